"""Partition assignors (``partition.assignment.strategy``) and the registry that builds them.

Every member advertises all its assignors in JoinGroup, in preference order; the broker picks
one every member supports, and the elected leader runs that assignor's ``assign`` over all
members' subscriptions. Names are Kafka's protocol names, so a group may mix kclient with
Java, librdkafka or kafka-python members.

Not implemented: rack-aware assignment (KIP-881). It needs partition replica racks, while
``assign`` receives only partition counts; members' ``rack_id`` is carried but not used.
"""
from __future__ import annotations

import abc
import enum
import logging
from typing import Iterable, Mapping

from kclient.group.classic_embedded_protocol import HIGHEST_VERSION, Assignment, Subscription
from kclient.errors import ConfigurationError
from kclient.structs import TopicPartition

log = logging.getLogger(__name__)

# Importing the submodule kclient.group.assignors.range binds the name "range" in this package's
# namespace, shadowing the builtin for code below; keep a reference to the builtin.
_range = range

__all__ = [
    "RebalanceProtocol", "AbstractPartitionAssignor", "Subscription", "Assignment",
    "RangeAssignor", "RoundRobinAssignor", "StickyAssignor", "CooperativeStickyAssignor",
    "DEFAULT_PARTITION_ASSIGNMENT_STRATEGY", "ASSIGNORS", "build_assignors",
]


class RebalanceProtocol(enum.IntEnum):
    """EAGER revokes everything before each join; COOPERATIVE (KIP-429) revokes only what moves."""

    EAGER = 0
    COOPERATIVE = 1


class AbstractPartitionAssignor(abc.ABC):
    """Base of all assignors. Subclass it for a custom strategy and pass the class or an instance.

    ``version`` is the ConsumerProtocol version this member's subscription is written at
    (Kafka writes its newest, 3; older readers ignore what they do not know).
    """

    name: str = ""
    version: int = HIGHEST_VERSION
    supported_protocols: tuple[RebalanceProtocol, ...] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        """Assignor-specific bytes sent to the leader with this member's subscription."""
        return None

    def metadata(
        self,
        topics: Iterable[str],
        owned: Iterable[TopicPartition] = (),
        generation: int = -1,
        *,
        rack_id: str | None = None,
    ) -> Subscription:
        """This member's JoinGroup subscription; the coordinator serializes it at ``version``.

        ``owned``: partitions currently assigned (empty under EAGER: they were revoked before
        the join). ``generation``: the generation they were assigned in (-1 if none).
        """
        topic_set = set(topics)
        return Subscription(
            topics=tuple(sorted(topic_set)),
            user_data=self.subscription_user_data(topic_set),
            owned_partitions=tuple(sorted(owned)),
            generation_id=generation,
            rack_id=rack_id,
        )

    @abc.abstractmethod
    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        """Leader only: map every member id in ``subscriptions`` to its Assignment.

        ``partitions_per_topic``: partition count of each subscribed topic known to metadata;
        topics missing from it are skipped (no metadata yet).
        """

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        """Called on every member after SyncGroup with its own assignment."""


def member_sort_key(member_id: str, subscription: Subscription) -> tuple:
    """Kafka's member order: static members (group.instance.id) first, by instance id, then
    dynamic members by member id. Static members keep their position across restarts, so
    range/roundrobin give them the same partitions again."""
    if subscription.group_instance_id is not None:
        return (0, subscription.group_instance_id, member_id)
    return (1, member_id, "")


def sorted_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    return sorted(subscriptions, key=lambda m: member_sort_key(m, subscriptions[m]))


def partitions_to_assign(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> list[TopicPartition]:
    """All partitions of topics someone subscribes to and metadata knows, sorted."""
    wanted: set[str] = set()
    for sub in subscriptions.values():
        wanted.update(sub.topics)
    missing = sorted(t for t in wanted if t not in partitions_per_topic)
    if missing:
        log.debug("skipping assignment of topics without metadata: %s", missing)
    return [
        TopicPartition(topic, p)
        for topic in sorted(wanted)
        if topic in partitions_per_topic
        for p in _range(partitions_per_topic[topic])
    ]


# Submodules import the base above; import them after it is defined.
from kclient.group.assignors.range import RangeAssignor  # noqa: E402
from kclient.group.assignors.roundrobin import RoundRobinAssignor  # noqa: E402
from kclient.group.assignors.sticky import CooperativeStickyAssignor, StickyAssignor  # noqa: E402

ASSIGNORS: dict[str, type[AbstractPartitionAssignor]] = {
    cls.name: cls
    for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}

# Kafka's default (since 3.0); the first entry is used until every member supports the second.
DEFAULT_PARTITION_ASSIGNMENT_STRATEGY = ("range", "cooperative-sticky")

_JAVA_CLASS_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}

_SETTING = "partition.assignment.strategy"


def _build_one(item) -> AbstractPartitionAssignor:
    if isinstance(item, AbstractPartitionAssignor):
        return item
    if isinstance(item, type) and issubclass(item, AbstractPartitionAssignor):
        return item()
    if isinstance(item, str):
        key = item.strip()
        key = _JAVA_CLASS_NAMES.get(key, key)
        cls = ASSIGNORS.get(key)
        if cls is None:
            raise ConfigurationError(
                f"{_SETTING}: unknown assignor {item!r}; known: {', '.join(ASSIGNORS)}"
                " (or pass a subclass of kclient.group.assignors.AbstractPartitionAssignor)"
            )
        return cls()
    # A kafka-python assignor class or instance: same protocol names, so the built-in
    # implementation of that name is a drop-in (their assign() signature differs from ours).
    name = getattr(item, "name", None)
    if isinstance(name, str) and name in ASSIGNORS:
        log.debug("%s: using kclient's %r assignor for %r", _SETTING, name, item)
        return ASSIGNORS[name]()
    raise ConfigurationError(
        f"{_SETTING}: {item!r} is not an assignor name or a subclass of"
        " kclient.group.assignors.AbstractPartitionAssignor"
    )


def build_assignors(strategy=DEFAULT_PARTITION_ASSIGNMENT_STRATEGY) -> list[AbstractPartitionAssignor]:
    """Assignors from ``partition.assignment.strategy``, in preference order.

    Accepts a comma-separated string (Java config style), or a sequence of protocol names,
    Java class names, AbstractPartitionAssignor subclasses or instances, or kafka-python
    assignor classes (mapped by name to the built-in of the same name).
    """
    if strategy is None:
        raise ConfigurationError(f"{_SETTING}: must name at least one assignor")
    if isinstance(strategy, str):
        items: list = [s for s in strategy.split(",") if s.strip()]
    elif isinstance(strategy, (AbstractPartitionAssignor, type)):
        items = [strategy]
    else:
        try:
            items = list(strategy)
        except TypeError:
            raise ConfigurationError(
                f"{_SETTING}: expected a list of assignors, got {type(strategy).__name__}"
            ) from None
    if not items:
        raise ConfigurationError(f"{_SETTING}: must name at least one assignor")
    assignors = [_build_one(item) for item in items]
    seen: set[str] = set()
    for a in assignors:
        if not isinstance(a.name, str) or not a.name:
            raise ConfigurationError(f"{_SETTING}: assignor {a!r} has no name")
        if a.name in seen:
            raise ConfigurationError(f"{_SETTING}: assignor {a.name!r} is listed twice")
        seen.add(a.name)
    return assignors
