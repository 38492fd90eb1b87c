"""Typed settings for each consumer component, built once from the checked config table.

``ConsumerConfig`` (kclient.config) checks every setting a user passes: name, type, range,
default, against the one table. This module turns that mapping into one immutable object per
component, named as in the Java client, so a component reads typed fields and never a dotted
key: ``NetworkClientConfig`` (NetworkClient), ``FetchConfig`` (Fetcher),
``GroupRebalanceConfig`` (AbstractCoordinator and its heartbeat) and ``ConsumerCoordinatorConfig``
(ConsumerCoordinator). ``ConsumerSettings.of(config)`` builds them all; KafkaConsumer does that
once and hands each component its part. Each component also accepts a plain mapping (it builds
its part through the same functions), which is what unit tests pass.

Checks that involve more than one setting live here too (a heartbeat interval must be below
the session timeout), so each rule exists once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from kclient import errors as Errors
from kclient.config import ConsumerConfig, as_config
from kclient.network.network_config import NetworkClientConfig

__all__ = ["NetworkClientConfig", "FetchConfig", "GroupRebalanceConfig", "ConsumerCoordinatorConfig",
           "ConsumerSettings"]


def _checked(config: Mapping[str, Any] | ConsumerConfig | None) -> ConsumerConfig:
    return config if isinstance(config, ConsumerConfig) else as_config(config)


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
    isolation_level: str
    retry_backoff_ms: int
    client_rack: str
    metadata_max_age_ms: int
    key_deserializer: Callable | None
    value_deserializer: Callable | None

    @classmethod
    def of(cls, config: Any) -> "FetchConfig":
        if isinstance(config, cls):
            return config
        c = _checked(config)
        return cls(
            min_bytes=c["fetch.min.bytes"],
            max_bytes=c["fetch.max.bytes"],
            max_wait_ms=c["fetch.max.wait.ms"],
            max_partition_fetch_bytes=c["max.partition.fetch.bytes"],
            max_in_flight_per_broker=c["fetch.max.in.flight.per.broker"],
            incremental_fetch_sessions=c["enable.incremental.fetch.sessions"],
            max_poll_records=c["max.poll.records"],
            check_crcs=c["check.crcs"],
            isolation_level=c["isolation.level"],
            retry_backoff_ms=c["retry.backoff.ms"],
            client_rack=c["client.rack"] or "",
            metadata_max_age_ms=c["metadata.max.age.ms"],
            key_deserializer=c["key.deserializer"],
            value_deserializer=c["value.deserializer"],
        )


@dataclass(frozen=True, slots=True)
class GroupRebalanceConfig:
    """Membership timing of one group member (mechanisms §2-§5, §8)."""

    group_id: str | None
    group_instance_id: str | None
    session_timeout_ms: int
    heartbeat_interval_ms: int
    rebalance_timeout_ms: int          # max.poll.interval.ms, sent as JoinGroup's rebalance timeout
    retry_backoff_ms: int
    request_timeout_ms: int
    leave_group_on_close: bool = True

    def __post_init__(self) -> None:
        # Without a group there is no membership, so nothing to keep alive (and nothing to check).
        if self.group_id is not None and self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise Errors.ConfigurationError(
                f"heartbeat.interval.ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session.timeout.ms ({self.session_timeout_ms}): a member must be able to heartbeat "
                "at least once per session")

    @classmethod
    def of(cls, config: Any) -> "GroupRebalanceConfig":
        if isinstance(config, cls):
            return config
        c = _checked(config)
        return cls(
            group_id=c["group.id"],
            group_instance_id=c["group.instance.id"],
            session_timeout_ms=c["session.timeout.ms"],
            heartbeat_interval_ms=c["heartbeat.interval.ms"],
            rebalance_timeout_ms=c["max.poll.interval.ms"],
            retry_backoff_ms=c["retry.backoff.ms"],
            request_timeout_ms=c["request.timeout.ms"],
        )


@dataclass(frozen=True, slots=True)
class ConsumerCoordinatorConfig:
    """Assignors, subscriptions and commits of the consumer's group member (mechanisms §6)."""

    assignment_strategy: tuple[Any, ...]
    exclude_internal_topics: bool
    client_rack: str | None
    default_api_timeout_ms: int
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    group_protocol: str = "classic"
    remote_assignor: str | None = None

    @classmethod
    def of(cls, config: Any) -> "ConsumerCoordinatorConfig":
        if isinstance(config, cls):
            return config
        c = _checked(config)
        _check_group_protocol(c)
        return cls(
            assignment_strategy=tuple(c["partition.assignment.strategy"]),
            exclude_internal_topics=c["exclude.internal.topics"],
            client_rack=c["client.rack"] or None,
            default_api_timeout_ms=c["default.api.timeout.ms"],
            enable_auto_commit=c["enable.auto.commit"] and c["group.id"] is not None,
            auto_commit_interval_ms=c["auto.commit.interval.ms"],
            group_protocol=c["group.protocol"],
            remote_assignor=c["group.remote.assignor"],
        )


#: Classic-protocol settings that the consumer protocol moves to the broker (as the Java client
#: rejects them): the broker's group.consumer.* configs or the group's own configs take over.
_CLASSIC_ONLY = {
    "partition.assignment.strategy": "the broker assigns partitions; choose its assignor with group.remote.assignor",
    "session.timeout.ms": "the broker sets it (group.consumer.session.timeout.ms, or the group config "
                          "consumer.session.timeout.ms)",
    "heartbeat.interval.ms": "the broker sets it (group.consumer.heartbeat.interval.ms, or the group config "
                             "consumer.heartbeat.interval.ms)",
}


def _check_group_protocol(c: Any) -> None:
    """Settings that belong to the other group protocol fail instead of being ignored."""
    protocol = c["group.protocol"]
    if protocol == "consumer":
        for name, why in _CLASSIC_ONLY.items():
            if c.is_set(name):
                raise Errors.ConfigurationError(
                    f"setting {name!r} does not apply to group.protocol=consumer: {why}")
    elif c["group.remote.assignor"] is not None:
        raise Errors.ConfigurationError(
            "setting 'group.remote.assignor' applies only to group.protocol=consumer (the classic "
            "protocol assigns in the client: use partition.assignment.strategy)")


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """Every component's settings, built once from one checked ConsumerConfig."""

    config: ConsumerConfig
    network: NetworkClientConfig
    fetch: FetchConfig
    rebalance: GroupRebalanceConfig
    coordinator: ConsumerCoordinatorConfig

    @classmethod
    def of(cls, config: Any) -> "ConsumerSettings":
        c = _checked(config)
        return cls(c, NetworkClientConfig.of(c), FetchConfig.of(c), GroupRebalanceConfig.of(c),
                   ConsumerCoordinatorConfig.of(c))
