"""ConsumerCoordinator / AbstractCoordinator against a scripted coordinator peer.

The peer (``ScriptedBroker``) is real sockets: every connection the client opens is one end
of a ``socketpair``; a thread reads the client's real request frames (``decode_request``) and
answers with real frames (``encode_response``). It plays a one-broker cluster: metadata, the
group coordinator (with the KIP-394 member-id round trip) and offset storage; tests inject
error codes per API, hold responses, or replace the group's answers. The stack under test is
the real one: NetworkClient + ConsumerNetworkClient + SubscriptionState + ConsumerCoordinator.
(test_heartbeat_thread.py imports this peer.)
"""
from __future__ import annotations

import collections
import logging
import selectors
import socket
import threading
import time

import pytest

from kclient import errors as Errors
from kclient.group.assignors import AbstractPartitionAssignor, RebalanceProtocol
from kclient.clock import SYSTEM_CLOCK, FakeClock
from kclient.config import ConsumerConfig
from kclient.group.consumer_coordinator import STEADY_POLL_MS, ConsumerCoordinator
from kclient.network.consumer_network_client import ConsumerNetworkClient
from kclient.network.network_config import NetworkClientConfig
from kclient.group.classic_embedded_protocol import (
    Assignment, Subscription, deserialize_assignment, deserialize_subscription, serialize_assignment,
    serialize_subscription,
)
from kclient.group.coordinator import NO_GENERATION, MemberState
from kclient.group.coordinator_channel import coordinator_node_id
from kclient.group.group_config import ConsumerCoordinatorConfig, GroupRebalanceConfig
from kclient.consumer.interceptors import ConsumerInterceptor, ConsumerInterceptors
from kclient.network.network_client import NetworkClient
from kclient.protocol import decode_request, encode_response
from kclient.structs import OffsetAndMetadata, TopicPartition
from kclient.subscription.state import FetchState, SubscriptionState
from kcore.frames import FrameSplitter

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, METADATA, API_VERSIONS = 8, 9, 3, 18
BROKER_ID = 1
BROKER_RANGES = {API_VERSIONS: (0, 4), METADATA: (0, 12), FIND_COORDINATOR: (0, 6), JOIN_GROUP: (0, 9),
                 HEARTBEAT: (0, 4), LEAVE_GROUP: (0, 5), SYNC_GROUP: (0, 5), OFFSET_COMMIT: (2, 9),
                 OFFSET_FETCH: (1, 9)}
HOLD = object()


def tp(topic, partition):
    return TopicPartition(topic, partition)


# ---------------------------------------------------------------------- the scripted peer
class _PeerConn:
    def __init__(self, sock, node):
        self.sock = sock
        self.node = node
        self.splitter = FrameSplitter(1 << 24)
        self.pending: collections.deque = collections.deque()   # answered in order, like a broker


class ScriptedBroker:
    """A one-broker cluster and group coordinator answering on socketpairs.

    Responses on a connection go out in request order (as Kafka guarantees): a held request
    also holds the ones behind it on the same connection until it is released.
    """

    def __init__(self, topics: dict[str, int] | None = None):
        self.topics = dict(topics or {})
        self.internal_topics: set[str] = set()
        self.cond = threading.Condition()
        self.requests: list[tuple[int, int, dict]] = []     # (api_key, version, body)
        self.errors: dict[int, collections.deque] = collections.defaultdict(collections.deque)
        self.hold: set[int] = set()
        self.commits: dict[TopicPartition, tuple[int, str, int]] = {}
        self.generation = 0
        self.next_member = 1
        self.join_override = None       # fn(body, member) -> JoinGroup response fields
        self.follower_assignment: dict[str, bytes] = {}
        self.drop: dict[int, int] = {}     # api -> how many of its requests get the connection closed
        self.drop_all = False
        self.refuse = False
        self.ranges = dict(BROKER_RANGES)      # what ApiVersions advertises
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._new: list[_PeerConn] = []
        self._conns: list[_PeerConn] = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name="scripted-broker", daemon=True)
        self._thread.start()

    # -- wiring
    def socket_factory(self, node):
        if self.refuse:
            raise ConnectionRefusedError("scripted broker refuses connections")
        client_end, peer_end = socket.socketpair()
        with self.cond:
            self._new.append(_PeerConn(peer_end, node))
        self._wake_w.send(b"x")
        return client_end

    def kill_connections(self):
        """Close every connection from the broker side (the client sees them fail)."""
        with self.cond:
            self.drop_all = True
        self._wake_w.send(b"x")

    def close(self):
        self._stop = True
        self._wake_w.send(b"x")
        self._thread.join(5)
        for c in self._conns:
            c.sock.close()

    def _serve(self):
        while not self._stop:
            for key, _ in self._sel.select(0.5):
                if key.data is None:
                    try:
                        self._wake_r.recv(4096)
                    except BlockingIOError:
                        pass
                    continue
                conn = key.data
                try:
                    data = conn.sock.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    self._sel.unregister(conn.sock)
                    continue
                for frame in conn.splitter.feed(data):
                    if conn.sock.fileno() < 0:
                        break
                    self._dispatch(conn, frame)
            with self.cond:
                new, self._new = self._new, []
                kill, self.drop_all = self.drop_all, False
            if kill:
                for c in self._conns:
                    if c.sock.fileno() >= 0:
                        self._sel.unregister(c.sock)
                        c.sock.close()
                self._conns = []
            for c in new:
                self._conns.append(c)
                self._sel.register(c.sock, selectors.EVENT_READ, c)
            for c in list(self._conns):
                if c.sock.fileno() >= 0:
                    self._flush(c)

    def _dispatch(self, conn, frame):
        api, version, corr, _client_id, body = decode_request(bytes(frame))
        with self.cond:
            if api not in (API_VERSIONS, METADATA):
                self.requests.append((api, version, body))
            if self.drop.get(api):
                self.drop[api] -= 1
                self.cond.notify_all()
                self._sel.unregister(conn.sock)
                conn.sock.close()
                conn.pending.clear()
                return
            conn.pending.append({"api": api, "version": version, "corr": corr, "body": body,
                                 "held": api in self.hold, "code": None})
            self.cond.notify_all()
        self._flush(conn)

    def _flush(self, conn):
        while True:
            with self.cond:
                if not conn.pending or conn.pending[0]["held"]:
                    return
                entry = conn.pending.popleft()
            if entry["code"] is not None:
                self.errors[entry["api"]].appendleft(entry["code"])
            response = self.answer(entry["api"], entry["version"], entry["body"])
            try:
                conn.sock.sendall(encode_response(entry["api"], entry["version"], entry["corr"], response))
            except OSError:
                pass

    def release(self, api, error_code=None):
        """Answer the held requests of ``api`` (normally, or with ``error_code``)."""
        with self.cond:
            self.hold.discard(api)
            for c in self._conns:
                for entry in c.pending:
                    if entry["held"] and entry["api"] == api:
                        entry["held"] = False
                        entry["code"] = error_code
        self._wake_w.send(b"x")      # the serving thread flushes the connections

    def wait_held(self, api, timeout=5.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not any(e["held"] and e["api"] == api for c in self._conns + self._new for e in c.pending):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no request {api} held")
                self.cond.wait(left)

    # -- observations
    def bodies(self, api):
        with self.cond:
            return [(v, b) for a, v, b in self.requests if a == api]

    def count(self, api):
        return len(self.bodies(api))

    def wait_count(self, api, n, timeout=5.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while sum(1 for a, _, _ in self.requests if a == api) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"fewer than {n} requests of api {api}: {self.requests}")
                self.cond.wait(left)
        return self.bodies(api)

    # -- answers
    def answer(self, api, version, body):
        code = 0
        with self.cond:
            if self.errors[api]:
                code = self.errors[api].popleft()
        return getattr(self, f"_answer_{api}")(version, body, code)

    def _answer_18(self, version, body, code):
        return {"error_code": 0, "throttle_time_ms": 0, "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in self.ranges.items()]}

    def _answer_3(self, version, body, code):
        wanted = body.get("topics")
        names = sorted(self.topics) if wanted is None else [t["name"] for t in wanted]
        topics = []
        for name in names:
            if name not in self.topics:
                topics.append({"error_code": 3, "name": name, "is_internal": False, "partitions": []})
                continue
            topics.append({"error_code": 0, "name": name, "is_internal": name in self.internal_topics,
                           "partitions": [{"error_code": 0, "partition_index": p, "leader_id": BROKER_ID,
                                           "leader_epoch": 0, "replica_nodes": [BROKER_ID],
                                           "isr_nodes": [BROKER_ID], "offline_replicas": []}
                                          for p in range(self.topics[name])]})
        return {"throttle_time_ms": 0, "cluster_id": "scripted", "controller_id": BROKER_ID,
                "brokers": [{"node_id": BROKER_ID, "host": "broker1", "port": 9092, "rack": None}],
                "topics": topics}

    def _answer_10(self, version, body, code):
        entry = {"node_id": BROKER_ID if not code else -1, "host": "broker1" if not code else "",
                 "port": 9092 if not code else -1, "error_code": code, "error_message": None}
        if version >= 4:
            return {"throttle_time_ms": 0, "coordinators": [dict(entry, key=k) for k in body["coordinator_keys"]]}
        return dict(entry, throttle_time_ms=0)

    def _answer_11(self, version, body, code):
        base = {"throttle_time_ms": 0, "error_code": code, "generation_id": -1, "protocol_type": "consumer",
                "protocol_name": None, "leader": "", "skip_assignment": False,
                "member_id": body["member_id"], "members": []}
        if code:
            return base
        if not body["member_id"] and version >= 4:
            with self.cond:
                member = f"m-{self.next_member}"
                self.next_member += 1
            return dict(base, error_code=79, member_id=member)
        member = body["member_id"] or "m-legacy"
        with self.cond:
            self.generation += 1
            generation = self.generation
        if self.join_override is not None:
            return dict(base, generation_id=generation, member_id=member, **self.join_override(body, member))
        proto = body["protocols"][0]
        return dict(base, generation_id=generation, protocol_name=proto["name"], leader=member, member_id=member,
                    members=[{"member_id": member, "group_instance_id": body.get("group_instance_id"),
                              "metadata": proto["metadata"]}])

    def _answer_14(self, version, body, code):
        if code:
            return {"throttle_time_ms": 0, "error_code": code, "protocol_type": None, "protocol_name": None,
                    "assignment": b""}
        mine = {a["member_id"]: a["assignment"] for a in body["assignments"]}
        assignment = mine.get(body["member_id"], self.follower_assignment.get(body["member_id"], b""))
        return {"throttle_time_ms": 0, "error_code": 0, "protocol_type": body.get("protocol_type"),
                "protocol_name": body.get("protocol_name"), "assignment": assignment}

    def _answer_12(self, version, body, code):
        return {"throttle_time_ms": 0, "error_code": code}

    def _answer_13(self, version, body, code):
        members = [{"member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"),
                    "error_code": 0} for m in body.get("members") or []]
        return {"throttle_time_ms": 0, "error_code": code, "members": members}

    def _answer_8(self, version, body, code):
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                if not code:
                    self.commits[tp(t["name"], p["partition_index"])] = (
                        p["committed_offset"], p["committed_metadata"], p["committed_leader_epoch"])
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    def _answer_9(self, version, body, code):
        groups = body["groups"] if version >= 8 else [{"group_id": body["group_id"], "topics": body["topics"]}]
        out = []
        for g in groups:
            topics = []
            for t in g["topics"] or []:
                parts = []
                for p in t["partition_indexes"]:
                    off, meta, epoch = self.commits.get(tp(t["name"], p), (-1, "", -1))
                    parts.append({"partition_index": p, "committed_offset": off, "committed_leader_epoch": epoch,
                                  "metadata": meta, "error_code": 0})
                topics.append({"name": t["name"], "partitions": parts})
            out.append({"group_id": g["group_id"], "topics": topics, "error_code": code})
        if version >= 8:
            return {"throttle_time_ms": 0, "groups": out}
        return {"throttle_time_ms": 0, "topics": out[0]["topics"], "error_code": code}


# ---------------------------------------------------------------------- the stack under test
class RecordingListener:
    def __init__(self, on_revoke=None):
        self.events: list[tuple[str, list]] = []
        self.on_revoke = on_revoke

    def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", sorted(revoked)))
        if self.on_revoke is not None:
            self.on_revoke(revoked)

    def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", sorted(assigned)))

    def on_partitions_lost(self, lost):
        self.events.append(("lost", sorted(lost)))


class Stack:
    """NetworkClient + ConsumerNetworkClient + SubscriptionState + ConsumerCoordinator."""

    def __init__(self, broker, clock=SYSTEM_CLOCK, topics=("t",), pattern=None, listener=None,
                 interceptors=None, start_heartbeat_thread=False, **cfg):
        settings = {"bootstrap.servers": "broker1:9092", "group.id": "g", "session.timeout.ms": 10000,
                    "heartbeat.interval.ms": 3000, "max.poll.interval.ms": 60000, "retry.backoff.ms": 10,
                    "enable.auto.commit": False, "request.timeout.ms": 30000}
        settings.update({k.replace("_", "."): v for k, v in cfg.items()})
        self.config = ConsumerConfig(settings)
        self.clock = clock
        self.net = NetworkClient(NetworkClientConfig.of(self.config), clock=clock, socket_factory=broker.socket_factory)
        self.client = ConsumerNetworkClient(self.net, clock=clock)
        self.metadata = self.client.metadata
        self.subs = SubscriptionState("earliest", self.config["exclude.internal.topics"])
        self.listener = listener if listener is not None else RecordingListener()
        if pattern is not None:
            self.subs.subscribe_pattern(pattern, self.listener)
            self.metadata.set_need_all_topics(True)
        elif topics is not None:
            self.subs.subscribe(list(topics), self.listener)
            self.metadata.set_topics(topics)
        self.coord = ConsumerCoordinator(self.client, self.subs, self.metadata, GroupRebalanceConfig.of(self.config),
                                         ConsumerCoordinatorConfig.of(self.config), clock=clock,
                                         interceptors=interceptors, start_heartbeat_thread=start_heartbeat_thread)

    def join(self, timeout_ms=5000):
        deadline = time.monotonic() + timeout_ms / 1000
        while not (self.coord.state is MemberState.STABLE and not self.coord.rejoin_needed_or_pending()):
            assert time.monotonic() < deadline, f"not joined: {self.coord.state}"
            self.coord.poll(timeout_ms)

    def pump(self, cond, timeout=5.0):
        """Serve the network on this thread until ``cond()`` holds (deadline in real time)."""
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, "condition not reached"
            self.client.poll_no_wakeup(20)

    def close(self):
        try:
            hb = self.coord.heartbeat_driver
            if hb is not None:
                hb.close(5)
        finally:
            self.client.close()


@pytest.fixture
def broker():
    b = ScriptedBroker({"t": 3, "u": 2})
    yield b
    b.close()


@pytest.fixture
def make_stack(broker):
    stacks = []

    def _make(**kwargs):
        s = Stack(broker, **kwargs)
        stacks.append(s)
        return s

    yield _make
    for s in stacks:
        s.close()


# ---------------------------------------------------------------------- join
def test_join_with_member_id_required_round_trip_and_join_fields(broker, make_stack):
    s = make_stack(max_poll_interval_ms=45000, session_timeout_ms=12000)
    s.join()
    joins = broker.bodies(JOIN_GROUP)
    assert len(joins) == 2
    (v1, first), (v2, second) = joins
    assert first["member_id"] == "" and second["member_id"] == "m-1"
    for v, body in joins:
        assert v == 9
        assert body["group_id"] == "g"
        assert body["session_timeout_ms"] == 12000
        assert body["rebalance_timeout_ms"] == 45000          # max.poll.interval.ms
        assert body["protocol_type"] == "consumer"
        assert body["group_instance_id"] is None
        # every configured assignor, in preference order, with a readable subscription
        assert [p["name"] for p in body["protocols"]] == ["range", "cooperative-sticky"]
        for p in body["protocols"]:
            assert deserialize_subscription(p["metadata"]).topics == ("t",)
    assert s.coord.generation().generation_id == 1
    assert s.coord.member_id == "m-1"
    assert s.coord.state is MemberState.STABLE
    assert s.subs.assigned_partitions() == {tp("t", 0), tp("t", 1), tp("t", 2)}
    assert s.listener.events == [("assigned", [tp("t", 0), tp("t", 1), tp("t", 2)])]
    # the leader (this member) sent the range assignment in SyncGroup
    (_, sync), = broker.bodies(SYNC_GROUP)
    assert sync["generation_id"] == 1 and sync["member_id"] == "m-1"
    (entry,) = sync["assignments"]
    assert sorted(deserialize_assignment(entry["assignment"]).partitions) == [tp("t", i) for i in range(3)]
    # the coordinator gets its own connection (no head-of-line blocking behind fetches)
    assert s.coord.coordinator().node_id == coordinator_node_id(BROKER_ID)


def test_leader_assigns_all_members_with_the_protocol_the_broker_chose(broker, make_stack):
    other = serialize_subscription(Subscription(topics=("t", "u")))

    def join(body, member):
        mine = next(p for p in body["protocols"] if p["name"] == "cooperative-sticky")
        return {"protocol_name": "cooperative-sticky", "leader": member,
                "members": [{"member_id": member, "group_instance_id": None, "metadata": mine["metadata"]},
                            {"member_id": "z-other", "group_instance_id": None, "metadata": other}]}

    broker.join_override = join
    s = make_stack(topics=("t",))
    s.join()
    (_, sync), = broker.bodies(SYNC_GROUP)
    got = {a["member_id"]: sorted(deserialize_assignment(a["assignment"]).partitions) for a in sync["assignments"]}
    assert set(got) == {s.coord.member_id, "z-other"}
    every = got[s.coord.member_id] + got["z-other"]
    assert sorted(every) == [tp("t", 0), tp("t", 1), tp("t", 2), tp("u", 0), tp("u", 1)]   # disjoint, complete
    assert all(p.topic == "t" for p in got[s.coord.member_id])
    assert s.coord.is_leader
    assert s.coord.generation().protocol_name == "cooperative-sticky"
    # the leader fetched metadata for the other member's topic before assigning
    assert "u" in s.metadata.topics


def test_follower_sends_empty_assignments_and_applies_its_own(broker, make_stack):
    broker.join_override = lambda body, member: {"protocol_name": "range", "leader": "a-leader", "members": []}
    s = make_stack()
    broker.follower_assignment = {"m-1": serialize_assignment(Assignment(partitions=[tp("t", 1)]))}
    s.join()
    (_, sync), = broker.bodies(SYNC_GROUP)
    assert sync["assignments"] == []
    assert s.subs.assigned_partitions() == {tp("t", 1)}
    assert not s.coord.is_leader


def test_static_member_sends_group_instance_id_everywhere(broker, make_stack):
    s = make_stack(group_instance_id="inst-1")
    s.join()
    assert all(b["group_instance_id"] == "inst-1" for _, b in broker.bodies(JOIN_GROUP))
    assert broker.bodies(SYNC_GROUP)[0][1]["group_instance_id"] == "inst-1"
    s.coord.committer.commit_offsets_sync({tp("t", 0): OffsetAndMetadata(5)}, 5000)
    assert broker.bodies(OFFSET_COMMIT)[0][1]["group_instance_id"] == "inst-1"
    # static members do not leave on close: their session outlives a restart
    s.coord.close(2000)
    assert broker.count(LEAVE_GROUP) == 0


def test_fenced_instance_id_on_join_is_raised_to_the_application(broker, make_stack):
    s = make_stack(group_instance_id="inst-1")
    broker.errors[JOIN_GROUP].extend([0, 82])   # member-id round trip, then FENCED_INSTANCE_ID
    with pytest.raises(Errors.FencedInstanceIdError):
        s.join()


@pytest.mark.parametrize("code", [14, 15, 16])    # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
def test_retriable_join_errors_are_retried(broker, make_stack, code):
    s = make_stack()
    broker.errors[JOIN_GROUP].append(code)
    s.join()
    assert s.coord.state is MemberState.STABLE
    if code in (15, 16):
        assert broker.count(FIND_COORDINATOR) >= 2   # the coordinator was looked up again


@pytest.mark.parametrize("code,exc", [(23, Errors.InconsistentGroupProtocolError),
                                      (26, Errors.InvalidSessionTimeoutError),
                                      (30, Errors.GroupAuthorizationFailedError)])
def test_fatal_join_errors_are_raised(broker, make_stack, code, exc):
    s = make_stack()
    broker.errors[JOIN_GROUP].append(code)
    with pytest.raises(exc):
        s.join()


def test_sync_group_rebalance_in_progress_rejoins(broker, make_stack):
    s = make_stack()
    broker.errors[SYNC_GROUP].append(27)
    s.join()
    assert broker.count(SYNC_GROUP) == 2
    assert s.coord.generation().generation_id == 2


def test_sync_group_answer_for_a_rebalance_the_member_left_is_discarded(broker, make_stack):
    s = make_stack()
    broker.hold.add(SYNC_GROUP)
    assert not s.coord.poll(300)                 # generation 1: SyncGroup in flight
    broker.wait_held(SYNC_GROUP)
    s.coord.maybe_leave_group("test")            # e.g. the poll timeout fired meanwhile
    broker.release(SYNC_GROUP)                   # its (stale) assignment must not be applied
    s.join()
    assert s.coord.generation().generation_id == 2
    assert [e for e in s.listener.events if e[0] == "assigned"] == [("assigned", [tp("t", i) for i in range(3)])]
    assert broker.count(SYNC_GROUP) == 2


def test_sync_group_connection_loss_rejoins(broker, make_stack):
    s = make_stack()
    broker.drop[SYNC_GROUP] = 1                  # the coordinator connection dies under SyncGroup
    s.join()
    assert s.coord.state is MemberState.STABLE
    assert broker.count(SYNC_GROUP) == 2 and broker.count(FIND_COORDINATOR) >= 2
    assert s.subs.assigned_partitions() == {tp("t", i) for i in range(3)}


def test_wakeup_during_leader_assignment_leaves_the_member_able_to_rejoin(broker, make_stack):
    s = make_stack()
    original = s.coord.on_leader_elected
    calls = []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 1:
            s.client.wakeup()
            s.client.poll(0)                     # raises WakeupError inside the assignment step
        return original(*args)

    s.coord.on_leader_elected = interrupted
    with pytest.raises(Errors.WakeupError):
        s.coord.poll(5000)
    assert s.coord.rejoin_needed_or_pending()
    s.join()
    assert s.coord.state is MemberState.STABLE and len(calls) == 2


def test_eager_rejoin_revokes_everything_before_join_group(broker, make_stack):
    order = []
    s = make_stack(listener=RecordingListener(on_revoke=lambda parts: order.append(broker.count(JOIN_GROUP))))
    s.join()
    joins_before = broker.count(JOIN_GROUP)
    s.coord.request_rejoin("test")
    s.join()
    assert order == [joins_before]         # revoked before the next JoinGroup went out
    assert s.listener.events[1:] == [("revoked", [tp("t", i) for i in range(3)]),
                                     ("assigned", [tp("t", i) for i in range(3)])]
    # eager members advertise no owned partitions (they revoked them all)
    _, last = broker.bodies(JOIN_GROUP)[-1]
    assert deserialize_subscription(last["protocols"][0]["metadata"]).owned_partitions == ()


class _TwoThenOne(AbstractPartitionAssignor):
    """Cooperative test assignor: all of "t" on the first join, then only partition 0."""
    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)
    calls = 0

    def assign(self, partitions_per_topic, subscriptions):
        type(self).calls += 1
        parts = [tp("t", p) for p in range(partitions_per_topic["t"])]
        if type(self).calls > 1:
            parts = parts[:1]
        (member,) = subscriptions
        return {member: Assignment(partitions=parts)}


def test_cooperative_revokes_only_moved_partitions_then_rejoins(broker, make_stack):
    _TwoThenOne.calls = 0
    s = make_stack(partition_assignment_strategy=[_TwoThenOne])
    s.join()
    s.coord.request_rejoin("test")
    s.join()
    assert s.listener.events == [
        ("assigned", [tp("t", 0), tp("t", 1), tp("t", 2)]),
        ("revoked", [tp("t", 1), tp("t", 2)]),       # only what moved; nothing revoked before the join
        ("assigned", []),
        ("assigned", []),                            # the follow-up rebalance (as Kafka, called when empty)
    ]
    assert s.subs.assigned_partitions() == {tp("t", 0)}
    # the revocation triggered a follow-up rebalance; owned partitions were advertised
    assert broker.count(JOIN_GROUP) >= 4
    _, second_join = broker.bodies(JOIN_GROUP)[2]
    owned = deserialize_subscription(second_join["protocols"][0]["metadata"]).owned_partitions
    assert sorted(owned) == [tp("t", 0), tp("t", 1), tp("t", 2)]


def test_evicted_member_reports_partitions_lost_with_a_warning(broker, make_stack, caplog):
    s = make_stack()
    s.join()
    broker.errors[OFFSET_COMMIT].append(25)         # UNKNOWN_MEMBER_ID
    with caplog.at_level(logging.WARNING), pytest.raises(Errors.CommitFailedError):
        s.coord.committer.commit_offsets_sync({tp("t", 0): OffsetAndMetadata(1)}, 5000)
    assert s.coord.generation() == NO_GENERATION
    assert any("m-1" in r.getMessage() and "removed from the group" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        s.join()
    assert s.listener.events[1] == ("lost", [tp("t", 0), tp("t", 1), tp("t", 2)])
    assert ("revoked", [tp("t", 0), tp("t", 1), tp("t", 2)]) not in s.listener.events
    lost_logs = [r.getMessage() for r in caplog.records if "lost partitions" in r.getMessage()]
    assert lost_logs and "m-1" in lost_logs[0]
    assert s.listener.events[-1][0] == "assigned"


def test_listener_exception_reaches_poll_after_assignment_is_applied(broker, make_stack):
    class Boom(RecordingListener):
        def on_partitions_assigned(self, assigned):
            raise RuntimeError("user bug")

    s = make_stack(listener=Boom())
    with pytest.raises(RuntimeError, match="user bug"):
        s.join()
    assert s.subs.assigned_partitions() == {tp("t", 0), tp("t", 1), tp("t", 2)}
    assert s.coord.state is MemberState.STABLE
    s.coord.request_rejoin("again")        # the next rebalance still revokes first
    s.listener.events.clear()
    with pytest.raises(RuntimeError):
        s.join()
    assert s.listener.events[0][0] == "revoked"


def test_commit_from_inside_revocation_callback_is_allowed(broker, make_stack):
    holder = {}

    def commit(parts):
        holder["s"].coord.committer.commit_offsets_sync({p: OffsetAndMetadata(7) for p in parts}, 5000)

    s = make_stack(listener=RecordingListener(on_revoke=commit))
    holder["s"] = s
    s.join()
    s.coord.request_rejoin("test")
    s.join()
    assert broker.commits[tp("t", 2)][0] == 7


# ---------------------------------------------------------------------- metadata rules
def test_partition_count_change_requests_rejoin(broker, make_stack):
    s = make_stack()
    s.join()
    assert not s.coord.rejoin_needed_or_pending()
    broker.topics["t"] = 5
    assert s.client.await_metadata_update(5000)
    assert s.coord.rejoin_needed_or_pending()
    s.join()
    assert s.subs.assigned_partitions() == {tp("t", i) for i in range(5)}


def test_leader_assignment_snapshot_compared_after_sync(broker, make_stack):
    s = make_stack()
    broker.hold.add(SYNC_GROUP)
    assert not s.coord.poll(300)              # the leader assigned 3 partitions; SyncGroup in flight
    broker.wait_held(SYNC_GROUP)
    broker.topics["t"] = 4                    # metadata changes while the assignment is in flight
    assert s.client.await_metadata_update(5000)
    broker.release(SYNC_GROUP)
    s.join()
    assert broker.count(SYNC_GROUP) == 2      # the snapshot differed: another rebalance
    assert s.subs.assigned_partitions() == {tp("t", i) for i in range(4)}


def test_pattern_subscription_matches_topics_and_skips_internal(broker, make_stack):
    broker.topics.update({"__consumer_offsets": 1, "tx": 1, "other": 1})
    broker.internal_topics.add("__consumer_offsets")
    s = make_stack(topics=None, pattern=r"(t.*|__consumer_offsets)")
    s.join()
    assert s.subs.subscription == {"t", "tx"}
    _, join = broker.bodies(JOIN_GROUP)[-1]
    assert deserialize_subscription(join["protocols"][0]["metadata"]).topics == ("t", "tx")
    assert s.subs.assigned_partitions() == {tp("t", 0), tp("t", 1), tp("t", 2), tp("tx", 0)}
    broker.topics["tnew"] = 1                   # a new matching topic: rejoin with it
    assert s.client.await_metadata_update(5000)
    s.coord.poll(0)
    assert s.coord.rejoin_needed_or_pending()
    s.join()
    assert tp("tnew", 0) in s.subs.assigned_partitions()


def test_pattern_includes_internal_topics_when_not_excluded(broker, make_stack):
    broker.topics.update({"__consumer_offsets": 1})
    broker.internal_topics.add("__consumer_offsets")
    s = make_stack(topics=None, pattern=r"__consumer_offsets", exclude_internal_topics=False)
    s.join()
    assert s.subs.assigned_partitions() == {tp("__consumer_offsets", 0)}


# ---------------------------------------------------------------------- offsets
class CountingInterceptor(ConsumerInterceptor):
    def __init__(self):
        self.commits = []

    def on_commit(self, offsets):
        self.commits.append(dict(offsets))


def test_commit_sync_sends_generation_metadata_and_epoch_and_calls_interceptors(broker, make_stack):
    ic = CountingInterceptor()
    s = make_stack(interceptors=ConsumerInterceptors([ic]))
    s.join()
    offsets = {tp("t", 0): OffsetAndMetadata(10, "meta", 3), tp("t", 1): OffsetAndMetadata(20)}
    s.coord.committer.commit_offsets_sync(offsets, 5000)
    (v, body), = broker.bodies(OFFSET_COMMIT)
    assert body["generation_id_or_member_epoch"] == 1 and body["member_id"] == "m-1"
    parts = {p["partition_index"]: p for p in body["topics"][0]["partitions"]}
    assert parts[0]["committed_offset"] == 10 and parts[0]["committed_metadata"] == "meta"
    assert parts[0]["committed_leader_epoch"] == 3 and parts[1]["committed_leader_epoch"] == -1
    assert ic.commits == [offsets]
    got = s.coord.committer.fetch_committed_offsets([tp("t", 0), tp("t", 1), tp("t", 2)], 5000)
    assert got == {tp("t", 0): OffsetAndMetadata(10, "meta", 3), tp("t", 1): OffsetAndMetadata(20, "", -1),
                   tp("t", 2): None}


@pytest.mark.parametrize("code", [14, 16, 15])
def test_commit_sync_retries_retriable_errors(broker, make_stack, code):
    s = make_stack()
    s.join()
    broker.errors[OFFSET_COMMIT].extend([code, code])
    s.coord.committer.commit_offsets_sync({tp("t", 0): OffsetAndMetadata(3)}, 5000)
    assert broker.count(OFFSET_COMMIT) == 3
    assert broker.commits[tp("t", 0)][0] == 3


def test_commit_sync_times_out_when_errors_persist(broker, make_stack):
    s = make_stack()
    s.join()
    broker.errors[OFFSET_COMMIT].extend([14] * 1000)
    with pytest.raises(Errors.KafkaTimeoutError, match="CoordinatorLoadInProgress"):
        s.coord.committer.commit_offsets_sync({tp("t", 0): OffsetAndMetadata(3)}, 300)


@pytest.mark.parametrize("code", [25, 22, 27])     # UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS
def test_commit_fails_when_the_group_moved_on(broker, make_stack, code):
    s = make_stack()
    s.join()
    broker.errors[OFFSET_COMMIT].append(code)
    with pytest.raises(Errors.CommitFailedError):
        s.coord.committer.commit_offsets_sync({tp("t", 0): OffsetAndMetadata(3)}, 5000)
    assert broker.count(OFFSET_COMMIT) == 1
    assert s.coord.rejoin_needed_or_pending()
    if code == 25:
        assert s.coord.generation() == NO_GENERATION
    if code == 22:
        assert s.coord.generation().generation_id == -1 and s.coord.member_id == "m-1"


def test_commit_after_generation_reset_fails_without_a_request(broker, make_stack):
    s = make_stack()
    s.join()
    s.coord.maybe_leave_group("test")
    with pytest.raises(Errors.CommitFailedError, match="no longer part"):
        s.coord.committer.commit_offsets_sync({tp("t", 0): OffsetAndMetadata(3)}, 5000)
    assert broker.count(OFFSET_COMMIT) == 0


def test_commit_async_callback_runs_on_next_poll(broker, make_stack):
    ic = CountingInterceptor()
    s = make_stack(interceptors=ConsumerInterceptors([ic]))
    s.join()
    results = []
    s.coord.committer.commit_offsets_async({tp("t", 0): OffsetAndMetadata(4)}, lambda o, e: results.append((o, e)))
    broker.wait_count(OFFSET_COMMIT, 1)
    s.pump(lambda: s.coord.committer.has_completed_commits)
    assert results == []                                 # not on the network thread
    s.coord.poll(0)
    assert results == [({tp("t", 0): OffsetAndMetadata(4)}, None)]
    assert ic.commits == [{tp("t", 0): OffsetAndMetadata(4)}]
    broker.errors[OFFSET_COMMIT].append(15)
    s.coord.committer.commit_offsets_async({tp("t", 0): OffsetAndMetadata(5)}, lambda o, e: results.append((o, e)))
    s.pump(lambda: s.coord.committer.has_completed_commits)
    s.coord.poll(0)
    assert isinstance(results[-1][1], Errors.RetriableCommitFailedError)


def test_commit_async_finds_the_coordinator_first(broker, make_stack):
    s = make_stack(topics=None)
    s.subs.assign_from_user([tp("t", 0)])
    results = []
    s.coord.committer.commit_offsets_async({tp("t", 0): OffsetAndMetadata(9)}, lambda o, e: results.append(e))
    s.pump(lambda: results or s.coord.committer.has_completed_commits)
    s.coord.poll(0)
    assert results == [None]
    (_, body), = broker.bodies(OFFSET_COMMIT)
    assert body["generation_id_or_member_epoch"] == -1 and body["member_id"] == ""   # manual assignment


def test_refresh_committed_offsets_sets_positions_and_leaves_others(broker, make_stack):
    broker.commits[tp("t", 0)] = (42, "", 0)
    s = make_stack()
    s.join()
    assert s.coord.committer.refresh_committed_offsets_if_needed(5000)
    assert s.subs.position(tp("t", 0)).offset == 42
    assert s.subs.position(tp("t", 0)).offset_epoch == 0
    # Committed with its record's leader epoch: checked for truncation first (KIP-320).
    assert s.subs.fetch_state(tp("t", 0)) is FetchState.AWAIT_VALIDATION
    assert s.subs.fetch_state(tp("t", 1)) is FetchState.INITIALIZING   # for auto.offset.reset


def test_a_committed_offset_without_a_leader_epoch_is_fetched_from_at_once(broker, make_stack):
    broker.commits[tp("t", 0)] = (42, "", -1)
    s = make_stack()
    s.join()
    assert s.coord.committer.refresh_committed_offsets_if_needed(5000)
    assert s.subs.position(tp("t", 0)).offset == 42
    assert s.subs.fetch_state(tp("t", 0)) is FetchState.FETCHING


def test_offset_fetch_retries_load_in_progress(broker, make_stack):
    broker.commits[tp("t", 1)] = (8, "x", -1)
    s = make_stack()
    s.join()
    broker.errors[OFFSET_FETCH].extend([14, 14])
    assert s.coord.committer.fetch_committed_offsets([tp("t", 1)], 5000) == {tp("t", 1): OffsetAndMetadata(8, "x", -1)}
    assert broker.count(OFFSET_FETCH) == 3


def test_offset_fetch_authorization_error_raised(broker, make_stack):
    s = make_stack()
    s.join()
    broker.errors[OFFSET_FETCH].append(30)
    with pytest.raises(Errors.GroupAuthorizationFailedError):
        s.coord.committer.fetch_committed_offsets([tp("t", 1)], 5000)


def test_no_group_id_commit_raises_and_poll_is_a_no_op(broker):
    cfg = ConsumerConfig({"bootstrap.servers": "broker1:9092"})
    net = NetworkClient(NetworkClientConfig.of(cfg), socket_factory=broker.socket_factory)
    client = ConsumerNetworkClient(net)
    try:
        subs = SubscriptionState()
        subs.assign_from_user([tp("t", 0)])
        coord = ConsumerCoordinator(client, subs, client.metadata, GroupRebalanceConfig.of(cfg),
                                    ConsumerCoordinatorConfig.of(cfg))
        assert coord.poll(0) is True
        assert coord.committer.refresh_committed_offsets_if_needed(0) is True
        with pytest.raises(Errors.InvalidGroupIdError):
            coord.committer.commit_offsets_sync({tp("t", 0): OffsetAndMetadata(1)}, 100)
        coord.close(100)
    finally:
        client.close()


# ---------------------------------------------------------------------- auto-commit and close
def test_auto_commit_runs_as_a_delayed_task_every_interval(broker, make_stack):
    clock = FakeClock()
    s = make_stack(clock=clock, enable_auto_commit=True, auto_commit_interval_ms=5000)
    s.join()
    s.subs.seek(tp("t", 0), 11)
    clock.advance(4999)
    s.client.poll(0)
    assert broker.count(OFFSET_COMMIT) == 0
    assert s.coord.time_to_next_poll(clock.now_ms()) == 1
    clock.advance(1)
    s.client.poll(0)                                    # the scheduled task runs in the app's poll
    (_, body), = broker.wait_count(OFFSET_COMMIT, 1)
    assert body["topics"][0]["partitions"][0]["committed_offset"] == 11
    s.subs.seek(tp("t", 0), 12)
    clock.advance(5000)
    s.coord.poll(0)                                     # ...or in the coordinator's poll
    broker.wait_count(OFFSET_COMMIT, 2)


def test_auto_commit_before_revocation_and_on_close(broker, make_stack):
    s = make_stack(enable_auto_commit=True, auto_commit_interval_ms=60000)
    s.join()
    s.subs.seek(tp("t", 1), 5)
    s.coord.request_rejoin("test")
    s.join()
    assert broker.commits[tp("t", 1)][0] == 5           # committed before the eager revocation
    s.coord.committer.refresh_committed_offsets_if_needed(5000)
    s.subs.seek(tp("t", 2), 6)
    s.coord.close(5000)
    assert broker.commits[tp("t", 2)][0] == 6
    assert broker.count(LEAVE_GROUP) == 1
    (v, leave), = broker.bodies(LEAVE_GROUP)
    assert leave["members"][0]["member_id"] == "m-1"
    assert s.listener.events[-1] == ("revoked", [tp("t", 0), tp("t", 1), tp("t", 2)])


def test_close_without_autocommit_does_not_commit(broker, make_stack):
    s = make_stack(enable_auto_commit=True)
    s.join()
    s.subs.seek(tp("t", 1), 5)
    s.coord.close(5000, autocommit=False)
    assert broker.count(OFFSET_COMMIT) == 0
    assert broker.count(LEAVE_GROUP) == 1


def test_a_stable_members_poll_skips_its_checks_until_something_is_due(broker, make_stack):
    clock = FakeClock()
    s = make_stack(clock=clock, enable_auto_commit=True, auto_commit_interval_ms=5000)
    s.join()
    checks = []
    check = s.coord.check_heartbeat_failure
    s.coord.check_heartbeat_failure = lambda: (checks.append(clock.now_ms()), check())[1]
    s.coord.poll(0)
    clock.advance(STEADY_POLL_MS - 1)
    s.coord.poll(0)
    assert checks == []                                  # stable, nothing due: skipped
    clock.advance(1)
    s.coord.poll(0)
    assert len(checks) == 1                              # at most STEADY_POLL_MS apart
    # An async commit's outcome is delivered by the next poll.
    results = []
    s.coord.committer.commit_offsets_async({tp("t", 0): OffsetAndMetadata(4)}, lambda o, e: results.append(e))
    s.pump(lambda: s.coord.committer.has_completed_commits)
    s.coord.poll(0)
    assert results == [None] and len(checks) == 2
    # The auto-commit deadline ends the skipping.
    deadline = s.coord.committer.next_auto_commit_deadline
    clock.advance(deadline - clock.now_ms() - STEADY_POLL_MS // 2)
    s.subs.seek(tp("t", 0), 11)
    s.coord.poll(0)
    assert len(checks) == 3 and broker.count(OFFSET_COMMIT) == 1
    clock.advance(STEADY_POLL_MS // 2)
    s.coord.poll(0)
    (_, body), = broker.wait_count(OFFSET_COMMIT, 2)[1:]
    assert body["topics"][0]["partitions"][0]["committed_offset"] == 11
    # So do a rejoin request and a metadata update.
    s.coord.request_rejoin("test")
    s.join()
    assert len(checks) >= 5
    s.coord.poll(0)
    n = len(checks)
    s.coord.poll(0)
    assert len(checks) == n
    version = s.metadata.update_version
    s.metadata.request_update()
    s.pump(lambda: s.metadata.update_version > version)
    s.coord.poll(0)
    assert len(checks) == n + 1


def test_time_to_next_poll_follows_heartbeat_and_auto_commit(broker, make_stack):
    clock = FakeClock()
    s = make_stack(clock=clock, enable_auto_commit=True, auto_commit_interval_ms=10000)
    assert s.coord.time_to_next_poll(clock.now_ms()) == 10000     # not joined: no heartbeat deadline
    s.join()
    assert s.coord.time_to_next_poll(clock.now_ms()) == 3000      # heartbeat.interval.ms


def test_group_metadata(broker, make_stack):
    s = make_stack(group_instance_id="i")
    s.join()
    md = s.coord.committer.group_metadata()
    assert (md.group_id, md.generation_id, md.member_id, md.group_instance_id) == ("g", 1, "m-1", "i")


# ---------------------------------------------------------------------- interceptors
def test_interceptors_run_in_order_and_swallow_errors(caplog):
    class Add(ConsumerInterceptor):
        def __init__(self, tag):
            self.tag = tag
            self.closed = False

        def on_consume(self, records):
            return records + [self.tag]

        def close(self):
            self.closed = True

    class Broken(ConsumerInterceptor):
        def on_consume(self, records):
            raise ValueError("broken interceptor")

        def on_commit(self, offsets):
            raise ValueError("broken commit")

        def close(self):
            raise ValueError("broken close")

    a, b = Add("a"), Add("b")
    ics = ConsumerInterceptors([a, Broken(), b])
    with caplog.at_level(logging.WARNING):
        assert ics.on_consume([]) == ["a", "b"]        # the failing one passes records through
        ics.on_commit({})
        ics.close()
    assert a.closed and b.closed
    assert sum("broken" in (r.exc_text or "") or "raised" in r.getMessage() for r in caplog.records) >= 3


def test_interceptors_from_config_accept_classes_names_and_instances():
    inst = CountingInterceptor()
    cfg = ConsumerConfig({"interceptor.classes": [CountingInterceptor, inst,
                                                  "kclient.consumer.interceptors.ConsumerInterceptor"]})
    ics = ConsumerInterceptors.from_config(cfg)
    assert len(ics) == 3 and ics.interceptors[1] is inst
    with pytest.raises(Errors.ConfigurationError, match="interceptor.classes"):
        ConsumerInterceptors.from_config(ConsumerConfig({"interceptor.classes": ["no.such.Module"]}))
    with pytest.raises(Errors.ConfigurationError, match="not a consumer interceptor"):
        ConsumerInterceptors.from_config(ConsumerConfig({"interceptor.classes": [object()]}))
