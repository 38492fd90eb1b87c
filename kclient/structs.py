"""Small value types shared by the consumer, with kafka-python's field names and order.

They are namedtuples (not dataclasses; ConsumerRecord is a compiled namedtuple) so that code
written for kafka-python that unpacks them positionally, compares them with tuples or uses
them as dict keys keeps working.
"""
from __future__ import annotations

from collections import namedtuple
from typing import TYPE_CHECKING

from kcore.records import record_type

__all__ = ["TopicPartition", "OffsetAndMetadata", "OffsetAndTimestamp", "ConsumerRecord"]


TopicPartition = namedtuple("TopicPartition", ["topic", "partition"])
TopicPartition.__doc__ = """A topic name and partition number; hashable, ordered by (topic, partition)."""


# Defaults as in kafka-python: metadata '' (the protocol's non-null metadata) and an unknown
# leader epoch (-1), so OffsetAndMetadata(42) is a valid commit.
OffsetAndMetadata = namedtuple(
    "OffsetAndMetadata", ["offset", "metadata", "leader_epoch"], defaults=[None, "", -1]
)
OffsetAndMetadata.__doc__ = """A committed (or to-be-committed) offset: the next offset to consume,
free-form metadata, and the leader epoch of the last consumed record (-1 if unknown)."""


OffsetAndTimestamp = namedtuple("OffsetAndTimestamp", ["offset", "timestamp", "leader_epoch"])
OffsetAndTimestamp.__doc__ = """The earliest offset whose timestamp is >= a searched timestamp
(``offsets_for_times``), with that record's timestamp and leader epoch."""


ConsumerRecord = namedtuple(
    "ConsumerRecord",
    [
        "topic", "partition", "leader_epoch", "offset", "timestamp", "timestamp_type",
        "key", "value", "headers", "checksum",
        "serialized_key_size", "serialized_value_size", "serialized_header_size",
    ],
)
ConsumerRecord.__doc__ = """One record returned by ``poll()`` or iteration.

timestamp_type: 0 CreateTime, 1 LogAppendTime. headers: list of (str, bytes).
checksum: always None (record format v2 has no per-record CRC).
serialized_*_size: bytes before deserialization, -1 when the key/value is null
(header size -1 when there are no headers)."""

# The same namedtuple, compiled (kcore.records.record_type): its fields read like instance
# slots and a poll's records reuse the memory of the previous poll's. Everything a
# namedtuple offers (unpacking, _asdict, _replace, pickling, tuple equality) is unchanged.
# (Type checkers see the namedtuple: the compiled class has the same fields and methods.)
if not TYPE_CHECKING:
    ConsumerRecord = record_type(ConsumerRecord)
