"""The group layer's typed configs, built once from the checked config table.

``GroupRebalanceConfig``: membership timing of one member (the coordinators, their heartbeat
drivers). ``ConsumerCoordinatorConfig``: assignors, commits and the group protocol of the
consumer's member. ``KafkaConsumer`` builds both once (``kclient.consumer.consumer_settings.ConsumerSettings``) and
hands them to the coordinator it chooses; the coordinators accept nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kclient import errors as Errors
from kclient.config import ConsumerConfig, as_config

__all__ = ["GroupRebalanceConfig", "ConsumerCoordinatorConfig"]


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
        c = config if isinstance(config, ConsumerConfig) else as_config(config)
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
        c = config if isinstance(config, ConsumerConfig) else as_config(config)
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
