"""ParallelConsumer's settings: its table (``PARALLEL_CONFIGS``, on the clients' ConfigDef
machinery) and their checked, typed values (``Settings``).

They are keyword arguments of ``ParallelConsumer``, so the table is strict: Python values of
the setting's type, no strings parsed, no NaN or infinite times. A bad value fails at
construction with a ConfigurationError naming the argument, instead of misbehaving later; an
unknown name fails naming the closest known one.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kclient import errors as Errors
from kclient.config import AbstractConfig, ConfigDef, ConfigRegistry
from kclient.parallel.scheduler import ORDERINGS

__all__ = ["ON_ERROR_POLICIES", "PARALLEL_CONFIGS", "DEFAULTS", "Settings"]

ON_ERROR_POLICIES = ("raise", "skip")


def _on_error(name: str, value: Any) -> Any:
    if not callable(value) and value not in ON_ERROR_POLICIES:
        raise Errors.ConfigurationError(
            f"setting {name!r} must be 'raise', 'skip' or a callable(record, exception) returning one of "
            f"them, got {value!r}")
    return value


def _fraction(name: str, value: float) -> float:
    if not 0 <= value < 1:
        raise Errors.ConfigurationError(f"setting {name!r} must be a fraction in [0, 1), got {value!r}")
    return value


def _not_empty(name: str, value: str) -> str:
    if not value:
        raise Errors.ConfigurationError(f"setting {name!r} must be a non-empty str, got {value!r}")
    return value


PARALLEL_CONFIGS = ConfigRegistry([
    ConfigDef("max_workers", "int", 16, min=1, max=10_000, doc="handler threads"),
    ConfigDef("ordering", "str", "key", choices=ORDERINGS,
              doc="key: one record of a key at a time, in offset order; partition: one record of a "
                  "partition at a time; unordered: any record on any worker"),
    ConfigDef("on_error", "object", "raise", validator=_on_error,
              doc="when a handler fails after its retries: raise (stop the run), skip (commit past "
                  "the record) or callable(record, exception) returning one of them"),
    ConfigDef("retries", "int", 0, min=0, doc="extra attempts after a handler failed"),
    ConfigDef("retry_backoff_ms", "float", 100.0, min=0,
              doc="wait before the first retry; doubles per attempt up to retry_backoff_max_ms"),
    ConfigDef("retry_backoff_max_ms", "float", 10_000.0, min=0,
              doc="the longest wait between attempts (not below retry_backoff_ms)"),
    ConfigDef("max_queued_records", "int", 10_000, min=1,
              doc="backpressure: records polled but not yet handled before fetching pauses"),
    ConfigDef("max_queued_bytes", "long", 64 * 1024 * 1024, min=1,
              doc="backpressure: bytes of records polled but not yet handled before fetching pauses"),
    ConfigDef("max_uncommitted_records", "int", 100_000, min=1,
              doc="per partition: records held back from the commit (behind an unfinished one) before "
                  "its fetching pauses"),
    ConfigDef("low_water", "float", 0.5, min=0, validator=_fraction,
              doc="fetching resumes below this fraction (below 1) of each backpressure bound"),
    ConfigDef("commit_interval_ms", "float", 1000.0, min=0, doc="periodic commit (0: every loop)"),
    ConfigDef("poll_timeout_ms", "int", 100, min=1, max=60_000, doc="the longest poll() of the loop"),
    ConfigDef("shutdown_timeout_ms", "float", 30_000.0, min=0,
              doc="how long stopping waits for running handlers"),
    ConfigDef("revoke_timeout_ms", "float", None, nullable=True, min=0,
              doc="how long a revocation waits for the revoked partitions' running handlers "
                  "(null: half the consumer's max.poll.interval.ms)"),
    ConfigDef("thread_name_prefix", "str", "kclient-parallel", validator=_not_empty,
              doc="worker thread names"),
], "ParallelConsumer", strict=True)

#: Each setting's default, by name: ParallelConsumer's signature reads them from here.
DEFAULTS: dict[str, Any] = {name: d.default for name, d in PARALLEL_CONFIGS.defs.items()}


@dataclasses.dataclass(frozen=True)
class Settings:
    """ParallelConsumer's checked settings (``PARALLEL_CONFIGS``), as typed fields."""

    max_workers: int = DEFAULTS["max_workers"]
    ordering: str = DEFAULTS["ordering"]
    on_error: str | Callable = DEFAULTS["on_error"]
    retries: int = DEFAULTS["retries"]
    retry_backoff_ms: float = DEFAULTS["retry_backoff_ms"]
    retry_backoff_max_ms: float = DEFAULTS["retry_backoff_max_ms"]
    max_queued_records: int = DEFAULTS["max_queued_records"]
    max_queued_bytes: int = DEFAULTS["max_queued_bytes"]
    max_uncommitted_records: int = DEFAULTS["max_uncommitted_records"]
    low_water: float = DEFAULTS["low_water"]
    commit_interval_ms: float = DEFAULTS["commit_interval_ms"]
    poll_timeout_ms: int = DEFAULTS["poll_timeout_ms"]
    shutdown_timeout_ms: float = DEFAULTS["shutdown_timeout_ms"]
    revoke_timeout_ms: float | None = DEFAULTS["revoke_timeout_ms"]
    thread_name_prefix: str = DEFAULTS["thread_name_prefix"]

    def __post_init__(self) -> None:
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        checked = AbstractConfig(PARALLEL_CONFIGS, configs=given)
        for name in given:
            object.__setattr__(self, name, checked[name])
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise Errors.ConfigurationError(
                f"setting 'retry_backoff_max_ms' ({self.retry_backoff_max_ms}) must not be below "
                f"retry_backoff_ms ({self.retry_backoff_ms})")
