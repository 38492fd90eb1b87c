"""Worker threads: run the handler on each task, with retries and the on_error policy.

Workers never touch the KafkaConsumer (it belongs to the polling thread); they only take
tasks from the scheduler and report outcomes back to it.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kclient.parallel.scheduler import Outcome, Scheduler, Task
from kclient.parallel.settings import Settings

__all__ = ["HandlerError", "WorkerPool"]

log = logging.getLogger(__name__)


class HandlerError(Exception):
    """Raised from ``ParallelConsumer.run`` when a handler failed under ``on_error="raise"``
    (the handler's exception is the ``__cause__``)."""

    def __init__(self, message: str, topic: str, partition: int, offset: int):
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset


def _where(record: Any) -> str:
    # Topic, partition and offset only: a record's key or value may hold secrets.
    return f"{record.topic}-{record.partition} offset {record.offset}"


#: What ``on_error`` may answer besides "raise", and the outcome each gives: consumer groups.
COMMIT_POLICIES: Mapping[str, Outcome] = {"skip": Outcome.SKIPPED}


class WorkerPool:
    """``max_workers`` threads handling tasks until the scheduler halts.

    A failure after the retries is decided by ``on_error`` (the settings' by default):
    "raise" stops everything (Outcome.FAILED), the other answers are ``policies``' keys."""

    def __init__(self, scheduler: Scheduler, handler: Callable[[Any], Any], settings: Settings, *,
                 on_error: str | Callable[[Any, BaseException], str] | None = None,
                 policies: Mapping[str, Outcome] = COMMIT_POLICIES):
        self._scheduler = scheduler
        self._handler = handler
        self._settings = settings
        self._on_error = settings.on_error if on_error is None else on_error
        self._policies = dict(policies)
        self._stopping = threading.Event()   # ends retry backoffs early
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        prefix = self._settings.thread_name_prefix
        for i in range(self._settings.max_workers):
            # Daemon threads: a handler that never returns must not keep the process alive
            # after the application gave up on it (shutdown waits only a bounded time).
            t = threading.Thread(target=self._loop, name=f"{prefix}-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Abort retry backoffs; the scheduler's halt() is what makes the threads exit."""
        self._stopping.set()

    def join(self, timeout_s: float) -> int:
        """Wait for the threads to exit; returns how many are still running (stuck handlers)."""
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(deadline - time.monotonic(), 0))
        return sum(t.is_alive() for t in self._threads)

    # ------------------------------------------------------------------ worker side
    def _loop(self) -> None:
        take, finish = self._scheduler.take, self._scheduler.finish
        while True:
            task = take()
            if task is None:
                return
            while task is not None:
                outcome, error = self._handle(task)
                if outcome is Outcome.FAILED:
                    # Stop at once: no other record may start after a fatal failure.
                    self._scheduler.halt()
                task = finish(task, outcome, error)

    def _handle(self, task: Task) -> tuple[Outcome, BaseException | None]:
        settings = self._settings
        record = task.record
        attempt = 0
        while True:
            try:
                self._handler(record)
                return Outcome.DONE, None
            except BaseException as exc:  # noqa: BLE001 - a worker must report every failure
                error = exc
            if attempt < settings.retries:
                delay_ms = min(settings.retry_backoff_ms * (2 ** attempt), settings.retry_backoff_max_ms)
                attempt += 1
                self._scheduler.count("retries")
                log.info("handler failed on %s (%s), retry %d of %d in %.0f ms", _where(record),
                         type(error).__name__, attempt, settings.retries, delay_ms)
                if self._stopping.wait(delay_ms / 1000.0):
                    # Shutting down mid-retry: neither handled nor failed, so not committed.
                    return Outcome.ABANDONED, error
                continue
            return self._decide(record, error)

    def _decide(self, record: Any, error: BaseException) -> tuple[Outcome, BaseException | None]:
        policy = self._on_error
        allowed = ("raise", *self._policies)
        if callable(policy):
            try:
                policy = policy(record, error)
            except Exception as exc:
                log.error("on_error callback failed for %s: %r", _where(record), exc)
                exc.__cause__ = error
                return Outcome.FAILED, exc
            if policy not in allowed:
                bad = TypeError(f"the on_error callable must return {' or '.join(map(repr, allowed))}, "
                                f"got {policy!r}")
                bad.__cause__ = error
                log.error("%s (for %s)", bad, _where(record))
                return Outcome.FAILED, bad
        outcome = self._policies.get(policy)
        if outcome is not None:
            log.warning("handler failed on %s, %s: %r", _where(record), outcome.value, error)
            return outcome, error
        log.error("handler failed on %s: %r", _where(record), error)
        return Outcome.FAILED, error
