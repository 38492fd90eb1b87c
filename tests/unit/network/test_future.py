"""RequestFuture (mechanisms §10): completion rules, listeners, compose/chain, cross-thread waits."""
from __future__ import annotations

import logging
import threading

import pytest

from kclient.errors import (
    CoordinatorNotAvailableError,
    IllegalArgumentError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoBrokersAvailable,
    NotCoordinatorError,
    UnknownMemberIdError,
)
from kclient.network.future import RequestFuture, RequestFutureAdapter


class Recorder:
    def __init__(self):
        self.events = []

    def on_success(self, value):
        self.events.append(("ok", value))

    def on_failure(self, exc):
        self.events.append(("err", exc))


def test_pending_state():
    f = RequestFuture()
    assert not f.is_done and not f.succeeded() and not f.failed() and not f.retriable()
    with pytest.raises(IllegalStateError):
        f.value
    with pytest.raises(IllegalStateError):
        f.exception


def test_complete_sets_value_not_exception():
    f = RequestFuture()
    assert f.complete(42) is f
    assert f.is_done and f.succeeded() and not f.failed()
    assert f.value == 42
    with pytest.raises(IllegalStateError):
        f.exception
    assert not f.retriable()


def test_raise_sets_exception_not_value():
    f = RequestFuture()
    err = NotCoordinatorError("moved")
    f.raise_(err)
    assert f.is_done and f.failed() and not f.succeeded()
    assert f.exception is err
    with pytest.raises(IllegalStateError):
        f.value
    assert f.retriable()  # NOT_COORDINATOR is retriable


def test_raise_accepts_class_and_non_retriable():
    f = RequestFuture().raise_(UnknownMemberIdError)
    assert isinstance(f.exception, UnknownMemberIdError)
    assert not f.retriable()
    assert RequestFuture().raise_(ValueError("x")).retriable() is False


@pytest.mark.parametrize("second", ["complete", "raise"])
@pytest.mark.parametrize("first", ["complete", "raise"])
def test_completing_twice_raises(first, second):
    f = RequestFuture()
    getattr(f, "complete" if first == "complete" else "raise_")(
        1 if first == "complete" else KafkaTimeoutError())
    with pytest.raises(IllegalStateError):
        getattr(f, "complete" if second == "complete" else "raise_")(
            2 if second == "complete" else KafkaTimeoutError())
    # the first outcome stands
    assert f.succeeded() == (first == "complete")


def test_complete_rejects_exception_and_raise_rejects_value():
    with pytest.raises(IllegalArgumentError):
        RequestFuture().complete(KafkaTimeoutError())
    with pytest.raises(IllegalArgumentError):
        RequestFuture().raise_(5)


def test_listeners_run_in_order_once():
    f = RequestFuture()
    rec = Recorder()
    seen = []
    f.add_listener(rec)
    f.on_success(lambda v: seen.append(("s1", v)))
    f.on_failure(lambda e: seen.append(("f1", e)))
    f.on_success(lambda tag, v: seen.append((tag, v)), "s2")
    f.add_both(lambda v: seen.append(("both", v)))
    assert rec.events == [] and seen == []
    f.complete("v")
    assert rec.events == [("ok", "v")]
    assert seen == [("s1", "v"), ("s2", "v"), ("both", "v")]


def test_failure_listeners():
    f = RequestFuture()
    seen = []
    f.on_success(lambda v: seen.append(("s", v)))
    f.on_failure(lambda e: seen.append(("f", e)))
    f.add_both(lambda e: seen.append(("b", e)))
    err = KafkaConnectionError("gone")
    f.raise_(err)
    assert seen == [("f", err), ("b", err)]


def test_listener_added_after_completion_runs_at_once():
    f = RequestFuture.completed(7)
    seen = []
    f.on_success(seen.append)
    assert seen == [7]
    g = RequestFuture.failure(KafkaTimeoutError("late"))
    rec = Recorder()
    g.add_listener(rec)
    assert rec.events[0][0] == "err" and isinstance(rec.events[0][1], KafkaTimeoutError)
    g.on_success(seen.append)  # wrong kind: not called
    assert seen == [7]


def test_failing_listener_does_not_stop_others(caplog):
    f = RequestFuture()
    seen = []

    def bad(_):
        raise RuntimeError("listener bug")

    f.on_success(bad)
    f.on_success(seen.append)
    with caplog.at_level(logging.ERROR, logger="kclient.network.future"):
        f.complete(1)
    assert seen == [1]
    assert any("listener" in r.getMessage() for r in caplog.records)


class Double(RequestFutureAdapter):
    def on_success(self, value, future):
        future.complete(value * 2)


class Wrap(RequestFutureAdapter):
    def on_success(self, value, future):
        future.complete(value)

    def on_failure(self, exc, future):
        future.raise_(CoordinatorNotAvailableError(f"wrapped: {exc}"))


def test_compose_success_and_failure_default_forward():
    f = RequestFuture()
    g = f.compose(Double())
    assert not g.is_done
    f.complete(21)
    assert g.value == 42

    f2 = RequestFuture()
    g2 = f2.compose(Double())
    err = NotCoordinatorError()
    f2.raise_(err)
    assert g2.exception is err


def test_compose_custom_failure_mapping_and_completed_source():
    f = RequestFuture.failure(KafkaConnectionError("x"))
    g = f.compose(Wrap())  # composed after completion: adapted at once
    assert isinstance(g.exception, CoordinatorNotAvailableError)
    assert g.retriable()


def test_compose_adapter_raising_fails_composed_future():
    class Broken(RequestFutureAdapter):
        def on_success(self, value, future):
            raise KeyError("missing field")

    g = RequestFuture.completed({}).compose(Broken())
    assert isinstance(g.exception, KeyError)


def test_chain_forwards_success_and_failure():
    a, b = RequestFuture(), RequestFuture()
    assert a.chain(b) is b
    a.complete("x")
    assert b.value == "x"
    c, d = RequestFuture(), RequestFuture()
    c.chain(d)
    err = KafkaTimeoutError()
    c.raise_(err)
    assert d.exception is err


def test_compose_then_chain_pipeline():
    src = RequestFuture()
    out = RequestFuture()
    src.compose(Double()).compose(Double()).chain(out)
    src.complete(1)
    assert out.value == 4


def test_factories():
    assert RequestFuture.void_success().value is None
    assert isinstance(RequestFuture.coordinator_not_available().exception, CoordinatorNotAvailableError)
    assert isinstance(RequestFuture.no_brokers_available().exception, NoBrokersAvailable)
    assert "pending" in repr(RequestFuture())


def test_wait_and_get_timeout():
    f = RequestFuture()
    assert f.wait(0.01) is False
    with pytest.raises(KafkaTimeoutError):
        f.get(0.01)
    f.raise_(NotCoordinatorError())
    with pytest.raises(NotCoordinatorError):
        f.get(0)


def test_completion_from_other_thread_wakes_waiter():
    f = RequestFuture()
    started = threading.Event()
    result = {}

    def waiter():
        started.set()
        result["done"] = f.wait(30)
        result["value"] = f.value

    t = threading.Thread(target=waiter)
    t.start()
    assert started.wait(10)
    f.complete("from-network-thread")
    t.join(10)
    assert not t.is_alive()
    assert result == {"done": True, "value": "from-network-thread"}


def test_concurrent_completion_exactly_one_wins_and_listeners_fire_once():
    for _ in range(50):
        f = RequestFuture()
        fired = []
        f.add_both(fired.append)
        barrier = threading.Barrier(4)
        outcomes = []

        def racer(i):
            barrier.wait()
            try:
                f.complete(i)
                outcomes.append(i)
            except IllegalStateError:
                pass

        threads = [threading.Thread(target=racer, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(outcomes) == 1
        assert fired == outcomes == [f.value]


def test_listener_added_concurrently_with_completion_runs_once():
    for _ in range(50):
        f = RequestFuture()
        fired = []
        barrier = threading.Barrier(2)

        def adder():
            barrier.wait()
            for _ in range(20):
                f.on_success(fired.append)

        t = threading.Thread(target=adder)
        t.start()
        barrier.wait()
        f.complete(1)
        t.join()
        assert fired == [1] * 20
