"""A share consumer's records: consumer records inside the acquired ranges, with their delivery
counts (compiled)."""
from typing import Any, Iterable, TypeVar

_R = TypeVar("_R")


def share_records(
    records: list[Any],
    record_cls: type[_R],
    ranges: Iterable[tuple[int, int, int]],
    *,
    gc_untrack: bool = True,
) -> tuple[list[_R], list[tuple[int, int]], list[tuple[int, int]]]:
    """``(share records, held runs, gap runs)`` of one partition's ShareFetch answer.

    records: consumer records (13-item tuples, as kcore.records.decode_consumer_records makes
    them) in ascending offset order. ranges: the acquired ranges ``(first offset, last offset,
    delivery count)``, ascending and disjoint. Each record inside a range becomes
    ``record_cls(*record, delivery_count)`` (record_cls: a namedtuple class of 14 fields);
    records outside every range are left out. Held runs: the offsets of the records returned,
    as (first, last) runs of consecutive offsets. Gap runs: offsets inside a range without a
    record.

    gc_untrack (default True): the new records are not tracked by the cyclic garbage collector,
    as decode_consumer_records' (see there).

    TypeError for a record_cls that is not a 14-field tuple class, a record that is not a
    13-item tuple or whose offset is not an int, a range that is not a 3-tuple of ints;
    ValueError for a range whose last offset precedes its first, a negative offset, ranges
    out of order or overlapping, records out of ascending offset order; OverflowError for an
    offset outside int64. Nothing is returned on error.
    """


def acquired_rows(offsets: Any, ranges: Iterable[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """The rows of a decoded answer (``offsets``: its int64 offsets column, as
    ``ColumnarBatch.offsets``) whose offsets lie in the acquired ranges, as ``(start, stop)``
    row spans (stop excluded; adjacent spans merged), so only those rows are made into records.

    ValueError for offsets not strictly ascending, or ranges as ``share_records`` refuses
    them; TypeError for a range that is not a 3-tuple or no buffer; ValueError or BufferError for a
    buffer that is not contiguous int64.
    """


def share_records_of(
    batch: Any,
    record_cls: type[_R],
    topic: str,
    partition: int,
    ranges: Iterable[tuple[int, int, int]],
    *,
    gc_untrack: bool = True,
) -> tuple[list[_R], list[tuple[int, int]], list[tuple[int, int]]]:
    """``share_records`` made straight from a columnar decode, in one step: ``(share records,
    held runs, gap runs)`` of one partition's ShareFetch answer.

    batch: ``kcore.records.decode_columnar``'s result for the answer's bytes (offsets strictly
    ascending). Each row whose offset lies in an acquired range becomes
    ``record_cls(topic, partition, leader_epoch, offset, timestamp, timestamp_type, key,
    value, headers, None, serialized_key_size, serialized_value_size,
    serialized_header_size, delivery_count)``, item for item what ``consumer_records`` and
    then ``share_records`` make (key and value copied into bytes); no consumer record is made
    in between. Rows outside every range are left out. Held and gap runs as ``share_records``.

    TypeError for a record_cls that is not a 14-field namedtuple class, a batch not made by
    decode_columnar, a range that is not a 3-tuple of ints; ValueError for offsets not
    strictly ascending, ranges as ``share_records`` refuses them, a row whose key, value or
    headers lie outside the data or that belongs to no batch; OverflowError for an offset
    outside int64. Nothing is returned on error.
    """


def share_record_type(cls: type[_R]) -> type[_R]:
    """A compiled twin of the namedtuple class ``cls``, as ``kcore.records.record_type`` makes
    (fields read like instance slots, everything a namedtuple offers unchanged), whose freed
    instances are reused by ``share_records_of``: a poll's share records take the memory of
    the previous poll's. TypeError for anything but a class made by collections.namedtuple."""
