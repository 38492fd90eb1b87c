"""The heartbeat loop (mechanisms §2), one branch at a time.

``HeartbeatThread.run_once()`` is one iteration of the loop, run here on the test thread with
a FakeClock: no sleeping for timing logic. The coordinator peer is the scripted socket broker
of test_coordinator_steps (real frames over socketpairs). A few tests run the real thread
(system clock, short intervals) to show what only a thread can: a fatal error ends it, and
heartbeats keep flowing while the application thread is blocked in a long network poll or
busy computing in pure Python. They wait on conditions with deadlines, never fixed sleeps.
"""
from __future__ import annotations

import logging
import threading
import time

import pytest

from kclient import errors as Errors
from kclient.clock import FakeClock
from kclient.group.coordinator import NO_GENERATION, MemberState
from kclient.group.heartbeat_thread import EXIT, WAIT_FOR_EVENT

from test_coordinator_steps import (  # noqa: E402  (the scripted peer lives there)
    FIND_COORDINATOR, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, ScriptedBroker, Stack,
)

SESSION, INTERVAL, MAX_POLL, BACKOFF = 10_000, 3_000, 60_000, 100


def python_thread(coord):
    """The coordinator's Python heartbeat thread (carried by the pacemaker link if there is one)."""
    driver = coord.heartbeat_driver
    return getattr(driver, "python_driver", driver)


@pytest.fixture
def broker():
    b = ScriptedBroker({"t": 2})
    yield b
    b.close()


@pytest.fixture
def joined(broker):
    """A STABLE member on a FakeClock; its heartbeat thread exists (enabled) but is not started."""
    stacks = []

    def _make(**cfg):
        cfg = {"session_timeout_ms": SESSION, "heartbeat_interval_ms": INTERVAL,
               "max_poll_interval_ms": MAX_POLL, "retry_backoff_ms": BACKOFF, **cfg}
        s = Stack(broker, clock=FakeClock(), **cfg)
        stacks.append(s)
        s.join()
        hb = python_thread(s.coord)
        assert hb is not None and not hb.is_alive() and hb.enabled
        return s, hb

    yield _make
    for s in stacks:
        s.close()


def send_one_heartbeat(s, hb, broker):
    """Advance to the next heartbeat, let run_once send it, wait until the peer has it."""
    s.clock.advance(max(s.coord.heartbeat.next_heartbeat_ms - s.clock.now_ms(), 0))
    n = broker.count(HEARTBEAT)
    assert hb.run_once() == 0
    assert s.coord.heartbeat.last_heartbeat_send_ms == s.clock.now_ms()
    s.pump(lambda: broker.count(HEARTBEAT) == n + 1)


def wait_notified(coord):
    """A thread waiting on the coordinator's condition; .result is True if it was notified."""
    ready = threading.Event()
    box = {}

    def waiter():
        with coord._lock:
            ready.set()
            box["notified"] = coord._cond.wait(5)

    t = threading.Thread(target=waiter)
    t.start()
    ready.wait(5)
    return t, box


# ---------------------------------------------------------------------- step 1
def test_closed_exits(joined):
    s, hb = joined()
    hb.close()
    assert hb.run_once() == EXIT


def test_disabled_waits_until_enabled(joined):
    s, hb = joined()
    hb.disable()
    assert hb.run_once() == WAIT_FOR_EVENT
    t, box = wait_notified(s.coord)
    with s.coord._lock:            # only reachable once the waiter is inside wait()
        hb.enable()
    t.join(5)
    assert box["notified"] is True
    assert hb.run_once() == INTERVAL


def test_not_stable_disables_then_waits(joined):
    s, hb = joined()
    s.coord.request_rejoin("test")
    assert hb.run_once() == INTERVAL            # a rejoin request alone keeps heartbeating
    s.coord.reset_state_and_generation("test", reset_member_id=True)
    assert s.coord.state is MemberState.UNJOINED
    assert hb.run_once() == 0
    assert not hb.enabled
    assert hb.run_once() == WAIT_FOR_EVENT


# ---------------------------------------------------------------------- step 3
def test_coordinator_unknown_starts_lookup_and_backs_off_while_in_flight(joined, broker):
    s, hb = joined()
    finds = broker.count(FIND_COORDINATOR)
    broker.hold.add(FIND_COORDINATOR)
    s.coord.mark_coordinator_unknown("test")
    assert hb.run_once() == 0                        # lookup started
    s.pump(lambda: broker.count(FIND_COORDINATOR) == finds + 1)
    assert hb.run_once() == BACKOFF                  # in flight: wait retry.backoff.ms
    assert broker.count(FIND_COORDINATOR) == finds + 1
    broker.release(FIND_COORDINATOR)
    s.pump(lambda: not s.coord.coordinator_unknown())
    assert hb.run_once() > 0                         # back to waiting for the next heartbeat


def test_coordinator_lookup_that_fails_at_once_backs_off(joined, broker):
    s, hb = joined()
    broker.refuse = True
    broker.kill_connections()                        # every connection fails, new ones are refused
    s.pump(lambda: s.coord.coordinator_unknown())
    assert hb.run_once() == 0                        # a lookup is tried once...
    s.pump(lambda: not s.coord.lookup_in_flight())
    # ...the only broker is now in reconnect backoff (the fake clock does not move)
    assert hb.run_once() == BACKOFF                  # no node to ask: failed at once
    broker.refuse = False
    s.clock.advance(1000)                            # backoff over: the lookup goes out
    finds = broker.count(FIND_COORDINATOR)
    assert hb.run_once() == 0
    s.pump(lambda: not s.coord.coordinator_unknown())
    assert broker.count(FIND_COORDINATOR) == finds + 1


def test_coordinator_lookup_does_not_wait_for_a_polling_application(joined, broker):
    s, hb = joined()
    s.coord.mark_coordinator_unknown("test")
    # Another thread holds the network client's poll lock (an application poll in select()):
    # the heartbeat thread still starts the lookup without waiting for that lock.
    locked, release = threading.Event(), threading.Event()

    def hold_lock():
        with s.client._lock:
            locked.set()
            release.wait(5)

    t = threading.Thread(target=hold_lock)
    t.start()
    locked.wait(5)
    try:
        assert hb.run_once() == 0
        assert s.coord.lookup_in_flight()
    finally:
        release.set()
        t.join(5)


# ---------------------------------------------------------------------- step 4
def test_session_expiry_marks_coordinator_unknown(joined):
    s, hb = joined()
    assert s.coord.coordinator() is not None
    s.clock.advance(SESSION + 1)                     # no heartbeat response for session.timeout.ms
    assert hb.run_once() == 0
    assert s.coord.channel.known_node is None


# ---------------------------------------------------------------------- step 5
def test_poll_timeout_sends_leave_group_and_resets(joined, broker, caplog):
    s, hb = joined(max_poll_interval_ms=5000)       # below the session timeout: poll expires first
    member = s.coord.member_id
    s.clock.advance(5001)
    with caplog.at_level(logging.WARNING):
        assert hb.run_once() == 0
    assert s.coord.state is MemberState.UNJOINED
    assert s.coord.generation() == NO_GENERATION and s.coord.rejoin_needed
    (_, leave), = broker.wait_count(LEAVE_GROUP, 1)
    assert leave["members"][0]["member_id"] == member
    assert any(member in r.getMessage() and "max.poll.interval.ms" in r.getMessage() for r in caplog.records)
    assert hb.run_once() == 0 and not hb.enabled    # not STABLE any more
    # the next poll() rejoins and tells the listener the partitions were lost
    s.join()
    assert s.listener.events[1] == ("lost", [("t", 0), ("t", 1)])
    assert hb.enabled


# ---------------------------------------------------------------------- step 6
def test_waits_until_next_heartbeat(joined):
    s, hb = joined()
    assert hb.run_once() == INTERVAL
    s.clock.advance(1000)
    assert hb.run_once() == INTERVAL - 1000


def test_waits_until_poll_expiry_when_it_comes_first(joined):
    s, hb = joined(max_poll_interval_ms=2000)        # poll expiry before the next heartbeat
    assert hb.run_once() == 2001                     # "expired" = strictly more than 2000 ms


def test_waits_until_session_expiry_when_it_comes_first(joined, broker):
    s, hb = joined()
    broker.hold.add(HEARTBEAT)
    send_one_heartbeat(s, hb, broker)                # sent at +3000, never answered
    # next heartbeat due at +6000, session expires at +10000 (from the reset at join)
    s.clock.advance(2000)
    assert hb.run_once() == 1000
    s.clock.advance(1000)
    send_one_heartbeat(s, hb, broker)                        # +6000
    assert hb.run_once() == 3000                     # next +9000
    s.clock.advance(3000)
    send_one_heartbeat(s, hb, broker)
    assert hb.run_once() == SESSION + 1 - 9000       # session expiry (+10001) before +12000


# ---------------------------------------------------------------------- step 7
def test_sends_heartbeat_with_group_generation_member_and_instance(joined, broker):
    s, hb = joined(group_instance_id="inst-7")
    send_one_heartbeat(s, hb, broker)
    (_, body), = broker.wait_count(HEARTBEAT, 1)
    assert body == {"group_id": "g", "generation_id": 1, "member_id": "m-1", "group_instance_id": "inst-7"}


def test_successful_heartbeat_is_received(joined, broker):
    s, hb = joined()
    broker.hold.add(HEARTBEAT)
    send_one_heartbeat(s, hb, broker)
    sent = s.clock.now_ms()
    s.clock.advance(5)
    broker.release(HEARTBEAT)
    s.pump(lambda: s.coord.heartbeat.last_heartbeat_receive_ms is not None)
    assert s.coord.heartbeat.last_heartbeat_receive_ms == sent + 5
    assert not s.coord.heartbeat.heartbeat_failed
    assert hb.run_once() == INTERVAL - 5


def test_rebalance_in_progress_counts_as_received_and_requests_rejoin(joined, broker):
    s, hb = joined()
    broker.errors[HEARTBEAT].append(27)
    send_one_heartbeat(s, hb, broker)
    s.pump(lambda: s.coord.heartbeat.last_heartbeat_receive_ms is not None)
    assert s.coord.heartbeat.last_heartbeat_receive_ms == s.clock.now_ms()
    assert not s.coord.heartbeat.heartbeat_failed
    assert s.coord.rejoin_needed
    assert s.coord.state is MemberState.STABLE       # keeps its partitions until it rejoins
    assert s.coord.generation().generation_id == 1


@pytest.mark.parametrize("code", [-1, 14, 7])       # UNKNOWN_SERVER_ERROR, LOAD_IN_PROGRESS, REQUEST_TIMED_OUT
def test_other_error_fails_heartbeat_wakes_thread_and_retries_after_backoff(joined, broker, code):
    s, hb = joined()
    broker.hold.add(HEARTBEAT)
    send_one_heartbeat(s, hb, broker)
    t, box = wait_notified(s.coord)
    broker.release(HEARTBEAT, error_code=code)
    s.pump(lambda: s.coord.heartbeat.heartbeat_failed)
    t.join(5)
    assert box["notified"] is True                   # the sleeping thread is woken to reschedule
    assert s.coord.heartbeat.last_heartbeat_receive_ms is None
    assert hb.run_once() == BACKOFF                  # retry after retry.backoff.ms
    assert hb.failure is None


@pytest.mark.parametrize("code", [15, 16])          # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
def test_coordinator_errors_mark_it_unknown(joined, broker, code):
    s, hb = joined()
    broker.errors[HEARTBEAT].append(code)
    send_one_heartbeat(s, hb, broker)
    s.pump(lambda: s.coord.heartbeat.heartbeat_failed)
    assert s.coord.channel.known_node is None
    finds = broker.count(FIND_COORDINATOR)
    assert hb.run_once() == 0                        # rediscovery starts
    s.pump(lambda: broker.count(FIND_COORDINATOR) == finds + 1)


@pytest.mark.parametrize("code,keeps_member", [(25, False), (22, True)])   # UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION
def test_fencing_errors_reset_generation_and_request_rejoin(joined, broker, caplog, code, keeps_member):
    s, hb = joined()
    broker.errors[HEARTBEAT].append(code)
    send_one_heartbeat(s, hb, broker)
    with caplog.at_level(logging.WARNING):
        s.pump(lambda: s.coord.heartbeat.heartbeat_failed)
    assert s.coord.generation().generation_id == -1
    assert s.coord.member_id == ("m-1" if keeps_member else "")
    assert s.coord.rejoin_needed and s.coord.state is MemberState.UNJOINED
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("m-1" in w and "removed from the group" in w for w in warnings)
    assert hb.run_once() == 0 and not hb.enabled
    s.join()                                          # the next poll rejoins, partitions reported lost
    assert ("lost", [("t", 0), ("t", 1)]) in s.listener.events


def test_error_for_an_older_generation_is_discarded(joined, broker, caplog):
    s, hb = joined()
    broker.hold.add(HEARTBEAT)
    send_one_heartbeat(s, hb, broker)
    s.pump(lambda: s.client.pending_request_count(s.coord.channel.known_node) == 1
           and s.net.in_flight_request_count(s.coord.channel.known_node) == 1)
    broker.wait_held(HEARTBEAT)
    s.coord.maybe_leave_group("test")               # the generation ends while the heartbeat is out
    assert s.coord.generation() == NO_GENERATION
    s.coord.last_reset_member_id = "x"
    with caplog.at_level(logging.WARNING):
        broker.release(HEARTBEAT, error_code=25)    # UNKNOWN_MEMBER_ID about generation 1
        s.pump(lambda: broker.count(LEAVE_GROUP) == 1 and not s.client.has_pending_requests())
    assert not any("removed from the group" in r.getMessage() for r in caplog.records)
    assert s.coord.last_reset_member_id == "x"      # no second reset for the stale answer
    assert hb.failure is None


# ---------------------------------------------------------------------- step 8
@pytest.mark.parametrize("code,exc,static", [(30, Errors.GroupAuthorizationFailedError, None),
                                             (82, Errors.FencedInstanceIdError, "inst-1")])
def test_fatal_error_ends_loop_and_next_poll_raises_once(joined, broker, code, exc, static):
    s, hb = joined(group_instance_id=static)
    broker.errors[HEARTBEAT].append(code)
    send_one_heartbeat(s, hb, broker)
    s.pump(lambda: hb.failure is not None)
    assert isinstance(hb.failure, exc)
    assert hb.run_once() == EXIT
    with pytest.raises(exc):
        s.coord.poll(0)
    assert python_thread(s.coord) is None or python_thread(s.coord) is not hb


def test_static_member_on_a_broker_without_heartbeat_v3_ends_thread(joined, broker):
    broker.ranges[HEARTBEAT] = (0, 2)                # no group.instance.id in Heartbeat
    s, hb = joined(group_instance_id="inst-1")
    s.clock.advance(INTERVAL)
    assert hb.run_once() == 0
    s.pump(lambda: hb.failure is not None)
    assert isinstance(hb.failure, Errors.UnsupportedVersionError)
    assert hb.run_once() == EXIT
    with pytest.raises(Errors.UnsupportedVersionError):
        s.coord.poll(0)


def test_unexpected_exception_in_loop_ends_thread(joined, monkeypatch):
    s, hb = joined()

    def boom():
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(s.coord, "send_heartbeat_request", boom)
    s.clock.advance(INTERVAL)
    hb.run()                                         # the loop itself, on this thread
    assert isinstance(hb.failure, ZeroDivisionError)
    with pytest.raises(ZeroDivisionError):
        s.coord.poll(0)


# ---------------------------------------------------------------------- the real thread
@pytest.fixture
def live(broker):
    """A member with a running heartbeat thread (system clock, 100 ms heartbeats)."""
    stacks = []

    def _make(**cfg):
        cfg = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 100, "max_poll_interval_ms": 60000,
               "retry_backoff_ms": 50, **cfg}
        s = Stack(broker, start_heartbeat_thread=True, **cfg)
        stacks.append(s)
        s.join()
        hb = python_thread(s.coord)
        assert hb.is_alive() and hb.name == "kclient-heartbeat-g" and hb.daemon
        return s, hb

    yield _make
    for s in stacks:
        s.close()


def test_thread_ends_on_fatal_error_and_poll_reraises(live, broker):
    s, hb = live(group_instance_id="inst-1")
    broker.errors[HEARTBEAT].append(82)
    hb.join(10)
    assert not hb.is_alive()
    with pytest.raises(Errors.FencedInstanceIdError):
        s.coord.poll(0)


def test_heartbeats_flow_while_application_blocks_in_long_polls(live, broker):
    s, hb = live()
    stop = threading.Event()

    def application():            # a consumer waiting for records: long network polls
        while not stop.is_set():
            s.client.poll(10_000)

    app = threading.Thread(target=application)
    app.start()
    try:
        start = broker.count(HEARTBEAT)
        first_receive = s.coord.heartbeat.last_heartbeat_receive_ms
        broker.wait_count(HEARTBEAT, start + 5, timeout=10)
        deadline = time.monotonic() + 5
        while s.coord.heartbeat.last_heartbeat_receive_ms == first_receive:
            assert time.monotonic() < deadline
            broker.wait_count(HEARTBEAT, broker.count(HEARTBEAT) + 1, timeout=5)
    finally:
        stop.set()
        s.net.wakeup()
        app.join(10)
    assert s.coord.state is MemberState.STABLE and hb.is_alive()
    assert not s.coord.heartbeat.session_timeout_expired(s.clock.now_ms())


def test_heartbeats_flow_while_application_computes_in_pure_python(live, broker):
    s, hb = live(session_timeout_ms=1000)
    start = broker.count(HEARTBEAT)
    deadline = time.monotonic() + 10
    x = 0
    # Busy pure-Python work on this thread (no network calls, no sleeps) until the heartbeat
    # thread has had more than a session timeout's worth of heartbeats answered.
    t0 = time.monotonic()
    while broker.count(HEARTBEAT) < start + 15 or time.monotonic() - t0 < 1.2:
        assert time.monotonic() < deadline
        for i in range(2000):
            x += i * i
    assert s.coord.heartbeat.last_heartbeat_receive_ms is not None
    assert not s.coord.heartbeat.session_timeout_expired(s.clock.now_ms())
    assert s.coord.state is MemberState.STABLE and s.coord.generation().generation_id == 1


# ---------------------------------------------------------------------- COMPLETING_REBALANCE
def test_completing_rebalance_keeps_heartbeating(joined, broker):
    # Between the JoinGroup response and SyncGroup the leader computes the assignment; the
    # Java client heartbeats meanwhile (the broker expires silent members in that phase too).
    s, hb = joined()
    with s.coord._lock:
        s.coord.state = MemberState.COMPLETING_REBALANCE
    send_one_heartbeat(s, hb, broker)
    assert hb.enabled


def test_heartbeats_flow_while_sync_group_is_pending(live, broker):
    s, hb = live()
    broker.hold.add(SYNC_GROUP)
    s.coord.request_rejoin("test")
    assert not s.coord.poll(300)                 # JoinGroup answered, SyncGroup held
    broker.wait_held(SYNC_GROUP)
    assert s.coord.state is MemberState.COMPLETING_REBALANCE and hb.enabled
    n = broker.count(HEARTBEAT)
    deadline = time.monotonic() + 20
    while broker.count(HEARTBEAT) < n + 2:
        assert time.monotonic() < deadline, "no heartbeats while SyncGroup was pending"
        time.sleep(0.02)
    assert s.coord.state is MemberState.COMPLETING_REBALANCE
    broker.release(SYNC_GROUP)
    s.join()
