"""A share consumer's columnar poll result: ``ColumnarRecords`` plus delivery counts.

``KafkaShareConsumer.poll_columnar()`` returns ``{TopicPartition: ShareColumnarRecords}``:
the arrays of ``KafkaConsumer.poll_columnar`` (offsets, timestamps, keys and values as
positions into the fetched bytes, ``to_arrow()``) for the rows the broker acquired for this
member, with ``delivery_counts`` (int16, one per row) and ``offset_ranges`` (the rows'
offsets as (first, last) runs, what ``acknowledge_batch`` acknowledges). No Python object is
made per record.
"""
from __future__ import annotations

import bisect
from array import array
from typing import Iterator

from kclient.consumer.columnar import ColumnarChunk, ColumnarRecords
from kclient.share.records import ShareConsumerRecord
from kclient.structs import TopicPartition

__all__ = ["ShareColumnarRecords", "rows_of_range", "runs_of_rows"]


def rows_of_range(chunk: ColumnarChunk, first: int, last: int, lo: int = 0, hi: int | None = None) -> tuple[int, int]:
    """The rows ``i..j-1`` of ``chunk`` whose offsets lie in ``first..last`` (offsets ascend)."""
    offsets = chunk.offsets
    hi = len(offsets) if hi is None else hi
    return bisect.bisect_left(offsets, first, lo, hi), bisect.bisect_right(offsets, last, lo, hi)


def runs_of_rows(chunk: ColumnarChunk, i: int, j: int) -> list[tuple[int, int]]:
    """The offsets of rows ``i..j-1`` as (first, last) runs of consecutive offsets; one run
    unless the rows skip offsets (control records, compacted ones)."""
    if i >= j:
        return []
    offsets = chunk.offsets
    if offsets[j - 1] - offsets[i] == j - i - 1:
        return [(offsets[i], offsets[j - 1])]
    runs: list[tuple[int, int]] = []
    start = prev = offsets[i]
    for k in range(i + 1, j):
        o = offsets[k]
        if o != prev + 1:
            runs.append((start, prev))
            start = o
        prev = o
    runs.append((start, prev))
    return runs


class ShareColumnarRecords(ColumnarRecords):
    """Rows of one partition acquired by one share poll (in offset order)."""

    __slots__ = ("_counts", "_runs")

    def __init__(self, tp: TopicPartition, pieces: list[tuple[ColumnarChunk, int, int]], counts: array):
        super().__init__(tp, pieces)
        if len(counts) != self._n:
            raise ValueError(f"{len(counts)} delivery counts for {self._n} rows")
        self._counts = counts
        runs: list[tuple[int, int]] = []
        for chunk, i, j in pieces:
            for first, last in runs_of_rows(chunk, i, j):
                if runs and runs[-1][1] + 1 == first:
                    runs[-1] = (runs[-1][0], last)
                else:
                    runs.append((first, last))
        self._runs = runs

    @property
    def delivery_counts(self) -> memoryview:
        """int16 delivery counts, one per row (1 on a record's first delivery)."""
        return memoryview(self._counts)

    @property
    def offset_ranges(self) -> list[tuple[int, int]]:
        """The rows' offsets as (first, last) runs of consecutive offsets."""
        return list(self._runs)

    def select(self, first: int, last: int) -> "ShareColumnarRecords | None":
        """The rows with offsets in ``first..last`` (None if there are none)."""
        pieces: list[tuple[ColumnarChunk, int, int]] = []
        counts = array("h")
        base = 0
        for chunk, i, j in self._pieces:
            a, b = rows_of_range(chunk, first, last, i, j)
            if a < b:
                pieces.append((chunk, a, b))
                counts.extend(self._counts[base + a - i:base + b - i])
            base += j - i
        return ShareColumnarRecords(self.topic_partition, pieces, counts) if pieces else None

    def __iter__(self) -> Iterator[ShareConsumerRecord]:   # type: ignore[override]
        """ShareConsumerRecord objects (slow path, for inspection and tests)."""
        counts = self._counts
        for k, record in enumerate(super().__iter__()):
            yield ShareConsumerRecord(*record, counts[k])
