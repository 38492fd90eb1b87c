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
