"""FetchConfig: the settings of the fetch components, typed, built once from the checked table."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kclient.config import ConsumerConfig, as_config

__all__ = ["FetchConfig"]

# The Fetch request's isolation_level field for each ``isolation.level``.
_ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """What shapes each Fetch and what poll() returns (mechanisms §7)."""

    min_bytes: int
    max_bytes: int
    max_wait_ms: int
    max_partition_fetch_bytes: int
    max_in_flight_per_broker: int
    incremental_fetch_sessions: bool
    max_poll_records: int
    check_crcs: bool
    zero_copy_records: bool
    isolation_level: str
    retry_backoff_ms: int
    client_rack: str
    metadata_max_age_ms: int
    key_deserializer: Callable | None
    value_deserializer: Callable | None

    @property
    def isolation(self) -> int:
        """isolation_level as the Fetch request carries it (1: read_committed)."""
        return _ISOLATION_LEVELS[self.isolation_level]

    @classmethod
    def of(cls, config: Any) -> "FetchConfig":
        """The fetch part of a consumer's settings (a ConsumerConfig, or a mapping checked
        against the consumer's table); a FetchConfig is returned as it is."""
        if isinstance(config, cls):
            return config
        c = config if isinstance(config, ConsumerConfig) else as_config(config)
        return cls(
            min_bytes=c["fetch.min.bytes"],
            max_bytes=c["fetch.max.bytes"],
            max_wait_ms=c["fetch.max.wait.ms"],
            max_partition_fetch_bytes=c["max.partition.fetch.bytes"],
            max_in_flight_per_broker=c["fetch.max.in.flight.per.broker"],
            incremental_fetch_sessions=c["enable.incremental.fetch.sessions"],
            max_poll_records=c["max.poll.records"],
            check_crcs=c["check.crcs"],
            zero_copy_records=c["zero.copy.records"],
            isolation_level=c["isolation.level"],
            retry_backoff_ms=c["retry.backoff.ms"],
            client_rack=c["client.rack"] or "",
            metadata_max_age_ms=c["metadata.max.age.ms"],
            key_deserializer=c["key.deserializer"],
            value_deserializer=c["value.deserializer"],
        )
