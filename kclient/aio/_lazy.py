"""Records made on the event loop, from decoded columns, as getmany()/getone() hand them out.

The worker thread polls columns (decoded and checked without the GIL, no object per record)
and the loop makes each record only when it hands it out, one batch at a time. Had the worker
made a whole poll's records, it would hold the GIL for the length of that C call, and the loop
(which waits up to the interpreter's switch interval, 5 ms, before it even asks for the GIL)
would wait for both. Made here, a batch of records costs the loop about as long as the
application's own work on it, and the worker holds the GIL only for short bookkeeping.
"""
from __future__ import annotations

from typing import Any, Iterator, overload

from kcore.records import consumer_records

from kclient.consumer.columnar import ColumnarRecords
from kclient.structs import ConsumerRecord

__all__ = ["LazyRecords"]


class LazyRecords:
    """The rows of one ``ColumnarRecords`` as a read-only sequence of ConsumerRecords.

    A slice is a new list of new records (what getmany() hands out; getone() takes slices
    too, see RecordBuffer.take_one), so records are made a batch at a time.
    """

    __slots__ = ("_topic", "_partition", "_pieces", "_starts", "_n", "_views")

    def __init__(self, columns: ColumnarRecords, views: bool):
        tp = columns.topic_partition
        self._topic = tp.topic
        self._partition = tp.partition
        # (decoded answer, first row, end row) per answer the poll drained, as the fetch
        # collector made them; the rows are made into records from these.
        self._pieces = columns.pieces
        starts = []
        n = 0
        for _, i, j in self._pieces:
            starts.append(n)
            n += j - i
        self._starts = starts
        self._n = n
        self._views = views

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Any]:
        return iter(self._make(0, self._n))

    @overload
    def __getitem__(self, key: int) -> Any: ...
    @overload
    def __getitem__(self, key: slice) -> list: ...

    def __getitem__(self, key: Any) -> Any:
        n = self._n
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                return self._make(0, n)[key]
            return self._make(start, stop) if stop > start else []
        if key < 0:
            key += n
        if not 0 <= key < n:
            raise IndexError("record index out of range")
        return self._make(key, key + 1)[0]

    def _make(self, start: int, stop: int) -> list:
        """New records for rows start..stop-1."""
        out: list | None = None
        starts = self._starts
        for k, (chunk, i, j) in enumerate(self._pieces):
            first = starts[k]
            last = first + (j - i)
            if last <= start:
                continue
            if first >= stop:
                break
            lo = i + max(start - first, 0)
            hi = i + min(stop - first, j - i)
            part = consumer_records(chunk.batch, ConsumerRecord, self._topic, self._partition, lo, hi,
                                    views=self._views)
            if out is None:
                out = part
            else:
                out.extend(part)
        return out if out is not None else []
