"""Share sessions, acknowledgement batches and ShareFetcher's requests and answers, with a
scripted client (no broker)."""
from __future__ import annotations

import pytest

from kclient import errors as Errors
from kclient.network.metadata import Node
from kclient.protocol import ApiKey
from kclient.share.acknowledgements import GAP, AcknowledgeType, acknowledgement_batches
from kclient.share.fetcher import Acquired, RECORD_LIMIT, ShareFetchConfig, ShareFetcher
from kclient.share.records import ShareConsumerRecord
from kclient.share.session import FINAL_EPOCH, ShareSession, next_epoch
from kclient.structs import ConsumerRecord, TopicPartition
from share_fakes import LEADER, TID, FakeClient, FakeCluster, fetch_answer, part, records_bytes

TP0, TP1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def test_acknowledge_types_are_kip_932s():
    assert [(t.name, int(t)) for t in AcknowledgeType] == [
        ("ACCEPT", 1), ("RELEASE", 2), ("REJECT", 3), ("RENEW", 4)]
    assert GAP == 0


def test_acknowledgement_batches_group_runs_of_one_type():
    acks = {5: 1, 6: 1, 7: 1, 8: 2, 10: 2, 11: 3, 3: 0}
    assert acknowledgement_batches(acks) == [
        {"first_offset": 3, "last_offset": 3, "acknowledge_types": [0]},
        {"first_offset": 5, "last_offset": 7, "acknowledge_types": [1]},
        {"first_offset": 8, "last_offset": 8, "acknowledge_types": [2]},
        {"first_offset": 10, "last_offset": 10, "acknowledge_types": [2]},
        {"first_offset": 11, "last_offset": 11, "acknowledge_types": [3]},
    ]
    assert acknowledgement_batches({}) == []


def test_share_record_is_a_consumer_record_plus_delivery_count():
    assert ShareConsumerRecord._fields == (*ConsumerRecord._fields, "delivery_count")


def test_session_epochs_added_and_forgotten_partitions():
    s = ShareSession(1)
    a, b, c = (TID, 0), (TID, 1), (TID, 2)
    assert s.plan({a, b}) == (0, {a, b}, set())
    s.answered()
    assert s.is_open and s.epoch == 1 and s.partitions == {a, b}
    assert s.plan({b, c}) == (1, {c}, {a})
    s.answered()
    assert s.epoch == 2 and s.partitions == {b, c}
    assert s.plan_acknowledge() == 2
    s.answered()
    assert s.epoch == 3 and s.partitions == {b, c}
    s.reset("test")
    assert s.epoch == 0 and s.partitions == set() and not s.is_open
    assert s.plan({b}) == (0, {b}, set())        # a new session names everything again
    assert next_epoch(2**31 - 1) == 1 and next_epoch(FINAL_EPOCH) == FINAL_EPOCH


# ---------------------------------------------------------------------------------------------
# ShareFetcher with a scripted client

@pytest.fixture
def env():
    client = FakeClient()
    fetcher = ShareFetcher(client, "g", lambda: "member-1",
                           ShareFetchConfig(max_wait_ms=100, max_records=50, batch_size=50,
                                            acquire_mode=RECORD_LIMIT))
    return client, fetcher


def test_first_fetch_opens_a_session_naming_every_partition(env):
    client, fetcher = env
    assert fetcher.send_fetches({TP0, TP1}) == 1
    node, api, body, _ = client.sent[-1]
    assert (node, api) == (1, int(ApiKey.SHARE_FETCH))
    assert body["share_session_epoch"] == 0 and body["member_id"] == "member-1" and body["group_id"] == "g"
    assert (body["max_records"], body["batch_size"], body["share_acquire_mode"]) == (50, 50, RECORD_LIMIT)
    assert body["topics"] == [{"topic_id": TID, "partitions": [
        {"partition_index": 0, "acknowledgement_batches": []},
        {"partition_index": 1, "acknowledgement_batches": []}]}]
    assert body["forgotten_topics_data"] == []
    assert fetcher.send_fetches({TP0, TP1}) == 0           # one request in flight per broker


def test_records_outside_acquired_ranges_are_not_handed_out_and_gaps_are_acknowledged(env):
    client, fetcher = env
    fetcher.send_fetches({TP0})
    # the batch holds offsets 10..14; 10-11 acquired (second delivery), 13-14 acquired first
    # time, 12 not acquired (another member holds it); 15 acquired but has no record
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(10, 5), [(10, 11, 2), (13, 15, 1)])]))
    [(tp, recs)] = fetcher.take_records()
    assert tp == TP0
    assert [(r.offset, r.value, r.delivery_count) for r in recs] == [
        (10, b"v10", 2), (11, b"v11", 2), (13, b"v13", 1), (14, b"v14", 1)]
    assert recs[0].topic == "orders" and recs[0].partition == 0
    assert fetcher.acquisition_lock_timeout_ms == 15000
    assert fetcher.pending_acknowledgements() == 1         # offset 15: a gap
    # the next fetch carries the acknowledgements, at epoch 1, naming no new partition
    fetcher.acknowledge(TP0, 10, AcknowledgeType.ACCEPT)
    fetcher.acknowledge(TP0, 11, AcknowledgeType.RELEASE)
    fetcher.send_fetches({TP0})
    body = client.sent[-1][2]
    assert body["share_session_epoch"] == 1
    assert body["topics"] == [{"topic_id": TID, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
        {"first_offset": 10, "last_offset": 10, "acknowledge_types": [1]},
        {"first_offset": 11, "last_offset": 11, "acknowledge_types": [2]},
        {"first_offset": 15, "last_offset": 15, "acknowledge_types": [0]}]}]}]
    client.sent[-1][3].complete(fetch_answer([part(0, None, [], ack_error=0)]))
    results = fetcher.take_results()
    # the gap is the fetcher's own acknowledgement: the application hears of its two only
    assert [(r.partition, sorted(r.offsets), r.error) for r in results] == [(TP0, [10, 11], None)]


def test_acknowledgement_error_of_a_partition_is_reported(env):
    client, fetcher = env
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 1), [(0, 0, 1)])]))
    fetcher.take_records()
    fetcher.acknowledge(TP0, 0, AcknowledgeType.ACCEPT)
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, None, [], ack_error=Errors.InvalidRecordStateError.errno)]))
    [result] = fetcher.take_results()
    assert isinstance(result.error, Errors.InvalidRecordStateError) and result.offsets == {0}


def test_unassigned_partition_is_forgotten(env):
    client, fetcher = env
    fetcher.send_fetches({TP0, TP1})
    client.sent[-1][3].complete(fetch_answer([]))
    fetcher.send_fetches({TP0})
    body = client.sent[-1][2]
    assert body["share_session_epoch"] == 1 and body["topics"] == []
    assert body["forgotten_topics_data"] == [{"topic_id": TID, "partitions": [1]}]
    client.sent[-1][3].complete(fetch_answer([]))
    assert fetcher.sessions[1].partitions == {(TID, 0)}


@pytest.mark.parametrize("error", [Errors.ShareSessionNotFoundError, Errors.InvalidShareSessionEpochError])
def test_session_error_opens_a_new_session_and_fails_the_acknowledgements(env, error):
    client, fetcher = env
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 2), [(0, 1, 1)])]))
    fetcher.take_records()
    fetcher.acknowledge(TP0, 0, AcknowledgeType.ACCEPT)
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([], error=error.errno))
    [result] = fetcher.take_results()
    assert isinstance(result.error, error)
    fetcher.send_fetches({TP0})
    body = client.sent[-1][2]
    assert body["share_session_epoch"] == 0 and body["topics"][0]["partitions"][0]["partition_index"] == 0


def test_partition_error_asks_for_metadata(env):
    client, fetcher = env
    fetcher.send_fetches({TP0})
    before = client.metadata.updates
    client.sent[-1][3].complete(fetch_answer([part(0, error=Errors.NotLeaderForPartitionError.errno)]))
    assert client.metadata.updates == before + 1 and fetcher.take_records() == []


def test_the_renew_pass_sends_renews_only_and_nothing_without_one(env):
    """``send_acknowledgements(only_renew=True)`` (every poll) sends nothing when no RENEW
    waits; a RENEW waiting behind a request in flight goes out with a later pass."""
    client, fetcher = env
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 4), [(0, 3, 1)])]))
    fetcher.take_records()
    fetcher.acknowledge_range(TP0, 0, 1, AcknowledgeType.ACCEPT)
    sent = len(client.sent)
    assert fetcher.send_acknowledgements(only_renew=True) == [] and len(client.sent) == sent
    assert fetcher.pending_acknowledgements() == 2          # the ACCEPTs wait for the next request
    fetcher.send_fetches({TP0})                             # in flight: the RENEW must wait
    fetch = client.sent[-1][3]
    fetcher.acknowledge(TP0, 2, AcknowledgeType.RENEW)
    assert fetcher.send_acknowledgements(only_renew=True) == []
    fetch.complete(fetch_answer([]))
    [f] = fetcher.send_acknowledgements(only_renew=True)
    body = client.sent[-1][2]
    assert body["is_renew_ack"] and body["topics"][0]["partitions"][0]["acknowledgement_batches"] == [
        {"first_offset": 2, "last_offset": 2, "acknowledge_types": [4]}]
    f.complete({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []})
    sent = len(client.sent)
    assert fetcher.send_acknowledgements(only_renew=True) == [] and len(client.sent) == sent


def test_share_acknowledge_carries_renew_and_close_uses_epoch_minus_one(env):
    client, fetcher = env
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 3), [(0, 2, 1)])]))
    fetcher.take_records()
    fetcher.acknowledge(TP0, 0, AcknowledgeType.RENEW)
    fetcher.acknowledge(TP0, 1, AcknowledgeType.ACCEPT)
    [f] = fetcher.send_acknowledgements(only_renew=True)
    node, api, body, _ = client.sent[-1]
    assert api == int(ApiKey.SHARE_ACKNOWLEDGE) and body["share_session_epoch"] == 1 and body["is_renew_ack"]
    assert body["topics"][0]["partitions"][0]["acknowledgement_batches"] == [
        {"first_offset": 0, "last_offset": 0, "acknowledge_types": [4]}]
    f.complete({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "acquisition_lock_timeout_ms": 20000, "responses": [], "node_endpoints": []})
    assert fetcher.acquisition_lock_timeout_ms == 20000 and fetcher.sessions[1].epoch == 2
    [close] = fetcher.close_sessions()
    body = client.sent[-1][2]
    assert body["share_session_epoch"] == -1 and not body["is_renew_ack"]
    assert body["topics"][0]["partitions"][0]["acknowledgement_batches"] == [
        {"first_offset": 1, "last_offset": 1, "acknowledge_types": [1]}]
    close.complete({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []})
    assert not fetcher.sessions[1].is_open


def test_batches_out_of_order_and_overlapping_ranges_still_hand_out_each_acquired_record_once(env):
    """Not what a broker sends; the records still come out once each, gaps acknowledged."""
    client, fetcher = env
    fetcher.send_fetches({TP0})
    data = records_bytes(13, 2) + records_bytes(10, 2)
    client.sent[-1][3].complete(fetch_answer([part(0, data, [(10, 14, 1), (14, 14, 3)])]))
    [(tp, recs)] = fetcher.take_records()
    assert [(r.offset, r.value, r.delivery_count) for r in recs] == [
        (13, b"v13", 1), (14, b"v14", 3), (10, b"v10", 1), (11, b"v11", 1)]
    fetcher.send_fetches({TP0})
    assert client.sent[-1][2]["topics"][0]["partitions"][0]["acknowledgement_batches"] == [
        {"first_offset": 12, "last_offset": 12, "acknowledge_types": [0]}]


def test_held_runs_are_the_handed_out_offsets(env):
    client, fetcher = env
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(10, 5), [(10, 11, 2), (12, 12, 1), (14, 15, 1)])]))
    [acquired] = fetcher.take_acquired()
    recs, held = fetcher.held_records_of(acquired)
    assert [r.offset for r in recs] == [10, 11, 12, 14] and held == [(10, 12), (14, 14)]


class MovingCluster(FakeCluster):
    """The metadata after a leader change: TP0's leader is node 2."""

    def __init__(self):
        self.leaders = {TP0: LEADER, TP1: LEADER}

    def leader_for(self, tp):
        return self.leaders[tp]


def acquire_from_node_1(client, fetcher):
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 2), [(0, 1, 1)])]))
    fetcher.take_records()


def test_acknowledgements_of_a_partition_whose_leader_moved_fail_at_once_and_go_nowhere(env):
    """The new leader has the records acquired from the old one available again (it loads the
    partition's state from the share coordinator): their acknowledgements fail at once with
    NOT_LEADER_OR_FOLLOWER, as the Java client's do. They neither wait for the old leader (a
    commit_sync would run into its timeout) nor travel to the new leader with its records."""
    client, fetcher = env
    client.metadata.cluster = cluster = MovingCluster()
    acquire_from_node_1(client, fetcher)
    fetcher.send_fetches({TP0})                                   # in flight to node 1 when it dies
    client.sent[-1][3].raise_(Errors.KafkaConnectionError("connection to node 1 closed by the broker"))
    cluster.leaders[TP0] = Node(2, "127.0.0.1", 9093)
    fetcher.acknowledge(TP0, 0, AcknowledgeType.ACCEPT)
    fetcher.acknowledge(TP0, 1, AcknowledgeType.REJECT)
    assert fetcher.send_acknowledgements() == []
    [result] = fetcher.take_results()
    assert result.partition == TP0 and result.offsets == {0, 1}
    assert isinstance(result.error, Errors.NotLeaderOrFollowerError)
    assert fetcher.pending_acknowledgements() == 0
    fetcher.send_fetches({TP0})
    node, _, body, future = client.sent[-1]
    assert node == 2 and body["share_session_epoch"] == 0
    assert body["topics"][0]["partitions"] == [{"partition_index": 0, "acknowledgement_batches": []}]
    # records of the new leader are acknowledged there
    future.complete(fetch_answer([part(0, records_bytes(0, 2), [(0, 1, 2)])]))
    [(_, recs)] = fetcher.take_records()
    assert [(r.offset, r.delivery_count) for r in recs] == [(0, 2), (1, 2)]
    fetcher.acknowledge(TP0, 0, AcknowledgeType.ACCEPT)
    [f] = fetcher.send_acknowledgements()
    assert client.sent[-1][0] == 2 and client.sent[-1][2]["share_session_epoch"] == 1
    assert fetcher.take_results() == []


def test_acknowledgements_through_a_reset_session_fail_and_the_new_session_opens_without_them(env):
    """The session the records were acquired through was reset (the broker released them): a
    new session's first ShareFetch may carry no acknowledgements (the broker answers
    INVALID_REQUEST), and a ShareAcknowledge needs an open session: they fail at once with
    INVALID_SHARE_SESSION_EPOCH instead of waiting for good."""
    client, fetcher = env
    client.metadata.cluster = MovingCluster()
    acquire_from_node_1(client, fetcher)
    fetcher.send_fetches({TP0})
    client.sent[-1][3].raise_(Errors.KafkaConnectionError("connection to node 1 reset"))
    fetcher.acknowledge(TP0, 0, AcknowledgeType.ACCEPT)
    assert fetcher.send_acknowledgements() == []
    [result] = fetcher.take_results()
    assert isinstance(result.error, Errors.InvalidShareSessionEpochError) and result.offsets == {0}
    fetcher.send_fetches({TP0})
    node, _, body, _ = client.sent[-1]
    assert node == 1 and body["share_session_epoch"] == 0
    assert body["topics"][0]["partitions"] == [{"partition_index": 0, "acknowledgement_batches": []}]
    assert fetcher.pending_acknowledgements() == 0


def _acquired_not_taken(client, fetcher):
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 2), [(0, 1, 1)])]))
    [acquired] = fetcher.take_acquired()
    return acquired


def test_records_acquired_from_a_leader_that_moved_are_void(env):
    """Acquired, not handed out yet, when the metadata names another leader: the new leader
    has them available again, so they are not this member's any more."""
    client, fetcher = env
    client.metadata.cluster = cluster = MovingCluster()
    acquired = _acquired_not_taken(client, fetcher)
    assert acquired.source == (1, 0) and fetcher.voided(acquired) is None
    cluster.leaders[TP0] = Node(2, "127.0.0.1", 9093)
    assert isinstance(fetcher.voided(acquired), Errors.NotLeaderOrFollowerError)
    assert fetcher.voided(Acquired(TP0, acquired.records, acquired.ranges)) is None    # source unknown


def test_records_acquired_through_a_session_since_reset_are_void(env):
    client, fetcher = env
    client.metadata.cluster = MovingCluster()
    acquired = _acquired_not_taken(client, fetcher)
    fetcher.send_fetches({TP0})
    client.sent[-1][3].raise_(Errors.KafkaConnectionError("connection to node 1 reset"))
    assert isinstance(fetcher.voided(acquired), Errors.InvalidShareSessionEpochError)
    # what the new session acquires is this member's
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 2), [(0, 1, 2)])]))
    [again] = fetcher.take_acquired()
    assert again.source == (1, 1) and fetcher.voided(again) is None


def test_records_whose_acquisition_lock_ran_out_before_a_poll_took_them_are_void():
    """The lock starts at the broker after the ShareFetch left: by this client's clock it ends
    at the latest its length after the send. Records still waiting for a poll then are the
    broker's again (it delivers them again, to any member), so they are void."""
    from kclient.clock import FakeClock
    clock = FakeClock(1_000)
    client = FakeClient()
    client.metadata.cluster = MovingCluster()
    fetcher = ShareFetcher(client, "g", lambda: "member-1", ShareFetchConfig(), clock=clock)
    fetcher.send_fetches({TP0})
    clock.advance(300)                      # the answer comes 300 ms after the send
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 2), [(0, 1, 1)])], lock=2000))
    [acquired] = fetcher.take_acquired()
    assert acquired.lock_deadline_ms == 3_000 and fetcher.voided(acquired) is None
    clock.advance(1_699)
    assert fetcher.voided(acquired) is None
    clock.advance(1)
    err = fetcher.voided(acquired)
    assert isinstance(err, Errors.InvalidRecordStateError) and "2000 ms" in str(err)


def test_no_share_fetch_to_a_node_in_reconnect_backoff(env):
    """A leader just killed: until the metadata names the new leader (the controller moves
    leadership after the broker's session times out, seconds), each fetch to it fails at once;
    they are not sent again in a loop but once its reconnect backoff is over."""
    client, fetcher = env
    fetcher.send_fetches({TP0})
    client.sent[-1][3].raise_(Errors.KafkaConnectionError("connection to node 1 refused"))
    client.unavailable.add(1)
    sent = len(client.sent)
    assert fetcher.send_fetches({TP0}) == 0 and len(client.sent) == sent
    client.unavailable.clear()
    assert fetcher.send_fetches({TP0}) == 1 and client.sent[-1][2]["share_session_epoch"] == 0



def test_a_leader_that_answered_a_partition_error_is_asked_again_after_the_backoff_or_new_metadata():
    """A restarted former leader answers NOT_LEADER_OR_FOLLOWER at once until the metadata names
    the new one: it is asked again after retry.backoff.ms, or as soon as the metadata changes,
    not at every poll in between."""
    from kclient.clock import FakeClock
    clock = FakeClock(1_000)
    client = FakeClient()
    fetcher = ShareFetcher(client, "g", lambda: "member-1", ShareFetchConfig(retry_backoff_ms=100), clock=clock)
    fetcher.send_fetches({TP0})
    client.sent[-1][3].complete(fetch_answer([part(0, error=Errors.NotLeaderOrFollowerError.errno)]))
    sent = len(client.sent)
    assert fetcher.send_fetches({TP0}) == 0
    clock.advance(99)
    assert fetcher.send_fetches({TP0}) == 0 and len(client.sent) == sent
    clock.advance(1)
    assert fetcher.send_fetches({TP0}) == 1
    client.sent[-1][3].complete(fetch_answer([part(0, error=Errors.NotLeaderOrFollowerError.errno)]))
    assert fetcher.send_fetches({TP0}) == 0
    client.metadata.cluster = FakeCluster()     # a metadata update: asked at once
    assert fetcher.send_fetches({TP0}) == 1


def test_acknowledgements_in_flight_name_the_partitions_sent_and_not_answered(env):
    client, fetcher = env
    fetcher.send_fetches({TP0, TP1})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 3), [(0, 2, 1)]),
                                              part(1, records_bytes(0, 3), [(0, 2, 1)])]))
    fetcher.take_records()
    assert fetcher.acknowledgements_in_flight() == set()
    fetcher.acknowledge_range(TP0, 0, 2, AcknowledgeType.ACCEPT)
    [f] = fetcher.send_acknowledgements()
    assert fetcher.acknowledgements_in_flight() == {TP0}      # TP1: nothing of the application's
    f.complete({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []})
    assert fetcher.acknowledgements_in_flight() == set()


def test_requests_and_the_records_their_answers_acquired_are_counted(env):
    client, fetcher = env
    fetcher.send_fetches({TP0, TP1})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(0, 10), [(0, 9, 1)]), part(1, None, [])]))
    [(tp, _)] = fetcher.take_records()
    fetcher.acknowledge_range(tp, 0, 9, AcknowledgeType.ACCEPT)
    [f] = fetcher.send_acknowledgements()
    f.complete({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []})
    fetcher.send_fetches({TP0, TP1})
    client.sent[-1][3].complete(fetch_answer([part(0, records_bytes(10, 3), [(10, 12, 1)])]))
    assert fetcher.counts == {"fetch-total": 2, "acknowledge-request-total": 1, "fetch-answers-total": 2,
                              "records-acquired-total": 13}


def test_fetches_follow_a_leader_that_moved_when_the_metadata_changes(env):
    """The partitions by leader are kept while the assignment and the metadata stay the same
    objects, and looked up again when either changes."""
    client, fetcher = env
    assignment = frozenset({TP0, TP1})
    fetcher.send_fetches(assignment)
    client.sent[-1][3].complete(fetch_answer([]))
    fetcher.send_fetches(assignment)
    assert [n for n, *_ in client.sent] == [1, 1]
    client.sent[-1][3].complete(fetch_answer([]))
    moved = Node(2, "127.0.0.1", 9093)

    class Moved(FakeCluster):
        def leader_for(self, tp):
            return moved if tp == TP1 else LEADER

    client.metadata.cluster = Moved()           # a metadata update: TP1 is led by node 2 now
    fetcher.send_fetches(assignment)
    by_node = {n: b for n, _, b, _ in client.sent[2:]}
    assert sorted(by_node) == [1, 2]
    assert by_node[1]["forgotten_topics_data"] == [{"topic_id": TID, "partitions": [1]}]
    assert [p["partition_index"] for p in by_node[2]["topics"][0]["partitions"]] == [1]
    assert by_node[2]["share_session_epoch"] == 0


def test_acknowledgements_behind_an_unanswered_fetch_wait_and_are_named_until_they_leave(env):
    """Acknowledgements made while the leader's ShareFetch is unanswered cannot leave (one
    request in flight per session): acknowledgements_waiting names their partition (commit_sync
    reports it at its timeout) until the answer lets them go, then acknowledgements_in_flight
    does until theirs comes."""
    client, fetcher = env
    acquire_from_node_1(client, fetcher)
    fetcher.send_fetches({TP0})
    fetch = client.sent[-1][3]
    fetcher.acknowledge(TP0, 0, AcknowledgeType.ACCEPT)
    assert fetcher.send_acknowledgements() == []
    assert fetcher.acknowledgements_waiting() == {TP0}
    assert fetcher.acknowledgements_in_flight() == set()
    fetch.complete(fetch_answer([part(0)]))
    [ack] = fetcher.send_acknowledgements()
    assert fetcher.acknowledgements_waiting() == set()
    assert fetcher.acknowledgements_in_flight() == {TP0}
    ack.complete({"error_code": 0, "error_message": None, "responses": []})
    assert fetcher.acknowledgements_in_flight() == set()
