"""aiokafka's ``aiokafka.structs``: the record, partition and offset types kclient.aio uses."""
from __future__ import annotations

from kclient.producer import RecordMetadata
from kclient.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

__all__ = ["ConsumerRecord", "TopicPartition", "OffsetAndMetadata", "OffsetAndTimestamp", "RecordMetadata"]
