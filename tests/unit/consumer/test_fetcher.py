"""Fetcher unit tests: one layer, driven by a scripted network client and a fake clock.

The scripted client records the Fetch requests the fetcher sends and lets each test answer
them with response dicts shaped like kclient.protocol's decoded FetchResponse; the record
bytes are real RecordBatch v2 bytes from kcore.records.encode_batch. Everything else (the
SubscriptionState, Metadata, the record decoder) is the real thing.
"""
from __future__ import annotations

import logging
import random
import uuid
from types import SimpleNamespace

import pytest

from kclient import errors as Errors
from kclient.clock import FakeClock
from kclient.config import ConsumerConfig
from kclient.consumer.fetch_config import FetchConfig
from kclient.consumer.fetch_requests import PREFETCH_DEPTH, fetch_stream_node_id
from kclient.consumer.fetcher import Fetcher
from kclient.network.future import RequestFuture
from kclient.network.metadata import Metadata
from kclient.structs import ConsumerRecord, TopicPartition
from kclient.subscription.state import FetchState, SubscriptionState
from kcore.fetchscan import next_fetch_offset
from kcore.records import control_record, decode_records, encode_batch

T = "topic-a"
TID = uuid.UUID("12345678-1234-5678-1234-567812345678")
TP0, TP1, TP2 = TopicPartition(T, 0), TopicPartition(T, 1), TopicPartition(T, 2)


class ScriptedClient:
    """Stands in for ConsumerNetworkClient: send() returns a future the test completes."""

    def __init__(self, metadata: Metadata, fetch_version: int = 12):
        self.metadata = metadata
        self.fetch_version = fetch_version
        self.sent: list[SimpleNamespace] = []
        self.unavailable: set[int] = set()

    def send(self, node, api_key, body, *, version=None, timeout_ms=None):
        fut = RequestFuture()
        self.sent.append(SimpleNamespace(node=node, api_key=api_key, body=body, version=version, future=fut))
        return fut

    def is_unavailable(self, node) -> bool:
        return node in self.unavailable

    def try_connect(self, node) -> bool:
        return True

    def api_version(self, node, api_key):
        return self.fetch_version

    def take(self) -> list[SimpleNamespace]:
        out, self.sent = self.sent, []
        return out


def make_metadata(partitions=3, leaders=None, topic_id=TID) -> Metadata:
    md = Metadata()
    leaders = leaders or [1] * partitions
    md.update({
        "brokers": [{"node_id": 1, "host": "h1", "port": 9092, "rack": None},
                    {"node_id": 2, "host": "h2", "port": 9092, "rack": None}],
        "cluster_id": "c", "controller_id": 1,
        "topics": [{"error_code": 0, "name": T, "topic_id": topic_id, "is_internal": False,
                    "partitions": [{"error_code": 0, "partition_index": p, "leader_id": leaders[p],
                                    "leader_epoch": 5, "replica_nodes": [leaders[p]], "isr_nodes": [leaders[p]],
                                    "offline_replicas": []} for p in range(partitions)]}],
    }, 1)
    return md


def batch(base: int, count: int, *, size: int = 20, **kw) -> bytes:
    return encode_batch([(i, 1000 + base + i, b"k%d" % (base + i), b"v%d-" % (base + i) + b"x" * size, None)
                         for i in range(count)], base_offset=base, **kw)


def partition_data(p: int, records: bytes | None, *, hw: int = 10_000, error: int = 0, aborted=None, lso=-1):
    return {"partition_index": p, "error_code": error, "high_watermark": hw, "last_stable_offset": lso,
            "log_start_offset": 0, "aborted_transactions": aborted,
            "records": None if records is None else memoryview(records)}


def fetch_response(parts: list[dict], *, topic: str | None = T, topic_id=None, error: int = 0) -> dict:
    # All partitions' records share one "frame", as in a real decoded response.
    frame = b"".join(bytes(p["records"]) for p in parts if p["records"] is not None)
    pos = 0
    for p in parts:
        if p["records"] is not None:
            n = len(p["records"])
            p["records"] = memoryview(frame)[pos:pos + n]
            pos += n
    entry = {"partitions": parts}
    if topic_id is not None:
        entry["topic_id"] = topic_id
    else:
        entry["topic"] = topic
    return {"throttle_time_ms": 0, "error_code": error, "session_id": 0, "responses": [entry]}


@pytest.fixture
def env():
    clock = FakeClock()
    md = make_metadata()
    client = ScriptedClient(md)
    subs = SubscriptionState("earliest")
    cfg = ConsumerConfig({"bootstrap.servers": "h1:9092", "max.poll.records": 500})
    fetcher = Fetcher(client, subs, FetchConfig.of(cfg), clock=clock)
    return SimpleNamespace(clock=clock, md=md, client=client, subs=subs, cfg=cfg, fetcher=fetcher)


def assign(env, partitions=(TP0, TP1, TP2), offset=0):
    env.subs.assign_from_user(list(partitions))
    for tp in partitions:
        env.subs.seek(tp, offset)


def requested(req) -> dict[TopicPartition, int]:
    out = {}
    for t in req.body["topics"]:
        for p in t["partitions"]:
            out[TopicPartition(t.get("topic", T), p["partition"])] = p["fetch_offset"]
    return out


def drain(fetcher, max_records=None):
    recs, _ = fetcher.fetched_records(max_records)
    return recs


# ---------------------------------------------------------------------- requests
def test_fetch_request_shape_and_one_request_per_leader():
    clock = FakeClock()
    md = make_metadata(leaders=[1, 2, 1])
    client = ScriptedClient(md)
    subs = SubscriptionState()
    cfg = ConsumerConfig({"fetch.min.bytes": 7, "fetch.max.wait.ms": 123, "fetch.max.bytes": 4567,
                          "max.partition.fetch.bytes": 890, "isolation.level": "read_committed"})
    fetcher = Fetcher(client, subs, FetchConfig.of(cfg), clock=clock)
    subs.assign_from_user([TP0, TP1, TP2])
    for tp, off in ((TP0, 10), (TP1, 20), (TP2, 30)):
        subs.seek(tp, off)
    assert fetcher.send_fetches() == 2
    reqs = {r.node: r for r in client.take()}
    assert set(reqs) == {1, 2}
    assert requested(reqs[1]) == {TP0: 10, TP2: 30}
    assert requested(reqs[2]) == {TP1: 20}
    body = reqs[1].body
    assert (body["min_bytes"], body["max_wait_ms"], body["max_bytes"], body["isolation_level"]) == (7, 123, 4567, 1)
    assert (body["session_id"], body["session_epoch"]) == (0, 0)   # a full fetch that opens a session
    assert body["replica_id"] == -1
    p = body["topics"][0]["partitions"][0]
    assert p["partition_max_bytes"] == 890 and p["current_leader_epoch"] == 5
    assert reqs[1].api_key == 1 and reqs[1].version == 12
    # One fetch in flight per node: nothing more until the answers arrive.
    assert fetcher.send_fetches() == 0


def test_fetches_in_flight_per_broker_share_its_partitions_and_fetch_max_bytes():
    clock = FakeClock()
    md = make_metadata(partitions=4, leaders=[1, 1, 1, 2])
    client = ScriptedClient(md)
    subs = SubscriptionState()
    cfg = ConsumerConfig({"fetch.max.bytes": 4000, "fetch.max.in.flight.per.broker": 2})
    fetcher = Fetcher(client, subs, FetchConfig.of(cfg), clock=clock)
    tps = [TopicPartition(T, p) for p in range(4)]
    subs.assign_from_user(tps)
    for tp in tps:
        subs.seek(tp, 0)
    # Node 1 leads three partitions: two fetches share them; node 2's one partition needs one.
    assert fetcher.send_fetches() == 3
    reqs = client.take()
    # The second stream to node 1 has a connection of its own: a Node with its own id and
    # node 1's address (a broker answers one request per connection at a time).
    stream = md.cluster.node_by_id(1)._replace(node_id=fetch_stream_node_id(1, 1))
    node1 = [r for r in reqs if r.node in (1, stream)]
    assert sorted(r.node if r.node == 1 else r.node.node_id for r in node1) == [1, stream.node_id]
    assert sorted(len(requested(r)) for r in node1) == [1, 2]
    assert set().union(*(requested(r) for r in node1)) == set(tps[:3])
    assert all(r.body["max_bytes"] == 2000 for r in reqs)   # each asks for half of fetch.max.bytes
    assert fetcher.send_fetches() == 0                       # every partition has its fetch in flight
    # One answer back: its partitions go out again while the other fetch is still in flight.
    first = node1[0]
    first.future.complete(fetch_response([partition_data(tp.partition, batch(0, 5)) for tp in requested(first)]))
    assert fetcher.send_fetches() == 1
    (again,) = client.take()
    assert again.node == first.node and set(requested(again)) == set(requested(first))
    assert set(requested(again).values()) == {5}
    assert fetcher.send_fetches() == 0                       # node 1 is at its two fetches


def test_fetch_max_in_flight_per_broker_is_checked():
    with pytest.raises(Errors.ConfigurationError, match="fetch.max.in.flight.per.broker"):
        ConsumerConfig({"fetch.max.in.flight.per.broker": 0})


def test_topic_ids_from_fetch_v13_and_answers_by_id(env):
    env.client.fetch_version = 13
    assign(env, [TP0])
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    assert req.version == 13 and req.body["topics"][0]["topic_id"] == TID and "topic" not in req.body["topics"][0]
    req.future.complete(fetch_response([partition_data(0, batch(0, 3))], topic_id=TID))
    recs = drain(env.fetcher)
    assert [r.offset for r in recs[TP0]] == [0, 1, 2]


def test_topic_without_id_falls_back_to_v12():
    md = make_metadata(topic_id=uuid.UUID(int=0))
    client = ScriptedClient(md, fetch_version=15)
    subs = SubscriptionState()
    fetcher = Fetcher(client, subs, FetchConfig.of(ConsumerConfig()), clock=FakeClock())
    subs.assign_from_user([TP0])
    subs.seek(TP0, 0)
    fetcher.send_fetches()
    (req,) = client.take()
    assert req.version == 12 and req.body["topics"][0]["topic"] == T


# ---------------------------------------------------------------------- draining
def test_records_positions_and_fields(env):
    assign(env, [TP0])
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    data = encode_batch([(0, 111, b"key", b"value", [("h", b"1")]), (1, 112, None, None, None)],
                        base_offset=0, partition_leader_epoch=5)
    req.future.complete(fetch_response([partition_data(0, data, hw=2)]))
    recs = drain(env.fetcher)[TP0]
    assert isinstance(recs[0], ConsumerRecord)
    r0, r1 = recs
    assert (r0.topic, r0.partition, r0.offset, r0.timestamp, r0.timestamp_type, r0.key, r0.value) == \
        (T, 0, 0, 111, 0, b"key", b"value")
    assert r0.headers == [("h", b"1")] and r0.serialized_header_size == 2
    assert (r0.serialized_key_size, r0.serialized_value_size, r0.leader_epoch, r0.checksum) == (3, 5, 5, None)
    assert (r1.key, r1.value, r1.serialized_key_size, r1.serialized_value_size, r1.headers) == (None, None, -1, -1, [])
    pos = env.subs.position(TP0)
    assert (pos.offset, pos.offset_epoch) == (2, 5)
    assert env.subs.high_watermark(TP0) == 2


def test_max_poll_records_shared_in_arrival_order_exactly_once(env):
    assign(env)
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    req.future.complete(fetch_response([partition_data(p, batch(0, 400)) for p in range(3)]))
    first = drain(env.fetcher, 500)
    assert sum(len(v) for v in first.values()) == 500
    assert len(first[TP0]) == 400 and len(first[TP1]) == 100
    seen = {tp: [r.offset for r in rs] for tp, rs in first.items()}
    while True:
        more = drain(env.fetcher, 500)
        if not more:
            break
        assert sum(len(v) for v in more.values()) <= 500
        for tp, rs in more.items():
            seen.setdefault(tp, []).extend(r.offset for r in rs)
    assert seen == {tp: list(range(400)) for tp in (TP0, TP1, TP2)}
    assert all(env.subs.position(tp).offset == 400 for tp in (TP0, TP1, TP2))


def test_partitions_that_returned_data_move_to_the_end_of_the_next_request(env):
    assign(env)
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    req.future.complete(fetch_response([partition_data(0, batch(0, 5)), partition_data(1, None),
                                        partition_data(2, None)]))
    env.clock.advance(1000)
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    order = [p["partition"] for p in req.body["topics"][0]["partitions"]]
    assert order[-1] == 0 and sorted(order) == [0, 1, 2]


def test_pipelining_prefetches_from_the_chain_end_up_to_the_depth(env):
    assign(env, [TP0])
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    req.future.complete(fetch_response([partition_data(0, batch(0, 10) + batch(10, 10))]))
    # Answered but not consumed: the next fetch already goes out, after the last batch.
    assert env.fetcher.send_fetches() == 1
    (req,) = env.client.take()
    assert requested(req) == {TP0: 20}
    req.future.complete(fetch_response([partition_data(0, batch(20, 10))]))
    assert env.fetcher.send_fetches() == 0  # PREFETCH_DEPTH answers buffered
    assert PREFETCH_DEPTH == 2
    recs = drain(env.fetcher, 1000)
    assert [r.offset for r in recs[TP0]] == list(range(30))
    assert env.fetcher.send_fetches() == 1
    assert requested(env.client.take()[0]) == {TP0: 30}


def test_partial_trailing_batch_is_fetched_again(env):
    assign(env, [TP0])
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    third = batch(20, 10)
    req.future.complete(fetch_response([partition_data(0, batch(0, 10) + batch(10, 10) + third[:len(third) // 2])]))
    recs = drain(env.fetcher, 1000)
    assert [r.offset for r in recs[TP0]] == list(range(20))
    assert env.subs.position(TP0).offset == 20
    env.fetcher.send_fetches()
    assert requested(env.client.take()[0]) == {TP0: 20}


def test_record_larger_than_partition_fetch_size_still_makes_progress(env, caplog):
    assign(env, [TP0])
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    big = batch(0, 1, size=5000)
    with caplog.at_level(logging.WARNING, logger="kclient.consumer.fetch_requests"):
        req.future.complete(fetch_response([partition_data(0, big[:1000])]))
    assert drain(env.fetcher) == {}
    assert "larger than max.partition.fetch.bytes" in caplog.text
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    assert requested(req) == {TP0: 0}
    req.future.complete(fetch_response([partition_data(0, big)]))  # the broker returns it whole
    recs = drain(env.fetcher)
    assert [r.offset for r in recs[TP0]] == [0] and len(recs[TP0][0].value) > 5000
    assert env.subs.position(TP0).offset == 1


def test_records_before_the_fetch_offset_are_skipped(env):
    assign(env, [TP0], offset=5)
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    req.future.complete(fetch_response([partition_data(0, batch(0, 10, codec=1))]))  # gzip batch from 0
    assert [r.offset for r in drain(env.fetcher)[TP0]] == [5, 6, 7, 8, 9]


def test_next_fetch_offset_matches_the_decoder(env):
    rng = random.Random(7)
    for _ in range(200):
        parts, epochs, base = [], [], rng.randrange(0, 1000)
        for _ in range(rng.randrange(0, 5)):
            n = rng.randrange(1, 6)
            epochs.append(rng.randrange(-1, 4))
            parts.append(batch(base, n, size=rng.randrange(0, 50), partition_leader_epoch=epochs[-1]))
            base += n + rng.randrange(0, 3)
        data = b"".join(parts)
        if data and rng.random() < 0.5:
            data = data[:rng.randrange(0, len(data))]
        res = decode_records(data)
        expected = res.next_offset if res.next_offset >= 0 else 17
        # The epoch of the last batch that arrived whole (the one the next fetch follows).
        whole = sum(1 for i in range(len(parts)) if len(b"".join(parts[:i + 1])) <= len(data))
        expected_epoch = epochs[whole - 1] if whole and expected > 17 else -1
        assert next_fetch_offset(memoryview(data), 17) == (max(expected, 17), expected_epoch)


# ---------------------------------------------------------------------- errors
def test_offset_out_of_range_resets_with_a_policy(env):
    assign(env, [TP0], offset=50)
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    req.future.complete(fetch_response([partition_data(0, None, error=1)]))
    assert env.subs.fetch_state(TP0) is FetchState.AWAIT_RESET
    assert drain(env.fetcher) == {}


def test_offset_out_of_range_without_policy_raises_from_poll():
    md = make_metadata()
    client = ScriptedClient(md)
    subs = SubscriptionState("none")
    fetcher = Fetcher(client, subs, FetchConfig.of(ConsumerConfig()), clock=FakeClock())
    subs.assign_from_user([TP0])
    subs.seek(TP0, 50)
    fetcher.send_fetches()
    client.take()[0].future.complete(fetch_response([partition_data(0, None, error=1)]))
    with pytest.raises(Errors.OffsetOutOfRangeError) as info:
        fetcher.fetched_records()
    assert info.value.partitions == {TP0: 50}
    assert subs.position(TP0).offset == 50


def test_stale_out_of_range_is_ignored(env):
    assign(env, [TP0], offset=50)
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    env.subs.seek(TP0, 60)  # the position moved while the fetch was in flight
    req.future.complete(fetch_response([partition_data(0, None, error=1)]))
    assert env.subs.fetch_state(TP0) is FetchState.FETCHING


@pytest.mark.parametrize("code", [6, 3, 100, 74])  # NOT_LEADER, UNKNOWN_TOPIC, UNKNOWN_TOPIC_ID, FENCED_EPOCH
def test_leader_errors_refresh_metadata_and_back_off(env, code):
    assign(env, [TP0])
    env.md.update({"brokers": [{"node_id": 1, "host": "h1", "port": 9092}], "topics": [
        {"error_code": 0, "name": T, "topic_id": TID, "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 5}]}]}, 2)
    assert not env.md.update_requested()
    env.fetcher.send_fetches()
    env.client.take()[0].future.complete(fetch_response([partition_data(0, None, error=code)]))
    assert env.md.update_requested()
    assert env.fetcher.send_fetches() == 0  # backing off
    env.clock.advance(env.cfg["retry.backoff.ms"])
    assert env.fetcher.send_fetches() == 1
    assert requested(env.client.take()[0]) == {TP0: 0}


def test_connection_failure_backs_off_then_retries(env):
    assign(env, [TP0])
    env.fetcher.send_fetches()
    env.client.take()[0].future.raise_(Errors.KafkaConnectionError("boom"))
    assert env.md.update_requested()
    assert env.fetcher.send_fetches() == 0
    env.clock.advance(env.cfg["retry.backoff.ms"])
    assert env.fetcher.send_fetches() == 1


def test_unknown_leader_requests_metadata(env):
    assign(env, [TopicPartition("other", 0)])
    assert env.fetcher.send_fetches() == 0
    assert env.md.update_requested()


def test_corrupt_batch_raises_without_moving_the_position(env):
    assign(env, [TP0], offset=0)
    env.fetcher.send_fetches()
    data = bytearray(batch(0, 5))
    data[-3] ^= 0xFF
    env.client.take()[0].future.complete(fetch_response([partition_data(0, bytes(data))]))
    with pytest.raises(Errors.CorruptRecordError, match="topic-a"):
        env.fetcher.fetched_records()
    assert env.subs.position(TP0).offset == 0
    env.fetcher.send_fetches()
    assert requested(env.client.take()[0]) == {TP0: 0}


def test_topic_authorization_error_raises(env):
    assign(env, [TP0])
    env.fetcher.send_fetches()
    env.client.take()[0].future.complete(fetch_response([partition_data(0, None, error=29)]))
    with pytest.raises(Errors.TopicAuthorizationFailedError):
        env.fetcher.fetched_records()


def test_top_level_error_backs_off(env):
    assign(env, [TP0])
    env.fetcher.send_fetches()
    env.client.take()[0].future.complete(fetch_response([], error=-1))
    assert env.fetcher.send_fetches() == 0
    env.clock.advance(1000)
    assert env.fetcher.send_fetches() == 1


# ---------------------------------------------------------------------- stale data, pause
def test_clear_partition_drops_buffered_and_in_flight_answers(env):
    assign(env, [TP0])
    env.fetcher.send_fetches()
    (first,) = env.client.take()
    first.future.complete(fetch_response([partition_data(0, batch(0, 10))]))
    env.fetcher.send_fetches()
    (second,) = env.client.take()
    env.subs.seek(TP0, 100)
    env.fetcher.clear_partition(TP0)
    assert env.fetcher.buffered_bytes == 0
    second.future.complete(fetch_response([partition_data(0, batch(10, 10))]))  # late, stale
    assert drain(env.fetcher) == {}
    env.fetcher.send_fetches()
    (third,) = env.client.take()
    assert requested(third) == {TP0: 100}
    third.future.complete(fetch_response([partition_data(0, batch(100, 3))]))
    assert [r.offset for r in drain(env.fetcher)[TP0]] == [100, 101, 102]


def test_assignment_change_drops_buffered_data(env):
    assign(env, [TP0, TP1])
    env.fetcher.send_fetches()
    env.client.take()[0].future.complete(fetch_response([partition_data(0, batch(0, 10)),
                                                         partition_data(1, batch(0, 10))]))
    env.subs.assign_from_user([TP1])
    assert drain(env.fetcher) == {}
    assert env.fetcher.buffered_bytes == 0
    env.fetcher.send_fetches()
    assert requested(env.client.take()[0]) == {TP1: 0}  # from the position, not the old chain


def test_paused_partition_keeps_its_data_for_resume(env):
    assign(env, [TP0, TP1])
    env.fetcher.send_fetches()
    env.client.take()[0].future.complete(fetch_response([partition_data(0, batch(0, 10)),
                                                         partition_data(1, batch(0, 10))]))
    env.subs.pause(TP0)
    recs = drain(env.fetcher, 5)
    assert list(recs) == [TP1] and len(recs[TP1]) == 5
    env.subs.pause(TP1)
    env.subs.resume(TP0)
    recs = drain(env.fetcher, 100)
    assert list(recs) == [TP0] and [r.offset for r in recs[TP0]] == list(range(10))
    env.subs.resume(TP1)
    assert [r.offset for r in drain(env.fetcher, 100)[TP1]] == list(range(5, 10))
    assert env.fetcher.send_fetches() == 1
    env.client.take()[0].future.complete(fetch_response([partition_data(0, None), partition_data(1, None)]))
    env.subs.pause(TP0)
    env.subs.pause(TP1)
    assert env.fetcher.send_fetches() == 0
    env.subs.resume(TP1)
    assert env.fetcher.send_fetches() == 1
    assert requested(env.client.take()[0]) == {TP1: 10}


# ---------------------------------------------------------------------- memory bound
def test_buffered_bytes_bound_new_fetches():
    clock = FakeClock()
    md = make_metadata()
    client = ScriptedClient(md)
    subs = SubscriptionState()
    fetcher = Fetcher(client, subs, FetchConfig.of(ConsumerConfig({"fetch.max.bytes": 2000})), clock=clock)
    subs.assign_from_user([TP0, TP1])
    subs.seek(TP0, 0)
    subs.seek(TP1, 0)
    fetcher.send_fetches()
    resp = fetch_response([partition_data(0, batch(0, 40)), partition_data(1, batch(0, 40))])
    frame_size = len(resp["responses"][0]["partitions"][0]["records"].obj)
    client.take()[0].future.complete(resp)
    assert fetcher.buffered_bytes == frame_size > 2000
    assert fetcher.send_fetches() == 0
    drain(fetcher, 40)                    # TP0 drained, TP1 still holds the frame
    assert fetcher.buffered_bytes == frame_size
    drain(fetcher, 40)
    assert fetcher.buffered_bytes == 0
    assert fetcher.send_fetches() == 1


class _ScanOfSmallRecords:
    """What a Fetch answer carries when the receive thread scanned it: the position arrays
    of its records, here half the frame's size, as they are for values of about 100 B."""

    def __init__(self, array_bytes: int):
        self.array_bytes = array_bytes

    def records_for(self, view):
        return None     # decoded on this thread, as a batch the scan skipped


@pytest.mark.parametrize("scanned", [False, True], ids=["decoded here", "scanned, arrays half the frame"])
def test_one_full_answer_buffered_still_lets_the_next_fetch_go(scanned):
    """A full answer (fetch.max.bytes) waiting to be read does not stop fetching: the next
    answer is fetched while this one is decoded. Two full answers (over fetch.max.bytes and
    its sixteenth of slack) do. The receive thread's arrays count in the memory held
    (buffered_bytes) but not toward that bound (counted, a full answer of small records was
    over it alone, and fetch and drain took turns)."""
    from kclient.network.network_client import SCANNED_FETCH
    first = fetch_response([partition_data(0, batch(0, 40))])
    size = len(first["responses"][0]["partitions"][0]["records"].obj)
    arrays = size // 2 if scanned else 0
    if scanned:
        first[SCANNED_FETCH] = _ScanOfSmallRecords(arrays)
    client = ScriptedClient(make_metadata())
    subs = SubscriptionState()
    fetcher = Fetcher(client, subs, FetchConfig.of(ConsumerConfig({"fetch.max.bytes": size})), clock=FakeClock())
    subs.assign_from_user([TP0])
    subs.seek(TP0, 0)
    assert fetcher.send_fetches() == 1
    client.take()[0].future.complete(first)
    assert fetcher.buffered_bytes == size + arrays      # exactly fetch.max.bytes of response
    assert fetcher.send_fetches() == 1
    (second,) = client.take()
    assert requested(second) == {TP0: 40}
    second.future.complete(fetch_response([partition_data(0, batch(40, 40))]))
    assert fetcher.buffered_bytes > size + size // 16
    assert fetcher.send_fetches() == 0
    assert [r.offset for r in drain(fetcher)[TP0]] == list(range(80))
    assert fetcher.buffered_bytes == 0


def test_caught_up_partitions_wait_while_records_are_buffered(env):
    assign(env, [TP0, TP1])
    env.fetcher.send_fetches()
    env.client.take()[0].future.complete(fetch_response([partition_data(0, batch(0, 10), hw=30),
                                                         partition_data(1, None, hw=0)]))
    env.fetcher.send_fetches()
    (req,) = env.client.take()
    assert requested(req) == {TP0: 10, TP1: 0}   # TP0's data answers it at once
    req.future.complete(fetch_response([partition_data(0, batch(10, 10), hw=30)]))
    # TP0 has more to fetch but two answers buffered: it waits for the application. TP1 is
    # at its end: its fetch alone would wait fetch.max.wait.ms on the broker and hold up the
    # connection when TP0's turn comes.
    assert env.fetcher.send_fetches() == 0
    assert env.client.take() == []
    drain(env.fetcher, 100)
    env.fetcher.send_fetches()  # nothing buffered: everyone is fetched (and may long-poll)
    assert requested(env.client.take()[0]) == {TP0: 20, TP1: 0}


def test_caught_up_partitions_are_fetched_again_as_soon_as_an_answer_arrives(env):
    """Records trickling in: the answer's partitions are at their end, nothing waits for a
    buffer, so the next fetch leaves before the answer is read (the broker holds it until
    records arrive) instead of a round trip after the application read them."""
    assign(env, [TP0, TP1])
    env.fetcher.send_fetches()
    env.client.take()[0].future.complete(fetch_response([partition_data(0, batch(0, 3), hw=3),
                                                         partition_data(1, None, hw=0)]))
    assert env.fetcher.send_fetches() == 1
    assert requested(env.client.take()[0]) == {TP0: 3, TP1: 0}
    assert [r.offset for r in drain(env.fetcher)[TP0]] == [0, 1, 2]


# ---------------------------------------------------------------------- transactions
def test_read_committed_skips_aborted_and_control_records():
    md = make_metadata()
    client = ScriptedClient(md)
    subs = SubscriptionState()
    fetcher = Fetcher(client, subs, FetchConfig.of(ConsumerConfig({"isolation.level": "read_committed"})), clock=FakeClock())
    subs.assign_from_user([TP0])
    subs.seek(TP0, 0)
    fetcher.send_fetches()
    aborted = encode_batch([(i, 1, None, b"aborted", None) for i in range(3)], base_offset=0,
                           producer_id=7, producer_epoch=0, transactional=True)
    k, v = control_record(0)  # abort marker
    marker = encode_batch([(0, 1, k, v, None)], base_offset=3, producer_id=7, producer_epoch=0,
                          transactional=True, control=True)
    committed = encode_batch([(i, 1, None, b"ok", None) for i in range(2)], base_offset=4)
    k, v = control_record(1)
    commit_marker = encode_batch([(0, 1, k, v, None)], base_offset=6, producer_id=8, producer_epoch=0,
                                 transactional=True, control=True)
    client.take()[0].future.complete(fetch_response([partition_data(
        0, aborted + marker + committed + commit_marker, hw=7, lso=7,
        aborted=[{"producer_id": 7, "first_offset": 0}])]))
    recs = fetcher.fetched_records()[0][TP0]
    assert [(r.offset, r.value) for r in recs] == [(4, b"ok"), (5, b"ok")]
    assert subs.position(TP0).offset == 7  # past the trailing commit marker
    assert subs.last_stable_offset(TP0) == 7


def test_read_uncommitted_returns_aborted_records_but_no_markers(env):
    assign(env, [TP0])
    env.fetcher.send_fetches()
    data = encode_batch([(0, 1, None, b"a", None)], base_offset=0, producer_id=7, producer_epoch=0,
                        transactional=True)
    k, v = control_record(0)
    data += encode_batch([(0, 1, k, v, None)], base_offset=1, producer_id=7, producer_epoch=0,
                         transactional=True, control=True)
    env.client.take()[0].future.complete(fetch_response([partition_data(0, data)]))
    recs = drain(env.fetcher)[TP0]
    assert [r.offset for r in recs] == [0]
    assert env.subs.position(TP0).offset == 2


# ---------------------------------------------------------------------- deserializers, columnar
def test_deserializers_functions_and_objects():
    class Upper:
        def deserialize(self, topic, data):
            return (topic, data.upper())

    md = make_metadata()
    client = ScriptedClient(md)
    subs = SubscriptionState()
    cfg = ConsumerConfig({"key.deserializer": lambda b: None if b is None else b.decode(),
                          "value.deserializer": Upper()})
    fetcher = Fetcher(client, subs, FetchConfig.of(cfg), clock=FakeClock())
    subs.assign_from_user([TP0])
    subs.seek(TP0, 0)
    fetcher.send_fetches()
    client.take()[0].future.complete(fetch_response([partition_data(0, encode_batch([(0, 1, b"k", b"v", None)]))]))
    (r,) = fetcher.fetched_records()[0][TP0]
    assert r.key == "k" and r.value == (T, b"V") and r.serialized_value_size == 1


def test_columnar_rows_and_positions_match_the_record_path(env):
    pytest.importorskip("pyarrow")
    assign(env, [TP0, TP1])
    env.fetcher.send_fetches()
    env.client.take()[0].future.complete(fetch_response([partition_data(0, batch(0, 300)),
                                                         partition_data(1, batch(0, 300, codec=4))]))
    out, _ = env.fetcher.fetched_columnar(500)
    assert len(out[TP0]) == 300 and len(out[TP1]) == 200
    assert list(out[TP1].offsets) == list(range(200))
    assert env.subs.position(TP1).offset == 200
    table = out[TP0].to_arrow()
    assert table.num_rows == 300 and table.column("offset").to_pylist() == list(range(300))
    assert out[TP0].values()[7] == b"v7-" + b"x" * 20
    rec = list(out[TP1])[3]
    assert (rec.offset, rec.key, rec.value) == (3, b"k3", b"v3-" + b"x" * 20)
    rest, _ = env.fetcher.fetched_columnar(500)
    assert rest[TP1].first_offset == 200 and rest[TP1].last_offset == 299
    assert rest[TP1].to_arrow().column("key").to_pylist()[0] == b"k200"
    assert env.subs.position(TP1).offset == 300


def test_update_offsets_false_reports_end_positions_without_moving(env):
    assign(env, [TP0])
    env.fetcher.send_fetches()
    env.client.take()[0].future.complete(fetch_response([partition_data(0, batch(0, 10))]))
    recs, ends = env.fetcher.fetched_records(100, update_offsets=False)
    assert len(recs[TP0]) == 10 and ends[TP0].offset == 10
    assert env.subs.position(TP0).offset == 0
    # The pipeline goes on from its own chain, not from the (unmoved) position.
    env.fetcher.send_fetches()
    assert requested(env.client.take()[0]) == {TP0: 10}


# ---------------------------------------------------------------------- ListOffsets (OffsetFetcher)
from kclient.consumer.offset_fetcher import OffsetFetcher  # noqa: E402
from kclient.structs import OffsetAndTimestamp  # noqa: E402


class AnsweringClient(ScriptedClient):
    """Answers ListOffsets at once with answer(body) (a dict or an exception); blocking
    waits advance the fake clock instead of sleeping."""

    def __init__(self, metadata, clock, answer):
        super().__init__(metadata)
        self.clock = clock
        self.answer = answer
        self.bodies = []
        self.metadata_waits = 0

    def send(self, node, api_key, body, *, version=None, timeout_ms=None):
        fut = super().send(node, api_key, body, version=version)
        b = body(7) if callable(body) else body
        self.bodies.append((node, b))
        result = self.answer(b)
        if isinstance(result, BaseException):
            fut.raise_(result)
        elif result is not None:
            fut.complete(result)
        return fut

    def poll_future(self, fut, timeout_ms=None):
        if not fut.is_done:
            self.clock.advance(timeout_ms or 0)
        return fut.is_done

    def await_metadata_update(self, timeout_ms=None):
        self.metadata_waits += 1
        return True


def list_offsets_answer(results):
    """results: {partition: (error, offset, timestamp)} for topic T."""
    def answer(body):
        parts = []
        for t in body["topics"]:
            for p in t["partitions"]:
                err, off, ts = results[p["partition_index"]]
                parts.append({"partition_index": p["partition_index"], "error_code": err, "timestamp": ts,
                              "offset": off, "leader_epoch": 5})
        return {"throttle_time_ms": 0, "topics": [{"name": T, "partitions": parts}]}
    return answer


def test_offsets_for_times_requests_and_results():
    clock = FakeClock()
    md = make_metadata(leaders=[1, 2, 1])
    client = AnsweringClient(md, clock, list_offsets_answer({0: (0, 12, 5000), 1: (0, -1, -1), 2: (0, 3, 4100)}))
    of = OffsetFetcher(client, SubscriptionState(), clock=clock)
    out = of.offsets_for_times({TP0: 4000, TP1: 4000, TP2: 4100}, 1000)
    assert out == {TP0: OffsetAndTimestamp(12, 5000, 5), TP1: None, TP2: OffsetAndTimestamp(3, 4100, 5)}
    by_node = {node: b for node, b in client.bodies}
    assert set(by_node) == {1, 2}
    sent = {p["partition_index"]: (p["timestamp"], p["current_leader_epoch"])
            for p in by_node[1]["topics"][0]["partitions"]}
    assert sent == {0: (4000, 5), 2: (4100, 5)}
    assert by_node[1]["replica_id"] == -1 and by_node[1]["isolation_level"] == 0


def test_offset_lookup_retries_after_leader_errors_and_raises_fatal_ones():
    clock = FakeClock()
    md = make_metadata()
    calls = []

    def flaky(body):
        calls.append(body)
        code = 6 if len(calls) == 1 else 0  # NOT_LEADER_OR_FOLLOWER once
        return list_offsets_answer({0: (code, 8, -1)})(body)

    client = AnsweringClient(md, clock, flaky)
    of = OffsetFetcher(client, SubscriptionState(), clock=clock)
    assert of.beginning_or_end_offsets([TP0], -1, 1000) == {TP0: 8}
    assert len(calls) == 2 and client.metadata_waits == 1
    fatal = AnsweringClient(md, clock, list_offsets_answer({0: (29, -1, -1)}))
    with pytest.raises(Errors.TopicAuthorizationFailedError):
        OffsetFetcher(fatal, SubscriptionState(), clock=clock).beginning_or_end_offsets([TP0], -2, 1000)
    silent = AnsweringClient(md, clock, lambda body: None)  # never answered
    with pytest.raises(Errors.KafkaTimeoutError):
        OffsetFetcher(silent, SubscriptionState(), clock=clock).beginning_or_end_offsets([TP0], -2, 500)


def test_reset_positions_sends_list_offsets_and_seeks():
    clock = FakeClock()
    md = make_metadata()
    client = AnsweringClient(md, clock, list_offsets_answer({0: (0, 42, -1), 1: (6, -1, -1)}))
    subs = SubscriptionState("latest")
    reset = []
    of = OffsetFetcher(client, subs, clock=clock, on_position_reset=reset.append)
    subs.assign_from_user([TP0, TP1])
    subs.request_offset_reset([TP0], "earliest")
    subs.request_offset_reset([TP1])
    of.reset_positions_if_needed()
    sent = {p["partition_index"]: p["timestamp"] for p in client.bodies[0][1]["topics"][0]["partitions"]}
    assert sent == {0: -2, 1: -1}
    assert subs.position(TP0).offset == 42 and subs.fetch_state(TP0) is FetchState.FETCHING
    assert reset == [TP0]
    assert subs.fetch_state(TP1) is FetchState.AWAIT_RESET and md.update_requested()
    of.reset_positions_if_needed()  # TP1 is backing off
    assert len(client.bodies) == 1
    clock.advance(100)
    of.reset_positions_if_needed()
    assert len(client.bodies) == 2
    client.answer = list_offsets_answer({1: (29, -1, -1)})
    clock.advance(100)
    of.reset_positions_if_needed()
    with pytest.raises(Errors.TopicAuthorizationFailedError):
        of.reset_positions_if_needed()


# ---------------------------------------------------------------------- fetch from followers (KIP-392)
def _follower_env(**config):
    clock = FakeClock()
    md = make_metadata(partitions=2, leaders=[1, 1])
    client = ScriptedClient(md)
    subs = SubscriptionState("earliest")
    cfg = ConsumerConfig({"bootstrap.servers": "h1:9092", "client.rack": "rack-2", "metadata.max.age.ms": 5000,
                          **config})
    fetcher = Fetcher(client, subs, FetchConfig.of(cfg), clock=clock)
    subs.assign_from_user([TP0, TP1])
    for tp in (TP0, TP1):
        subs.seek(tp, 0)
    return clock, client, subs, fetcher


def _nodes_by_partition(reqs) -> dict[TopicPartition, int]:
    return {tp: r.node for r in reqs for tp in requested(r)}


def test_the_leader_names_a_read_replica_and_the_partition_is_fetched_from_it():
    clock, client, subs, fetcher = _follower_env()
    fetcher.send_fetches()
    (req,) = client.take()
    assert req.node == 1 and req.body["rack_id"] == "rack-2"
    answer = fetch_response([partition_data(0, None), partition_data(1, batch(0, 3))])
    answer["responses"][0]["partitions"][0]["preferred_read_replica"] = 2
    req.future.complete(answer)
    fetcher.send_fetches()
    assert _nodes_by_partition(client.take()) == {TP0: 2, TP1: 1}
    assert fetcher.preferred_read_replica(TP0) == 2 and fetcher.preferred_read_replica(TP1) is None


def _redirected(clock, client, fetcher):
    fetcher.send_fetches()
    (req,) = client.take()
    answer = fetch_response([partition_data(0, None), partition_data(1, None)])
    answer["responses"][0]["partitions"][0]["preferred_read_replica"] = 2
    req.future.complete(answer)
    fetcher.send_fetches()
    reqs = {r.node: r for r in client.take()}
    assert set(reqs) == {1, 2}
    return reqs


@pytest.mark.parametrize("error", [6, 1, 78])   # NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE, OFFSET_NOT_AVAILABLE
def test_an_error_from_the_read_replica_sends_the_partition_back_to_its_leader(error):
    clock, client, subs, fetcher = _follower_env()
    reqs = _redirected(clock, client, fetcher)
    reqs[2].future.complete(fetch_response([partition_data(0, None, error=error)]))
    reqs[1].future.complete(fetch_response([]))
    clock.advance(1000)
    fetcher.send_fetches()
    assert _nodes_by_partition(client.take()) == {TP0: 1, TP1: 1}
    assert fetcher.preferred_read_replica(TP0) is None
    assert subs.position(TP0).offset == 0 and subs.is_fetchable(TP0)    # no reset from a lagging follower


def test_a_read_replica_that_cannot_be_reached_sends_the_partition_back_to_its_leader():
    clock, client, subs, fetcher = _follower_env()
    reqs = _redirected(clock, client, fetcher)
    reqs[2].future.raise_(Errors.KafkaConnectionError("connection refused"))
    reqs[1].future.complete(fetch_response([]))
    clock.advance(1000)
    fetcher.send_fetches()
    assert _nodes_by_partition(client.take()) == {TP0: 1, TP1: 1}


def test_a_read_replica_in_reconnect_backoff_or_past_its_time_is_not_used():
    clock, client, subs, fetcher = _follower_env()
    reqs = _redirected(clock, client, fetcher)
    for r in reqs.values():
        r.future.complete(fetch_response([]))
    client.unavailable.add(2)
    fetcher.send_fetches()
    assert _nodes_by_partition(client.take())[TP0] == 1
    clock, client, subs, fetcher = _follower_env()
    reqs = _redirected(clock, client, fetcher)
    for r in reqs.values():
        r.future.complete(fetch_response([]))
    clock.advance(5000)                                  # metadata.max.age.ms
    fetcher.send_fetches()
    assert _nodes_by_partition(client.take())[TP0] == 1
