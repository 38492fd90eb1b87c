"""kclient.parallel without a broker: the offset tracker, the scheduler's ordering rules,
backpressure decisions, worker retries / on_error, and argument checks.

Threads are synchronised with events and conditions with deadlines, never with sleeps.
"""
from __future__ import annotations

import threading
import time
from collections import namedtuple

import pytest

from kclient import KafkaConsumer, TopicPartition
from kclient import errors as Errors
from kclient.parallel import ParallelConsumer
from kclient.parallel.backpressure import Backpressure
from kclient.parallel.offsets import OffsetTracker
from kclient.parallel.scheduler import Outcome, Scheduler, Task, ordering_key
from kclient.parallel.settings import Settings
from kclient.parallel.workers import WorkerPool

Rec = namedtuple("Rec", "topic partition offset key value")
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
DEADLINE = 30.0


def task(tp, offset, key=None, ordering="key", size=10):
    rec = Rec(tp.topic, tp.partition, offset, key, b"v")
    return Task(rec, tp, ordering_key(ordering, tp, rec), size, None)


# ---------------------------------------------------------------------------- offset tracker
def test_tracker_commits_only_the_contiguous_prefix():
    t = OffsetTracker()
    for o in range(10, 15):
        t.add(o)
    assert t.committable is None
    assert not t.complete(12)           # behind 10 and 11
    assert not t.complete(11)
    assert t.committable is None and t.first_pending == 10
    assert t.complete(10)                # 10, 11, 12 form the prefix now
    assert t.committable == 13
    assert t.uncommittable == 2
    assert t.complete(14) is False and t.committable == 13
    assert t.complete(13) and t.committable == 15 and t.uncommittable == 0


def test_tracker_offsets_with_gaps_commit_the_last_completed_plus_one():
    t = OffsetTracker()
    for o in (3, 7, 8, 20):              # compaction / transaction markers leave gaps
        t.add(o)
    t.complete(7)
    assert t.committable is None
    t.complete(3)
    assert t.committable == 8
    t.complete(20)
    t.complete(8)
    assert t.committable == 21


def test_tracker_refuses_unordered_adds_and_unknown_completions():
    t = OffsetTracker()
    t.add(5)
    with pytest.raises(ValueError, match="must increase"):
        t.add(5)
    with pytest.raises(ValueError, match="not received"):
        t.complete(9)
    t.complete(5)
    with pytest.raises(ValueError, match="not received"):
        t.complete(5)


def test_tracker_lag_counts_offsets_past_the_commit():
    t = OffsetTracker()
    assert t.lag(None) == 0
    for o in range(100, 110):
        t.add(o)
    assert t.lag(None) == 10                 # nothing committed: from the first received
    assert t.lag(104) == 6


# ---------------------------------------------------------------------------- scheduler
def drain_ready(s: Scheduler) -> list[Task]:
    """Every task a worker could take right now (without blocking)."""
    got = []
    while s.snapshot()["queued"] and s._ready:
        got.append(s.take())
    return got


def test_key_ordering_runs_one_record_per_key_in_offset_order():
    s = Scheduler("key")
    s.submit([task(TP0, 0, b"a"), task(TP0, 1, b"b"), task(TP0, 2, b"a"), task(TP0, 3, None),
              task(TP0, 4, None), task(TP0, 5, b"a")])
    first = drain_ready(s)
    assert [t.record.offset for t in first] == [0, 1, 3, 4]     # one "a", one "b", every keyless one
    assert s.snapshot()["queued"] == 2
    a0 = first[0]
    nxt = s.finish(a0, Outcome.DONE)
    assert nxt.record.offset == 2                                 # the same worker continues with "a"
    nxt = s.finish(nxt, Outcome.DONE)
    assert nxt.record.offset == 5
    assert s.finish(nxt, Outcome.DONE) is None
    assert [(t.record.offset, o) for t, o, _ in s.drain()] == [(0, Outcome.DONE), (2, Outcome.DONE),
                                                               (5, Outcome.DONE)]


def test_same_key_in_two_partitions_is_two_keys():
    s = Scheduler("key")
    s.submit([task(TP0, 0, b"a"), task(TP1, 0, b"a")])
    assert len(drain_ready(s)) == 2


def test_partition_ordering_runs_one_record_per_partition():
    s = Scheduler("partition")
    s.submit([task(TP0, o, b"k%d" % o, "partition") for o in range(3)] +
             [task(TP1, o, None, "partition") for o in range(2)])
    running = drain_ready(s)
    assert sorted((t.tp.partition, t.record.offset) for t in running) == [(0, 0), (1, 0)]
    assert s.finish(running[0], Outcome.DONE).record.offset == 1


def test_unordered_runs_everything_at_once():
    s = Scheduler("unordered")
    s.submit([task(TP0, o, b"same", "unordered") for o in range(5)])
    assert len(drain_ready(s)) == 5


def test_drop_forgets_queued_records_of_revoked_partitions_only():
    s = Scheduler("key")
    s.submit([task(TP0, 0, b"a"), task(TP0, 1, b"a"), task(TP0, 2, b"b"), task(TP1, 0, b"a")])
    running = s.take()                                   # TP0 offset 0, key a
    assert running.record.offset == 0
    assert s.drop([TP0]) == 2                            # offsets 1 (waiting on a) and 2
    snap = s.snapshot()
    assert snap["queued"] == 1 and snap["queued_by_tp"] == {TP1: 1} and snap["in_flight"] == 1
    assert s.finish(running, Outcome.DONE) is None       # its chain was emptied
    s.submit([task(TP0, 3, b"a")])                       # a new chain after re-assignment
    assert {t.record.offset for t in drain_ready(s)} == {0, 3}
    assert s.snapshot()["counts"]["dropped"] == 2


def test_halt_drops_the_queue_and_releases_idle_workers():
    s = Scheduler("unordered")
    got = []
    worker = threading.Thread(target=lambda: got.append(s.take()))
    worker.start()
    assert s.halt() == 0
    worker.join(DEADLINE)
    assert not worker.is_alive() and got == [None]
    assert s.submit([task(TP0, 0)]) == 0


def test_wait_idle_and_wait_queued_at_most():
    s = Scheduler("unordered")
    s.submit([task(TP0, o, ordering="unordered") for o in range(4)])
    assert not s.wait_queued_at_most(1, 0)
    t0 = s.take()
    assert not s.wait_idle([TP0], 0)
    assert s.wait_idle([TP1], 0)
    done = threading.Event()

    def work():
        for _ in range(3):
            s.finish(s.take(), Outcome.DONE)
        s.finish(t0, Outcome.DONE)
        done.set()

    threading.Thread(target=work).start()
    assert s.wait_queued_at_most(0, DEADLINE)
    assert s.wait_idle(None, DEADLINE)
    assert done.wait(DEADLINE)
    assert s.snapshot()["counts"]["done"] == 4


def test_bytes_are_counted_while_queued():
    s = Scheduler("unordered")
    s.submit([task(TP0, 0, size=100, ordering="unordered"), task(TP0, 1, size=50, ordering="unordered")])
    assert s.queued_bytes == 150
    s.take()
    assert s.queued_bytes == 50


def test_unhashable_keys_still_order():
    rec = Rec("t", 0, 0, {"id": 1}, b"")
    assert ordering_key("key", TP0, rec) == ordering_key("key", TP0, Rec("t", 0, 1, {"id": 1}, b""))


# ---------------------------------------------------------------------------- backpressure
def test_backpressure_pauses_everything_at_the_bound_and_resumes_below_low_water():
    bp = Backpressure(max_queued_records=100, max_queued_bytes=10_000, max_uncommitted_records=1000,
                      low_water=0.5)
    bp.update(99, 0, {})
    assert bp.paused({TP0, TP1}) == set()
    assert bp.poll_limit(99, 500) == 1
    bp.update(100, 0, {})
    assert bp.paused({TP0, TP1}) == {TP0, TP1}
    bp.update(60, 0, {})
    assert bp.global_paused                          # still above low water
    bp.update(50, 0, {})
    assert not bp.global_paused
    bp.update(0, 10_000, {})                         # bytes alone trip it too
    assert bp.global_paused
    assert bp.poll_limit(0, 500) == 100


def test_backpressure_holds_a_partition_with_too_much_uncommitted():
    bp = Backpressure(100, 10_000, max_uncommitted_records=10, low_water=0.5)
    bp.update(0, 0, {TP0: 10, TP1: 3})
    assert bp.paused({TP0, TP1}) == {TP0}
    bp.update(0, 0, {TP0: 6, TP1: 3})
    assert bp.paused({TP0, TP1}) == {TP0}
    bp.update(0, 0, {TP0: 5, TP1: 3})
    assert bp.paused({TP0, TP1}) == set()


# ---------------------------------------------------------------------------- workers
def run_pool(handler, records, **settings):
    """Run ``records`` through a real WorkerPool; returns {offset: outcome} and errors."""
    s = Scheduler("unordered")
    pool = WorkerPool(s, handler, Settings(max_workers=2, ordering="unordered", **settings))
    pool.start()
    s.submit([task(TP0, o, ordering="unordered") for o in records])
    outcomes, errors = {}, {}
    deadline = time.monotonic() + DEADLINE
    while len(outcomes) < len(records) and time.monotonic() < deadline:
        halted = s.halted          # read first: once idle after a halt, every outcome is in
        idle = s.wait_idle(None, 0.05)
        for t, outcome, error in s.drain():
            outcomes[t.record.offset] = outcome
            errors[t.record.offset] = error
        if idle and halted:        # a fatal failure dropped the rest
            break
    s.halt()
    pool.stop()
    assert pool.join(DEADLINE) == 0
    return outcomes, errors, s.snapshot()["counts"]


def test_retries_with_backoff_then_success():
    attempts = {}

    def handler(rec):
        attempts[rec.offset] = attempts.get(rec.offset, 0) + 1
        if rec.offset == 1 and attempts[rec.offset] <= 2:
            raise ConnectionError("flaky")

    outcomes, _, counts = run_pool(handler, [0, 1, 2], retries=3, retry_backoff_ms=1)
    assert outcomes == {0: Outcome.DONE, 1: Outcome.DONE, 2: Outcome.DONE}
    assert attempts[1] == 3 and counts["retries"] == 2


def test_skip_policy_and_callable_policy():
    def handler(rec):
        if rec.offset in (1, 2, 3):
            raise ValueError(f"bad {rec.offset}")

    outcomes, errors, counts = run_pool(handler, [0, 1, 2], on_error="skip")
    assert outcomes == {0: Outcome.DONE, 1: Outcome.SKIPPED, 2: Outcome.SKIPPED}
    assert isinstance(errors[1], ValueError) and counts["skipped"] == 2

    decide = {1: "skip", 2: "raise", 3: "nonsense"}
    outcomes, errors, _ = run_pool(handler, [0, 1, 2, 3], on_error=lambda rec, exc: decide[rec.offset])
    assert outcomes[0] is Outcome.DONE and outcomes[1] is Outcome.SKIPPED
    # A fatal failure halts dispatch; offset 3 may or may not have started before the halt.
    assert outcomes[2] is Outcome.FAILED and isinstance(errors[2], ValueError)
    if 3 in outcomes:
        assert outcomes[3] is Outcome.FAILED and isinstance(errors[3], TypeError)
        assert "must return 'raise' or 'skip'" in str(errors[3])


def test_a_failing_on_error_callable_is_fatal():
    def policy(rec, exc):
        raise RuntimeError("policy broke")

    outcomes, errors, _ = run_pool(lambda rec: 1 / 0, [0], on_error=policy)
    assert outcomes == {0: Outcome.FAILED}
    assert isinstance(errors[0], RuntimeError) and isinstance(errors[0].__cause__, ZeroDivisionError)


# ---------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("kwargs, match", [
    ({"max_workers": 0}, "max_workers"),
    ({"max_workers": "8"}, "max_workers"),
    ({"ordering": "fifo"}, "ordering"),
    ({"on_error": "ignore"}, "on_error"),
    ({"retries": -1}, "retries"),
    ({"retry_backoff_ms": -5}, "retry_backoff_ms"),
    ({"retry_backoff_ms": 500, "retry_backoff_max_ms": 100}, "retry_backoff_max_ms"),
    ({"max_queued_records": 0}, "max_queued_records"),
    ({"max_queued_bytes": 0}, "max_queued_bytes"),
    ({"max_uncommitted_records": 0}, "max_uncommitted_records"),
    ({"low_water": 1.0}, "low_water"),
    ({"commit_interval_ms": float("nan")}, "commit_interval_ms"),
    ({"poll_timeout_ms": 0}, "poll_timeout_ms"),
    ({"shutdown_timeout_ms": float("inf")}, "shutdown_timeout_ms"),
    ({"revoke_timeout_ms": -1}, "revoke_timeout_ms"),
])
def test_bad_settings_name_the_argument(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        Settings(**kwargs)


def offline_consumer(**cfg) -> KafkaConsumer:
    # api_version given: the constructor does not probe the (absent) cluster.
    settings = {"bootstrap_servers": "127.0.0.1:9", "api_version": (3, 0), "enable_auto_commit": False,
                "group_id": "g"}
    settings.update(cfg)
    return KafkaConsumer(**settings)


def test_auto_commit_consumers_are_refused():
    consumer = offline_consumer(enable_auto_commit=True)
    try:
        with pytest.raises(Errors.IllegalArgumentError, match="enable_auto_commit=False"):
            ParallelConsumer(consumer)
    finally:
        consumer.close()


def test_consumer_without_group_or_wrong_type_is_refused():
    consumer = offline_consumer(group_id=None)
    try:
        with pytest.raises(Errors.IllegalArgumentError, match="group_id"):
            ParallelConsumer(consumer)
    finally:
        consumer.close()
    with pytest.raises(TypeError, match="kclient.KafkaConsumer"):
        ParallelConsumer(object())


def test_bad_listener_handler_and_stop_are_refused():
    consumer = offline_consumer()
    try:
        with pytest.raises(TypeError, match="on_partitions_revoked"):
            ParallelConsumer(consumer, listener=object())
        pc = ParallelConsumer(consumer)
        with pytest.raises(TypeError, match="handler"):
            pc.run("not callable")
        with pytest.raises(TypeError, match="stop"):
            pc.run(print, stop=True)
        with pytest.raises(Errors.IllegalStateError, match="neither subscribed nor assigned"):
            pc.run(print)
        pc.close()
    finally:
        consumer.close()


def test_an_existing_subscription_gets_the_listener():
    consumer = offline_consumer()
    try:
        consumer.subscribe(["a", "b"])
        ParallelConsumer(consumer)
        assert consumer.subscription() == {"a", "b"}
    finally:
        consumer.close()
    consumer = offline_consumer()
    try:
        consumer.subscribe(pattern="orders-.*")
        with pytest.raises(Errors.IllegalStateError, match="pattern"):
            ParallelConsumer(consumer)
    finally:
        consumer.close()
