"""The synchronous KafkaConsumer as kclient.aio's worker thread drives it.

aiokafka moves a partition's position only past records it has handed to the application:
records fetched but not yet returned by ``getone()``/``getmany()`` (prefetched, held for
another partition filter, or fetched for a task that was cancelled) are neither committed
nor skipped. KafkaConsumer.poll() moves positions as it returns records, so this adapter
polls with ``poll_held()`` (positions stay) and moves each position when the loop reports
the records as delivered. The consumer's ``subscription_state`` is also read from the loop
thread, which its lock allows.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.subscription.state import FetchPosition, SubscriptionState
from kclient.structs import OffsetAndMetadata, TopicPartition

__all__ = ["SyncCore", "FetchPosition"]

#: {TopicPartition: (position after the delivered records, assignment id they belong to)}
Delivered = Mapping[TopicPartition, "tuple[FetchPosition, int]"]


class SyncCore:
    """One KafkaConsumer, used only from the worker thread (except the read-only views)."""

    def __init__(self, settings: dict[str, Any]):
        self.consumer = KafkaConsumer(**settings)
        self.subscriptions: SubscriptionState = self.consumer.subscription_state

    # ------------------------------------------------------------------ worker thread
    def fetch(self, timeout_ms: int, max_records: int, columnar: bool):
        """(records or columns by partition, {tp: position after them}); positions unchanged."""
        return self.consumer.poll_held(timeout_ms, max_records, columnar)

    def advance(self, delivered: Delivered) -> None:
        """Move positions past records the application received (never backwards, and only
        within the assignment the records were fetched under)."""
        if not delivered:
            return
        subs = self.subscriptions
        current = subs.assignment_id
        for tp, (position, assignment_id) in delivered.items():
            if assignment_id == current:
                subs.advance_position(tp, position)

    def rewind(self, partitions: Iterable[TopicPartition]) -> None:
        """Fetch these partitions again from their positions (records fetched past them were
        dropped by the loop)."""
        subs = self.subscriptions
        for tp in partitions:
            position = subs.valid_position(tp) if subs.is_assigned(tp) else None
            if position is not None:
                epoch = position.offset_epoch if position.offset_epoch is not None else -1
                self.consumer.seek(tp, OffsetAndMetadata(position.offset, "", epoch))

    # ------------------------------------------------------------------ any thread (locked state)
    def assignment_id(self) -> int:
        return self.subscriptions.assignment_id

    def assignment(self) -> set[TopicPartition]:
        return self.subscriptions.assigned_partitions()

    def is_assigned(self, tp: TopicPartition) -> bool:
        return self.subscriptions.is_assigned(tp)

    def subscription(self) -> frozenset[str]:
        return self.subscriptions.subscription

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.subscriptions.high_watermark(tp)

    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return self.subscriptions.last_stable_offset(tp)

    def cached_partitions(self, topic: str) -> set[int] | None:
        return self.consumer.cached_partitions_for_topic(topic)

