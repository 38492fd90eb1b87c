"""ConsumerRebalanceListener: user callbacks around group rebalances.

Callbacks run on the application thread, inside ``poll()`` (never on the heartbeat thread),
so they may use the consumer (commit, seek, position) but should be quick: time spent in
them counts against ``max.poll.interval.ms``.

kafka-python listeners (``kafka.ConsumerRebalanceListener`` subclasses) and any object with
the same methods are accepted too; ``invoke_partitions_lost`` falls back to
``on_partitions_revoked`` for objects that lack ``on_partitions_lost``.
"""
from __future__ import annotations

import abc
import logging
from typing import Any, Collection

from kclient.structs import TopicPartition

__all__ = ["ConsumerRebalanceListener", "validate_listener", "invoke_partitions_lost", "call_rebalance_listener"]

log = logging.getLogger(__name__)


class ConsumerRebalanceListener(abc.ABC):
    @abc.abstractmethod
    def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        """Partitions this consumer gives up: commit their offsets / flush their state here.

        Eager protocol: called with everything before each rebalance. Cooperative protocol:
        called only with the partitions that move to another member.
        """

    @abc.abstractmethod
    def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        """Partitions this consumer now owns (cooperative: only the newly added ones),
        before any record of them is fetched: seek or load state here."""

    def on_partitions_lost(self, lost: Collection[TopicPartition]) -> None:
        """Partitions already owned by someone else (this member was evicted: session
        timeout, unknown member, fenced). Offsets can no longer be committed for them.
        Defaults to ``on_partitions_revoked`` as in Kafka."""
        self.on_partitions_revoked(lost)


def validate_listener(listener) -> None:
    """Raise TypeError unless ``listener`` is None or has the two required callbacks."""
    if listener is None:
        return
    for method in ("on_partitions_revoked", "on_partitions_assigned"):
        if not callable(getattr(listener, method, None)):
            raise TypeError(
                f"listener must be a ConsumerRebalanceListener (missing {method}); got {type(listener).__name__}"
            )


def invoke_partitions_lost(listener, lost: Collection[TopicPartition]) -> None:
    handler = getattr(listener, "on_partitions_lost", None)
    if callable(handler):
        handler(lost)
    else:
        listener.on_partitions_revoked(lost)


def call_rebalance_listener(listener: Any, what: str, partitions: Collection[TopicPartition],
                            group_id: str | None) -> BaseException | None:
    """Call ``on_partitions_<what>`` ("revoked", "assigned" or "lost") of ``listener`` (None:
    nothing to call); its exception is logged and returned, for the caller to raise once the
    rebalance step is complete."""
    if listener is None:
        return None
    parts = set(partitions)
    try:
        if what == "revoked":
            listener.on_partitions_revoked(parts)
        elif what == "assigned":
            listener.on_partitions_assigned(parts)
        else:
            invoke_partitions_lost(listener, parts)
    except Exception as exc:
        log.error("group %s: the rebalance listener failed in on_partitions_%s(%s): %r",
                  group_id, what, sorted(parts), exc, exc_info=True)
        return exc
    return None
