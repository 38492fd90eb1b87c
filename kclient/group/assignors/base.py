"""What every partition assignor is built from: the assignor base class, the rebalance
protocols, and the helpers the built-in assignors share (member order, partitions to assign)."""
from __future__ import annotations

import abc
import enum
import logging
from typing import Iterable, Mapping

from kclient.group.classic_embedded_protocol import HIGHEST_VERSION, Assignment, Subscription
from kclient.structs import TopicPartition

__all__ = ["RebalanceProtocol", "AbstractPartitionAssignor", "Subscription", "Assignment",
           "member_sort_key", "sorted_members", "partitions_to_assign"]

log = logging.getLogger("kclient.group.assignors")


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
        for p in range(partitions_per_topic[topic])
    ]
