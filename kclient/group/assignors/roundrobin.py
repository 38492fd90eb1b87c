"""The "roundrobin" assignor: all partitions, sorted, dealt to members in turn.

Members are taken in Kafka's member order (static members first) in a cycle; a member not
subscribed to a partition's topic is skipped for that partition. With identical
subscriptions the counts differ by at most one across members; with different subscriptions
it can be unbalanced (the sticky assignors are not).
"""
from __future__ import annotations

from typing import Mapping

from kclient.group.assignors.base import (
    AbstractPartitionAssignor,
    Assignment,
    Subscription,
    partitions_to_assign,
    sorted_members,
)
from kclient.structs import TopicPartition


class RoundRobinAssignor(AbstractPartitionAssignor):
    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        order = sorted_members(subscriptions)
        topics_of = {m: frozenset(subscriptions[m].topics) for m in order}
        result: dict[str, list[TopicPartition]] = {m: [] for m in order}
        turn = 0  # index of the member whose turn it is
        for tp in partitions_to_assign(partitions_per_topic, subscriptions):
            # Someone subscribes to every partition's topic, so this scan ends within one cycle.
            while tp.topic not in topics_of[order[turn]]:
                turn = (turn + 1) % len(order)
            result[order[turn]].append(tp)
            turn = (turn + 1) % len(order)
        return {m: Assignment(partitions=tuple(parts)) for m, parts in result.items()}
