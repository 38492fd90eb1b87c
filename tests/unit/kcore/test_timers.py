"""kcore.timers.DelayedTaskQueue against a plain heapq model (mechanisms §10 delayed-task queue)."""
from __future__ import annotations

import gc
import heapq
import random
import weakref

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kcore.timers import DelayedTaskQueue

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class Task:
    """A task object; compared by identity like Java's DelayedTask instances."""

    __slots__ = ("name", "__weakref__")

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Task({self.name!r})"


class ModelDelayedTaskQueue:
    """The obvious Python implementation: heapq of (deadline, seq, id) with lazy deletion."""

    def __init__(self):
        self._heap = []
        self._live = {}          # id(task) -> (deadline, seq, task)
        self._seq = 0

    def add(self, task, at_ms):
        self._seq += 1
        self._live[id(task)] = (at_ms, self._seq, task)
        heapq.heappush(self._heap, (at_ms, self._seq, id(task)))

    def remove(self, task):
        return self._live.pop(id(task), None) is not None

    def _clean(self):
        while self._heap:
            _, seq, key = self._heap[0]
            entry = self._live.get(key)
            if entry is not None and entry[1] == seq:
                return
            heapq.heappop(self._heap)

    def next_deadline_ms(self):
        self._clean()
        return self._heap[0][0] if self._heap else None

    def deadline_of(self, task):
        entry = self._live.get(id(task))
        return None if entry is None else entry[0]

    def pop_due(self, now_ms):
        out = []
        while True:
            self._clean()
            if not self._heap or self._heap[0][0] > now_ms:
                return out
            _, _, key = heapq.heappop(self._heap)
            out.append(self._live.pop(key)[2])

    def __len__(self):
        return len(self._live)

    def __contains__(self, task):
        return id(task) in self._live


# Many equal deadlines (small range), plus the extremes of int64.
deadlines = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1, 2**62, 2**62 + 1, -(2**62)]),
    st.integers(INT64_MIN, INT64_MAX),
)


class DelayedTaskQueueMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tasks = [Task(i) for i in range(12)]
        self.real = DelayedTaskQueue()
        self.model = ModelDelayedTaskQueue()

    @rule(i=st.integers(0, 11), at=deadlines)
    def add(self, i, at):
        self.real.add(self.tasks[i], at)
        self.model.add(self.tasks[i], at)

    @rule(i=st.integers(0, 11))
    def remove(self, i):
        assert self.real.remove(self.tasks[i]) == self.model.remove(self.tasks[i])

    @rule(now=deadlines)
    def pop_due(self, now):
        assert self.real.pop_due(now) == self.model.pop_due(now)

    @rule()
    def clear(self):
        self.real.clear()
        self.model = ModelDelayedTaskQueue()

    @invariant()
    def same_state(self):
        assert len(self.real) == len(self.model)
        assert self.real.next_deadline_ms() == self.model.next_deadline_ms()
        for t in self.tasks:
            assert (t in self.real) == (t in self.model)
            assert self.real.deadline_of(t) == self.model.deadline_of(t)


TestDelayedTaskQueueStateful = DelayedTaskQueueMachine.TestCase
TestDelayedTaskQueueStateful.settings = settings(
    max_examples=150, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("seed", range(4))
def test_random_sequences_match_model(seed):
    # Long sequences grow the arrays, recycle slots and reschedule in place.
    rng = random.Random(seed)
    tasks = [Task(i) for i in range(300)]
    real, model = DelayedTaskQueue(), ModelDelayedTaskQueue()
    now = 0
    for _ in range(20_000):
        op = rng.random()
        if op < 0.55:
            t = rng.choice(tasks)
            at = now + rng.randrange(-5, 60) if rng.random() < 0.95 else rng.randrange(INT64_MIN, INT64_MAX)
            real.add(t, at)
            model.add(t, at)
        elif op < 0.75:
            t = rng.choice(tasks)
            assert real.remove(t) == model.remove(t)
        else:
            now += rng.randrange(0, 8)
            assert real.pop_due(now) == model.pop_due(now)
        assert len(real) == len(model)
        assert real.next_deadline_ms() == model.next_deadline_ms()
    assert real.pop_due(INT64_MAX) == model.pop_due(INT64_MAX)
    assert len(real) == 0


def test_equal_deadlines_keep_insertion_order():
    q = DelayedTaskQueue()
    tasks = [Task(i) for i in range(50)]
    for t in tasks:
        q.add(t, 7)
    assert q.pop_due(6) == []
    assert q.pop_due(7) == tasks


def test_reschedule_moves_task_after_equal_deadlines():
    q = DelayedTaskQueue()
    a, b, c = Task("a"), Task("b"), Task("c")
    q.add(a, 5)
    q.add(b, 5)
    q.add(c, 9)
    q.add(a, 5)          # rescheduled: now after b
    assert len(q) == 3
    q.add(c, 1)          # moved earlier
    assert q.next_deadline_ms() == 1
    assert q.deadline_of(c) == 1
    assert q.pop_due(5) == [c, b, a]


def test_empty_queue():
    q = DelayedTaskQueue()
    assert len(q) == 0
    assert q.next_deadline_ms() is None
    assert q.pop_due(INT64_MAX) == []
    assert q.remove(Task("x")) is False
    assert Task("x") not in q
    assert q.deadline_of(Task("x")) is None


def test_remove_absent_and_twice():
    q = DelayedTaskQueue()
    a, b = Task("a"), Task("b")
    q.add(a, 1)
    assert q.remove(b) is False
    assert q.remove(a) is True
    assert q.remove(a) is False
    assert len(q) == 0 and q.next_deadline_ms() is None


def test_extreme_deadlines():
    q = DelayedTaskQueue()
    lo, hi, mid = Task("lo"), Task("hi"), Task("mid")
    q.add(hi, INT64_MAX)
    q.add(lo, INT64_MIN)
    q.add(mid, 2**62)
    assert q.pop_due(INT64_MIN) == [lo]
    assert q.pop_due(2**62 - 1) == []
    assert q.pop_due(2**62) == [mid]
    assert q.pop_due(INT64_MAX) == [hi]


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, 10**30])
def test_out_of_range_deadline_rejected_without_change(bad):
    q = DelayedTaskQueue()
    a = Task("a")
    q.add(a, 3)
    with pytest.raises(OverflowError):
        q.add(Task("b"), bad)
    with pytest.raises(OverflowError):
        q.add(a, bad)        # a reschedule with a bad deadline leaves the old one
    with pytest.raises(OverflowError):
        q.pop_due(bad)
    assert len(q) == 1 and q.deadline_of(a) == 3


@pytest.mark.parametrize("bad", [None, 1.5, "3"])
def test_non_integer_deadline_rejected(bad):
    q = DelayedTaskQueue()
    with pytest.raises(TypeError):
        q.add(Task("a"), bad)
    assert len(q) == 0


def test_identity_semantics_for_unhashable_and_hostile_eq():
    class Hostile:
        __hash__ = None              # unhashable

        def __eq__(self, other):
            raise AssertionError("the queue must not compare tasks")

    q = DelayedTaskQueue()
    h1, h2, lst = Hostile(), Hostile(), [1, 2]
    q.add(h1, 2)
    q.add(h2, 1)
    q.add(lst, 3)
    assert h1 in q and [1, 2] not in q and lst in q
    assert q.remove(h1)
    assert q.pop_due(10) == [h2, lst]


def test_references_are_released():
    q = DelayedTaskQueue()
    tasks = [Task(i) for i in range(100)]
    refs = [weakref.ref(t) for t in tasks]
    for i, t in enumerate(tasks):
        q.add(t, i % 7)
    popped = q.pop_due(3)
    assert q.remove(tasks[6])          # deadline 6: still queued
    del tasks, popped, t
    gc.collect()
    assert sum(r() is not None for r in refs) == len(q)     # only queued tasks stay alive
    q.clear()
    gc.collect()
    assert all(r() is None for r in refs)


def test_cycle_through_queue_is_collected():
    q = DelayedTaskQueue()
    t = Task("cycle")
    t.name = q                      # task -> queue -> task
    q.add(t, 1)
    ref = weakref.ref(t)
    del q, t
    gc.collect()
    assert ref() is None


def test_task_finalizer_reentering_queue_during_clear():
    # remove() and pop_due() never drop the last reference (the caller's argument or the
    # returned list holds one); clear() does, so finalizers may re-enter the queue there.
    q = DelayedTaskQueue()
    seen = []

    class Reenter:
        def __init__(self, n):
            self.n = n

        def __del__(self):
            seen.append(len(q))
            q.add(Task(("from-del", self.n)), self.n)

    for i in range(5):
        q.add(Reenter(i), i)
    q.clear()
    gc.collect()
    assert sorted(seen) == [0, 1, 2, 3, 4]       # each finalizer saw a consistent queue
    assert len(q) == 5
    assert [t.name for t in q.pop_due(INT64_MAX)] == [("from-del", i) for i in range(5)]


def test_huge_count_matches_sort():
    rng = random.Random(7)
    q = DelayedTaskQueue()
    n = 100_000
    tasks = [Task(i) for i in range(n)]
    deadlines_ = [rng.randrange(1000) for _ in range(n)]
    for t, d in zip(tasks, deadlines_):
        q.add(t, d)
    assert len(q) == n
    removed = set(rng.sample(range(n), n // 10))
    for i in removed:
        assert q.remove(tasks[i])
    expected = [tasks[i] for i in sorted((i for i in range(n) if i not in removed),
                                         key=lambda i: (deadlines_[i], i))]
    got = []
    for now in range(0, 1000, 37):
        got.extend(q.pop_due(now))
    got.extend(q.pop_due(INT64_MAX))
    assert got == expected
    assert len(q) == 0


# ----------------------------------------------------------------- the .pyi stub
