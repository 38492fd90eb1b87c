"""The "range" assignor: each topic's partitions split into contiguous ranges.

Per topic, the members subscribed to it (in Kafka's member order, static members first) get
consecutive ranges; the first ``partitions % members`` members get one extra. Topics are
assigned independently, so members with the same subscription get the same partition
numbers of co-partitioned topics (what joins across topics rely on), at the cost of skew
when many topics have fewer partitions than members.
"""
from __future__ import annotations

from typing import Mapping

from kclient.group.assignors.base import (
    AbstractPartitionAssignor,
    Assignment,
    Subscription,
    sorted_members,
)
from kclient.structs import TopicPartition


class RangeAssignor(AbstractPartitionAssignor):
    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        order = sorted_members(subscriptions)
        members_per_topic: dict[str, list[str]] = {}
        for member in order:  # already in member order, so each list is too
            for topic in set(subscriptions[member].topics):
                members_per_topic.setdefault(topic, []).append(member)

        result: dict[str, list[TopicPartition]] = {m: [] for m in order}
        for topic in sorted(members_per_topic):
            count = partitions_per_topic.get(topic)
            if not count:
                continue
            members = members_per_topic[topic]
            per_member, extra = divmod(count, len(members))
            start = 0
            for i, member in enumerate(members):
                length = per_member + (1 if i < extra else 0)
                result[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
                start += length
        return {m: Assignment(partitions=tuple(parts)) for m, parts in result.items()}
