"""ConsumerNetworkClient (mechanisms §10) against a scripted socket peer, with a fake clock where
timing logic is tested and the real clock where a thread must be woken."""
from __future__ import annotations

import logging
import threading
import time

import pytest

from kclient import errors as Errors
from kclient.clock import FakeClock
from kclient.network.connection import ConnectionState
from kclient.network.network_config import NetworkClientConfig
from kclient.network.consumer_network_client import ConsumerNetworkClient
from kclient.network.future import RequestFuture, RequestFutureAdapter
from kclient.network.network_client import ClientRequest

from test_network_client import (  # the scripted peer lives with the NetworkClient tests
    HEARTBEAT, METADATA, T0, ScriptedCluster, known_metadata, metadata_response,
)

HB_BODY = {"group_id": "g", "generation_id": 1, "member_id": "m"}


@pytest.fixture
def clock():
    return FakeClock(T0)


@pytest.fixture
def cluster():
    c = ScriptedCluster()
    yield c
    c.close()


def make_cnc(clock, cluster, **cfg):
    cfg.setdefault("bootstrap.servers", "broker1:9092")
    md = known_metadata(clock) if clock is not None else None
    if clock is None:
        from kclient.clock import SYSTEM_CLOCK
        md = known_metadata(SYSTEM_CLOCK)
    return ConsumerNetworkClient(config=NetworkClientConfig.of(cfg), metadata=md, clock=clock,
                                 socket_factory=cluster.socket_factory)


@pytest.fixture
def cnc(clock, cluster):
    c = make_cnc(clock, cluster)
    yield c
    c.close()


def poll_until(cnc, cond, timeout_s=5.0, step_ms=50):
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        cnc.poll(step_ms)


def connect(cnc, cluster, node_id, ranges=None):
    cnc.try_connect(node_id)
    poll_until(cnc, lambda: cnc.client.connection_state(node_id) is ConnectionState.API_VERSIONS)
    cluster.peer(node_id).answer_api_versions(ranges)
    poll_until(cnc, lambda: cnc.client.is_ready(node_id))


def answer_heartbeat(peer, error_code=0):
    api, version, corr, _cid, body = peer.read_request()
    assert api == HEARTBEAT
    peer.respond(HEARTBEAT, version, corr, {"error_code": error_code, "throttle_time_ms": 0})
    return body


# ---------------------------------------------------------------------- send / poll
def test_send_connects_handshakes_and_completes_future(cnc, cluster):
    f = cnc.send(1, HEARTBEAT, HB_BODY)
    assert isinstance(f, RequestFuture) and not f.is_done
    assert cnc.pending_request_count(1) == 1
    poll_until(cnc, lambda: cnc.client.connection_state(1) is ConnectionState.API_VERSIONS)
    peer = cluster.peer(1)
    peer.answer_api_versions()
    poll_until(cnc, lambda: not peer.no_request_pending())
    body = answer_heartbeat(peer)
    assert body["group_id"] == "g"
    assert cnc.poll(f, 5000) is True
    assert f.succeeded() and f.value["error_code"] == 0
    assert f.api_version == 4 and f.node_id == 1
    assert cnc.pending_request_count() == 0


def test_a_completed_request_leaves_no_reference_cycle(cnc, cluster):
    """handler -> request -> handler.on_complete was a cycle: each response (a fetch
    response's frame: megabytes) lived until a cyclic collection. Without the collector,
    a completed future and its response go as soon as the caller drops them."""
    import gc
    import weakref
    connect(cnc, cluster, 1)
    gc.collect()
    gc.disable()
    try:
        for outcome in ("answer", "disconnect"):
            f = cnc.send(1, HEARTBEAT, HB_BODY)
            cnc.poll(0)
            if outcome == "answer":
                answer_heartbeat(cluster.peer(1))
            else:
                cluster.peer(1).close()
            deadline = time.monotonic() + 5
            while not f.is_done and time.monotonic() < deadline:
                cnc.poll(50)
            assert f.succeeded() if outcome == "answer" else f.failed()
            assert f.request is not None and f.request.callback is None
            assert f.api_version == 4 and f.node_id == 1
            dead = weakref.ref(f)
            del f
            assert dead() is None, outcome
    finally:
        gc.enable()

def test_responses_complete_in_request_order(cnc, cluster):
    connect(cnc, cluster, 1)
    order = []
    futures = [cnc.send(1, HEARTBEAT, dict(HB_BODY, generation_id=i)) for i in range(4)]
    for i, f in enumerate(futures):
        f.on_success(lambda v, i=i: order.append(i))
    cnc.poll(0)
    peer = cluster.peer(1)
    assert [answer_heartbeat(peer)["generation_id"] for _ in range(4)] == [0, 1, 2, 3]
    poll_until(cnc, lambda: all(f.is_done for f in futures))
    assert order == [0, 1, 2, 3]


def test_send_queued_writes_to_ready_nodes_without_reading_and_leaves_the_rest_queued(cnc, cluster):
    connect(cnc, cluster, 1)
    answered = cnc.send(1, HEARTBEAT, dict(HB_BODY, generation_id=7))
    cnc.poll(0)
    assert answer_heartbeat(cluster.peer(1))["generation_id"] == 7   # its answer waits unread
    ready = cnc.send(1, HEARTBEAT, HB_BODY)
    later = cnc.send(2, HEARTBEAT, HB_BODY)          # node 2 has no connection yet
    cnc.send_queued()
    # Written at once: the peer reads it without another poll.
    assert answer_heartbeat(cluster.peer(1))["group_id"] == "g"
    assert not answered.is_done                      # send_queued read nothing
    assert cnc.pending_request_count(1) == 2 and not ready.is_done
    assert cnc.pending_request_count(2) == 1 and not later.is_done
    poll_until(cnc, lambda: answered.is_done)
    assert answered.succeeded()
    poll_until(cnc, lambda: ready.is_done)
    assert ready.succeeded()
    poll_until(cnc, lambda: cnc.client.connection_state(2) is ConnectionState.API_VERSIONS)
    cluster.peer(2).answer_api_versions()
    poll_until(cnc, lambda: not cluster.peer(2).no_request_pending())
    answer_heartbeat(cluster.peer(2))
    poll_until(cnc, lambda: later.is_done)
    assert later.succeeded()
    cnc.send_queued()                                # nothing queued: a no-op


class _Interrupt(BaseException):
    """KeyboardInterrupt's stand-in (a BaseException, as a signal handler raises): one that
    escapes where it should not fails the test instead of stopping pytest."""


class _InterruptWhileWriting(logging.Filter):
    """Raises _Interrupt at the "sending" log line of the first request of one API, as a
    Ctrl-C landing while that request is written would."""

    def __init__(self, api_key: int):
        super().__init__()
        self.needle = f"sending <ClientRequest api={api_key} "
        self.raised = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.raised and record.getMessage().startswith(self.needle):
            self.raised = True
            raise _Interrupt
        return True


@pytest.mark.parametrize("writer", ["poll", "send_queued"])
def test_an_interrupt_while_a_request_is_written_leaves_its_caller_holding_its_future(cnc, cluster, caplog,
                                                                                     writer):
    # A group member's close() sends LeaveGroup around a JoinGroup the broker holds (another
    # connection): it can only if it holds that JoinGroup's future. So send() only queues, and
    # an interrupt while the request is written comes out of the call that writes it.
    connect(cnc, cluster, 1)
    caplog.set_level(logging.DEBUG, logger="kclient.network.network_client")
    interrupt = _InterruptWhileWriting(HEARTBEAT)
    logging.getLogger("kclient.network.network_client").addFilter(interrupt)
    try:
        held = cnc.send(1, HEARTBEAT, dict(HB_BODY, generation_id=1))   # does not raise
        assert not interrupt.raised
        with pytest.raises(_Interrupt):
            cnc.poll(0) if writer == "poll" else cnc.send_queued()
    finally:
        logging.getLogger("kclient.network.network_client").removeFilter(interrupt)
    assert interrupt.raised and not held.is_done
    assert cnc.client.in_flight_request_count(1) == cnc.pending_request_count(1) == 1
    # Written all the same (no later request needed to push it out), and its answer completes
    # the future its caller holds.
    peer = cluster.peer(1)
    assert answer_heartbeat(peer)["generation_id"] == 1
    poll_until(cnc, lambda: held.is_done)
    assert held.succeeded()


def test_poll_future_times_out_with_real_clock(cluster):
    cnc = make_cnc(None, cluster)
    try:
        connect(cnc, cluster, 1)
        f = cnc.send(1, HEARTBEAT, HB_BODY)
        start = time.monotonic()
        assert cnc.poll(f, 200) is False                 # the peer never answers
        assert time.monotonic() - start >= 0.19
        assert not f.is_done
    finally:
        cnc.close()


def test_listeners_run_outside_the_client_lock(cnc, cluster):
    connect(cnc, cluster, 1)
    seen = []
    f = cnc.send(1, HEARTBEAT, HB_BODY)
    f.add_both(lambda _v: seen.append(cnc._lock._is_owned()))
    cnc.poll(0)
    answer_heartbeat(cluster.peer(1))
    cnc.poll(f, 5000)
    assert seen == [False]


def test_compose_and_chain_through_the_network(cnc, cluster):
    class ErrorCodeAdapter(RequestFutureAdapter):
        def on_success(self, response, future):
            cls = Errors.for_code(response["error_code"])
            if cls is None:
                future.complete("ok")
            else:
                future.raise_(cls())

    connect(cnc, cluster, 1)
    out_ok, out_err = RequestFuture(), RequestFuture()
    cnc.send(1, HEARTBEAT, HB_BODY).compose(ErrorCodeAdapter()).chain(out_ok)
    cnc.send(1, HEARTBEAT, HB_BODY).compose(ErrorCodeAdapter()).chain(out_err)
    cnc.poll(0)
    answer_heartbeat(cluster.peer(1), 0)
    answer_heartbeat(cluster.peer(1), 27)
    poll_until(cnc, lambda: out_ok.is_done and out_err.is_done)
    assert out_ok.value == "ok"
    assert isinstance(out_err.exception, Errors.RebalanceInProgressError)
    # a network failure propagates through compose and chain as well
    out_dc = RequestFuture()
    cnc.send(1, HEARTBEAT, HB_BODY).compose(ErrorCodeAdapter()).chain(out_dc)
    cnc.poll(0)
    cluster.peer(1).close()
    poll_until(cnc, lambda: out_dc.is_done)
    assert isinstance(out_dc.exception, Errors.KafkaConnectionError) and out_dc.retriable()


# ---------------------------------------------------------------------- failures
def test_unsent_requests_expire_after_request_timeout(clock, cluster):
    cnc = make_cnc(clock, cluster, **{"request.timeout.ms": 1000,
                                      "socket.connection.setup.timeout.ms": 60_000,
                                      "socket.connection.setup.timeout.max.ms": 60_000})
    try:
        f = cnc.send(1, HEARTBEAT, HB_BODY)              # the handshake is never answered
        poll_until(cnc, lambda: cnc.client.connection_state(1) is ConnectionState.API_VERSIONS)
        clock.advance(1000)
        cnc.poll(0)
        assert not f.is_done                             # not early
        clock.advance(1)
        cnc.poll(0)
        assert isinstance(f.exception, Errors.KafkaTimeoutError) and f.retriable()
        assert "could not be sent" in str(f.exception)
        # only the (internal) ApiVersions request remains, in flight
        assert cnc.pending_request_count(1) == cnc.client.in_flight_request_count(1) == 1
    finally:
        cnc.close()


def test_disconnect_fails_in_flight_and_unsent_requests(cnc, cluster):
    connect(cnc, cluster, 1)
    in_flight = cnc.send(1, HEARTBEAT, HB_BODY)
    cnc.poll(0)
    assert cnc.client.in_flight_request_count(1) == 1
    fired = []
    in_flight.on_failure(fired.append)
    cluster.peer(1).close()
    poll_until(cnc, lambda: in_flight.is_done)
    assert isinstance(in_flight.exception, Errors.KafkaConnectionError) and in_flight.retriable()
    assert fired == [in_flight.exception]
    # while the node is backing off, a new request fails at the next poll (step 5)
    queued = cnc.send(1, HEARTBEAT, HB_BODY)
    cnc.poll(0)
    assert isinstance(queued.exception, Errors.KafkaConnectionError)
    assert cnc.is_unavailable(1)


def test_request_queued_during_a_poll_reconnects_a_node_out_of_backoff(cnc, cluster, clock):
    """Step 5 fails the unsent requests of a node whose connection failed. A request queued
    while a poll waits (by another thread: the heartbeat thread), for a node whose *earlier*
    connection failed and whose reconnect backoff has passed, must get a new connection
    instead (step 7). Before the fix it failed at step 5 of that poll, and again at every
    later poll: after a coordinator outage every heartbeat failed until something else
    reconnected the node."""
    connect(cnc, cluster, 2)
    connect(cnc, cluster, 1)
    cluster.peer(1).close()
    poll_until(cnc, lambda: cnc.connection_failed(1))
    clock.advance(5000)                                  # past any reconnect backoff (max 1 s)
    # The lost broker made the client ask for fresh metadata: node 2 (ready, idle) gets it.
    peer2 = cluster.peer(2)
    poll_until(cnc, lambda: not peer2.no_request_pending())
    api, version, corr, _cid, _body = peer2.read_request()
    assert api == METADATA
    peer2.respond(METADATA, version, corr, metadata_response())
    poll_until(cnc, lambda: not cnc.metadata.update_requested())
    assert cnc.connection_failed(1) and not cnc.is_unavailable(1)
    assert len(cluster.conns[1]) == 1                    # nothing reconnected node 1 meanwhile
    # Queue the request from inside the network poll (step 3), where a send from another
    # thread lands while the poll waits: from a response callback of a request to node 2.
    queued = {}

    def on_response(_response, _error):
        queued["future"] = cnc.send(1, HEARTBEAT, HB_BODY)

    cnc.client.send(ClientRequest(2, HEARTBEAT, HB_BODY, on_response), clock.now_ms())
    answer_heartbeat(peer2)
    poll_until(cnc, lambda: "future" in queued)
    f = queued["future"]
    assert not f.is_done, f"failed by step 5: {f.exception!r}"
    poll_until(cnc, lambda: cnc.client.connection_state(1) is ConnectionState.API_VERSIONS)
    assert len(cluster.conns[1]) == 2                    # a new connection (started by step 7)
    peer1 = cluster.peer(1)
    peer1.answer_api_versions()
    poll_until(cnc, lambda: not peer1.no_request_pending())
    answer_heartbeat(peer1)
    assert cnc.poll(f, 5000) and f.succeeded()


def test_request_for_a_node_whose_connection_fails_in_the_poll_still_fails_fast(cnc, cluster, clock):
    """The other side of the fix above: a node that was being connected for a queued
    request, and whose connection fails in this poll, fails that request at once (step 5),
    even with the backoff over by then; it does not wait for the unsent expiry."""
    f = cnc.send(1, HEARTBEAT, HB_BODY)
    poll_until(cnc, lambda: cnc.client.connection_state(1) is ConnectionState.API_VERSIONS)
    cluster.peer(1).close()
    clock.advance(5000)
    poll_until(cnc, lambda: f.is_done)
    assert isinstance(f.exception, Errors.KafkaConnectionError)


def test_connect_refused_fails_unsent(cnc, cluster):
    cluster.refuse.add(2)
    f = cnc.send(2, HEARTBEAT, HB_BODY)
    cnc.poll(0)
    assert isinstance(f.exception, Errors.KafkaConnectionError)
    assert "refusal" in str(f.exception)


def test_request_to_unknown_node_fails_fast(cnc):
    f = cnc.send(42, HEARTBEAT, HB_BODY)
    cnc.poll(0)
    assert isinstance(f.exception, Errors.KafkaConnectionError) and f.retriable()
    assert "not in the cluster metadata" in str(f.exception)


def test_explicit_disconnect_and_async_disconnect(cnc, cluster):
    connect(cnc, cluster, 1)
    a = cnc.send(1, HEARTBEAT, HB_BODY)
    cnc.disconnect(1)
    assert isinstance(a.exception, Errors.KafkaConnectionError)
    connect(cnc, cluster, 1)
    b = cnc.send(1, HEARTBEAT, HB_BODY)
    cnc.disconnect_async(1)
    cnc.poll(0)
    assert isinstance(b.exception, Errors.KafkaConnectionError)
    assert cnc.client.connection_state(1) is ConnectionState.DISCONNECTED


def test_close_cancels_queued_requests(clock, cluster):
    cnc = make_cnc(clock, cluster)
    f = cnc.send(3, HEARTBEAT, HB_BODY)
    cnc.close()
    assert isinstance(f.exception, Errors.RequestCancelledError)
    with pytest.raises(Errors.IllegalStateError):
        cnc.send(3, HEARTBEAT, HB_BODY)


# ---------------------------------------------------------------------- delayed tasks
def test_delayed_tasks_run_in_deadline_order_and_not_early(cnc, clock):
    ran = []

    class Task:
        def __init__(self, name):
            self.name = name

        def run(self, now):
            ran.append((self.name, now - T0))

    cnc.schedule(Task("c"), T0 + 30)
    cnc.schedule(Task("a"), T0 + 10)
    cnc.schedule(lambda now: ran.append(("b", now - T0)), T0 + 20)
    cnc.poll(0)
    clock.advance(9)
    cnc.poll(0)
    assert ran == []
    clock.advance(11)                                     # now T0 + 20
    cnc.poll(0, execute_delayed_tasks=False)
    assert ran == []
    cnc.poll(0)
    assert ran == [("a", 20), ("b", 20)]
    clock.advance(10)
    cnc.poll(0)
    assert ran == [("a", 20), ("b", 20), ("c", 30)]


def test_rescheduling_and_unscheduling(cnc, clock):
    ran = []

    def task(now):
        ran.append(now - T0)

    cnc.schedule(task, T0 + 10)
    cnc.schedule(task, T0 + 50)                           # moved, not duplicated
    clock.advance(10)
    cnc.poll(0)
    assert ran == []
    clock.advance(40)
    cnc.poll(0)
    assert ran == [50]
    cnc.schedule(task, T0 + 60)
    assert cnc.unschedule(task) is True
    clock.advance(100)
    cnc.poll(0)
    assert ran == [50]


def test_failing_task_does_not_stop_others_and_surfaces(cnc, clock):
    ran = []

    def bad(now):
        raise RuntimeError("task failed")

    cnc.schedule(bad, T0 + 1)
    cnc.schedule(lambda now: ran.append("after"), T0 + 1)
    clock.advance(1)
    with pytest.raises(RuntimeError, match="task failed"):
        cnc.poll(0)
    assert ran == ["after"]


def test_poll_wait_is_capped_by_next_task(cluster):
    cnc = make_cnc(None, cluster)
    try:
        ran = threading.Event()
        cnc.schedule(lambda now: ran.set(), cnc._clock.now_ms() + 50)
        start = time.monotonic()
        deadline = start + 10
        while not ran.is_set() and time.monotonic() < deadline:
            cnc.poll(60_000)
        assert ran.is_set()
        assert time.monotonic() - start < 5              # liveness bound, not a speed claim
    finally:
        cnc.close()


def test_schedule_from_other_thread_wakes_blocked_poll(cluster):
    cnc = make_cnc(None, cluster)
    try:
        ran = threading.Event()
        started = threading.Event()

        def other():
            started.wait(5)
            wait_until_another_thread_polls(cnc)   # the main thread is blocked in its 60 s poll
            cnc.schedule(lambda now: ran.set(), 0)

        t = threading.Thread(target=other)
        t.start()
        started.set()
        start = time.monotonic()
        while not ran.is_set() and time.monotonic() - start < 10:
            cnc.poll(60_000)
        t.join()
        assert ran.is_set() and time.monotonic() - start < 5
    finally:
        cnc.close()


# ---------------------------------------------------------------------- wakeups
def test_wakeup_from_other_thread_ends_long_poll(cluster):
    cnc = make_cnc(None, cluster)
    try:
        connect(cnc, cluster, 1)
        started = threading.Event()

        def waker():
            started.wait(5)
            wait_until_another_thread_polls(cnc)   # the main thread is blocked in its 60 s poll
            cnc.wakeup()

        t = threading.Thread(target=waker)
        t.start()
        started.set()
        start = time.monotonic()
        with pytest.raises(Errors.WakeupError):
            cnc.poll(60_000)
        elapsed = time.monotonic() - start
        t.join()
        assert elapsed < 5                               # liveness: far below the 60 s timeout
        cnc.poll(0)                                      # the wakeup was consumed
    finally:
        cnc.close()


def test_pending_wakeup_raised_by_next_poll(cnc):
    cnc.wakeup()
    with pytest.raises(Errors.WakeupError):
        cnc.poll(60_000)
    cnc.poll(0)


def test_poll_no_wakeup_keeps_wakeup_pending(cnc):
    cnc.wakeup()
    cnc.poll_no_wakeup()
    cnc.poll(0, disable_wakeup=True)
    with pytest.raises(Errors.WakeupError):
        cnc.poll(0)


def test_wakeup_disabled_count_nests(cnc):
    cnc.disable_wakeups()
    cnc.disable_wakeups()
    assert cnc.wakeup_disabled_count == 2
    cnc.wakeup()
    cnc.poll(0)
    cnc.enable_wakeups()
    cnc.poll(0)                                          # still disabled once
    cnc.enable_wakeups()
    with pytest.raises(Errors.WakeupError):
        cnc.poll(0)
    with pytest.raises(Errors.IllegalStateError):
        cnc.enable_wakeups()
    with cnc.wakeups_disabled():
        cnc.wakeup()
        cnc.poll(0)
    with pytest.raises(Errors.WakeupError):
        cnc.poll(0)


# ---------------------------------------------------------------------- threads
def test_send_from_heartbeat_thread_leaves_while_app_thread_blocks(cluster):
    """The heartbeat thread queues a request while the application thread sits in a 60 s
    poll: the request must reach the broker and complete long before that poll would end."""
    cnc = make_cnc(None, cluster)
    try:
        connect(cnc, cluster, 1)
        peer = cluster.peer(1)
        result = {}
        app_started = threading.Event()

        def heartbeat_thread():
            app_started.wait(5)
            wait_until_another_thread_polls(cnc)   # the application thread is in its long poll
            f = cnc.send(1, HEARTBEAT, HB_BODY)
            result["future"] = f

        t = threading.Thread(target=heartbeat_thread)
        t.start()
        app_started.set()
        start = time.monotonic()
        # the peer answers from yet another thread as soon as the request arrives; it flags
        # the answer *before* sending it, so "flagged and nothing pending" means done and
        # anything else means an event (the send's wakeup, the response) is still to come.
        answering = threading.Event()

        def broker():
            api, version, corr, _cid, _body = peer.read_request()
            answering.set()
            peer.respond(api, version, corr, {"error_code": 0})

        b = threading.Thread(target=broker)
        b.start()
        while not (answering.is_set() and cnc.pending_request_count() == 0):
            if time.monotonic() - start > 10:
                break
            cnc.poll(60_000)
        t.join()
        b.join()
        assert answering.is_set()
        assert result["future"].succeeded()
        assert time.monotonic() - start < 5
    finally:
        cnc.close()


def test_heartbeat_thread_poll_waits_for_app_poll_and_both_progress(cluster):
    cnc = make_cnc(None, cluster)
    try:
        connect(cnc, cluster, 1)
        stop = threading.Event()
        errors = []
        hb_polls = []

        def hb_loop():
            try:
                while not stop.is_set():
                    cnc.poll_no_wakeup(10)
                    hb_polls.append(1)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        t = threading.Thread(target=hb_loop)
        t.start()
        try:
            for _ in range(5):
                f = cnc.send(1, HEARTBEAT, HB_BODY)
                answer_heartbeat(cluster.peer(1))
                assert cnc.poll(f, 5000)
                assert f.succeeded()
        finally:
            stop.set()
            t.join(5)
        assert not errors and hb_polls
    finally:
        cnc.close()


def _long_poll_in_thread(cnc):
    """An application thread polling with 60 s timeouts until stopped; returns stop()."""
    stop = threading.Event()
    errors = []

    def app():
        try:
            while not stop.is_set():
                cnc.poll(60_000)
        except BaseException as exc:  # pragma: no cover - reported by stop()
            errors.append(exc)

    t = threading.Thread(target=app)
    t.start()

    def stop_it():
        stop.set()
        cnc.wake_poll()
        t.join(5)
        assert not t.is_alive() and not errors, errors

    return stop_it


def wait_until_another_thread_polls(cnc, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while cnc.try_poll_no_wakeup(0):             # True: nobody else was polling, it polled itself
        assert time.monotonic() < deadline, "the other thread never polled"


def in_thread(fn, timeout_s=5.0):
    """fn() on another thread; its result, asserting it returned within timeout_s (a bound
    that only a call blocked behind another thread's 60 s poll can exceed)."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("result", fn()))
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"{fn} waited for the other thread's poll"
    return out["result"]


def test_try_poll_no_wakeup_polls_unless_another_thread_is_polling(cluster):
    cnc = make_cnc(None, cluster)
    try:
        connect(cnc, cluster, 1)
        f = cnc.send(1, HEARTBEAT, HB_BODY)
        seen = []
        f.add_both(lambda _v: seen.append(cnc._lock._is_owned()))
        assert cnc.try_poll_no_wakeup(0) is True           # nobody else polls: it polls (and sends)
        answer_heartbeat(cluster.peer(1))
        deadline = time.monotonic() + 5
        while not f.is_done and time.monotonic() < deadline:
            assert cnc.try_poll_no_wakeup(50) is True
        assert f.succeeded() and seen == [False]           # listeners ran after the lock was released
        cnc.wakeup()
        assert cnc.try_poll_no_wakeup(0) is True           # a pending wakeup is not raised here...
        with pytest.raises(Errors.WakeupError):
            cnc.poll(0)                                    # ...but kept for the application's poll
        stop = _long_poll_in_thread(cnc)
        try:
            wait_until_another_thread_polls(cnc)
            assert in_thread(lambda: cnc.try_poll_no_wakeup(60_000)) is False
            # what this thread queues meanwhile is sent and answered by the other thread's poll
            done = threading.Event()
            g = cnc.send(1, HEARTBEAT, HB_BODY)
            g.add_both(lambda _v: done.set())
            answer_heartbeat(cluster.peer(1))
            assert done.wait(5) and g.succeeded()
        finally:
            stop()
    finally:
        cnc.close()


def test_connection_queries_do_not_wait_for_another_threads_poll(cluster):
    """least_loaded_node, is_unavailable and try_connect serve the heartbeat thread's
    coordinator lookup while the application thread may sit in a long poll."""
    cnc = make_cnc(None, cluster)
    try:
        connect(cnc, cluster, 1)
        stop = _long_poll_in_thread(cnc)
        try:
            wait_until_another_thread_polls(cnc)
            assert in_thread(cnc.least_loaded_node) == 1   # ready and idle
            assert in_thread(lambda: cnc.is_unavailable(3)) is False
            assert in_thread(lambda: cnc.try_connect(3)) is False
            # the polling thread was woken and started the connection
            deadline = time.monotonic() + 5
            while cnc.client.connection_state(3) is ConnectionState.DISCONNECTED:
                assert time.monotonic() < deadline, "the connection to node 3 was not started"
                time.sleep(0.005)
        finally:
            stop()
        assert 3 in cluster.conns
    finally:
        cnc.close()


# ---------------------------------------------------------------------- waiting helpers
def test_await_metadata_update(cnc, cluster, clock):
    connect(cnc, cluster, 2)
    clock.advance(100)
    done = {}

    def broker():
        peer = cluster.peer(2)
        api, version, corr, _, _ = peer.read_request()
        assert api == METADATA
        peer.respond(METADATA, version, corr, metadata_response(nodes=(1, 2, 3, 4)))
        done["ok"] = True

    b = threading.Thread(target=broker)
    b.start()
    deadline = time.monotonic() + 5
    updated = False
    while not updated and time.monotonic() < deadline:
        updated = cnc.await_metadata_update(100)
    b.join()
    assert updated and done
    assert sorted(n.node_id for n in cnc.metadata.cluster.nodes()) == [1, 2, 3, 4]


def test_await_pending_requests(cnc, cluster):
    connect(cnc, cluster, 1)
    cnc.send(1, HEARTBEAT, HB_BODY)
    cnc.send(1, HEARTBEAT, HB_BODY)
    cnc.poll(0)
    assert cnc.has_pending_requests(1) and cnc.pending_request_count() == 2
    peer = cluster.peer(1)
    answer_heartbeat(peer)
    answer_heartbeat(peer)
    assert cnc.await_pending_requests(1, 5000)
    assert not cnc.has_pending_requests()


def test_least_loaded_node_and_try_connect(cnc, cluster):
    assert cnc.least_loaded_node() in (1, 2, 3)
    connect(cnc, cluster, 3)
    assert cnc.least_loaded_node() == 3
    assert cnc.try_connect(3) is True
