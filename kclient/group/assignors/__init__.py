"""Partition assignors (``partition.assignment.strategy``) and the registry that builds them.

Every member advertises all its assignors in JoinGroup, in preference order; the broker picks
one every member supports, and the elected leader runs that assignor's ``assign`` over all
members' subscriptions. Names are Kafka's protocol names, so a group may mix kclient with
Java, librdkafka or kafka-python members.

Not implemented: rack-aware assignment (KIP-881). It needs partition replica racks, while
``assign`` receives only partition counts; members' ``rack_id`` is carried but not used.
"""
from __future__ import annotations

import logging

from kclient.errors import ConfigurationError
from kclient.group.assignors.base import (
    AbstractPartitionAssignor, Assignment, RebalanceProtocol, Subscription, member_sort_key, partitions_to_assign,
    sorted_members,
)
from kclient.group.assignors.range import RangeAssignor
from kclient.group.assignors.roundrobin import RoundRobinAssignor
from kclient.group.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

log = logging.getLogger(__name__)

__all__ = [
    "RebalanceProtocol", "AbstractPartitionAssignor", "Subscription", "Assignment",
    "RangeAssignor", "RoundRobinAssignor", "StickyAssignor", "CooperativeStickyAssignor",
    "DEFAULT_PARTITION_ASSIGNMENT_STRATEGY", "ASSIGNORS", "build_assignors",
    "member_sort_key", "sorted_members", "partitions_to_assign",
]


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
