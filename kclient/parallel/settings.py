"""ParallelConsumer's settings, checked at construction: a bad value fails at once, naming
the argument, instead of misbehaving later."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from kclient import errors as Errors
from kclient.parallel.scheduler import ORDERINGS

__all__ = ["ON_ERROR_POLICIES", "Settings"]

ON_ERROR_POLICIES = ("raise", "skip")


def _int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise Errors.IllegalArgumentError(f"{name} must be {bound}, got {value}")
    return value


def _ms(name: str, value: Any, minimum: float = 0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise TypeError(f"{name} must be a number of milliseconds, got {value!r}")
    if value < minimum or math.isinf(value):
        raise Errors.IllegalArgumentError(f"{name} must be finite and >= {minimum}, got {value}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class Settings:
    max_workers: int = 16
    ordering: str = "key"
    on_error: str | Callable = "raise"
    retries: int = 0
    retry_backoff_ms: float = 100.0
    retry_backoff_max_ms: float = 10_000.0
    max_queued_records: int = 10_000
    max_queued_bytes: int = 64 * 1024 * 1024
    max_uncommitted_records: int = 100_000
    low_water: float = 0.5
    commit_interval_ms: float = 1000.0
    poll_timeout_ms: int = 100
    shutdown_timeout_ms: float = 30_000.0
    revoke_timeout_ms: float | None = None
    thread_name_prefix: str = "kclient-parallel"

    def __post_init__(self) -> None:
        _int("max_workers", self.max_workers, 1, 10_000)
        if not isinstance(self.ordering, str) or self.ordering not in ORDERINGS:
            raise Errors.IllegalArgumentError(f"ordering must be one of {', '.join(map(repr, ORDERINGS))}, "
                                              f"got {self.ordering!r}")
        if not callable(self.on_error) and self.on_error not in ON_ERROR_POLICIES:
            raise Errors.IllegalArgumentError(
                f"on_error must be 'raise', 'skip' or a callable(record, exception) returning one of "
                f"them, got {self.on_error!r}")
        _int("retries", self.retries, 0)
        _ms("retry_backoff_ms", self.retry_backoff_ms)
        _ms("retry_backoff_max_ms", self.retry_backoff_max_ms)
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise Errors.IllegalArgumentError(
                f"retry_backoff_max_ms ({self.retry_backoff_max_ms}) must not be below retry_backoff_ms "
                f"({self.retry_backoff_ms})")
        _int("max_queued_records", self.max_queued_records, 1)
        _int("max_queued_bytes", self.max_queued_bytes, 1)
        _int("max_uncommitted_records", self.max_uncommitted_records, 1)
        if (isinstance(self.low_water, bool) or not isinstance(self.low_water, (int, float))
                or not 0 <= self.low_water < 1):
            raise Errors.IllegalArgumentError(f"low_water must be a fraction in [0, 1), got {self.low_water!r}")
        _ms("commit_interval_ms", self.commit_interval_ms)
        _int("poll_timeout_ms", self.poll_timeout_ms, 1, 60_000)
        _ms("shutdown_timeout_ms", self.shutdown_timeout_ms)
        if self.revoke_timeout_ms is not None:
            _ms("revoke_timeout_ms", self.revoke_timeout_ms)
        if not isinstance(self.thread_name_prefix, str) or not self.thread_name_prefix:
            raise Errors.IllegalArgumentError(f"thread_name_prefix must be a non-empty str, "
                                              f"got {self.thread_name_prefix!r}")
