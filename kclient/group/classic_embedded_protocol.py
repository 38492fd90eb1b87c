"""The classic group protocol's embedded "consumer" protocol: what members put in JoinGroup
metadata and SyncGroup assignments (``group.protocol=classic``; KIP-848 members send no such bytes).

The group coordinator treats these bytes as opaque; only consumers read them. Layouts follow
Kafka's ConsumerProtocolSubscription.json and ConsumerProtocolAssignment.json (versions 0-3,
non-flexible encoding), each prefixed by an int16 version:

Subscription: topics [string], user_data nullable bytes, owned_partitions [topic string,
    partitions [int32]] (v1+), generation_id int32 (v2+, default -1), rack_id nullable
    string (v3+).
Assignment: assigned_partitions [topic string, partitions [int32]], user_data nullable bytes.

As in Kafka, a version newer than ours is read with our newest layout (new versions may only
append fields) and bytes after the last known field are ignored. Hostile input raises a
ProtocolError subclass before anything is allocated from an unchecked count. Plain Python:
this runs once per member per rebalance, never on the record path.
"""
from __future__ import annotations

from dataclasses import dataclass
import struct
from typing import Iterable

from kclient.errors import (
    BufferUnderflowError,
    IllegalArgumentError,
    InvalidLengthError,
    ProtocolError,
    UnsupportedVersionError,
)
from kclient.structs import TopicPartition

__all__ = [
    "PROTOCOL_TYPE", "LOWEST_VERSION", "HIGHEST_VERSION", "Subscription", "Assignment",
    "serialize_subscription", "deserialize_subscription",
    "serialize_assignment", "deserialize_assignment", "deserialize_version", "EmbeddedReader",
]

PROTOCOL_TYPE = "consumer"
LOWEST_VERSION = 0
HIGHEST_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True)
class Subscription:
    """One member's subscription as the group leader sees it.

    ``group_instance_id`` is not part of these bytes: the leader copies it from the JoinGroup
    response's member entry (static membership), because assignors order members by it.
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        # Frozen with tuples: assignors can share and hash them without defensive copies.
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(
            self, "owned_partitions", tuple(TopicPartition(*tp) for tp in self.owned_partitions)
        )
        if self.user_data is not None:
            object.__setattr__(self, "user_data", bytes(self.user_data))


@dataclass(frozen=True)
class Assignment:
    """The partitions the leader gave one member, plus assignor-specific user data."""

    partitions: tuple[TopicPartition, ...] = ()
    user_data: bytes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", tuple(TopicPartition(*tp) for tp in self.partitions))
        if self.user_data is not None:
            object.__setattr__(self, "user_data", bytes(self.user_data))


# --------------------------------------------------------------------------- writing
def _check_version(version: int, what: str) -> int:
    if not isinstance(version, int) or version < LOWEST_VERSION:
        raise UnsupportedVersionError(f"unsupported consumer protocol {what} version: {version!r}")
    # A newer peer's version is encoded and read with our newest layout (fields only append).
    return min(version, HIGHEST_VERSION)


def _put_string(out: bytearray, s: str | None, nullable: bool = False) -> None:
    if s is None:
        if not nullable:
            raise IllegalArgumentError("a non-nullable string in the consumer protocol is None")
        out += _I16.pack(-1)
        return
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise IllegalArgumentError(f"string of {len(raw)} bytes does not fit an int16 length")
    out += _I16.pack(len(raw))
    out += raw


def _put_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(b))
        out += b


def _put_topic_partitions(out: bytearray, groups: list[tuple[str, list[int]]]) -> None:
    out += _I32.pack(len(groups))
    for topic, partitions in groups:
        _put_string(out, topic)
        out += _I32.pack(len(partitions))
        for p in partitions:
            out += _I32.pack(p)


def _group_by_topic(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    """Group partitions by topic, topics in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for topic, partition in partitions:
        groups.setdefault(topic, []).append(partition)
    return list(groups.items())


def serialize_subscription(subscription: Subscription, version: int = HIGHEST_VERSION) -> bytes:
    """Encode with the int16 version prefix; topics and owned partitions are sorted as Kafka does."""
    version = _check_version(version, "subscription")
    out = bytearray(_I16.pack(version))
    topics = sorted(subscription.topics)
    out += _I32.pack(len(topics))
    for t in topics:
        _put_string(out, t)
    _put_bytes(out, subscription.user_data)
    if version >= 1:
        _put_topic_partitions(out, _group_by_topic(sorted(subscription.owned_partitions)))
    if version >= 2:
        out += _I32.pack(subscription.generation_id)
    if version >= 3:
        _put_string(out, subscription.rack_id, nullable=True)
    return bytes(out)


def serialize_assignment(assignment: Assignment, version: int = HIGHEST_VERSION) -> bytes:
    """Encode with the int16 version prefix; partitions grouped by topic in first-seen order."""
    version = _check_version(version, "assignment")
    out = bytearray(_I16.pack(version))
    _put_topic_partitions(out, _group_by_topic(assignment.partitions))
    _put_bytes(out, assignment.user_data)
    return bytes(out)


# --------------------------------------------------------------------------- reading
class EmbeddedReader:
    """Bounds-checked reads of the embedded protocol's non-flexible encoding (also used for the
    sticky assignor's user data)."""

    __slots__ = ("buf", "pos", "what")

    def __init__(self, data, what: str):
        if data is None:
            raise BufferUnderflowError(f"consumer protocol {what}: no data")
        self.buf = memoryview(data).cast("B")
        self.pos = 0
        self.what = what

    def _need(self, n: int, field_name: str) -> int:
        start = self.pos
        if start + n > len(self.buf):
            raise BufferUnderflowError(
                f"consumer protocol {self.what}: {field_name} needs {n} bytes at offset {start},"
                f" only {len(self.buf) - start} left"
            )
        self.pos = start + n
        return start

    def int16(self, field_name: str) -> int:
        return _I16.unpack_from(self.buf, self._need(2, field_name))[0]

    def int32(self, field_name: str) -> int:
        return _I32.unpack_from(self.buf, self._need(4, field_name))[0]

    def string(self, field_name: str) -> str:
        return self._text(self.int16(field_name), field_name)

    def nullable_string(self, field_name: str) -> str | None:
        n = self.int16(field_name)
        return None if n == -1 else self._text(n, field_name)

    def _text(self, n: int, field_name: str) -> str:
        """The UTF-8 string of length ``n`` (just read) at the current position."""
        if n < 0:
            raise InvalidLengthError(f"consumer protocol {self.what}: {field_name} has length {n}")
        start = self._need(n, field_name)
        try:
            return str(self.buf[start:start + n], "utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"consumer protocol {self.what}: {field_name} is not UTF-8: {e}") from None

    def nullable_bytes(self, field_name: str) -> bytes | None:
        n = self.int32(field_name)
        if n == -1:
            return None
        if n < 0:
            raise InvalidLengthError(f"consumer protocol {self.what}: {field_name} has length {n}")
        start = self._need(n, field_name)
        return bytes(self.buf[start:start + n])

    def count(self, field_name: str, min_element_size: int) -> int:
        n = self.int32(field_name)
        if n < 0:
            raise InvalidLengthError(f"consumer protocol {self.what}: {field_name} has count {n}")
        # Refuse a count the remaining bytes cannot hold before building anything from it.
        if n * min_element_size > len(self.buf) - self.pos:
            raise InvalidLengthError(
                f"consumer protocol {self.what}: {field_name} count {n} exceeds the"
                f" {len(self.buf) - self.pos} bytes left"
            )
        return n

    def topic_partitions(self, field_name: str) -> list[TopicPartition]:
        result: list[TopicPartition] = []
        # each entry is at least a 2-byte topic length and a 4-byte partition count
        for _ in range(self.count(field_name, 6)):
            topic = self.string(field_name + ".topic")
            for _ in range(self.count(field_name + ".partitions", 4)):
                p = self.int32(field_name + ".partitions")
                if p < 0:
                    raise ProtocolError(
                        f"consumer protocol {self.what}: negative partition {p} for topic {topic!r}"
                    )
                result.append(TopicPartition(topic, p))
        return result


def deserialize_version(data) -> int:
    """The int16 version that prefixes subscription and assignment bytes."""
    return EmbeddedReader(data, "header").int16("version")


def deserialize_subscription(data, *, group_instance_id: str | None = None) -> Subscription:
    """Decode JoinGroup member metadata; ``group_instance_id`` comes from the JoinGroup member entry."""
    r = EmbeddedReader(data, "subscription")
    version = _check_version(r.int16("version"), "subscription")
    topics = tuple(r.string("topics") for _ in range(r.count("topics", 2)))
    user_data = r.nullable_bytes("user_data")
    owned = tuple(r.topic_partitions("owned_partitions")) if version >= 1 else ()
    generation_id = r.int32("generation_id") if version >= 2 else -1
    rack_id = r.nullable_string("rack_id") if version >= 3 else None
    return Subscription(
        topics=topics,
        user_data=user_data,
        owned_partitions=owned,
        generation_id=generation_id,
        rack_id=rack_id or None,  # Kafka treats an empty rack as no rack
        group_instance_id=group_instance_id,
    )


def deserialize_assignment(data) -> Assignment:
    """Decode a SyncGroup assignment.

    Empty bytes (fewer than the 2-byte version) raise BufferUnderflowError, as in Kafka: the
    broker sends them when the leader's assignor left this member out, which is a leader bug
    the coordinator should log and answer with a rejoin.
    """
    if data is not None and len(data) < 2:
        raise BufferUnderflowError(
            f"consumer protocol assignment has {len(data)} bytes, fewer than its version prefix;"
            " the group leader's assignor probably returned nothing for this member"
        )
    r = EmbeddedReader(data, "assignment")
    _check_version(r.int16("version"), "assignment")
    partitions = r.topic_partitions("assigned_partitions")
    user_data = r.nullable_bytes("user_data")
    return Assignment(partitions=tuple(partitions), user_data=user_data)
