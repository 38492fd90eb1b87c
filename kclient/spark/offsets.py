"""Streaming offsets as Spark checkpoints them, and the per-trigger rate limit.

A streaming query's offset is JSON ``{"topic": {"partition": offset}}`` (partition numbers as
strings, offsets as the next record to read), the shape Spark's Kafka source writes to its
offset log: a checkpoint stays readable by a person, and one written by this source names
the same positions that Spark's would.

``rate_limit(start, end, max_records)`` is ``maxOffsetsPerTrigger``: end offsets admitting at
most ``max_records`` records in all, split across partitions in proportion to what each has
waiting. Plain Python, no pyspark.
"""
from __future__ import annotations

from typing import Any, Mapping

from kclient import errors as Errors
from kclient.structs import TopicPartition

__all__ = ["to_json_offsets", "from_json_offsets", "rate_limit"]

PartitionOffsets = dict[TopicPartition, int]


def to_json_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """{TopicPartition: offset} -> {"topic": {"0": offset}}, sorted (stable checkpoints)."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_json_offsets(value: Any) -> PartitionOffsets:
    """The inverse of to_json_offsets; a malformed offset (a checkpoint written by another
    source, or edited by hand) raises naming what is wrong."""
    if not isinstance(value, Mapping):
        raise Errors.IllegalStateError(f"a kclient streaming offset is a JSON object, got {value!r}")
    out: PartitionOffsets = {}
    for topic, parts in value.items():
        if not isinstance(parts, Mapping):
            raise Errors.IllegalStateError(f"streaming offset of topic {topic!r} must map partitions to offsets, "
                                           f"got {parts!r}")
        for p, off in parts.items():
            try:
                partition = int(p)
            except (TypeError, ValueError):
                raise Errors.IllegalStateError(f"streaming offset: partition {p!r} of {topic!r} is not a number") \
                    from None
            if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                raise Errors.IllegalStateError(f"streaming offset of {topic}-{partition} must be an offset >= 0, "
                                               f"got {off!r}")
            out[TopicPartition(str(topic), partition)] = off
    return out


def rate_limit(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
               max_records: int) -> PartitionOffsets:
    """End offsets that admit at most max_records records from start (partitions missing
    from start begin at their end: nothing to read).

    Each partition gets the whole part of its proportional share; the records left over
    (the fractions add up to a whole number) go one each by largest fraction, to partitions
    whose share rounded to nothing first: a partition with little waiting next to a busy one
    still moves every few triggers instead of starving. The total never exceeds max_records."""
    if max_records < 1:
        raise ValueError(f"max_records must be >= 1, got {max_records}")
    waiting = {tp: end[tp] - start.get(tp, end[tp]) for tp in end}
    total = sum(n for n in waiting.values() if n > 0)
    if total <= max_records:
        return dict(end)
    out = dict(end)
    shares: dict[TopicPartition, int] = {}
    fractions = []
    for tp in sorted(end):
        n = waiting[tp]
        if n <= 0:
            continue
        whole, rest = divmod(n * max_records, total)     # exact: integers, no float rounding
        shares[tp] = whole
        fractions.append((whole > 0, -rest, tp))
    left = max_records - sum(shares.values())
    for _, _, tp in sorted(fractions)[:left]:
        shares[tp] += 1
    for tp, share in shares.items():
        out[tp] = start[tp] + share
    return out
