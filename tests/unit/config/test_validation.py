"""Position validation after leader changes (KIP-320), one layer at a time: SubscriptionState's
state machine, OffsetFetcher's OffsetsForLeaderEpoch requests against a scripted client, and
the Fetcher's last_fetched_epoch / diverging_epoch handling. Tests on real brokers (a leader
change on the mock cluster, an unclean election on Apache Kafka) are in
tests/test_truncation.py."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kclient import errors as Errors
from kclient.clock import FakeClock
from kclient.config import ConsumerConfig
from kclient.consumer.fetch_config import FetchConfig
from kclient.consumer.fetcher import Fetcher
from kclient.consumer.offset_fetcher import OffsetFetcher
from kclient.subscription.state import FetchPosition, SubscriptionState
from kclient.network.future import RequestFuture
from kclient.network.metadata import Metadata
from kclient.protocol import ApiKey
from kclient.structs import OffsetAndMetadata, TopicPartition

T = "t"
TP0, TP1 = TopicPartition(T, 0), TopicPartition(T, 1)


def metadata_body(leader_epochs, leaders=(1, 1)) -> dict:
    return {
        "brokers": [{"node_id": 1, "host": "h1", "port": 9092, "rack": None},
                    {"node_id": 2, "host": "h2", "port": 9092, "rack": None}],
        "cluster_id": "c", "controller_id": 1,
        "topics": [{"error_code": 0, "name": T, "is_internal": False,
                    "partitions": [{"error_code": 0, "partition_index": p, "leader_id": leaders[p],
                                    "leader_epoch": le, "replica_nodes": [1, 2], "isr_nodes": [1, 2],
                                    "offline_replicas": []} for p, le in enumerate(leader_epochs)]}],
    }


def metadata(leader_epochs=(5, 5)) -> Metadata:
    md = Metadata()
    md.update(metadata_body(leader_epochs), 0)
    return md


class ScriptedClient:
    """Stands in for ConsumerNetworkClient: every request is kept; the test answers it."""

    def __init__(self, md: Metadata, versions: dict[int, int | None] | None = None):
        self.metadata = md
        self.versions = {int(ApiKey.FETCH): 12, int(ApiKey.LIST_OFFSETS): 7,
                         int(ApiKey.OFFSET_FOR_LEADER_EPOCH): 4, **(versions or {})}
        self.sent: list[SimpleNamespace] = []

    def send(self, node, api_key, body, *, version=None, timeout_ms=None):
        fut = RequestFuture()
        body = body(self.versions[api_key]) if callable(body) else body
        self.sent.append(SimpleNamespace(node=node, api_key=api_key, body=body, future=fut))
        return fut

    def is_unavailable(self, node) -> bool:
        return False

    def try_connect(self, node) -> bool:
        return True

    def api_version(self, node, api_key):
        return self.versions.get(api_key)

    def take(self, api_key=None) -> list[SimpleNamespace]:
        out = [r for r in self.sent if api_key is None or r.api_key == api_key]
        self.sent = [r for r in self.sent if r not in out]
        return out


def epoch_answer(parts: dict[int, tuple[int, int, int]]) -> dict:
    """{partition: (error, leader_epoch, end_offset)} for topic T."""
    return {"throttle_time_ms": 0, "topics": [{"topic": T, "partitions": [
        {"partition": p, "error_code": e, "leader_epoch": le, "end_offset": end}
        for p, (e, le, end) in parts.items()]}]}


@pytest.fixture
def env():
    def make(reset="earliest", leader_epochs=(5, 5)):
        clock = FakeClock()
        md = metadata(leader_epochs)
        client = ScriptedClient(md)
        subs = SubscriptionState(reset)
        subs.assign_from_user([TP0, TP1])
        cfg = ConsumerConfig({"bootstrap.servers": "h1:9092"})
        fetcher = Fetcher(client, subs, FetchConfig.of(cfg), clock=clock)
        offsets = OffsetFetcher(client, subs, clock=clock, on_position_reset=fetcher.clear_partition)
        return SimpleNamespace(clock=clock, md=md, client=client, subs=subs, fetcher=fetcher, offsets=offsets)
    return make


# ---------------------------------------------------------------------- SubscriptionState
def test_a_newer_leader_epoch_sends_a_position_with_a_known_epoch_to_validation():
    s = SubscriptionState("none")
    s.assign_from_user([TP0, TP1])
    s.seek_validated(TP0, FetchPosition(100, 4, 5))       # record before 100 was of epoch 4
    s.seek_validated(TP1, FetchPosition(50, None, 5))     # epoch of the record before unknown
    assert s.maybe_validate_for_leader_epochs({TP0: 5, TP1: 5}) == []    # same epoch: nothing
    assert s.maybe_validate_for_leader_epochs({TP0: 6, TP1: 6}) == [TP0]
    assert s.awaiting_validation(TP0) and not s.is_fetchable(TP0)
    assert s.position(TP0) == FetchPosition(100, 4, 6)    # fenced by the new epoch from now on
    # TP1 cannot be checked: it adopts the new epoch and keeps fetching.
    assert s.is_fetchable(TP1) and s.position(TP1) == FetchPosition(50, None, 6)


def test_a_position_without_a_leader_epoch_adopts_the_current_one():
    s = SubscriptionState("none")
    s.assign_from_user([TP0])
    s.seek(TP0, 10)
    assert s.maybe_validate_for_leader_epochs({TP0: 3}) == []
    assert s.position(TP0) == FetchPosition(10, None, 3)


def test_advancing_keeps_the_leader_epoch_the_position_was_validated_under():
    s = SubscriptionState("none")
    s.assign_from_user([TP0])
    s.seek_validated(TP0, FetchPosition(10, 2, 5))
    assert s.advance_position(TP0, FetchPosition(20, 3, None))
    assert s.position(TP0) == FetchPosition(20, 3, 5)


@pytest.mark.parametrize("reset", ["earliest", "latest"])
def test_truncation_below_the_position_moves_it_to_the_divergent_offset_with_a_policy(reset):
    s = SubscriptionState(reset)
    s.assign_from_user([TP0])
    pos = FetchPosition(100, 4, 6)
    s.seek_unvalidated(TP0, pos)
    assert s.awaiting_validation(TP0)
    t = s.maybe_complete_validation(TP0, pos, 4, 80)
    assert t is not None and t.reset and t.divergent == OffsetAndMetadata(80, "", 4)
    assert s.is_fetchable(TP0) and s.position(TP0) == FetchPosition(80, 4, 6)


def test_truncation_without_a_policy_is_returned_and_the_partition_stays_unfetchable():
    s = SubscriptionState("none")
    s.assign_from_user([TP0])
    pos = FetchPosition(100, 4, 6)
    s.seek_unvalidated(TP0, pos)
    t = s.maybe_complete_validation(TP0, pos, 3, 90)
    assert t is not None and not t.reset and t.divergent == OffsetAndMetadata(90, "", 3)
    assert s.awaiting_validation(TP0) and s.position(TP0) == pos


def test_an_end_offset_at_or_past_the_position_validates_it():
    s = SubscriptionState("none")
    s.assign_from_user([TP0, TP1])
    p0, p1 = FetchPosition(100, 4, 6), FetchPosition(100, 5, 6)
    s.seek_unvalidated(TP0, p0)
    s.seek_unvalidated(TP1, p1)
    assert s.maybe_complete_validation(TP0, p0, 4, 100) is None
    assert s.is_fetchable(TP0) and s.position(TP0) == p0
    # The leader never had epoch 5; its epoch 4 reaches past the position: go on under 4, so
    # the next Fetch's last_fetched_epoch agrees with the leader.
    assert s.maybe_complete_validation(TP1, p1, 4, 150) is None
    assert s.position(TP1) == FetchPosition(100, 4, 6)


def test_an_unknown_epoch_resets_with_a_policy_and_is_returned_without_one():
    s = SubscriptionState("earliest")
    s.assign_from_user([TP0])
    pos = FetchPosition(100, 4, 6)
    s.seek_unvalidated(TP0, pos)
    assert s.maybe_complete_validation(TP0, pos, -1, -1) is None
    assert s.partitions_needing_reset(0) == {TP0}
    s = SubscriptionState("none")
    s.assign_from_user([TP0])
    s.seek_unvalidated(TP0, pos)
    t = s.maybe_complete_validation(TP0, pos, -1, -1)
    assert t is not None and t.divergent is None


def test_an_answer_for_a_position_that_changed_meanwhile_is_ignored():
    s = SubscriptionState("none")
    s.assign_from_user([TP0])
    old = FetchPosition(100, 4, 6)
    s.seek_unvalidated(TP0, old)
    s.seek(TP0, 7)                                        # the application seeked meanwhile
    assert s.maybe_complete_validation(TP0, old, 4, 10) is None
    assert s.position(TP0) == FetchPosition(7) and s.is_fetchable(TP0)


# ---------------------------------------------------------------------- OffsetFetcher
KEY = int(ApiKey.OFFSET_FOR_LEADER_EPOCH)


def test_validation_request_shape_and_success(env):
    e = env("none")
    e.subs.seek_unvalidated(TP0, FetchPosition(100, 4, 5))
    e.subs.seek_unvalidated(TP1, FetchPosition(30, 5, 5))
    e.offsets.validate_positions_if_needed()
    (req,) = e.client.take(KEY)
    assert req.node == 1 and req.body["replica_id"] == -1
    sent = {p["partition"]: (p["current_leader_epoch"], p["leader_epoch"])
            for t in req.body["topics"] for p in t["partitions"]}
    assert sent == {0: (5, 4), 1: (5, 5)}
    e.offsets.validate_positions_if_needed()
    assert e.client.take(KEY) == []                      # one request in flight, no duplicate
    req.future.complete(epoch_answer({0: (0, 4, 120), 1: (0, 5, 30)}))
    assert e.subs.is_fetchable(TP0) and e.subs.is_fetchable(TP1)
    e.offsets.validate_positions_if_needed()              # nothing cached to raise


def test_truncation_without_a_policy_raises_log_truncation_error_naming_partition_and_offsets(env):
    e = env("none")
    e.subs.seek_unvalidated(TP0, FetchPosition(100, 4, 5))
    e.offsets.validate_positions_if_needed()
    e.client.take(KEY)[0].future.complete(epoch_answer({0: (0, 3, 77)}))
    with pytest.raises(Errors.LogTruncationError) as info:
        e.offsets.validate_positions_if_needed()
    exc = info.value
    assert isinstance(exc, Errors.OffsetOutOfRangeError)
    assert exc.divergent_offsets == {TP0: OffsetAndMetadata(77, "", 3)}
    assert exc.partitions == {TP0: 100}
    assert "t-0" in str(exc) or "t, 0" in str(exc) or str(TP0) in str(exc)
    assert "100" in str(exc) and "77" in str(exc)
    # The application decides: seek to the divergent offset and go on.
    e.subs.seek(TP0, 77)
    assert e.subs.is_fetchable(TP0)


def test_truncation_with_a_policy_moves_the_position_and_drops_fetched_data(env):
    e = env("earliest")
    e.subs.seek_validated(TP0, FetchPosition(100, 4, 5))
    e.fetcher.send_fetches()
    assert e.client.take(int(ApiKey.FETCH))
    cleared = []
    e.offsets._on_position_reset = lambda tp: cleared.append(tp)
    e.subs.seek_unvalidated(TP0, FetchPosition(100, 4, 5))
    e.offsets.validate_positions_if_needed()
    e.client.take(KEY)[0].future.complete(epoch_answer({0: (0, 4, 60)}))
    assert e.subs.position(TP0) == FetchPosition(60, 4, 5) and e.subs.is_fetchable(TP0)
    assert cleared == [TP0]
    e.offsets.validate_positions_if_needed()              # resolved: nothing raised


@pytest.mark.parametrize("code, refresh", [
    (Errors.FencedLeaderEpochError.errno, True),
    (Errors.UnknownLeaderEpochError.errno, True),
    (Errors.NotLeaderOrFollowerError.errno, True),
    (Errors.UnknownTopicOrPartitionError.errno, True),
])
def test_retriable_validation_errors_refresh_metadata_and_retry_after_backoff(env, code, refresh):
    e = env("none")
    e.subs.seek_unvalidated(TP0, FetchPosition(100, 4, 5))
    e.offsets.validate_positions_if_needed()
    assert not e.md.update_requested()
    e.client.take(KEY)[0].future.complete(epoch_answer({0: (code, -1, -1)}))
    assert e.md.update_requested() is refresh
    assert e.subs.awaiting_validation(TP0)
    e.offsets.validate_positions_if_needed()
    assert e.client.take(KEY) == []                      # backing off
    e.clock.advance(100)
    e.offsets.validate_positions_if_needed()
    assert len(e.client.take(KEY)) == 1


def test_authorization_failure_is_raised(env):
    e = env("none")
    e.subs.seek_unvalidated(TP0, FetchPosition(100, 4, 5))
    e.offsets.validate_positions_if_needed()
    e.client.take(KEY)[0].future.complete(epoch_answer({0: (Errors.TopicAuthorizationFailedError.errno, -1, -1)}))
    with pytest.raises(Errors.TopicAuthorizationFailedError, match="not authorized to read topic 't'"):
        e.offsets.validate_positions_if_needed()


def test_a_broker_without_offsets_for_leader_epoch_leaves_positions_unchecked(env):
    e = env("none")
    e.client.versions[KEY] = None
    e.subs.seek_unvalidated(TP0, FetchPosition(100, 4, 5))
    e.offsets.validate_positions_if_needed()
    assert e.client.take(KEY) == []
    assert e.subs.is_fetchable(TP0) and e.subs.position(TP0).offset == 100


def test_unsupported_version_from_the_broker_leaves_positions_unchecked(env):
    e = env("none")
    e.subs.seek_unvalidated(TP0, FetchPosition(100, 4, 5))
    e.offsets.validate_positions_if_needed()
    e.client.take(KEY)[0].future.raise_(Errors.UnsupportedVersionError("no OffsetForLeaderEpoch v2+"))
    assert e.subs.is_fetchable(TP0)


def test_a_connection_failure_retries_after_backoff(env):
    e = env("none")
    e.subs.seek_unvalidated(TP0, FetchPosition(100, 4, 5))
    e.offsets.validate_positions_if_needed()
    e.client.take(KEY)[0].future.raise_(Errors.KafkaConnectionError("connection reset"))
    assert e.subs.awaiting_validation(TP0)
    e.clock.advance(100)
    e.offsets.validate_positions_if_needed()
    assert len(e.client.take(KEY)) == 1


# ---------------------------------------------------------------------- Fetcher
FETCH = int(ApiKey.FETCH)


def fetch_answer(p: int, **fields) -> dict:
    part = {"partition_index": p, "error_code": 0, "high_watermark": 1000, "last_stable_offset": -1,
            "log_start_offset": 0, "aborted_transactions": None, "records": None}
    part.update(fields)
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": T, "partitions": [part]}]}


def fetched(req) -> dict[int, tuple[int, int, int]]:
    return {p["partition"]: (p["fetch_offset"], p["current_leader_epoch"], p["last_fetched_epoch"])
            for t in req.body["topics"] for p in t["partitions"]}


def test_fetch_sends_the_epoch_of_the_record_before_the_position_and_then_of_the_chain(env):
    from kcore.records import encode_batch
    e = env("none")
    e.subs.assign_from_user([TP0])
    e.subs.seek_validated(TP0, FetchPosition(10, 3, 5))
    e.fetcher.send_fetches()
    (req,) = e.client.take(FETCH)
    assert fetched(req) == {0: (10, 5, 3)}
    data = encode_batch([(0, 1, b"k", b"v", None), (1, 1, b"k", b"v", None)], base_offset=10,
                        partition_leader_epoch=5)
    req.future.complete(fetch_answer(0, records=memoryview(data)))
    e.fetcher.send_fetches()
    (req,) = e.client.take(FETCH)
    assert fetched(req) == {0: (12, 5, 5)}                # chained after the batch of epoch 5


def test_a_leader_epoch_change_in_metadata_stops_fetching_until_validated(env):
    e = env("none")
    e.subs.assign_from_user([TP0])
    e.subs.seek_validated(TP0, FetchPosition(10, 3, 5))
    e.fetcher.send_fetches()
    e.client.take(FETCH)[0].future.complete(fetch_answer(0))
    e.md.update(metadata_body((6, 6)), 0)
    assert e.fetcher.send_fetches() == 0
    assert e.subs.awaiting_validation(TP0)
    e.offsets.validate_positions_if_needed()
    (req,) = e.client.take(KEY)
    assert [(p["current_leader_epoch"], p["leader_epoch"]) for t in req.body["topics"] for p in t["partitions"]] == [(6, 3)]
    req.future.complete(epoch_answer({0: (0, 3, 10)}))
    assert e.fetcher.send_fetches() == 1
    assert fetched(e.client.take(FETCH)[0]) == {0: (10, 6, 3)}


def test_a_diverging_epoch_in_a_fetch_answer_without_a_policy_raises_from_poll(env):
    e = env("none")
    e.subs.assign_from_user([TP0])
    e.subs.seek_validated(TP0, FetchPosition(100, 4, 5))
    e.fetcher.send_fetches()
    e.client.take(FETCH)[0].future.complete(fetch_answer(0, diverging_epoch={"epoch": 3, "end_offset": 80}))
    assert e.fetcher.fetched_records()[0] == {}
    assert e.subs.awaiting_validation(TP0)                # checked before anything else is read
    e.offsets.validate_positions_if_needed()
    e.client.take(KEY)[0].future.complete(epoch_answer({0: (0, 3, 80)}))
    with pytest.raises(Errors.LogTruncationError) as info:
        e.offsets.validate_positions_if_needed()
    assert info.value.divergent_offsets == {TP0: OffsetAndMetadata(80, "", 3)}
    assert e.subs.position(TP0).offset == 100             # nothing moved by itself


def test_a_diverging_epoch_with_a_policy_moves_to_the_divergent_offset(env):
    e = env("latest")
    e.subs.assign_from_user([TP0])
    e.subs.seek_validated(TP0, FetchPosition(100, 4, 5))
    e.fetcher.send_fetches()
    e.client.take(FETCH)[0].future.complete(fetch_answer(0, diverging_epoch={"epoch": 3, "end_offset": 80}))
    assert e.fetcher.fetched_records()[0] == {}
    e.offsets.validate_positions_if_needed()
    e.client.take(KEY)[0].future.complete(epoch_answer({0: (0, 3, 80)}))
    assert e.subs.position(TP0) == FetchPosition(80, 3, 5)
    e.clock.advance(1000)
    e.fetcher.send_fetches()
    assert fetched(e.client.take(FETCH)[0]) == {0: (80, 5, 3)}


def test_a_diverging_epoch_after_buffered_records_refetches_from_the_position(env):
    from kcore.records import encode_batch
    e = env("none")
    e.subs.assign_from_user([TP0])
    e.subs.seek_validated(TP0, FetchPosition(10, 3, 5))
    e.fetcher.send_fetches()
    data = encode_batch([(0, 1, b"k", b"v", None), (1, 1, b"k", b"v", None)], base_offset=10,
                        partition_leader_epoch=5)
    e.client.take(FETCH)[0].future.complete(fetch_answer(0, records=memoryview(data)))
    e.fetcher.send_fetches()                              # chained at 12, records 10-11 buffered
    (chained,) = e.client.take(FETCH)
    assert fetched(chained) == {0: (12, 5, 5)}
    chained.future.complete(fetch_answer(0, diverging_epoch={"epoch": 4, "end_offset": 11}))
    assert e.fetcher.fetched_records()[0] == {}           # the buffered records were dropped too
    assert e.subs.is_fetchable(TP0)
    e.clock.advance(1000)
    e.fetcher.send_fetches()
    assert fetched(e.client.take(FETCH)[0]) == {0: (10, 5, 3)}


def test_an_undefined_diverging_epoch_is_ignored(env):
    e = env("none")
    e.subs.assign_from_user([TP0])
    e.subs.seek_validated(TP0, FetchPosition(100, 4, 5))
    e.fetcher.send_fetches()
    e.client.take(FETCH)[0].future.complete(fetch_answer(0, diverging_epoch={"epoch": -1, "end_offset": -1}))
    assert e.fetcher.fetched_records()[0] == {}
    assert e.subs.is_fetchable(TP0) and e.subs.position(TP0).offset == 100
