"""Columnar poll results: a partition's records as arrays instead of one object per record.

``KafkaConsumer.poll_columnar()`` returns ``{TopicPartition: ColumnarRecords}``. The arrays
come from kcore.records.decode_columnar: offsets and timestamps are int64 buffers, keys
and values are (position, length) pairs into one data buffer, which is the fetch response
itself when the batches were not compressed (nothing is copied per record).

``ColumnarRecords.to_arrow()`` gives a ``pyarrow.RecordBatch`` (offset, timestamp, key,
value, headers); numeric columns are zero-copy. Keep a result only as long as you need it:
while it is alive it keeps its fetch response in memory.
"""
from __future__ import annotations

from typing import Iterator, Literal

from kclient.structs import ConsumerRecord, TopicPartition

__all__ = ["ColumnarRecords", "ColumnarChunk"]


class ColumnarChunk:
    """One decoded answer (kcore ColumnarBatch) shared by the polls that drain it; its Arrow
    form is built once, then sliced per poll."""

    __slots__ = ("batch", "_arrow", "_arrow_view")

    def __init__(self, batch):
        self.batch = batch
        self._arrow = None
        self._arrow_view = None

    @property
    def num_records(self) -> int:
        return self.batch.num_records

    @property
    def offsets(self):
        return self.batch.offsets

    @property
    def batches(self):
        return self.batch.batches

    @property
    def next_offset(self) -> int:
        return self.batch.next_offset

    def arrow(self, binary_view: bool = False):
        if binary_view:
            if self._arrow_view is None:
                self._arrow_view = self.batch.to_arrow(binary_view=True)
            return self._arrow_view
        if self._arrow is None:
            self._arrow = self.batch.to_arrow()
        return self._arrow


class ColumnarRecords:
    """Rows of one partition returned by one ``poll_columnar()`` (in offset order)."""

    __slots__ = ("topic_partition", "_pieces", "_n")

    def __init__(self, tp: TopicPartition, pieces: list[tuple[ColumnarChunk, int, int]]):
        self.topic_partition = tp
        self._pieces = pieces
        self._n = sum(j - i for _, i, j in pieces)

    @property
    def pieces(self) -> list[tuple[ColumnarChunk, int, int]]:
        """The rows as (chunk, start, stop) slices of the fetched answers, in offset order: for
        code that makes records from the columns itself (``kclient.aio`` does, on its loop)."""
        return self._pieces

    @property
    def topic(self) -> str:
        return self.topic_partition.topic

    @property
    def partition(self) -> int:
        return self.topic_partition.partition

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return (f"ColumnarRecords({self.topic_partition}, records={self._n}, "
                f"offsets={self.first_offset}..{self.last_offset})")

    @property
    def first_offset(self) -> int:
        chunk, i, _ = self._pieces[0]
        return chunk.batch.offsets[i]

    @property
    def last_offset(self) -> int:
        chunk, _, j = self._pieces[-1]
        return chunk.batch.offsets[j - 1]

    def _column(self, name: str, fmt: Literal["b", "i", "q"]) -> memoryview:
        if len(self._pieces) == 1:
            chunk, i, j = self._pieces[0]
            return getattr(chunk.batch, name)[i:j]
        joined = b"".join(getattr(chunk.batch, name)[i:j].tobytes() for chunk, i, j in self._pieces)
        return memoryview(joined).cast(fmt)

    @property
    def offsets(self) -> memoryview:
        """int64 offsets (``numpy.asarray(r.offsets)`` views them without a copy)."""
        return self._column("offsets", "q")

    @property
    def timestamps(self) -> memoryview:
        return self._column("timestamps", "q")

    @property
    def timestamp_types(self) -> memoryview:
        return self._column("timestamp_types", "b")

    @property
    def key_lengths(self) -> memoryview:
        """int32 key lengths, -1 for a null key."""
        return self._column("key_lengths", "i")

    @property
    def value_lengths(self) -> memoryview:
        """int32 value lengths, -1 for a null value."""
        return self._column("value_lengths", "i")

    def _blobs(self, pos_name: str, len_name: str) -> list:
        out = []
        for chunk, i, j in self._pieces:
            b = chunk.batch
            data = b.data
            pos = getattr(b, pos_name)
            lens = getattr(b, len_name)
            for k in range(i, j):
                ln = lens[k]
                out.append(None if ln < 0 else bytes(data[pos[k]:pos[k] + ln]))
        return out

    def keys(self) -> list:
        """Keys as bytes (None for null): one object per record, for convenience."""
        return self._blobs("key_offsets", "key_lengths")

    def values(self) -> list:
        """Values as bytes (None for null): one object per record, for convenience."""
        return self._blobs("value_offsets", "value_lengths")

    def to_arrow(self, *, binary_view: bool = False):
        """A pyarrow.RecordBatch of these rows: offset, timestamp, key, value, headers."""
        slices = [chunk.arrow(binary_view).slice(i, j - i) for chunk, i, j in self._pieces]
        if len(slices) == 1:
            return slices[0]
        import pyarrow as pa
        return pa.Table.from_batches(slices).combine_chunks().to_batches()[0]

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """ConsumerRecord objects (slow path, for inspection and tests)."""
        tp = self.topic_partition
        keys, values = self.keys(), self.values()
        k = 0
        for chunk, i, j in self._pieces:
            b = chunk.batch
            offs, ts, tts = b.offsets, b.timestamps, b.timestamp_types
            hs = b.header_starts
            hko, hkl, hvo, hvl = b.header_key_offsets, b.header_key_lengths, b.header_value_offsets, b.header_value_lengths
            data = b.data
            for row in range(i, j):
                headers = []
                for h in range(hs[row], hs[row + 1]):
                    key = bytes(data[hko[h]:hko[h] + hkl[h]]).decode("utf-8", "replace")
                    val = None if hvl[h] < 0 else bytes(data[hvo[h]:hvo[h] + hvl[h]])
                    headers.append((key, val))
                key, value = keys[k], values[k]
                k += 1
                hsize = -1 if not headers else sum(len(a.encode()) + (len(v) if v else 0) for a, v in headers)
                yield ConsumerRecord(tp.topic, tp.partition, epoch_of_row(b, row), offs[row], ts[row], tts[row],
                                     key, value, headers, None, -1 if key is None else len(key),
                                     -1 if value is None else len(value), hsize)


def epoch_of_row(batch, row: int) -> int:
    """The partition leader epoch of the record batch that holds row ``row`` of a decoded
    (kcore ColumnarBatch) answer, -1 if unknown."""
    for b in reversed(batch.batches):
        if b.record_start <= row < b.record_end:
            return b.partition_leader_epoch
    return -1
