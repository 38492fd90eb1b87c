"""Rebalance listeners for kclient.aio: aiokafka's ConsumerRebalanceListener, whose callbacks
may be plain functions or coroutines.

The rebalance itself runs on the consumer's worker thread. Each callback runs on the event
loop (so it may use the consumer: ``await consumer.commit()``, ``consumer.seek()``), and the
rebalance waits for it: a commit made in ``on_partitions_revoked`` is done before the
partitions go to another member.
"""
from __future__ import annotations

import abc
import logging
from typing import Any, Callable, Collection

from kclient.subscription.listener import ConsumerRebalanceListener as SyncListener
from kclient.structs import TopicPartition

__all__ = ["ConsumerRebalanceListener"]

log = logging.getLogger(__name__)


class ConsumerRebalanceListener(abc.ABC):
    """aiokafka's listener: implement both methods, as ``def`` or ``async def``."""

    @abc.abstractmethod
    def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> Any:
        """Partitions this consumer gives up; commit or save their state here."""

    @abc.abstractmethod
    def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> Any:
        """Partitions this consumer now owns, before any of their records is fetched."""


class LoopListener(SyncListener):
    """The kclient listener the worker thread installs: runs the user's callbacks on the loop
    (``on_change`` first, on the loop too)."""

    def __init__(self, user: Any, run_on_loop: Callable[..., Any], on_change: Callable[[], None]):
        self._user = user
        self._run_on_loop = run_on_loop
        self._on_change = on_change
        self._detached = False

    def detach(self) -> None:
        """Call the user's listener no more (the consumer is stopping or subscribed anew)."""
        self._detached = True

    def _call(self, name: str, partitions: Collection[TopicPartition]) -> None:
        if not self._detached:
            self._run_on_loop(self._on_loop, name, set(partitions))

    def _on_loop(self, name: str, partitions: set[TopicPartition]) -> Any:
        # Records the loop holds were fetched under the assignment that is changing now.
        self._on_change()
        return getattr(self._user, name)(partitions)

    def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        self._call("on_partitions_revoked", revoked)

    def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        self._call("on_partitions_assigned", assigned)

    def on_partitions_lost(self, lost: Collection[TopicPartition]) -> None:
        name = "on_partitions_lost" if callable(getattr(self._user, "on_partitions_lost", None)) \
            else "on_partitions_revoked"
        self._call(name, lost)
