"""The metadata a group member's subscription needs, kept up to date (mechanisms §6).

Pattern subscriptions re-match the cluster's topics on every metadata update, and every
subscribed topic is added to the topics the metadata is fetched for. Both group protocols'
coordinators run it at the start of their poll.
"""
from __future__ import annotations

import logging
from typing import Any

from kclient.subscription.state import SubscriptionState

__all__ = ["SubscriptionMetadata"]

log = logging.getLogger(__name__)


class SubscriptionMetadata:
    def __init__(self, subscriptions: SubscriptionState, metadata: Any, group_id: str | None):
        self.subscriptions = subscriptions
        self.metadata = metadata
        self.group_id = group_id
        self._snapshot_version = -1

    def update(self) -> None:
        """Pattern re-match and metadata topics, once per metadata update."""
        md = self.metadata
        version = md.update_version
        subs = self.subscriptions
        if subs.has_pattern_subscription():
            if not md.need_all_topics:
                md.set_need_all_topics(True)
            if version != self._snapshot_version and version > 0:
                cluster = md.cluster
                matched = subs.topics_matching_pattern(cluster.topics(), cluster.internal_topics)
                if subs.subscribe_from_pattern(matched):
                    log.info("group %s: the pattern subscription now matches %s", self.group_id, sorted(matched))
        if subs.has_auto_assigned_partitions():
            missing = subs.metadata_topics() - md.topics
            if missing:
                md.add_topics(*missing)
        self._snapshot_version = version
