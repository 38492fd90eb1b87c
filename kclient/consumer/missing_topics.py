"""A warning, once per topic, when a topic the consumer was asked for does not exist.

A consumer subscribed to (or assigned) a topic the cluster does not have gets no records and
no error: Kafka treats it as a topic that may appear later. Without a word this looks like a
consumer that hangs, so the first metadata answer saying UNKNOWN_TOPIC_OR_PARTITION for such
a topic logs a warning naming it, and says why it was not created.
"""
from __future__ import annotations

import logging
import threading

from kclient import errors as Errors
from kclient.clock import Clock
from kclient.network.metadata import Cluster

log = logging.getLogger(__name__)

_UNKNOWN_TOPIC = Errors.UnknownTopicOrPartitionError.errno
# How long a broker that creates topics on first use may answer "unknown" while it does.
AUTO_CREATE_GRACE_MS = 2000


def requested_topics(subscriptions) -> frozenset[str]:
    """Topics asked for by name: subscribed (not by pattern) or assigned by the user."""
    if subscriptions.has_pattern_subscription():
        return frozenset()
    if subscriptions.has_auto_assigned_partitions():
        return subscriptions.subscription
    return frozenset(tp.topic for tp in subscriptions.assigned_partitions())


class MissingTopicWarner:
    """A metadata listener: ``topics()`` gives the topics the consumer asked for by name."""

    def __init__(self, topics, allow_auto_create: bool, clock: Clock) -> None:
        self._topics = topics
        self._allow_auto_create = allow_auto_create
        self._clock = clock
        self._first_missing: dict[str, int] = {}   # topic -> when an answer first lacked it
        self._warned: set[str] = set()
        self._lock = threading.Lock()   # metadata answers arrive on the heartbeat thread too

    def __call__(self, cluster: Cluster) -> None:
        wanted = self._topics()
        if not wanted and not self._first_missing:
            return
        missing = {t for t, code in cluster.topic_errors.items() if code == _UNKNOWN_TOPIC and t in wanted}
        now = self._clock.now_ms()
        # Asking may create the topic: the broker answers "unknown" while it creates it, so
        # only a topic still unknown after AUTO_CREATE_GRACE_MS is missing.
        grace = AUTO_CREATE_GRACE_MS if self._allow_auto_create else 0
        with self._lock:
            # A topic seen again may be deleted later: it is warned about again then.
            self._warned &= missing
            self._first_missing = {t: self._first_missing.get(t, now) for t in missing}
            new = sorted(t for t, since in self._first_missing.items()
                         if now - since >= grace and t not in self._warned)
            self._warned.update(new)
        for topic in new:
            if self._allow_auto_create:
                why = ("the broker does not create topics on first use (its auto.create.topics.enable "
                       "is off)")
            else:
                why = "this consumer does not ask the broker to create it (allow_auto_create_topics=False)"
            log.warning("topic %r does not exist: no records until it is created; %s", topic, why)
