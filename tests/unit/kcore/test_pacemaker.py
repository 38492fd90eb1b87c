"""kcore.groupcodec and kcore.pacemaker: the C codec against kclient.protocol (the schema-driven reference), hostile
input, and the GIL-free loop against a scripted coordinator socket peer.

Timing is checked with conditions and deadlines; intervals are read from the pacemaker's
own send instants (never early), never asserted as upper bounds.
"""
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
from kclient.group.pacemaker import pacemaker_unavailable_reason

HEARTBEAT, LEAVE_GROUP, CGH = 12, 13, 68
DEADLINE_S = 20.0      # generous: the machine is shared and loaded


def wait_for(cond, timeout=DEADLINE_S, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


# ---------------------------------------------------------------------------- codec
def _hb_body(version, instance):
    return {"group_id": "grp-ü", "generation_id": 7, "member_id": "m-1",
            "group_instance_id": instance if version >= 3 else None}


@pytest.mark.parametrize("version", range(5))
@pytest.mark.parametrize("instance", [None, "inst-1"])
@pytest.mark.parametrize("client_id", [None, "", "client-é"])
def test_heartbeat_request_matches_reference(version, instance, client_id):
    ours = codec.encode_heartbeat_request(version, 123456, client_id, "grp-ü", 7, "m-1",
                                       instance if version >= 3 else None)
    ref = protocol.encode_request(HEARTBEAT, version, 123456, client_id, _hb_body(version, instance))
    assert ours == ref


def _leave_body(version, instance, reason):
    if version < 3:
        return {"group_id": "g", "member_id": "m-1"}
    member = {"member_id": "m-1", "group_instance_id": instance}
    if version >= 5:
        member["reason"] = reason
    return {"group_id": "g", "members": [member]}


@pytest.mark.parametrize("version", range(6))
@pytest.mark.parametrize("instance,reason", [(None, None), ("i", "why"), (None, "x" * 300)])
def test_leave_group_request_matches_reference(version, instance, reason):
    ours = codec.encode_leave_group_request(version, -5, "cid", "g", "m-1", instance, reason)
    ref = protocol.encode_request(LEAVE_GROUP, version, -5, "cid", _leave_body(version, instance, reason))
    assert ours == ref


@pytest.mark.parametrize("version", range(5))
@pytest.mark.parametrize("error", [0, 27, 25, -1, 32767])
def test_heartbeat_response_decodes_like_reference(version, error):
    frame = protocol.encode_response(HEARTBEAT, version, 99, {"throttle_time_ms": 250, "error_code": error})
    assert codec.decode_heartbeat_response(version, frame[4:]) == (99, 250 if version >= 1 else 0, error)


@pytest.mark.parametrize("version", range(6))
def test_leave_group_response_reports_member_errors(version):
    body = {"throttle_time_ms": 1, "error_code": 0}
    if version >= 3:
        body["members"] = [{"member_id": "a", "group_instance_id": None, "error_code": 0},
                           {"member_id": "b", "group_instance_id": "i", "error_code": 25}]
    frame = protocol.encode_response(LEAVE_GROUP, version, 5, body)
    assert codec.decode_leave_group_response(version, frame[4:]) == (5, 25 if version >= 3 else 0)
    body["error_code"] = 16
    frame = protocol.encode_response(LEAVE_GROUP, version, 5, body)
    assert codec.decode_leave_group_response(version, frame[4:]) == (5, 16)


@pytest.mark.parametrize("version", range(5))
def test_heartbeat_response_truncated_and_trailing_rejected(version):
    frame = protocol.encode_response(HEARTBEAT, version, 1, {"throttle_time_ms": 0, "error_code": 0})[4:]
    for cut in range(len(frame)):
        with pytest.raises(ValueError, match="truncated"):
            codec.decode_heartbeat_response(version, frame[:cut])
    with pytest.raises(ValueError, match="bytes left"):
        codec.decode_heartbeat_response(version, frame + b"\0")


def test_hostile_leave_group_responses():
    ok = protocol.encode_response(LEAVE_GROUP, 3, 1, {"throttle_time_ms": 0, "error_code": 0, "members": [
        {"member_id": "m", "group_instance_id": None, "error_code": 0}]})[4:]
    for cut in range(len(ok)):
        with pytest.raises(ValueError, match="truncated"):
            codec.decode_leave_group_response(3, ok[:cut])
    head = struct.pack(">iih", 1, 0, 0)
    # negative member count, negative (non-null) member id length, null member id
    for tail in (struct.pack(">i", -2), struct.pack(">ih", 1, -7), struct.pack(">ih", 1, -1)):
        with pytest.raises(ValueError, match="malformed"):
            codec.decode_leave_group_response(3, head + tail)
    # a count far larger than the frame can hold: truncated, not a long loop
    with pytest.raises(ValueError, match="truncated"):
        codec.decode_leave_group_response(3, head + struct.pack(">i", 2**31 - 1))
    # flexible: a tagged field claiming more bytes than there are; a bad varint
    flex_head = struct.pack(">i", 1) + b"\x00" + struct.pack(">ih", 0, 0)
    with pytest.raises(ValueError, match="truncated"):
        codec.decode_leave_group_response(4, flex_head + b"\x01" + b"\x01\x01\x05\x00")
    with pytest.raises(ValueError, match="malformed"):
        codec.decode_leave_group_response(4, flex_head + b"\x01" + b"\xff\xff\xff\xff\xff\xff")


def test_encoder_rejects_oversized_strings_and_bad_versions():
    with pytest.raises(ValueError, match="32767"):
        codec.encode_heartbeat_request(4, 1, "c", "g" * 32768, 1, "m")
    assert len(codec.encode_heartbeat_request(4, 1, "c" * 32767, "g" * 32767, 1, "m" * 32767, "i" * 32767)) > 4 * 32767
    with pytest.raises(ValueError, match="version"):
        codec.encode_heartbeat_request(5, 1, "c", "g", 1, "m")
    with pytest.raises(ValueError, match="version"):
        codec.encode_leave_group_request(-1, 1, "c", "g", "m")
    with pytest.raises(ValueError, match="version"):
        codec.decode_heartbeat_response(9, b"")
    with pytest.raises(TypeError):
        codec.encode_heartbeat_request(4, 1, "c", None, 1, "m")
    with pytest.raises(OverflowError):
        codec.encode_heartbeat_request(4, 2**31, "c", "g", 1, "m")


# ---------------------------------------------------------------------------- scripted coordinator
class ScriptedCoordinator:
    """A TCP peer answering Heartbeat and LeaveGroup from a script (error codes per request)."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.requests: list[tuple[float, int, int, dict]] = []   # (monotonic, api, version, body)
        self.errors: dict[int, list[int]] = {HEARTBEAT: [], LEAVE_GROUP: [], CGH: []}
        # ConsumerGroupHeartbeat answers: the next scripted one, else an echo of the epoch
        self.cgh_answers: list[dict] = []
        self.cgh_interval = 100
        self.silent = False          # read requests, never answer
        self.drop_next = False       # close the connection instead of answering the next request
        self.connections = 0
        self.lock = threading.Lock()
        self.closed = False
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def count(self, api):
        with self.lock:
            return sum(1 for r in self.requests if r[1] == api)

    def last(self, api):
        with self.lock:
            return [r for r in self.requests if r[1] == api][-1]

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
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
                frame = self._read(conn, size)
                api, version, corr, _cid, body = protocol.decode_request(frame)
                with self.lock:
                    self.requests.append((time.monotonic(), api, version, body))
                    errs = self.errors.get(api)
                    code = errs.pop(0) if errs else 0
                    drop, self.drop_next = self.drop_next, False
                if drop:
                    conn.close()
                    return
                if self.silent:
                    continue
                if api == HEARTBEAT:
                    resp = {"throttle_time_ms": 0, "error_code": code}
                elif api == CGH:
                    with self.lock:
                        scripted = self.cgh_answers.pop(0) if self.cgh_answers else None
                    resp = {"throttle_time_ms": 0, "error_code": code, "error_message": None,
                            "member_id": body["member_id"], "member_epoch": max(body["member_epoch"], 0),
                            "heartbeat_interval_ms": self.cgh_interval, "assignment": None}
                    resp.update(scripted or {})
                else:
                    resp = {"throttle_time_ms": 0, "error_code": 0,
                            "members": [{"member_id": "m-1", "group_instance_id": None, "error_code": code}]}
                conn.sendall(protocol.encode_response(api, version, corr, resp))
        except (ConnectionError, OSError):
            conn.close()

    def close(self):
        self.closed = True
        self.server.close()
        with self.lock:
            for s in self.socks:
                try:
                    s.close()
                except OSError:
                    pass


class Loop:
    """A Pacemaker with its run() thread, on the system clock."""

    def __init__(self, session=3000, interval=100, max_poll=60000, backoff=50):
        self.hb = Heartbeat(session, interval, max_poll, backoff, SYSTEM_CLOCK.now_ms())
        self.pm = pm.Pacemaker(self.hb, "test-client")
        self.thread = threading.Thread(target=self.pm.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.pm.is_running, what="the loop to start")   # a close() must find it running
        self.events: list[tuple] = []

    def configure_consumer(self, peer, **kw):
        args = dict(host="127.0.0.1", port=peer.port, group_id="g", member_id="m-1", member_epoch=3,
                    version=1, request_timeout_ms=5000)
        args.update(kw)
        self.hb.reset_timeouts(SYSTEM_CLOCK.now_ms())
        return self.pm.configure_consumer(**args)

    def configure(self, peer, **kw):
        args = dict(host="127.0.0.1", port=peer.port, group_id="g", member_id="m-1", generation_id=3,
                    heartbeat_version=4, leave_group_version=5, request_timeout_ms=5000)
        args.update(kw)
        self.hb.reset_timeouts(SYSTEM_CLOCK.now_ms())
        return self.pm.configure(**args)

    def collect(self):
        self.events.extend(self.pm.take_events())
        return self.events

    def wait_event(self, kind, code=None):
        def seen():
            self.events.extend(self.pm.wait_events(50))
            return any(e[0] == kind and (code is None or e[1] == code) for e in self.events)
        wait_for(seen, what=f"event {kind} {code}")
        return next(e for e in self.events if e[0] == kind and (code is None or e[1] == code))

    def close(self):
        self.pm.close()
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture
def peer():
    p = ScriptedCoordinator()
    yield p
    p.close()


@pytest.fixture
def loop():
    loops = []

    def make(**kw):
        lp = Loop(**kw)
        loops.append(lp)
        return lp
    yield make
    for lp in loops:
        lp.close()


def test_heartbeats_on_schedule_with_the_configured_identity(peer, loop):
    lp = loop(interval=100)
    epoch = lp.configure(peer, group_instance_id="inst-1", generation_id=42)
    wait_for(lambda: peer.count(HEARTBEAT) >= 6, what="6 heartbeats")
    _, api, version, body = peer.last(HEARTBEAT)
    assert (version, body["group_id"], body["generation_id"], body["member_id"], body["group_instance_id"]) == (
        4, "g", 42, "m-1", "inst-1")
    sends = lp.pm.send_times_ms()
    assert len(sends) >= 6
    assert min(b - a for a, b in zip(sends, sends[1:])) >= 100     # never early
    wait_for(lambda: lp.hb.last_heartbeat_receive_ms is not None, what="a response")
    assert lp.hb.last_heartbeat_receive_ms >= sends[0]
    assert lp.pm.is_active and lp.pm.epoch == epoch
    assert lp.pm.stats()["received"] >= 5 and lp.pm.stats()["connects"] == 1
    assert all(e[0] != pm.EV_HEARTBEAT_ERROR for e in lp.collect())


def test_rebalance_in_progress_keeps_heartbeating(peer, loop):
    lp = loop()
    peer.errors[HEARTBEAT] = [27]
    lp.configure(peer)
    ev = lp.wait_event(pm.EV_HEARTBEAT_ERROR, 27)
    assert ev[3] == 3                     # the generation the heartbeat was for
    n = peer.count(HEARTBEAT)
    wait_for(lambda: peer.count(HEARTBEAT) >= n + 3, what="heartbeats after REBALANCE_IN_PROGRESS")
    assert lp.pm.is_active


@pytest.mark.parametrize("code", [25, 22, 82, 30])
def test_member_errors_halt_until_reconfigured(peer, loop, code):
    lp = loop()
    peer.errors[HEARTBEAT] = [code]
    first = lp.configure(peer)
    ev = lp.wait_event(pm.EV_HEARTBEAT_ERROR, code)
    assert ev[2] == first
    wait_for(lambda: not lp.pm.is_active, what="halt")
    n = peer.count(HEARTBEAT)
    # halted: a heartbeat interval and more pass without a heartbeat (checked via its own state)
    assert lp.pm.wait_events(400) == [] and peer.count(HEARTBEAT) == n
    second = lp.configure(peer, generation_id=4)
    assert second > first and lp.pm.is_active
    wait_for(lambda: peer.count(HEARTBEAT) > n, what="heartbeats after reconfigure")
    assert peer.last(HEARTBEAT)[3]["generation_id"] == 4


@pytest.mark.parametrize("code", [16, 15])
def test_not_coordinator_reports_coordinator_loss(peer, loop, code):
    lp = loop()
    peer.errors[HEARTBEAT] = [code]
    lp.configure(peer)
    lp.wait_event(pm.EV_COORDINATOR_LOST, code)
    wait_for(lambda: not lp.pm.is_active, what="halt")


def test_other_errors_retry_after_backoff(peer, loop):
    lp = loop(interval=1000, backoff=50)
    peer.errors[HEARTBEAT] = [14]    # COORDINATOR_LOAD_IN_PROGRESS
    lp.configure(peer)
    lp.wait_event(pm.EV_HEARTBEAT_ERROR, 14)
    wait_for(lambda: peer.count(HEARTBEAT) >= 2, what="a retry")
    sends = lp.pm.send_times_ms()
    assert 50 <= sends[1] - sends[0] < 1000     # after retry.backoff.ms, not a whole interval
    assert lp.pm.is_active


def test_reconnects_after_the_connection_drops(peer, loop):
    lp = loop()
    lp.configure(peer)
    wait_for(lambda: peer.count(HEARTBEAT) >= 2, what="heartbeats")
    peer.drop_next = True
    lp.wait_event(pm.EV_DISCONNECTED, None)
    n = peer.count(HEARTBEAT)
    wait_for(lambda: peer.count(HEARTBEAT) >= n + 2, what="heartbeats after reconnect")
    assert peer.connections >= 2 and lp.pm.stats()["connects"] >= 2 and lp.pm.is_active


def test_coordinator_move_switches_connection(peer, loop):
    other = ScriptedCoordinator()
    try:
        lp = loop()
        lp.configure(peer)
        wait_for(lambda: peer.count(HEARTBEAT) >= 2, what="heartbeats to the first coordinator")
        lp.configure(other)
        wait_for(lambda: other.count(HEARTBEAT) >= 2, what="heartbeats to the second coordinator")
        n = peer.count(HEARTBEAT)
        wait_for(lambda: other.count(HEARTBEAT) >= 4, what="more heartbeats")
        assert peer.count(HEARTBEAT) == n
    finally:
        other.close()


def test_silent_coordinator_is_lost_after_the_session(peer, loop):
    lp = loop(session=600, interval=100)
    peer.silent = True
    lp.configure(peer, request_timeout_ms=60000)
    ev = lp.wait_event(pm.EV_COORDINATOR_LOST, pm.CODE_SESSION_EXPIRED)
    assert not lp.pm.is_active
    # noticed when the session ended, not at request.timeout.ms
    assert ev[4] - lp.pm.send_times_ms()[0] < 60000


def test_poll_timeout_sends_leave_group_and_halts(peer, loop):
    lp = loop(max_poll=300)
    lp.configure(peer)
    ev = lp.wait_event(pm.EV_POLL_TIMEOUT, None)
    assert ev[1] == 0 and ev[5] > 300
    _, _, version, body = peer.last(LEAVE_GROUP)
    assert version == 5 and body["members"][0]["member_id"] == "m-1"
    assert "max.poll.interval.ms" in body["members"][0]["reason"]
    assert not lp.pm.is_active


def test_poll_keeps_the_member_in(peer, loop):
    lp = loop(max_poll=300)
    lp.configure(peer)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        lp.hb.poll(SYSTEM_CLOCK.now_ms())       # the application polls often enough
        time.sleep(0.02)
    assert peer.count(LEAVE_GROUP) == 0 and lp.pm.is_active


def test_static_member_poll_timeout_sends_no_leave_group(peer, loop):
    lp = loop(max_poll=300)
    lp.configure(peer, group_instance_id="inst", leave_group_version=None)
    ev = lp.wait_event(pm.EV_POLL_TIMEOUT, pm.CODE_NOT_SENT)
    assert ev and peer.count(LEAVE_GROUP) == 0


def test_deactivate_stops_heartbeats_and_close_ends_run(peer, loop):
    lp = loop()
    lp.configure(peer)
    wait_for(lambda: peer.count(HEARTBEAT) >= 2, what="heartbeats")
    lp.pm.deactivate()
    assert not lp.pm.is_active
    n = peer.count(HEARTBEAT)
    lp.pm.wait_events(400)
    assert peer.count(HEARTBEAT) <= n + 1     # at most the one already in flight
    lp.close()
    assert not lp.pm.is_running
    with pytest.raises(RuntimeError):
        lp.pm.run()


def test_connect_failure_is_reported(loop):
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()                            # nothing listens there now
    lp = loop()
    lp.pm.configure(host="127.0.0.1", port=port, group_id="g", member_id="m", generation_id=1,
                    heartbeat_version=4)
    ev = lp.wait_event(pm.EV_DISCONNECTED, pm.CODE_CONNECT_FAILED)
    assert ev[5] != 0                        # errno (ECONNREFUSED)
    assert lp.pm.stats()["connects"] == 0


def test_wait_events_is_woken():
    hb = Heartbeat(3000, 100, 60000, 50, SYSTEM_CLOCK.now_ms())
    p = pm.Pacemaker(hb, None)
    t = threading.Timer(0.2, p.wake)
    t.start()
    assert p.wait_events(60000) == []        # returns at wake(), not after a minute
    t.join()
    with pytest.raises(ValueError):
        p.wait_events(-1)


@pytest.mark.parametrize("kw,match", [
    ({"port": 0}, "port"), ({"port": 70000}, "port"), ({"host": ""}, "host"), ({"host": "h" * 256}, "host"),
    ({"heartbeat_version": 5}, "Heartbeat version"), ({"leave_group_version": 6}, "LeaveGroup version"),
    ({"member_id": "m" * 40000}, "32767"), ({"request_timeout_ms": 0}, "request_timeout_ms"),
])
def test_configure_rejects_bad_input(kw, match):
    p = pm.Pacemaker(Heartbeat(3000, 100, 60000, 50, 0), "c")
    args = dict(host="127.0.0.1", port=9092, group_id="g", member_id="m", generation_id=1, heartbeat_version=4)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        p.configure(**args)
    assert not p.is_active


def test_secured_protocols_fall_back_only_without_settings_for_the_compiled_connection():
    class Settings:
        security_protocol = "SASL_SSL"

    class Client:
        settings = Settings()
    reason = pacemaker_unavailable_reason(Client())
    assert reason is not None and "SASL_SSL" in reason
    Settings.security_protocol = "PLAINTEXT"
    assert pacemaker_unavailable_reason(Client()) is None


def test_uninitialised_or_reinitialised_pacemaker_is_refused():
    p = pm.Pacemaker.__new__(pm.Pacemaker)
    with pytest.raises(RuntimeError, match="__init__"):
        p.run()
    with pytest.raises(RuntimeError, match="__init__"):
        p.configure(host="h", port=1, group_id="g", member_id="m", generation_id=1, heartbeat_version=4)
    assert p.take_events() == [] and not p.is_active
    p.close()
    hb = Heartbeat(3000, 100, 60000, 50, 0)
    q = pm.Pacemaker(hb, "c")
    with pytest.raises(RuntimeError, match="already"):
        q.__init__(hb, "c")


def test_create_link_logs_why_it_falls_back(caplog):
    from kclient.group.pacemaker import create_link

    class Settings:
        security_protocol = "SSL"

    class Client:
        settings = Settings()

    class Coordinator:
        group_id = "g"

    with caplog.at_level("INFO", logger="kclient.group.pacemaker"):
        assert create_link(Coordinator(), Client()) is None
    lines = [r.getMessage() for r in caplog.records if r.name == "kclient.group.pacemaker"]
    assert len(lines) == 1 and "security.protocol SSL" in lines[0] and "Python heartbeat thread" in lines[0]


# ---------------------------------------------------------------------------- KIP-848: ConsumerGroupHeartbeat
T1, T2 = uuid.UUID(int=0x1234), uuid.UUID(int=2**128 - 1)


def _cgh_short_body(version, epoch, instance):
    body = {"group_id": "grp-ü", "member_id": "m-1", "member_epoch": epoch, "instance_id": instance,
            "rack_id": None, "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
            "server_assignor": None, "topic_partitions": None}
    if version >= 1:
        body["subscribed_topic_regex"] = None
    return body


@pytest.mark.parametrize("version", range(2))
@pytest.mark.parametrize("epoch", [7, -1, -2, 2**31 - 1])
@pytest.mark.parametrize("instance", [None, "inst-1"])
@pytest.mark.parametrize("client_id", [None, "client-é"])
def test_consumer_group_heartbeat_request_matches_reference(version, epoch, instance, client_id):
    ours = codec.encode_consumer_group_heartbeat_request(version, 77, client_id, "grp-ü", "m-1", epoch, instance)
    ref = protocol.encode_request(CGH, version, 77, client_id, _cgh_short_body(version, epoch, instance))
    assert ours == ref
    # and it reads back as "every other field unchanged"
    _api, _v, _corr, _cid, body = protocol.decode_request(ours[4:])
    assert body["rebalance_timeout_ms"] == -1 and body["topic_partitions"] is None


def _cgh_answer(error=0, epoch=9, interval=2500, assignment=None, message=None, member_id="m-1"):
    return {"throttle_time_ms": 12, "error_code": error, "error_message": message, "member_id": member_id,
            "member_epoch": epoch, "heartbeat_interval_ms": interval, "assignment": assignment}


ASSIGNMENTS = [None, {"topic_partitions": []},
               {"topic_partitions": [{"topic_id": T1, "partitions": [0, 5, 7]}, {"topic_id": T2, "partitions": []}]}]


@pytest.mark.parametrize("version", range(2))
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
@pytest.mark.parametrize("error,message,member_id", [(0, None, "m-1"), (110, "fenced é", None), (25, "", "x")])
def test_consumer_group_heartbeat_response_decodes_like_reference(version, assignment, error, message, member_id):
    body = _cgh_answer(error, 9, 2500, assignment, message, member_id)
    frame = protocol.encode_response(CGH, version, 31, body)[4:]
    assert codec.decode_consumer_group_heartbeat_response(version, frame) == (
        31, 12, error, 9, 2500, assignment is not None)
    assert protocol.decode_response(CGH, version, frame)["assignment"] == assignment


def test_hostile_consumer_group_heartbeat_responses():
    full = _cgh_answer(assignment=ASSIGNMENTS[2], message="m")
    frame = protocol.encode_response(CGH, 1, 1, full)[4:]
    for cut in range(len(frame)):
        with pytest.raises(ValueError, match="truncated"):
            codec.decode_consumer_group_heartbeat_response(1, frame[:cut])
    with pytest.raises(ValueError, match="bytes left"):
        codec.decode_consumer_group_heartbeat_response(1, frame + b"\0")
    head = struct.pack(">i", 1) + b"\x00" + struct.pack(">ih", 0, 0) + b"\x00\x00" + struct.pack(">ii", 3, 100)
    # assignment present: a topic count the frame cannot hold; a null (non-nullable) topic array
    with pytest.raises(ValueError, match="truncated"):
        codec.decode_consumer_group_heartbeat_response(1, head + b"\x01" + b"\xff\xff\xff\xff\x07")
    with pytest.raises(ValueError, match="malformed"):
        codec.decode_consumer_group_heartbeat_response(1, head + b"\x01" + b"\x00" + b"\x00\x00")
    # a partition count the frame cannot hold; a bad varint; a string longer than the frame
    topic = b"\x02" + T1.bytes
    with pytest.raises(ValueError, match="truncated"):
        codec.decode_consumer_group_heartbeat_response(1, head + b"\x01" + topic + b"\xf0\xff\xff\x0f" + b"\x00" * 8)
    with pytest.raises(ValueError, match="malformed"):
        codec.decode_consumer_group_heartbeat_response(1, head + b"\x01" + b"\xff" * 6)
    bad_msg = struct.pack(">i", 1) + b"\x00" + struct.pack(">ih", 0, 0) + b"\x7f" + b"x" * 10
    with pytest.raises(ValueError, match="truncated"):
        codec.decode_consumer_group_heartbeat_response(1, bad_msg)
    with pytest.raises(ValueError, match="version"):
        codec.decode_consumer_group_heartbeat_response(2, frame)
    with pytest.raises(ValueError, match="version"):
        codec.encode_consumer_group_heartbeat_request(2, 1, "c", "g", "m", 1)
    with pytest.raises(ValueError, match="32767"):
        codec.encode_consumer_group_heartbeat_request(1, 1, "c", "g", "m" * 32768, 1)


def test_consumer_mode_heartbeats_short_form_and_follows_the_epoch(peer, loop):
    lp = loop(interval=100)
    peer.cgh_interval = 150
    epoch = lp.configure_consumer(peer, group_instance_id="inst-1", member_epoch=3)
    wait_for(lambda: peer.count(CGH) >= 2, what="2 heartbeats")
    _, _, version, body = peer.last(CGH)
    assert (version, body["group_id"], body["member_id"], body["member_epoch"], body["instance_id"]) == (
        1, "g", "m-1", 3, "inst-1")
    assert body["topic_partitions"] is None and body["subscribed_topic_names"] is None
    wait_for(lambda: lp.hb.heartbeat_interval_ms == 150, what="the broker's interval")
    # the broker moves the member to epoch 5 with a new assignment: the loop heartbeats at 5 from then on
    assignment = {"topic_partitions": [{"topic_id": T1, "partitions": [1, 2]}]}
    peer.cgh_answers.append(_cgh_answer(epoch=5, interval=150, assignment=assignment))
    ev = lp.wait_event(pm.EV_ASSIGNMENT)
    assert ev[2] == epoch and ev[3] == 5 and ev[5] == 1
    seq, v, frame = lp.pm.take_assignment()
    assert (seq, v) == (1, 1)
    assert protocol.decode_response(CGH, 1, frame)["assignment"] == assignment
    assert lp.pm.take_assignment() is None              # once
    assert lp.pm.member_epoch == 5
    n = peer.count(CGH)
    wait_for(lambda: peer.count(CGH) >= n + 2, what="heartbeats after the new epoch")
    assert peer.last(CGH)[3]["member_epoch"] == 5
    # a new epoch without an assignment is announced too (detail 0: nothing to take)
    peer.cgh_answers.append(_cgh_answer(epoch=6, interval=150))
    wait_for(lambda: any(e[0] == pm.EV_ASSIGNMENT and e[3] == 6 for e in lp.collect()), what="epoch 6")
    assert [e[5] for e in lp.events if e[0] == pm.EV_ASSIGNMENT and e[3] == 6] == [0]
    assert lp.pm.take_assignment() is None and lp.pm.is_active


@pytest.mark.parametrize("code", [110, 25, 111, 112, 30])
def test_consumer_mode_errors_halt_until_reconfigured(peer, loop, code):
    lp = loop()
    peer.errors[CGH] = [code]
    lp.configure_consumer(peer)
    ev = lp.wait_event(pm.EV_HEARTBEAT_ERROR, code)
    assert ev[3] == 3
    wait_for(lambda: not lp.pm.is_active, what="halt")
    n = peer.count(CGH)
    lp.pm.wait_events(300)
    assert peer.count(CGH) == n


@pytest.mark.parametrize("code,kind", [(16, pm.EV_COORDINATOR_LOST), (14, pm.EV_HEARTBEAT_ERROR)])
def test_consumer_mode_coordinator_errors(peer, loop, code, kind):
    lp = loop()
    peer.errors[CGH] = [code]
    lp.configure_consumer(peer)
    lp.wait_event(kind, code)
    if code == 14:      # still loading: retried
        n = peer.count(CGH)
        wait_for(lambda: peer.count(CGH) >= n + 2, what="retries")
        assert lp.pm.is_active
    else:
        wait_for(lambda: not lp.pm.is_active, what="halt")


@pytest.mark.parametrize("instance,leave_epoch", [(None, -1), ("inst", -2)])
def test_consumer_mode_poll_timeout_sends_the_leave_heartbeat(peer, loop, instance, leave_epoch):
    lp = loop(max_poll=300)
    lp.configure_consumer(peer, group_instance_id=instance)
    ev = lp.wait_event(pm.EV_POLL_TIMEOUT, None)
    assert ev[1] == 0 and ev[5] > 300
    _, _, _, body = peer.last(CGH)
    assert body["member_epoch"] == leave_epoch and body["instance_id"] == instance
    assert not lp.pm.is_active


def test_consumer_mode_configure_rejects_bad_input(loop):
    lp = loop()
    for kw, match in ((dict(member_epoch=0), "member_epoch"), (dict(member_epoch=-1), "member_epoch"),
                      (dict(version=2), "version")):
        args = dict(host="127.0.0.1", port=9, group_id="g", member_id="m", member_epoch=1, version=1)
        args.update(kw)
        with pytest.raises(ValueError, match=match):
            lp.pm.configure_consumer(**args)


UTF8_CASES = [b"", b"plain", "é€𝄞".encode(), b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\xaf",
              b"\xc3", b"\xe2\x82", b"\xf0\x9d\x84", b"\x80", b"\xff", b"\xf5\x80\x80\x80", b"ok\xc3\xa9\xc3"]


def _cgh_frame_with_member_id(raw: bytes) -> bytes:
    head = struct.pack(">i", 1) + b"\x00" + struct.pack(">ih", 0, 0) + b"\x00"   # corr, tags, throttle, error, msg null
    return head + bytes([len(raw) + 1]) + raw + struct.pack(">ii", 3, 500) + b"\xff\x00"


@pytest.mark.parametrize("raw", UTF8_CASES)
def test_consumer_group_heartbeat_strings_are_checked_like_pythons_utf8(raw):
    """The C decoder refuses exactly the strings Python's strict UTF-8 decoder refuses, so an
    answer the pacemaker keeps is one the schema-driven codec can read."""
    try:
        raw.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    frame = _cgh_frame_with_member_id(raw)
    if valid:
        assert codec.decode_consumer_group_heartbeat_response(1, frame)[3] == 3
        assert protocol.decode_response(CGH, 1, frame)["member_id"] == raw.decode()
    else:
        with pytest.raises(ValueError, match="UTF-8"):
            codec.decode_consumer_group_heartbeat_response(1, frame)


def test_consumer_group_heartbeat_utf8_check_matches_python_on_random_bytes():
    rng = __import__("random").Random(848)
    alphabet = [0x41, 0x7f, 0x80, 0xbf, 0xc2, 0xc3, 0xdf, 0xe0, 0xe1, 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0x9f, 0xa0, 0x8f, 0x90]
    for _ in range(5000):
        raw = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
        try:
            raw.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        try:
            codec.decode_consumer_group_heartbeat_response(1, _cgh_frame_with_member_id(raw))
            ours = True
        except ValueError:
            ours = False
        assert ours == valid, raw


def test_a_link_closed_before_its_thread_runs_ends_that_thread_quietly(monkeypatch):
    """A client that fails to build closes the link it made, sometimes before the link's
    thread got to run the pacemaker: that thread ends without an error (the pacemaker refuses
    run() after close(), which the link expects)."""
    import kclient.group.pacemaker as link_module

    held: list[threading.Thread] = []

    class HeldThread(threading.Thread):
        def start(self):            # started by the test, after the close
            held.append(self)

    class Link(link_module.LinkBase):
        def __init__(self):
            super().__init__(Heartbeat(3000, 100, 60000, 50, 0), threading.Lock(), "g", "c")
            self._python = type("NoPythonThread", (), {"close": lambda self, timeout_s=None: None})()

    failures: list = []
    monkeypatch.setattr(link_module.threading, "Thread", HeldThread)
    monkeypatch.setattr(threading, "excepthook", failures.append)
    link = Link()
    link.close()
    (thread,) = held
    super(HeldThread, thread).start()
    thread.join(10)
    assert not thread.is_alive() and failures == []
