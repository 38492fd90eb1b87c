"""The RecordBatch v2 encoder (compiled): build batches record by record or in one call."""
from __future__ import annotations

from typing import Iterable, Sequence

Header = tuple[str, bytes | None]
# (offset_delta or None for "position in the list", timestamp_ms, key, value, headers)
RecordTuple = tuple[int | None, int, bytes | None, bytes | None, Sequence[Header] | None]


class RecordBatchBuilder:
    """Accumulates the records of one v2 batch (encoded as they are appended).

    base_timestamp: the batch's base timestamp; default: the first record's timestamp.
    """
    def __init__(self, *, base_timestamp: int | None = None) -> None: ...
    def __len__(self) -> int: ...
    @property
    def size_in_bytes(self) -> int:
        """Exact size of the batch if built uncompressed now."""
    def append(self, timestamp_ms: int, key: bytes | bytearray | memoryview | None,
               value: bytes | bytearray | memoryview | None,
               headers: Sequence[tuple[str | bytes, bytes | None]] | None = None,
               offset_delta: int | None = None) -> int:
        """Encode one record (offset_delta default: its position); returns its size."""
    def build(self, *, base_offset: int = 0, codec: int = 0,
              compression_level: int | None = None, timestamp_type: int = 0,
              producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
              transactional: bool = False, control: bool = False,
              partition_leader_epoch: int = -1, max_timestamp: int | None = None,
              last_offset_delta: int | None = None,
              has_delete_horizon: bool = False) -> bytes:
        """The complete batch with its CRC32C.  max_timestamp default: the largest record
        timestamp; last_offset_delta default: the last record's delta."""


def encode_batch(
    records: Iterable[RecordTuple],
    *,
    base_offset: int = 0,
    codec: int = 0,
    timestamp_type: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    compression_level: int | None = None,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    has_delete_horizon: bool = False,
) -> bytes:
    """One v2 batch from (offset_delta|None, timestamp_ms, key, value, headers) tuples.

    Uncompressed output is byte-identical to the broker's bytes for the same fields (the
    overrides exist so any batch, compacted ones included, can be rebuilt exactly).
    Snappy is written in xerial framing and lz4 as a frame with independent blocks, the
    formats the Java client reads and writes.
    """


def control_record(control_type: int, coordinator_epoch: int = 0,
                   version: int = 0) -> tuple[bytes, bytes]:
    """(key, value) of an end-transaction marker record (0 abort, 1 commit)."""
