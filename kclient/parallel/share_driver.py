"""ParallelConsumer on a share group: ``ParallelConsumer(share_consumer, ...)`` with a
``KafkaShareConsumer`` in explicit acknowledgement mode returns this.

The broker already hands each record to one member at a time and takes it back record by
record, so there are no offsets to track, no rebalances to serve and no order to keep: every
record of a poll goes to the workers at once; a handler that returns ACCEPTs its record, one
that fails RELEASEs it (delivered again, to any member, with its delivery count one higher;
the broker archives it after ``share.delivery.count.limit`` deliveries) or REJECTs it, as
``on_error`` decides. Workers never touch the share consumer: their outcomes go through the
scheduler to the thread in ``run()``, which acknowledges them and sends the acknowledgements
every ``commit_interval_ms`` and when a poll's records are all done (the share consumer
refuses a poll while records of the previous one are unacknowledged, so a poll's records
finish before the next poll).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kclient import errors as Errors
from kclient.parallel.driver import _NEW, ParallelConsumer
from kclient.parallel.metrics import ShareParallelMetrics
from kclient.parallel.scheduler import Outcome, Scheduler, Task
from kclient.parallel.settings import DEFAULTS, Settings
from kclient.parallel.workers import WorkerPool
from kclient.share.acknowledgements import AcknowledgeType
from kclient.share.consumer import KafkaShareConsumer

__all__ = ["ShareParallelConsumer", "SHARE_POLICIES"]

log = logging.getLogger(__name__)

#: What ``on_error`` may answer besides "raise", and the outcome each gives: share groups.
SHARE_POLICIES = {"release": Outcome.RELEASED, "reject": Outcome.REJECTED}
_ACK = {Outcome.DONE: AcknowledgeType.ACCEPT, Outcome.RELEASED: AcknowledgeType.RELEASE,
        Outcome.REJECTED: AcknowledgeType.REJECT}
#: How long the loop waits for completions before looking at stop requests and the send interval.
_WAIT_S = 0.05


def _check_on_error(value: Any) -> Any:
    if not callable(value) and value not in ("raise", *SHARE_POLICIES):
        raise Errors.ConfigurationError(
            "setting 'on_error' must be 'release', 'reject', 'raise' or a callable(record, exception) "
            f"returning one of them, got {value!r}")
    return value


class ShareParallelConsumer(ParallelConsumer):
    """``ParallelConsumer`` for a ``KafkaShareConsumer`` (see the module's text). Settings:
    ``max_workers``, ``on_error`` ("release", the default, "reject", "raise" or
    ``callable(record, exception)`` returning one), ``retries`` / ``retry_backoff_ms`` /
    ``retry_backoff_max_ms`` (attempts on the worker before on_error), ``commit_interval_ms``
    (how often acknowledgements are sent while a poll's records run), ``poll_timeout_ms``,
    ``shutdown_timeout_ms``, ``thread_name_prefix``. ``ordering`` may only be "unordered"."""

    def __init__(self, consumer: KafkaShareConsumer, max_workers: int = DEFAULTS["max_workers"],
                 ordering: str = "unordered", *,
                 on_error: str | Callable[[Any, BaseException], str] = "release",
                 retries: int = DEFAULTS["retries"], retry_backoff_ms: float = DEFAULTS["retry_backoff_ms"],
                 retry_backoff_max_ms: float = DEFAULTS["retry_backoff_max_ms"],
                 commit_interval_ms: float = DEFAULTS["commit_interval_ms"],
                 poll_timeout_ms: int = DEFAULTS["poll_timeout_ms"],
                 shutdown_timeout_ms: float = DEFAULTS["shutdown_timeout_ms"],
                 thread_name_prefix: str = DEFAULTS["thread_name_prefix"], **not_for_share_groups: Any):
        if not_for_share_groups:
            raise TypeError(
                f"{', '.join(sorted(not_for_share_groups))}: not a setting of ParallelConsumer on a share group "
                "(the broker bounds what a member holds and there are no offsets or rebalances)")
        if ordering != "unordered":
            raise Errors.ConfigurationError(
                f"ordering={ordering!r}: a share group keeps no order (any member may get any record), so "
                "ParallelConsumer on a share group runs records unordered; use a consumer group "
                "(KafkaConsumer) for key or partition order")
        self._on_error = _check_on_error(on_error)
        self._settings = Settings(
            max_workers=max_workers, ordering="unordered", on_error="raise", retries=retries,
            retry_backoff_ms=retry_backoff_ms, retry_backoff_max_ms=retry_backoff_max_ms,
            commit_interval_ms=commit_interval_ms, poll_timeout_ms=poll_timeout_ms,
            shutdown_timeout_ms=shutdown_timeout_ms, thread_name_prefix=thread_name_prefix)
        if not isinstance(consumer, KafkaShareConsumer):
            raise TypeError(f"consumer must be a kclient.KafkaShareConsumer, got {type(consumer).__name__}")
        if not consumer.config.explicit_acknowledgement:
            raise Errors.IllegalArgumentError(
                "consumer: ParallelConsumer acknowledges each record by its handler's outcome, so the "
                "KafkaShareConsumer needs share_acknowledgement_mode='explicit' (in implicit mode the next "
                "poll would accept records still being handled)")
        self._share = consumer
        self._scheduler = Scheduler("unordered")
        self._pool: WorkerPool | None = None
        self._lock = threading.Lock()
        self._outstanding: dict[tuple[Any, int], Any] = {}   # (tp, offset) -> record not acknowledged yet
        self._counts = {"accepted": 0, "released": 0, "rejected": 0, "acknowledgement_failures": 0, "batches": 0}
        self._fatal: tuple[Task, BaseException | None] | None = None
        self._stop_requested = threading.Event()
        self._finished = threading.Event()
        self._state = _NEW
        self._run_thread: int | None = None
        consumer.set_acknowledgement_commit_callback(self._acknowledged)

    def subscribe(self, topics=(), pattern=None, listener=None) -> None:
        """Subscribe the share consumer to ``topics`` (share groups have no patterns or
        rebalance listeners)."""
        if self._state != _NEW:
            raise Errors.IllegalStateError("subscribe() must be called before run()")
        if pattern is not None or listener is not None:
            raise Errors.IllegalArgumentError("a share group has no pattern subscriptions or rebalance listeners")
        self._share.subscribe(topics)

    # ------------------------------------------------------------------ the loop
    def run(self, handler: Callable[[Any], Any], stop: threading.Event | None = None) -> None:
        """Handle records until ``stop`` is set, ``stop()``/``close()`` is called, or Ctrl-C;
        then stop taking records, wait up to ``shutdown_timeout_ms`` for running handlers,
        release every record not handled, send the acknowledgements and return. Raises
        HandlerError after a failure that ``on_error`` answered with "raise"."""
        self._start_running(handler, stop)
        self._pool = WorkerPool(self._scheduler, handler, self._settings, on_error=self._on_error,
                                policies=SHARE_POLICIES)
        self._pool.start()
        log.info("parallel share consumer running: %d workers", self._settings.max_workers)
        interval_s = self._settings.commit_interval_ms / 1000.0

        def loop() -> None:
            while not self._stopping(stop):
                records = self._share.poll(self._settings.poll_timeout_ms)
                if not records:
                    continue
                self._submit(records)
                next_send = time.monotonic() + interval_s
                while self._outstanding and not self._stopping(stop):
                    self._scheduler.wait_idle(None, _WAIT_S)
                    self._apply_completions()
                    if self._outstanding and time.monotonic() >= next_send:
                        self._share.commit_async()
                        next_send = time.monotonic() + interval_s
                if not self._outstanding:
                    self._share.commit_async()

        self._run_then_shut_down(loop, "parallel share consumer", "releasing the records not handled")

    def _check_subscribed(self) -> None:
        if not self._share.subscription():
            raise Errors.IllegalStateError(
                "the share consumer is not subscribed: subscribe it (or call ParallelConsumer.subscribe) "
                "before run()")

    def _submit(self, records: dict) -> None:
        tasks = []
        with self._lock:
            self._counts["batches"] += 1
            for tp, recs in records.items():
                for r in recs:
                    self._outstanding[(tp, r.offset)] = r
                    tasks.append(Task(r, tp, None, 0, None))
        self._scheduler.submit(tasks)

    def _apply_completions(self) -> None:
        for task, outcome, error in self._scheduler.drain():
            kind = _ACK.get(outcome)
            if kind is None:
                if outcome is Outcome.FAILED and self._fatal is None:
                    self._fatal = (task, error)
                continue      # failed or abandoned: released with the rest at shutdown
            self._acknowledge(task.tp, task.record, kind)

    def _acknowledge(self, tp: Any, record: Any, kind: AcknowledgeType) -> None:
        with self._lock:
            if self._outstanding.pop((tp, record.offset), None) is None:
                return
            self._counts[{AcknowledgeType.ACCEPT: "accepted", AcknowledgeType.RELEASE: "released",
                          AcknowledgeType.REJECT: "rejected"}[kind]] += 1
        self._share.acknowledge(record, type=kind)

    def _acknowledged(self, offsets: dict, error: BaseException | None) -> None:
        if error is None:
            return
        n = sum(len(o) for o in offsets.values())
        with self._lock:
            self._counts["acknowledgement_failures"] += n
        # The broker delivers these records again (their locks ran out or the member moved on).
        log.warning("acknowledgements of %d record(s) of %s failed: %s", n,
                    ", ".join(f"{tp.topic}-{tp.partition}" for tp in offsets), error)

    # ------------------------------------------------------------------ stopping
    def _shutdown(self) -> None:
        scheduler = self._scheduler
        pool = self._pool
        assert pool is not None
        try:
            dropped = scheduler.halt()
            pool.stop()
            log.info("stopping: %d queued records dropped, %d handlers running", dropped, scheduler.running)
            deadline = time.monotonic() + self._settings.shutdown_timeout_ms / 1000.0
            while not scheduler.wait_idle(None, min(_WAIT_S, max(deadline - time.monotonic(), 0))):
                if time.monotonic() >= deadline:
                    log.warning("%d handlers still running after shutdown_timeout_ms=%d: their records are "
                                "released", scheduler.running, self._settings.shutdown_timeout_ms)
                    break
                self._apply_completions()
            self._apply_completions()
            with self._lock:
                left = list(self._outstanding.items())
            for (tp, _), record in left:     # dropped, abandoned, failed or still running: deliver again
                self._acknowledge(tp, record, AcknowledgeType.RELEASE)
            try:
                self._share.commit_sync(int(self._settings.shutdown_timeout_ms))
            except Errors.KafkaError as exc:
                log.warning("sending the last acknowledgements failed: %s", exc)
        finally:
            self._shut_down_finally("parallel share consumer")

    # ------------------------------------------------------------------ numbers
    def metrics(self) -> ShareParallelMetrics:  # type: ignore[override]
        """A snapshot (any thread)."""
        snap = self._scheduler.snapshot()
        counts = snap["counts"]
        with self._lock:
            c = dict(self._counts)
            outstanding = len(self._outstanding)
        return ShareParallelMetrics(
            in_flight=snap["in_flight"], queued=snap["queued"], outstanding=outstanding,
            accepted=c["accepted"], released=c["released"], rejected=c["rejected"],
            retries=counts.get("retries", 0), dropped=counts.get("dropped", 0), max_in_flight=snap["max_in_flight"],
            batches=c["batches"], acknowledgement_failures=c["acknowledgement_failures"])


ParallelConsumer._flavours.append((KafkaShareConsumer, ShareParallelConsumer))
