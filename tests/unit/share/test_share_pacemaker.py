"""ShareGroupHeartbeat in C (kcore.groupcodec) against the schema-driven codec, with hostile
input, and the pacemaker's share mode against a scripted coordinator."""
from __future__ import annotations

import socket
import struct
import threading
import time
import uuid

import pytest

from kcore import groupcodec as codec
from kcore import pacemaker as pm
from kcore.timers import Heartbeat
from kclient import protocol
from kclient.clock import SYSTEM_CLOCK
from kclient.protocol import ApiKey

SGH = int(ApiKey.SHARE_GROUP_HEARTBEAT)
T1, T2 = uuid.UUID(int=0x1234), uuid.UUID(int=2**128 - 1)
DEADLINE_S = 10


def wait_for(cond, timeout=DEADLINE_S, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)      # a check interval, not a wait for the condition
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------------------- codec
@pytest.mark.parametrize("epoch", [1, 7, -1, 2**31 - 1])
@pytest.mark.parametrize("client_id", [None, "client-é"])
def test_share_group_heartbeat_request_matches_reference(epoch, client_id):
    ours = codec.encode_share_group_heartbeat_request(1, 77, client_id, "grp-ü", "m-1", epoch)
    body = {"group_id": "grp-ü", "member_id": "m-1", "member_epoch": epoch, "rack_id": None,
            "subscribed_topic_names": None}
    assert ours == protocol.encode_request(SGH, 1, 77, client_id, body)
    _api, _v, corr, _cid, decoded = protocol.decode_request(ours[4:])
    assert corr == 77 and decoded["subscribed_topic_names"] is None and decoded["rack_id"] is None


def _answer(error=0, epoch=9, interval=2500, assignment=None, message=None, member_id="m-1"):
    return {"throttle_time_ms": 12, "error_code": error, "error_message": message, "member_id": member_id,
            "member_epoch": epoch, "heartbeat_interval_ms": interval, "assignment": assignment}


ASSIGNMENTS = [None, {"topic_partitions": []},
               {"topic_partitions": [{"topic_id": T1, "partitions": [0, 5, 7]}, {"topic_id": T2, "partitions": []}]}]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
@pytest.mark.parametrize("error,message,member_id", [(0, None, "m-1"), (110, "fenced é", None), (25, "", "x")])
def test_share_group_heartbeat_response_decodes_like_reference(assignment, error, message, member_id):
    frame = protocol.encode_response(SGH, 1, 31, _answer(error, 9, 2500, assignment, message, member_id))[4:]
    assert codec.decode_share_group_heartbeat_response(1, frame) == (31, 12, error, 9, 2500, assignment is not None)
    assert protocol.decode_response(SGH, 1, frame)["assignment"] == assignment


def test_hostile_share_group_heartbeat_responses():
    frame = protocol.encode_response(SGH, 1, 1, _answer(assignment=ASSIGNMENTS[2], message="m"))[4:]
    for cut in range(len(frame)):
        with pytest.raises(ValueError, match="truncated"):
            codec.decode_share_group_heartbeat_response(1, frame[:cut])
    with pytest.raises(ValueError, match="bytes left"):
        codec.decode_share_group_heartbeat_response(1, frame + b"\0")
    head = struct.pack(">i", 1) + b"\x00" + struct.pack(">ih", 0, 0) + b"\x00\x00" + struct.pack(">ii", 3, 100)
    with pytest.raises(ValueError, match="truncated"):     # a topic count the frame cannot hold
        codec.decode_share_group_heartbeat_response(1, head + b"\x01" + b"\xff\xff\xff\xff\x07")
    with pytest.raises(ValueError, match="malformed"):     # a null (non-nullable) topic array
        codec.decode_share_group_heartbeat_response(1, head + b"\x01" + b"\x00" + b"\x00\x00")
    topic = b"\x02" + T1.bytes
    with pytest.raises(ValueError, match="truncated"):     # a partition count the frame cannot hold
        codec.decode_share_group_heartbeat_response(1, head + b"\x01" + topic + b"\xf0\xff\xff\x0f" + b"\x00" * 8)
    with pytest.raises(ValueError, match="malformed"):     # a varint that never ends
        codec.decode_share_group_heartbeat_response(1, head + b"\x01" + b"\xff" * 6)
    bad_utf8 = struct.pack(">i", 1) + b"\x00" + struct.pack(">ih", 0, 0) + b"\x03\xc3\x28" + b"\x00" + b"\x00" * 8
    with pytest.raises(ValueError, match="malformed"):
        codec.decode_share_group_heartbeat_response(1, bad_utf8 + b"\xff\x00")
    for version in (0, 2):
        with pytest.raises(ValueError, match="version"):
            codec.decode_share_group_heartbeat_response(version, frame)
        with pytest.raises(ValueError, match="version"):
            codec.encode_share_group_heartbeat_request(version, 1, "c", "g", "m", 1)
    with pytest.raises(ValueError, match="32767"):
        codec.encode_share_group_heartbeat_request(1, 1, "c", "g", "m" * 32768, 1)
    with pytest.raises(TypeError):
        codec.encode_share_group_heartbeat_request(1, 1, "c", None, "m", 1)


def test_share_group_heartbeat_decoder_survives_random_bytes():
    import random
    rng = random.Random(932)
    frame = protocol.encode_response(SGH, 1, 5, _answer(assignment=ASSIGNMENTS[2]))[4:]
    for _ in range(3000):
        mutated = bytearray(frame)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        data = bytes(mutated[:rng.randint(0, len(mutated))] if rng.random() < 0.3 else mutated)
        try:
            ours = codec.decode_share_group_heartbeat_response(1, data)
        except ValueError:
            continue
        # what the C decoder accepts, the schema-driven codec reads with the same scalars
        ref = protocol.decode_response(SGH, 1, data)
        assert ours[2:5] == (ref["error_code"], ref["member_epoch"], ref["heartbeat_interval_ms"])
        assert ours[5] == (ref["assignment"] is not None)


# ---------------------------------------------------------------------------- pacemaker share mode
class ShareCoordinatorPeer:
    """A TCP peer answering ShareGroupHeartbeat: the next scripted answer, else an echo of the epoch."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.requests: list[tuple[int, dict]] = []
        self.answers: list[dict] = []
        self.lock = threading.Lock()
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def count(self) -> int:
        with self.lock:
            return len(self.requests)

    def last(self) -> tuple[int, dict]:
        with self.lock:
            return self.requests[-1]

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                self.socks.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read(self, conn, n):
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                raise ConnectionError
            buf += chunk
        return buf

    def _serve(self, conn):
        try:
            while True:
                size = struct.unpack(">i", self._read(conn, 4))[0]
                api, version, corr, _cid, body = protocol.decode_request(self._read(conn, size))
                assert api == SGH
                with self.lock:
                    self.requests.append((version, body))
                    scripted = self.answers.pop(0) if self.answers else None
                resp = _answer(epoch=max(body["member_epoch"], 0), interval=150)
                resp.update(scripted or {})
                conn.sendall(protocol.encode_response(api, version, corr, resp))
        except (ConnectionError, OSError):
            conn.close()

    def close(self):
        self.server.close()
        with self.lock:
            for s in self.socks:
                s.close()


@pytest.fixture
def peer():
    p = ShareCoordinatorPeer()
    yield p
    p.close()


@pytest.fixture
def loop():
    hb = Heartbeat(3000, 100, 2**31 - 1, 50, SYSTEM_CLOCK.now_ms())
    pacemaker = pm.Pacemaker(hb, "share-client")
    thread = threading.Thread(target=pacemaker.run, daemon=True)
    thread.start()
    wait_for(lambda: pacemaker.is_running, what="the loop to start")
    yield hb, pacemaker
    pacemaker.close()
    thread.join(10)
    assert not thread.is_alive()


def _configure(pacemaker, peer, **kw):
    args = dict(host="127.0.0.1", port=peer.port, group_id="sg", member_id="m-1", member_epoch=3, version=1,
                request_timeout_ms=5000)
    args.update(kw)
    return pacemaker.configure_share(**args)


def _wait_event(pacemaker, kind, events):
    def seen():
        events.extend(pacemaker.wait_events(50))
        return any(e[0] == kind for e in events)
    wait_for(seen, what=f"event {kind}")
    return next(e for e in events if e[0] == kind)


def test_share_mode_heartbeats_short_form_follows_the_epoch_and_announces_assignments(peer, loop):
    hb, pacemaker = loop
    epoch = _configure(pacemaker, peer)
    wait_for(lambda: peer.count() >= 2, what="2 heartbeats")
    version, body = peer.last()
    assert (version, body["group_id"], body["member_id"], body["member_epoch"]) == (1, "sg", "m-1", 3)
    assert body["subscribed_topic_names"] is None and body["rack_id"] is None
    wait_for(lambda: hb.heartbeat_interval_ms == 150, what="the broker's interval")
    assignment = {"topic_partitions": [{"topic_id": T1, "partitions": [0, 1]}]}
    peer.answers.append(_answer(epoch=5, interval=150, assignment=assignment))
    events: list = []
    ev = _wait_event(pacemaker, pm.EV_ASSIGNMENT, events)
    assert ev[2] == epoch and ev[3] == 5 and ev[5] == 1
    seq, v, frame = pacemaker.take_assignment()
    assert (seq, v) == (1, 1)
    assert protocol.decode_response(SGH, 1, frame)["assignment"] == assignment
    assert pacemaker.take_assignment() is None and pacemaker.member_epoch == 5
    n = peer.count()
    wait_for(lambda: peer.count() >= n + 2, what="heartbeats at the new epoch")
    assert peer.last()[1]["member_epoch"] == 5


def test_share_mode_never_leaves_on_its_own_and_halts_on_member_errors(peer, loop):
    hb, pacemaker = loop
    _configure(pacemaker, peer)
    # no poll bound: no poll() for far longer than the interval, and still no leave heartbeat
    wait_for(lambda: peer.count() >= 5, what="5 heartbeats")
    assert all(body["member_epoch"] == 3 for _, body in peer.requests)
    peer.answers.append(_answer(error=110, epoch=3))     # FENCED_MEMBER_EPOCH
    events: list = []
    ev = _wait_event(pacemaker, pm.EV_HEARTBEAT_ERROR, events)
    assert ev[1] == 110
    wait_for(lambda: not pacemaker.is_active, what="halt")
    n = peer.count()
    pacemaker.wait_events(300)
    assert peer.count() == n


def test_share_mode_configure_rejects_bad_input(loop):
    _hb, pacemaker = loop
    for kw, match in ((dict(member_epoch=0), "member_epoch"), (dict(version=0), "version"),
                      (dict(version=2), "version"), (dict(port=0), "port")):
        args = dict(host="127.0.0.1", port=9, group_id="g", member_id="m", member_epoch=1, version=1)
        args.update(kw)
        with pytest.raises(ValueError, match=match):
            pacemaker.configure_share(**args)
    assert not pacemaker.is_active


# ---------------------------------------------------------------------------- the share link
class FakeShareHost:
    """What SharePacemakerLink needs of its share coordinator, with a real membership."""

    def __init__(self, port: int):
        from kclient.network.metadata import Node
        from kclient.share.membership import ShareMembership

        self.group_id = "sg"
        self.membership = ShareMembership(group_id="sg", member_id="m-1")
        self.heartbeat = Heartbeat(3000, 100, 2**31 - 1, 50, SYSTEM_CLOCK.now_ms())
        self.request_timeout_ms = 5000
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.closed = False
        self.node = Node(1, "127.0.0.1", port)
        self.lost: list[str] = []
        self.errors: list[BaseException] = []

    def now_ms(self) -> int:
        return SYSTEM_CLOCK.now_ms()

    def coordinator(self):
        return self.node

    def api_version(self, node, api):
        return 1 if api == SGH else None

    def subscription_acknowledged(self) -> bool:
        return True

    def heartbeat_in_flight(self) -> bool:
        return False

    def mark_coordinator_unknown(self, reason: str) -> None:
        self.lost.append(reason)

    def on_heartbeat_error(self, err, node) -> None:
        self.errors.append(err)

    def wake_network(self) -> None:
        pass


def test_the_share_link_engages_for_a_stable_member_and_digests_what_the_pacemaker_hears(peer):
    from kclient.share.membership import ShareMemberState
    from kclient.share.pacemaker_link import SharePacemakerLink

    host = FakeShareHost(peer.port)
    m = host.membership
    m.subscribe()
    link = SharePacemakerLink(host, "share-client")
    try:
        with host.lock:
            link.sync()
        assert not link.engaged                     # joining: Python's heartbeat, not the pacemaker's
        m.on_response(_answer(epoch=3, interval=100))
        with host.lock:
            link.sync()
        assert link.engaged
        wait_for(lambda: peer.count() >= 1, what="a pacemaker heartbeat")
        assert peer.last()[1]["member_epoch"] == 3
        peer.answers.append(_answer(epoch=5, interval=100,
                                    assignment={"topic_partitions": [{"topic_id": T1, "partitions": [0, 1]}]}))
        wait_for(lambda: (link.wait_and_drain(50), m.member_epoch == 5)[1], what="the assignment adopted")
        assert m.assignment == {T1: frozenset({0, 1})} and link.assignments_adopted == 1
        assert m.state is ShareMemberState.STABLE and link.engaged
        # fenced: the link lets go, the membership rejoins through Python
        peer.answers.append(_answer(error=110, epoch=5))
        wait_for(lambda: (link.wait_and_drain(50), m.state is ShareMemberState.FENCED)[1], what="fencing")
        assert not link.engaged and m.assignment == {} and host.errors
        # Python's next heartbeat takes over: disengage hands the pacemaker's epoch back first
        m.rejoin()
        m.on_response(_answer(epoch=7, interval=100))
        with host.lock:
            link.sync()
            assert link.engaged
            link.disengage()
        assert not link.engaged and m.member_epoch == 7
    finally:
        link.close(5)


def test_the_share_coordinator_hands_steady_heartbeats_to_the_pacemaker_and_leaves_itself(peer):
    from kclient.network.metadata import Node
    from kclient.share.coordinator import ShareCoordinator
    from kclient.share.membership import ShareMemberState
    from kclient.share.pacemaker_link import SharePacemakerLink

    from test_share_membership import T1, FakeClient, answer

    class Client(FakeClient):
        def api_version(self, node, api):
            return 1 if api == SGH else None

    client = Client({T1: "orders"})
    coord = ShareCoordinator(client, "sg", retry_backoff_ms=100, clock=SYSTEM_CLOCK)
    coord.channel.found(Node(1, "127.0.0.1", peer.port), 1)
    link = SharePacemakerLink(coord, "share-client")
    coord.set_driver(link)
    try:
        coord.subscribe(["orders"])
        coord.heartbeat_tick(coord.now_ms())            # the join is Python's: it carries the subscription
        [(_node, _api, body, future)] = client.sent
        assert body["member_epoch"] == 0 and body["subscribed_topic_names"] == ["orders"]
        future.complete(answer(3, interval=100, assignment={T1: {0}}))
        assert coord.membership.state is ShareMemberState.STABLE and link.engaged
        assert coord.heartbeat_tick(coord.now_ms()) == 100 and len(client.sent) == 1
        wait_for(lambda: peer.count() >= 2, what="pacemaker heartbeats")
        assert {body["member_epoch"] for _, body in peer.requests} == {3}
        # a new subscription is Python's again
        coord.subscribe(["orders", "refunds"])
        assert not link.engaged
        coord.close(0)                                   # the leave is Python's, after the pacemaker stopped
        assert client.sent[-1][2]["member_epoch"] == -1 and not link.engaged
        assert not link.pacemaker.is_active
    finally:
        link.close(5)


def test_share_mode_ignores_the_poll_bound_of_its_timing_struct(peer):
    # a timing struct with a short poll bound (as the consumer modes use): share mode neither
    # leaves nor spins when it passes
    hb = Heartbeat(3000, 100, 300, 50, SYSTEM_CLOCK.now_ms())
    pacemaker = pm.Pacemaker(hb, "share-client")
    thread = threading.Thread(target=pacemaker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: pacemaker.is_running, what="the loop to start")
        _configure(pacemaker, peer)
        events: list = []
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            events.extend(pacemaker.wait_events(100))
        assert not [e for e in events if e[0] == pm.EV_POLL_TIMEOUT] and pacemaker.is_active
        assert all(body["member_epoch"] == 3 for _, body in peer.requests)
        assert 3 <= pacemaker.stats()["sent"] <= 20          # on the 150 ms interval, not in a loop
    finally:
        pacemaker.close()
        thread.join(10)
