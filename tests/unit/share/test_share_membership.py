"""ShareMembership (the share group's member state machine) and ShareCoordinator's heartbeat
timing, on a fake clock with a scripted client: no broker, no sleeping."""
from __future__ import annotations

import uuid

import pytest

from kclient import errors as Errors
from kclient.clock import FakeClock
from kclient.network.future import RequestFuture
from kclient.network.metadata import Node
from kclient.protocol import ApiKey
from kclient.share.coordinator import NETWORK_WAIT_MAX_MS, ShareCoordinator
from kclient.share.membership import LEAVE_EPOCH, ShareMembership, ShareMemberState
from kclient.structs import TopicPartition

T1, T2 = uuid.uuid4(), uuid.uuid4()


def answer(epoch, interval=1000, assignment=None, error=0, member_id=None, message=None):
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "member_id": member_id,
            "member_epoch": epoch, "heartbeat_interval_ms": interval,
            "assignment": None if assignment is None else {
                "topic_partitions": [{"topic_id": t, "partitions": sorted(ps)} for t, ps in assignment.items()]}}


# ---------------------------------------------------------------------------------------------
# the state machine

def test_join_body_then_stable_with_assignment_and_interval():
    m = ShareMembership(group_id="g", rack_id="r1")
    assert m.state is ShareMemberState.UNSUBSCRIBED and len(m.member_id) == 32
    first_id = m.member_id
    m.subscribe()
    assert m.state is ShareMemberState.JOINING
    assert m.heartbeat_body(["b", "a"]) == {"group_id": "g", "member_id": first_id, "member_epoch": 0,
                                            "rack_id": "r1", "subscribed_topic_names": ["a", "b"]}
    assert m.on_response(answer(4, interval=1000, assignment={T1: {0, 1, 2}})) is None
    assert m.state is ShareMemberState.STABLE and m.in_group()
    assert (m.member_epoch, m.heartbeat_interval_ms) == (4, 1000)
    assert m.assignment == {T1: frozenset({0, 1, 2})} and m.assignment_version == 1
    assert m.member_id == first_id                 # the client's id, kept when the broker echoes none
    assert m.heartbeat_body(["a"])["member_epoch"] == 4


def test_null_assignment_keeps_the_current_one_and_empty_topics_are_dropped():
    m = ShareMembership(group_id="g")
    m.subscribe()
    m.on_response(answer(1, assignment={T1: {0}, T2: set()}))
    assert m.assignment == {T1: frozenset({0})}
    version = m.assignment_version
    m.on_response(answer(2))                       # null: nothing changed
    assert m.assignment == {T1: frozenset({0})} and m.assignment_version == version
    m.on_response(answer(3, assignment={T1: {0}}))  # the same set: no new version
    assert m.assignment_version == version
    m.on_response(answer(4, assignment={T2: {1}}))
    assert m.assignment == {T2: frozenset({1})} and m.assignment_version == version + 1


def test_joining_answer_with_epoch_zero_stays_joining():
    m = ShareMembership(group_id="g")
    m.subscribe()
    m.on_response(answer(0))
    assert m.state is ShareMemberState.JOINING and not m.in_group()


@pytest.mark.parametrize("code", [110, 25])     # FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID
def test_fencing_drops_the_assignment_and_rejoins_with_epoch_zero_and_same_id(code):
    m = ShareMembership(group_id="g")
    m.subscribe()
    m.on_response(answer(7, assignment={T1: {0}}))
    member_id = m.member_id
    err = m.on_response(answer(7, error=code))
    assert isinstance(err, Errors.error_class(code))
    assert m.state is ShareMemberState.FENCED and m.assignment == {}
    m.rejoin()
    assert m.state is ShareMemberState.JOINING
    body = m.heartbeat_body(["t"])
    assert body["member_epoch"] == 0 and body["member_id"] == member_id
    assert body["subscribed_topic_names"] == ["t"]


def test_answer_after_fencing_or_leaving_is_ignored():
    m = ShareMembership(group_id="g")
    m.subscribe()
    m.on_response(answer(3, assignment={T1: {0}}))
    m.fenced("test")
    assert m.on_response(answer(9, assignment={T1: {0, 1}})) is None
    assert m.state is ShareMemberState.FENCED and m.member_epoch == 3 and m.assignment == {}


def test_leave_sends_epoch_minus_one_then_unsubscribed():
    m = ShareMembership(group_id="g")
    m.subscribe()
    m.on_response(answer(5, assignment={T1: {0}}))
    assert m.leave()
    assert m.state is ShareMemberState.LEAVING and m.assignment == {}
    body = m.heartbeat_body(["t"])
    assert body["member_epoch"] == LEAVE_EPOCH == -1 and body["subscribed_topic_names"] is None
    m.sent()
    assert m.state is ShareMemberState.UNSUBSCRIBED and m.member_epoch == 0
    assert not m.leave()                           # nothing left to leave


def test_leave_before_joining_sends_nothing():
    m = ShareMembership(group_id="g")
    m.subscribe()
    assert not m.leave()
    assert m.state is ShareMemberState.UNSUBSCRIBED


def test_non_retriable_error_is_fatal_and_retriable_is_not():
    m = ShareMembership(group_id="g")
    m.subscribe()
    err = m.on_response(answer(-1, error=Errors.CoordinatorLoadInProgressError.errno))
    assert isinstance(err, Errors.CoordinatorLoadInProgressError) and m.state is ShareMemberState.JOINING
    err = m.on_response(answer(-1, error=Errors.NotCoordinatorError.errno))
    assert m.state is ShareMemberState.JOINING
    err = m.on_response(answer(-1, error=Errors.GroupAuthorizationFailedError.errno, message="no"))
    assert isinstance(err, Errors.GroupAuthorizationFailedError)
    assert m.state is ShareMemberState.FATAL and m.fatal_error is err


# ---------------------------------------------------------------------------------------------
# ShareCoordinator on a fake clock

NODE = Node(2147483646, "127.0.0.1", 9092)


class FakeCluster:
    def __init__(self, names):
        self.names = names

    def topic_name(self, topic_id):
        return self.names.get(topic_id)


class FakeMetadata:
    def __init__(self, names):
        self.cluster = FakeCluster(names)
        self.updates = 0

    def request_update(self):
        self.updates += 1
        return self.updates


class FakeClient:
    """Records the requests sent; the test completes their futures."""

    def __init__(self, names=None):
        self.sent: list[tuple[Node, int, dict, RequestFuture]] = []
        self.metadata = FakeMetadata(names or {})

    def send(self, node, api, body):
        future: RequestFuture = RequestFuture()
        self.sent.append((node, api, body, future))
        return future

    def is_unavailable(self, node):
        return False

    def try_connect(self, node):
        pass

    def wake_poll(self):
        pass

    def try_poll_no_wakeup(self, timeout_ms):
        return True

    def has_pending_requests(self, node):
        return any(not f.is_done for _, _, _, f in self.sent)

    def await_pending_requests(self, node, timeout_ms):
        return not self.has_pending_requests(node)

    def disconnect_async(self, node):
        pass


@pytest.fixture
def env():
    clock = FakeClock()
    client = FakeClient({T1: "orders"})
    coord = ShareCoordinator(client, "g", retry_backoff_ms=100, clock=clock)
    coord.channel.found(NODE, 1)
    coord.subscribe(["orders"])
    return clock, client, coord


def test_heartbeats_follow_the_broker_interval(env):
    clock, client, coord = env
    assert coord.heartbeat_tick(clock.now_ms()) == NETWORK_WAIT_MAX_MS
    node, api, body, future = client.sent[-1]
    assert (node, api, body["member_epoch"]) == (NODE, int(ApiKey.SHARE_GROUP_HEARTBEAT), 0)
    assert coord.heartbeat_tick(clock.now_ms()) == NETWORK_WAIT_MAX_MS   # one in flight at a time
    assert len(client.sent) == 1
    future.complete(answer(1, interval=1000, assignment={T1: {0, 1}}))
    assert coord.membership.state is ShareMemberState.STABLE
    assert coord.assignment() == {TopicPartition("orders", 0), TopicPartition("orders", 1)}
    clock.advance(10)
    # the next one is due the broker's interval after its answer
    assert coord.heartbeat_tick(clock.now_ms()) == 990
    clock.advance(990)
    coord.heartbeat_tick(clock.now_ms())
    assert len(client.sent) == 2 and client.sent[-1][2]["member_epoch"] == 1


def test_unknown_topic_id_asks_for_metadata(env):
    clock, client, coord = env
    coord.heartbeat_tick(clock.now_ms())
    client.sent[-1][3].complete(answer(1, assignment={T1: {0}, T2: {3}}))
    assert coord.assignment() == {TopicPartition("orders", 0)}
    assert client.metadata.updates == 1


def test_assignment_is_made_again_only_when_it_or_the_metadata_changed(env):
    clock, client, coord = env
    coord.heartbeat_tick(clock.now_ms())
    client.sent[-1][3].complete(answer(1, interval=1000, assignment={T1: {0}, T2: {3}}))
    first = coord.assignment()
    assert first == {TopicPartition("orders", 0)} and client.metadata.updates == 1
    # a topic the metadata cannot name yet: asked for again at every call, nothing kept
    assert coord.assignment() == first and coord.assignment() is not first and client.metadata.updates == 3
    client.metadata.cluster = FakeCluster({T1: "orders", T2: "payments"})     # a metadata update
    named = coord.assignment()
    assert named == {TopicPartition("orders", 0), TopicPartition("payments", 3)}
    assert coord.assignment() is named and client.metadata.updates == 3        # kept
    clock.advance(1000)
    coord.heartbeat_tick(clock.now_ms())
    client.sent[-1][3].complete(answer(1, interval=1000, assignment={T2: {3}}))
    assert coord.assignment() == {TopicPartition("payments", 3)}               # a new assignment


def test_fenced_member_rejoins_on_the_next_tick_with_epoch_zero(env):
    clock, client, coord = env
    coord.heartbeat_tick(clock.now_ms())
    client.sent[-1][3].complete(answer(3, assignment={T1: {0}}))
    clock.advance(1000)
    coord.heartbeat_tick(clock.now_ms())
    client.sent[-1][3].complete(answer(3, error=110))
    assert coord.assignment() == set()
    coord.heartbeat_tick(clock.now_ms())           # at once, not after the interval
    assert len(client.sent) == 3 and client.sent[-1][2]["member_epoch"] == 0
    assert client.sent[-1][2]["member_id"] == client.sent[0][2]["member_id"]


def test_retriable_error_retries_after_backoff(env):
    clock, client, coord = env
    coord.heartbeat_tick(clock.now_ms())
    client.sent[-1][3].complete(answer(-1, error=Errors.CoordinatorLoadInProgressError.errno))
    assert coord.heartbeat_tick(clock.now_ms()) == 100
    clock.advance(100)
    coord.heartbeat_tick(clock.now_ms())
    assert len(client.sent) == 2 and client.sent[-1][2]["member_epoch"] == 0


def test_coordinator_error_forgets_the_coordinator(env):
    clock, client, coord = env
    coord.heartbeat_tick(clock.now_ms())
    client.sent[-1][3].complete(answer(-1, error=Errors.NotCoordinatorError.errno))
    assert coord.coordinator() is None


def test_fatal_error_is_raised_by_raise_if_fatal(env):
    clock, client, coord = env
    coord.heartbeat_tick(clock.now_ms())
    client.sent[-1][3].complete(answer(-1, error=Errors.GroupAuthorizationFailedError.errno))
    with pytest.raises(Errors.GroupAuthorizationFailedError):
        coord.raise_if_fatal()


def test_close_leaves_with_epoch_minus_one(env):
    clock, client, coord = env
    coord.heartbeat_tick(clock.now_ms())
    client.sent[-1][3].complete(answer(2, assignment={T1: {0}}))
    coord.close(0)
    body = client.sent[-1][2]
    assert body["member_epoch"] == -1 and coord.closed
    assert coord.membership.state is ShareMemberState.UNSUBSCRIBED
    client.sent[-1][3].complete(answer(-1))        # the leave's answer changes nothing
    assert coord.membership.state is ShareMemberState.UNSUBSCRIBED


def test_broker_without_share_groups_is_fatal_naming_the_feature_and_version(env):
    clock, client, coord = env
    coord.heartbeat_tick(clock.now_ms())
    client.sent[-1][3].raise_(Errors.UnsupportedVersionError("node 1 supports API 76 in versions none"))
    with pytest.raises(Errors.UnsupportedVersionError, match=r"share\.version.*4\.2|4\.2.*share\.version"):
        coord.raise_if_fatal()
    assert coord.membership.state is ShareMemberState.FATAL


def test_unsupported_version_answer_is_fatal_naming_the_feature(env):
    clock, client, coord = env
    coord.heartbeat_tick(clock.now_ms())
    client.sent[-1][3].complete(answer(-1, error=Errors.UnsupportedVersionError.errno))
    with pytest.raises(Errors.UnsupportedVersionError, match="share.version"):
        coord.raise_if_fatal()
