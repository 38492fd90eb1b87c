"""ParallelConsumer: more handler threads than partitions, committing only what is safe (mechanisms §9).

The application thread owns the KafkaConsumer (kclient consumers are single-threaded) and
runs the loop in ``run()``: apply the workers' completions to the per-partition offset
trackers, commit the completed prefixes every ``commit_interval_ms``, pause or resume
fetching for backpressure, and ``poll()`` with a short timeout so the group sees a live
member however slow the handlers are. Workers only run handlers and report back through the
scheduler; they never touch the consumer.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kclient import KafkaConsumer, OffsetAndMetadata
from kclient import errors as Errors
from kclient.parallel.backpressure import Backpressure
from kclient.parallel.metrics import ParallelMetrics, PartitionMetrics
from kclient.parallel.offsets import OffsetTracker
from kclient.parallel.rebalance import RebalanceHook, check_listener
from kclient.parallel.scheduler import Outcome, Scheduler, Task, ordering_key
from kclient.parallel.settings import DEFAULTS, Settings
from kclient.parallel.workers import HandlerError, WorkerPool

__all__ = ["ParallelConsumer"]

log = logging.getLogger(__name__)

_NEW, _RUNNING, _CLOSED = "new", "running", "closed"


def _record_size(record: Any) -> int:
    return max(record.serialized_key_size, 0) + max(record.serialized_value_size, 0)


class ParallelConsumer:
    """Run ``handler(record)`` on up to ``max_workers`` threads for the records of ``consumer``.

    ``consumer`` must have a ``group_id`` and ``enable_auto_commit=False`` (auto-commit would
    commit records still being handled). If it is already subscribed to topics, it is
    re-subscribed to the same topics with ParallelConsumer's rebalance listener (which calls
    ``listener``, the application's own, afterwards); a pattern subscription must be made
    through ``subscribe(pattern=...)`` instead. A consumer given partitions with ``assign()``
    works as is (no rebalances). See docs/parallel.md for every setting.

    Given a ``KafkaShareConsumer`` (explicit acknowledgement mode) instead, it returns a
    ShareParallelConsumer: each handler's outcome acknowledges its record (share_driver).
    """

    # (consumer type, the ParallelConsumer subclass for it): kclient.parallel.share_driver
    # registers the share-group flavour, so this module does not import it back.
    _flavours: list[tuple[type, type]] = []

    def __new__(cls, consumer: Any = None, *args: Any, **kwargs: Any) -> "ParallelConsumer":
        # A share consumer gets the share-group flavour (same calls, per-record acknowledgements).
        if cls is ParallelConsumer:
            for consumer_type, flavour in ParallelConsumer._flavours:
                if isinstance(consumer, consumer_type):
                    return super().__new__(flavour)
        return super().__new__(cls)

    def __init__(self, consumer: KafkaConsumer, max_workers: int = DEFAULTS["max_workers"],
                 ordering: str = DEFAULTS["ordering"], *,
                 on_error: str | Callable[[Any, BaseException], str] = DEFAULTS["on_error"],
                 retries: int = DEFAULTS["retries"], retry_backoff_ms: float = DEFAULTS["retry_backoff_ms"],
                 retry_backoff_max_ms: float = DEFAULTS["retry_backoff_max_ms"],
                 max_queued_records: int = DEFAULTS["max_queued_records"],
                 max_queued_bytes: int = DEFAULTS["max_queued_bytes"],
                 max_uncommitted_records: int = DEFAULTS["max_uncommitted_records"],
                 low_water: float = DEFAULTS["low_water"], commit_interval_ms: float = DEFAULTS["commit_interval_ms"],
                 poll_timeout_ms: int = DEFAULTS["poll_timeout_ms"],
                 shutdown_timeout_ms: float = DEFAULTS["shutdown_timeout_ms"],
                 revoke_timeout_ms: float | None = DEFAULTS["revoke_timeout_ms"],
                 listener=None, thread_name_prefix: str = DEFAULTS["thread_name_prefix"]):
        self._settings = Settings(
            max_workers=max_workers, ordering=ordering, on_error=on_error, retries=retries,
            retry_backoff_ms=retry_backoff_ms, retry_backoff_max_ms=retry_backoff_max_ms,
            max_queued_records=max_queued_records, max_queued_bytes=max_queued_bytes,
            max_uncommitted_records=max_uncommitted_records, low_water=low_water,
            commit_interval_ms=commit_interval_ms, poll_timeout_ms=poll_timeout_ms,
            shutdown_timeout_ms=shutdown_timeout_ms, revoke_timeout_ms=revoke_timeout_ms,
            thread_name_prefix=thread_name_prefix)
        check_listener(listener)
        self._check_consumer(consumer)
        self._consumer = consumer
        config = consumer.config
        self._max_poll_records = config["max.poll.records"]
        # Revocation waits for running records at most this long: the group's rebalance
        # timeout is max.poll.interval.ms, and the rest of the join needs time too.
        s = self._settings
        self._revoke_timeout_s = (s.revoke_timeout_ms if s.revoke_timeout_ms is not None
                                  else config["max.poll.interval.ms"] / 2) / 1000.0
        self._hook = RebalanceHook(self, listener)
        self._scheduler = Scheduler(s.ordering)
        self._backpressure = Backpressure(s.max_queued_records, s.max_queued_bytes, s.max_uncommitted_records,
                                          s.low_water)
        self._pool: WorkerPool | None = None
        # Touched by the polling thread; read by metrics() from any thread under _lock.
        self._lock = threading.Lock()
        self._trackers: dict[Any, OffsetTracker] = {}
        self._sent: dict[Any, int] = {}        # last offset sent in a commit, per partition
        self._committed: dict[Any, int] = {}   # last offset the broker confirmed
        self._paused: set = set()              # partitions this object paused
        self._commits = 0
        self._fatal: tuple[Task, BaseException | None] | None = None
        self._stop_requested = threading.Event()
        self._finished = threading.Event()
        self._state = _NEW
        self._run_thread: int | None = None
        self._install_listener()

    # ------------------------------------------------------------------ setup
    @staticmethod
    def _check_consumer(consumer) -> None:
        if not isinstance(consumer, KafkaConsumer):
            raise TypeError(f"consumer must be a kclient.KafkaConsumer, got {type(consumer).__name__}")
        if consumer.config["group.id"] is None:
            raise Errors.IllegalArgumentError(
                "consumer: ParallelConsumer commits offsets to a group, so the KafkaConsumer needs a group_id")
        if consumer.config["enable.auto.commit"]:
            raise Errors.IllegalArgumentError(
                "consumer: enable_auto_commit=True would commit offsets of records still being handled "
                "(or failed); create the KafkaConsumer with enable_auto_commit=False and let "
                "ParallelConsumer commit")

    def _install_listener(self) -> None:
        topics = self._consumer.subscription()
        if topics is None:   # not subscribed yet, or assign()ed partitions (no rebalances)
            return
        try:
            if not topics:
                raise Errors.IllegalStateError("subscribed to a pattern")
            # Same topics, so no rebalance is triggered: only the listener changes.
            self._consumer.subscribe(sorted(topics), listener=self._hook)
        except Errors.IllegalStateError as exc:
            raise Errors.IllegalStateError(
                "the consumer is subscribed with a pattern, which ParallelConsumer cannot read back to "
                "add its rebalance listener: create the KafkaConsumer without a subscription and call "
                "ParallelConsumer.subscribe(pattern=...)") from exc

    def subscribe(self, topics=(), pattern=None, listener=None) -> None:
        """Subscribe the consumer (topics or a pattern) with ParallelConsumer's rebalance
        listener; ``listener`` (or the one given at construction) is called after it."""
        if self._state != _NEW:
            raise Errors.IllegalStateError("subscribe() must be called before run()")
        if listener is not None:
            check_listener(listener)
            self._hook.user_listener = listener
        self._consumer.subscribe(topics, pattern=pattern, listener=self._hook)

    # ------------------------------------------------------------------ the loop
    def run(self, handler: Callable[[Any], Any], stop: threading.Event | None = None) -> None:
        """Handle records until ``stop`` is set, ``stop()``/``close()`` is called, or Ctrl-C
        (KeyboardInterrupt ends the run normally); then stop taking records, wait up to
        ``shutdown_timeout_ms`` for running handlers, commit, and return. Raises HandlerError
        after a handler failure under ``on_error="raise"`` (having committed what completed)."""
        self._start_running(handler, stop)
        self._pool = WorkerPool(self._scheduler, handler, self._settings)
        self._pool.start()
        log.info("parallel consumer running: %d workers, ordering=%s", self._settings.max_workers,
                 self._settings.ordering)

        def loop() -> None:
            next_commit = time.monotonic() + self._settings.commit_interval_ms / 1000.0
            while not self._stopping(stop):
                self._apply_completions()
                if self._fatal is not None:
                    break
                now = time.monotonic()
                if now >= next_commit:
                    self._commit(sync=False)
                    next_commit = now + self._settings.commit_interval_ms / 1000.0
                self._poll_once()

        self._run_then_shut_down(loop, "parallel consumer", "committing the completed records")

    # ------------------------------------------------------------------ the run's frame (both flavours)
    def _start_running(self, handler: Any, stop: Any) -> None:
        """Check run()'s arguments, then go from new to running once."""
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {handler!r}")
        if stop is not None and not callable(getattr(stop, "is_set", None)):
            raise TypeError(f"stop must be a threading.Event (or have is_set()), got {stop!r}")
        with self._lock:
            if self._state != _NEW:
                raise Errors.IllegalStateError(f"a ParallelConsumer runs once (this one is {self._state})")
            self._check_subscribed()
            self._state = _RUNNING
            self._run_thread = threading.get_ident()

    def _stopping(self, stop: threading.Event | None) -> bool:
        return (self._stop_requested.is_set() or (stop is not None and stop.is_set())
                or self._fatal is not None or self._scheduler.halted)

    def _run_then_shut_down(self, loop: Callable[[], None], name: str, after_failure: str) -> None:
        """Run loop, then shut down: Ctrl-C ends the run normally, any other exception after the
        shutdown; a handler failure that on_error answered with "raise" raises HandlerError."""
        try:
            loop()
        except KeyboardInterrupt:
            log.info("interrupted: stopping the %s", name)
        except BaseException:
            self._shutdown()
            raise
        self._shutdown()
        if self._fatal is not None:
            task, error = self._fatal
            r = task.record
            raise HandlerError(f"handler failed on {r.topic}-{r.partition} offset {r.offset} "
                               f"({type(error).__name__}); stopped after {after_failure}",
                               r.topic, r.partition, r.offset) from error

    def _shut_down_finally(self, name: str) -> None:
        """The end of every shutdown, whatever failed before it."""
        with self._lock:
            self._state = _CLOSED
        self._finished.set()
        assert self._pool is not None
        self._pool.join(0.5 if self._scheduler.running == 0 else 0)
        log.info("%s stopped", name)

    def _check_subscribed(self) -> None:
        """Raise if the consumer has nothing to read yet (each flavour asks its own consumer)."""
        if self._consumer.subscription() is None and not self._consumer.assignment():
            raise Errors.IllegalStateError(
                "the consumer is neither subscribed nor assigned any partitions: subscribe it "
                "(or call ParallelConsumer.subscribe) before run()")

    def _poll_once(self) -> None:
        self._apply_backpressure()
        scheduler = self._scheduler
        timeout = self._settings.poll_timeout_ms
        if self._backpressure.global_paused:
            # Nothing can be fetched: keep the membership serviced with a non-blocking poll
            # and wait for the workers to drain the queue, so fetching resumes without delay.
            self._submit(self._consumer.poll(timeout_ms=0, max_records=1))
            low = int(self._settings.max_queued_records * self._settings.low_water)
            scheduler.wait_queued_at_most(low, timeout / 1000.0)
            return
        limit = self._backpressure.poll_limit(scheduler.queued, self._max_poll_records)
        self._submit(self._consumer.poll(timeout_ms=timeout, max_records=limit))

    def _submit(self, records: dict) -> None:
        if not records:
            return
        ordering = self._settings.ordering
        tasks = []
        with self._lock:
            for tp, recs in records.items():
                tracker = self._trackers.get(tp)
                if tracker is None:
                    tracker = self._trackers[tp] = OffsetTracker()
                for r in recs:
                    end = tracker.received_end
                    if end is not None and r.offset < end:
                        # Only a seek behind our back can do this; tracking it twice would
                        # corrupt the committed prefix.
                        log.warning("%s: offset %d received again (after %d): ignored", tp, r.offset, end - 1)
                        continue
                    tracker.add(r.offset)
                    tasks.append(Task(r, tp, ordering_key(ordering, tp, r), _record_size(r), tracker))
        self._scheduler.submit(tasks)

    def _apply_completions(self) -> None:
        done = self._scheduler.drain()
        if not done:
            return
        with self._lock:
            trackers = self._trackers
            for task, outcome, error in done:
                if outcome is Outcome.DONE or outcome is Outcome.SKIPPED:
                    # A tracker replaced or dropped since (revocation): its records belong to
                    # another owner now, the completion no longer counts.
                    tracker = trackers.get(task.tp)
                    if tracker is not None and tracker is task.tracker:
                        tracker.complete(task.record.offset)
                elif outcome is Outcome.FAILED and self._fatal is None:
                    self._fatal = (task, error)

    def _apply_backpressure(self) -> None:
        scheduler = self._scheduler
        bp = self._backpressure
        with self._lock:
            uncommitted = {tp: t.uncommittable for tp, t in self._trackers.items()}
        bp.update(scheduler.queued, scheduler.queued_bytes, uncommitted)
        assigned = self._consumer.assignment()
        want = assigned if scheduler.halted else bp.paused(assigned)
        self._set_paused(want, assigned)

    def _set_paused(self, want: set, assigned: set) -> None:
        current = self._paused & assigned
        pause, resume = want - current, current - want
        if pause:
            self._consumer.pause(*pause)
            log.debug("paused %s", sorted(pause))
        if resume:
            self._consumer.resume(*resume)
            log.debug("resumed %s", sorted(resume))
        with self._lock:
            self._paused = set(want)

    # ------------------------------------------------------------------ commits
    def _commit(self, sync: bool, only: set | None = None) -> None:
        """Commit every partition's completed prefix that moved since the last commit."""
        offsets = {}
        with self._lock:
            for tp, tracker in self._trackers.items():
                end = tracker.committable
                if end is not None and end != self._sent.get(tp) and (only is None or tp in only):
                    offsets[tp] = OffsetAndMetadata(end, "", -1)
        if not offsets:
            return
        try:
            if sync:
                self._consumer.commit(offsets)
                self._committed_ok(offsets, None)
            else:
                self._consumer.commit_async(offsets, callback=self._committed_ok)
        except Errors.KafkaError as exc:
            # Not fatal: the records stay uncommitted and are redelivered (at least once).
            log.warning("commit of %s failed: %s", {str(tp): om.offset for tp, om in offsets.items()}, exc)
            return
        with self._lock:
            self._commits += 1
            for tp, om in offsets.items():
                self._sent[tp] = om.offset

    def _committed_ok(self, offsets, error) -> None:
        with self._lock:
            for tp, om in offsets.items():
                if error is None:
                    if tp in self._trackers and om.offset > self._committed.get(tp, -1):
                        self._committed[tp] = om.offset
                elif self._sent.get(tp) == om.offset:
                    del self._sent[tp]    # resend at the next interval
        if error is not None:
            log.warning("asynchronous commit failed (retried at the next interval): %s", error)

    # ------------------------------------------------------------------ rebalances
    def _on_revoked(self, tps: set) -> None:
        if self._state != _RUNNING:
            self._forget(tps)
            return
        dropped = self._scheduler.drop(tps)
        if not self._scheduler.wait_idle(tps, self._revoke_timeout_s):
            log.warning("records of %s still running %.1f s after revocation: not committed, the new owner "
                        "gets them again", sorted(map(str, tps)), self._revoke_timeout_s)
        self._apply_completions()
        self._commit(sync=True, only=tps)
        self._forget(tps)
        log.info("revoked %s: %d queued records dropped (redelivered to the new owner)",
                 sorted(map(str, tps)), dropped)

    def _on_lost(self, tps: set) -> None:
        # Someone else owns them already: committing would be refused; just stop their work.
        self._scheduler.drop(tps)
        self._forget(tps)
        log.warning("lost %s: their uncommitted records will be handled again by their new owner",
                    sorted(map(str, tps)))

    def _on_assigned(self, tps: set) -> None:
        if self._state == _RUNNING and (self._backpressure.global_paused or self._scheduler.halted):
            # The queue is full (or we are stopping): new partitions start paused too.
            self._consumer.pause(*tps)
            with self._lock:
                self._paused |= tps

    def _forget(self, tps: set) -> None:
        with self._lock:
            for tp in tps:
                self._trackers.pop(tp, None)
                self._sent.pop(tp, None)
                self._committed.pop(tp, None)
            self._paused -= tps
        self._backpressure.forget(tps)

    # ------------------------------------------------------------------ stopping
    def stop(self) -> None:
        """Ask ``run()`` to finish (any thread); it returns after its shutdown."""
        self._stop_requested.set()

    def _shutdown(self) -> None:
        settings = self._settings
        scheduler = self._scheduler
        pool = self._pool
        assert pool is not None  # run() starts the pool before anything that leads here
        try:
            dropped = scheduler.halt()
            pool.stop()
            log.info("stopping: %d queued records dropped, %d handlers running", dropped, scheduler.running)
            deadline = time.monotonic() + settings.shutdown_timeout_ms / 1000.0
            can_poll = True
            while not scheduler.wait_idle(None, 0):
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("%d handlers still running after shutdown_timeout_ms=%d: their records are "
                                "not committed (handled again later)", scheduler.running,
                                settings.shutdown_timeout_ms)
                    break
                if can_poll:
                    can_poll = self._poll_paused(min(settings.poll_timeout_ms / 1000.0, left))
                else:
                    scheduler.wait_idle(None, min(0.1, left))
            self._apply_completions()
            try:
                self._commit(sync=True)
            except Errors.IllegalStateError as exc:   # the consumer was closed under us
                log.warning("final commit impossible: %s", exc)
            self._resume_ours()
        finally:
            self._shut_down_finally("parallel consumer")

    def _poll_paused(self, timeout_s: float) -> bool:
        """While handlers finish: poll with every partition paused, so the group keeps this
        member (max.poll.interval.ms) and a rebalance is served. False if polling failed."""
        try:
            self._apply_backpressure()    # halted: pauses everything assigned
            records = self._consumer.poll(timeout_ms=max(int(timeout_s * 1000), 1))
            for tp, recs in records.items():
                # Not going to be handled: put the position back for whoever reads next.
                self._consumer.seek(tp, recs[0].offset)
            return True
        except Exception as exc:   # e.g. the poll that raised is why we stop
            log.debug("no more polling while stopping: %r", exc)
            return False

    def _resume_ours(self) -> None:
        try:
            assigned = self._consumer.assignment()
            mine = self._paused & assigned
            if mine:
                self._consumer.resume(*mine)
        except Exception as exc:
            log.debug("resuming paused partitions failed: %r", exc)
        with self._lock:
            self._paused = set()

    def close(self) -> None:
        """Finish: from the running thread's side as ``run()`` does on its way out; from another
        thread, ask ``run()`` to stop and wait for it. The consumer stays open (it is yours)."""
        with self._lock:
            state = self._state
            if state == _NEW:
                self._state = _CLOSED
                return
        if state == _RUNNING and self._run_thread != threading.get_ident():
            self._stop_requested.set()
            self._finished.wait(self._settings.shutdown_timeout_ms / 1000.0 + 10)
        elif state == _RUNNING:
            self._stop_requested.set()   # called from a listener inside run(): run finishes

    def __enter__(self) -> ParallelConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ numbers
    def metrics(self) -> ParallelMetrics:
        """A snapshot (any thread): counts, and per partition in-flight, queued, commit lag."""
        snap = self._scheduler.snapshot()
        counts = snap["counts"]
        running, queued = snap["running_by_tp"], snap["queued_by_tp"]
        parts = {}
        with self._lock:
            for tp in set(self._trackers) | set(running) | set(queued):
                tracker = self._trackers.get(tp)
                committed = self._committed.get(tp)
                parts[tp] = PartitionMetrics(
                    in_flight=running.get(tp, 0), queued=queued.get(tp, 0), committed=committed,
                    committable=tracker.committable if tracker else None,
                    received=tracker.received_end if tracker else None,
                    commit_lag=tracker.lag(committed) if tracker else 0, paused=tp in self._paused)
            commits = self._commits
        return ParallelMetrics(
            in_flight=snap["in_flight"], queued=snap["queued"], queued_bytes=snap["queued_bytes"],
            completed=counts.get("done", 0), failed=counts.get("skipped", 0) + counts.get("failed", 0),
            skipped=counts.get("skipped", 0), retries=counts.get("retries", 0), dropped=counts.get("dropped", 0),
            max_in_flight=snap["max_in_flight"], commits=commits, paused=self._backpressure.global_paused,
            partitions=parts)
