"""Task scheduling: which received record a free worker runs next, under the ordering rule.

- ``"key"``: records with the same key (within a partition) run one at a time, in offset
  order; keyless records have no predecessor (as if each had its own key).
- ``"partition"``: one record at a time per partition, in offset order.
- ``"unordered"``: any record may run as soon as a worker is free.

A key with a record running or ready has a *chain*: its later records wait there, and the
worker that finishes one record takes the next of the same key at once (no round trip
through the polling thread). Everything here is guarded by one lock; workers block in
``take()`` on its condition. Completions are collected for the polling thread, which alone
applies them to the offset trackers and commits.
"""
from __future__ import annotations

import collections
import enum
import threading
import time
from collections.abc import Hashable, Iterable
from typing import Any

__all__ = ["ORDERINGS", "Outcome", "Scheduler", "Task"]

ORDERINGS = ("key", "partition", "unordered")


class Outcome(enum.Enum):
    DONE = "done"            # handled: counts towards the commit
    SKIPPED = "skipped"      # failed, skipped by policy: counts towards the commit
    FAILED = "failed"        # failed, the policy says stop: never committed
    ABANDONED = "abandoned"  # given up at shutdown (retry pending): never committed
    RELEASED = "released"    # share groups: failed, given back to the broker for another delivery
    REJECTED = "rejected"    # share groups: failed, never to be delivered again


class Task:
    """One record to handle; ``tracker`` identifies the partition's ownership period (a
    completion for a tracker that was dropped at revocation is ignored)."""

    __slots__ = ("key", "record", "size", "tp", "tracker")

    def __init__(self, record: Any, tp: Any, key: Hashable | None, size: int, tracker: Any):
        self.record = record
        self.tp = tp
        self.key = key
        self.size = size
        self.tracker = tracker


def _hashable(key: Any) -> Hashable:
    try:
        hash(key)
        return key
    except TypeError:  # a deserializer returned e.g. a dict: order by its representation
        return ("unhashable-key", repr(key))


def ordering_key(ordering: str, tp: Any, record: Any) -> Hashable | None:
    """The chain a record belongs to, or None when it may run without waiting for any other."""
    if ordering == "partition":
        return tp
    if ordering == "key":
        key = record.key
        return None if key is None else (tp, _hashable(key))
    return None


class Scheduler:
    """Thread-safe queues of tasks; counts of queued and running tasks per partition."""

    def __init__(self, ordering: str):
        if ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {ORDERINGS}, got {ordering!r}")
        self.ordering = ordering
        self._lock = threading.Lock()
        # Conditions on one lock: idle workers wait for work; the polling thread waits for
        # running tasks to end (revocation, shutdown) or for the queue to drain
        # (backpressure). Each is notified only when someone waits on it, so thousands of
        # completions a second wake neither idle workers nor the polling thread.
        self._work = threading.Condition(self._lock)
        self._changed = threading.Condition(self._lock)
        self._idle_waiters = 0
        self._low_mark = -1
        self._ready: collections.deque[Task] = collections.deque()
        self._chains: dict[Hashable, collections.deque[Task]] = {}
        self._running_keys: set[Hashable] = set()
        self._queued = 0
        self._queued_bytes = 0
        self._queued_by_tp: collections.Counter = collections.Counter()
        self._running_by_tp: collections.Counter = collections.Counter()
        self._running = 0
        self._max_running = 0
        self._completions: list[tuple[Task, Outcome, BaseException | None]] = []
        self._halted = False
        self.counts: collections.Counter[str] = collections.Counter()   # completed / skipped / failed / abandoned / retries / dropped

    # ------------------------------------------------------------------ polling thread
    def submit(self, tasks: Iterable[Task]) -> int:
        """Queue tasks (each partition's in offset order); returns how many were queued."""
        n = 0
        with self._lock:
            if self._halted:
                return 0
            for task in tasks:
                key = task.key
                if key is None:
                    self._ready.append(task)
                elif key in self._chains:
                    self._chains[key].append(task)
                else:
                    self._chains[key] = collections.deque()
                    self._ready.append(task)
                self._queued += 1
                self._queued_bytes += task.size
                self._queued_by_tp[task.tp] += 1
                n += 1
            if n:
                self._work.notify(n)
        return n

    def drop(self, tps: Iterable[Any] | None = None) -> int:
        """Forget the queued (not running) tasks of ``tps`` (all if None); returns how many."""
        with self._lock:
            return self._drop_locked(None if tps is None else set(tps))

    def _drop_locked(self, tps: set | None) -> int:
        def gone(task):
            return tps is None or task.tp in tps
        kept = collections.deque(t for t in self._ready if not gone(t))
        dropped = [t for t in self._ready if gone(t)]
        self._ready = kept
        for key in list(self._chains):
            if tps is not None and self._key_tp(key) not in tps:
                continue
            chain = self._chains[key]
            dropped.extend(chain)
            # A chain lives while its head is ready or running: the ready head was dropped
            # above, a running one keeps the (now empty) chain until it finishes.
            if key in self._running_keys:
                chain.clear()
            else:
                del self._chains[key]
        for task in dropped:
            self._queued -= 1
            self._queued_bytes -= task.size
            self._queued_by_tp[task.tp] -= 1
            if not self._queued_by_tp[task.tp]:
                del self._queued_by_tp[task.tp]
        self.counts["dropped"] += len(dropped)
        return len(dropped)

    def _key_tp(self, key: Any) -> Any:  # key: a partition, or a (partition, record key) tuple
        # "partition" ordering: the key is the partition; "key" ordering: (partition, key).
        return key if self.ordering == "partition" else key[0]

    def halt(self) -> int:
        """Stop dispatching: drop every queued task, wake idle workers so they exit."""
        with self._lock:
            self._halted = True
            n = self._drop_locked(None)
            self._work.notify_all()
            self._changed.notify_all()
            return n

    @property
    def halted(self) -> bool:
        return self._halted

    def drain(self) -> list[tuple[Task, Outcome, BaseException | None]]:
        """Completions since the last drain, oldest first."""
        with self._lock:
            done, self._completions = self._completions, []
            return done

    def wait_idle(self, tps: Iterable[Any] | None, timeout_s: float) -> bool:
        """Wait until no task of ``tps`` (all if None) runs; False if the time ran out."""
        tps = None if tps is None else set(tps)
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._idle_waiters += 1
            try:
                while True:
                    busy = self._running if tps is None else sum(self._running_by_tp[tp] for tp in tps)
                    if not busy:
                        return True
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._changed.wait(left)
            finally:
                self._idle_waiters -= 1

    def wait_queued_at_most(self, n: int, timeout_s: float) -> bool:
        """Wait until at most ``n`` tasks are queued; False if the time ran out."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._low_mark = n
            try:
                while self._queued > n and not self._halted:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._changed.wait(left)
                return True
            finally:
                self._low_mark = -1

    # ------------------------------------------------------------------ workers
    def take(self) -> Task | None:
        """The next ready task (blocking); None once halted."""
        with self._lock:
            while not self._ready:
                if self._halted:
                    return None
                self._work.wait()
            if self._halted:
                return None
            return self._start_locked(self._ready.popleft())

    def _start_locked(self, task: Task) -> Task:
        self._queued -= 1
        self._queued_bytes -= task.size
        tp = task.tp
        self._queued_by_tp[tp] -= 1
        if not self._queued_by_tp[tp]:
            del self._queued_by_tp[tp]
        self._running_by_tp[tp] += 1
        self._running += 1
        if self._queued == self._low_mark:
            self._changed.notify_all()
        self._max_running = max(self._max_running, self._running)
        if task.key is not None:
            self._running_keys.add(task.key)
        return task

    def finish(self, task: Task, outcome: Outcome, error: BaseException | None = None) -> Task | None:
        """Record a task's outcome; returns the next task of the same key for this worker to
        run at once, if there is one (and dispatch is not halted)."""
        with self._lock:
            self._running -= 1
            tp = task.tp
            self._running_by_tp[tp] -= 1
            if not self._running_by_tp[tp]:
                del self._running_by_tp[tp]
            self._completions.append((task, outcome, error))
            self.counts[outcome.value] += 1
            nxt = None
            key = task.key
            if key is not None:
                self._running_keys.discard(key)
                chain = self._chains.get(key)
                if chain:
                    if not self._halted:
                        nxt = self._start_locked(chain.popleft())
                elif chain is not None:
                    del self._chains[key]
            if self._idle_waiters:
                self._changed.notify_all()
            return nxt

    def count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.counts[what] += n

    # ------------------------------------------------------------------ numbers
    def snapshot(self) -> dict:
        with self._lock:
            return {"queued": self._queued, "queued_bytes": self._queued_bytes, "in_flight": self._running,
                    "max_in_flight": self._max_running, "queued_by_tp": dict(self._queued_by_tp),
                    "running_by_tp": dict(self._running_by_tp), "counts": dict(self.counts)}

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    @property
    def running(self) -> int:
        return self._running
