"""Benchmarks: kcore queues and the delayed-task heap vs plain-Python equivalents.

Run:  python bench/bench_queues.py            (pytest-benchmark + an ops/s and ratio table)
  or  python -m pytest bench/bench_queues.py --benchmark-only

Each benchmarked call performs a batch of operations; the table divides by the batch size.
Baselines are what a pure-Python implementation would be: heapq with (deadline, seq, task)
tuples, and small classes over dict + collections.deque.
"""
from __future__ import annotations

import heapq
import itertools
import random
import sys
from collections import deque

import pytest

if __name__ == "__main__":     # run as a script: make the in-place kcore importable
    sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.dirname(
        __import__("os").path.abspath(__file__))))

from kcore.queues import InFlightRequests, UnsentQueue
from kcore.timers import DelayedTaskQueue

N = 1000


class Task:
    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n


TASKS = [Task(i) for i in range(N)]
_rng = random.Random(1)
DEADLINES = [_rng.randrange(0, 5000) for _ in range(N)]
FAR = 10**12


def mark(benchmark, impl, ops):
    benchmark.extra_info["impl"] = impl
    benchmark.extra_info["ops_per_call"] = ops


# ----------------------------------------------------------------- delayed tasks
class HeapqDelayedTasks:
    """Baseline: heapq with a sequence tiebreak (like Python's sched module)."""

    def __init__(self):
        self.heap = []
        self.seq = itertools.count()

    def add(self, task, at_ms):
        heapq.heappush(self.heap, (at_ms, next(self.seq), task))

    def pop_due(self, now_ms):
        heap, out = self.heap, []
        while heap and heap[0][0] <= now_ms:
            out.append(heapq.heappop(heap)[2])
        return out


def _bulk(q):
    add = q.add
    for t, d in zip(TASKS, DEADLINES):
        add(t, d)
    return q.pop_due(FAR)


@pytest.mark.benchmark(group="delayed: add 1000 + pop_due all")
def test_delayed_bulk_kcore(benchmark):
    q = DelayedTaskQueue()
    mark(benchmark, "kcore", 2 * N)
    assert len(benchmark(_bulk, q)) == N


@pytest.mark.benchmark(group="delayed: add 1000 + pop_due all")
def test_delayed_bulk_heapq(benchmark):
    q = HeapqDelayedTasks()
    mark(benchmark, "baseline", 2 * N)
    assert len(benchmark(_bulk, q)) == N


def _steady(q):
    # 1000 far-future tasks stay queued; each step schedules one task now and pops it.
    add, pop_due = q.add, q.pop_due
    t = TASKS[0]
    for now in range(N):
        add(t, now)
        pop_due(now)


@pytest.mark.benchmark(group="delayed: add+pop_due one, 1000 queued")
def test_delayed_steady_kcore(benchmark):
    q = DelayedTaskQueue()
    for i, t in enumerate(TASKS[1:]):
        q.add(t, FAR + i)
    mark(benchmark, "kcore", 2 * N)
    benchmark(_steady, q)
    assert len(q) == N - 1


@pytest.mark.benchmark(group="delayed: add+pop_due one, 1000 queued")
def test_delayed_steady_heapq(benchmark):
    q = HeapqDelayedTasks()
    for i, t in enumerate(TASKS[1:]):
        q.add(t, FAR + i)
    mark(benchmark, "baseline", 2 * N)
    benchmark(_steady, q)
    assert len(q.heap) == N - 1


# ----------------------------------------------------------------- unsent
class DequeUnsent:
    """Baseline: dict of deques of (request, enqueue_ms)."""

    def __init__(self):
        self.nodes = {}

    def put(self, node_id, request, now_ms):
        d = self.nodes.get(node_id)
        if d is None:
            d = self.nodes[node_id] = deque()
        d.append((request, now_ms))

    def drain(self, node_id):
        d = self.nodes.get(node_id)
        if not d:
            return []
        out = [r for r, _ in d]
        d.clear()
        return out

    def remove_expired(self, now_ms, timeout_ms):
        out = []
        for d in self.nodes.values():
            while d and now_ms - d[0][1] > timeout_ms:
                out.append(d.popleft()[0])
        return out


NODE_OF = [i % 4 for i in range(N)]


def _put_drain(q):
    put = q.put
    for i, t in enumerate(TASKS):
        put(NODE_OF[i], t, i)
    return sum(len(q.drain(n)) for n in range(4))


@pytest.mark.benchmark(group="unsent: put 1000 (4 nodes) + drain")
def test_unsent_put_drain_kcore(benchmark):
    mark(benchmark, "kcore", N + 4)
    assert benchmark(_put_drain, UnsentQueue()) == N


@pytest.mark.benchmark(group="unsent: put 1000 (4 nodes) + drain")
def test_unsent_put_drain_deque(benchmark):
    mark(benchmark, "baseline", N + 4)
    assert benchmark(_put_drain, DequeUnsent()) == N


def _expire_none(q):
    for now in range(N):
        q.remove_expired(now, 30_000)


@pytest.mark.benchmark(group="unsent: remove_expired, nothing due (8 nodes x 50)")
def test_unsent_expire_none_kcore(benchmark):
    q = UnsentQueue()
    for i in range(400):
        q.put(i % 8, TASKS[i], 0)
    mark(benchmark, "kcore", N)
    benchmark(_expire_none, q)
    assert len(q) == 400


@pytest.mark.benchmark(group="unsent: remove_expired, nothing due (8 nodes x 50)")
def test_unsent_expire_none_deque(benchmark):
    q = DequeUnsent()
    for i in range(400):
        q.put(i % 8, TASKS[i], 0)
    mark(benchmark, "baseline", N)
    benchmark(_expire_none, q)


# ----------------------------------------------------------------- in flight
class DequeInFlight:
    """Baseline: dict of deques of (correlation id, request, deadline), one shared timeout."""

    def __init__(self, max_per_connection):
        self.max = max_per_connection
        self.nodes = {}

    def add(self, node_id, correlation_id, request, send_ms, timeout_ms):
        d = self.nodes.get(node_id)
        if d is None:
            d = self.nodes[node_id] = deque()
        if len(d) >= self.max:
            raise RuntimeError("too many in flight")
        d.append((correlation_id, request, send_ms + timeout_ms))

    def complete_next(self, node_id, correlation_id):
        d = self.nodes[node_id]
        if d[0][0] != correlation_id:
            raise RuntimeError("mismatch")
        return d.popleft()[1]

    def nodes_with_timed_out_requests(self, now_ms):
        return [n for n, d in self.nodes.items() if d and now_ms > d[0][2]]


def _add_complete(f):
    add, complete = f.add, f.complete_next
    for base in range(0, N, 5):            # five in flight, then their five responses
        for cid in range(base, base + 5):
            add(1, cid, TASKS[cid], cid, 30_000)
        for cid in range(base, base + 5):
            complete(1, cid)


@pytest.mark.benchmark(group="in-flight: add + complete_next (max 5)")
def test_inflight_add_complete_kcore(benchmark):
    mark(benchmark, "kcore", 2 * N)
    benchmark(_add_complete, InFlightRequests(5))


@pytest.mark.benchmark(group="in-flight: add + complete_next (max 5)")
def test_inflight_add_complete_deque(benchmark):
    mark(benchmark, "baseline", 2 * N)
    benchmark(_add_complete, DequeInFlight(5))


def _timed_out(f):
    for now in range(N):
        f.nodes_with_timed_out_requests(now)


def _fill(f):
    for node in range(10):
        for cid in range(5):
            f.add(node, cid, TASKS[cid], 0, 30_000)
    return f


@pytest.mark.benchmark(group="in-flight: nodes_with_timed_out_requests (10 nodes x 5)")
def test_inflight_timed_out_kcore(benchmark):
    mark(benchmark, "kcore", N)
    benchmark(_timed_out, _fill(InFlightRequests(5)))


@pytest.mark.benchmark(group="in-flight: nodes_with_timed_out_requests (10 nodes x 5)")
def test_inflight_timed_out_deque(benchmark):
    mark(benchmark, "baseline", N)
    benchmark(_timed_out, _fill(DequeInFlight(5)))


# ----------------------------------------------------------------- report
def report(json_path):
    import json
    data = json.load(open(json_path))
    groups = {}
    for b in data["benchmarks"]:
        ops = b["extra_info"]["ops_per_call"] / b["stats"]["mean"]
        groups.setdefault(b["group"], {})[b["extra_info"]["impl"]] = (b["name"], ops)
    print(f"\n{'group':58} {'kcore ops/s':>14} {'baseline ops/s':>15} {'ratio':>7}")
    for g, impls in groups.items():
        k, base = impls["kcore"][1], impls["baseline"][1]
        print(f"{g:58} {k:14,.0f} {base:15,.0f} {k / base:6.2f}x")


if __name__ == "__main__":
    import os
    import tempfile
    out = os.path.join(tempfile.mkdtemp(), "bench.json")
    rc = pytest.main([__file__, "--benchmark-only", f"--benchmark-json={out}", "-q",
                      "-p", "no:cacheprovider", *sys.argv[1:]])
    if rc == 0:
        report(out)
    sys.exit(rc)
