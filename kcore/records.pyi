"""Kafka record batches: decode (per record or columnar); the encoder (kcore.builder), the
checksums (kcore.crc), ColumnarBatch (kcore.columnar) and the layout constants
(kcore.layout) are re-exported.

Input of both decoders is the "records" bytes of ONE partition from a Fetch response
(bytes, bytearray, memoryview slice: any contiguous buffer; None = no records).  It may hold
RecordBatch v2 (magic 2) batches and legacy v0/v1 messages (written before an in-place
upgrade), compressed or not.

Errors (all kcore.errors.KafkaError subclasses):
  CrcMismatchError         CRC32C (v2) / CRC32 (v0/v1) does not match (check_crcs=True)
  InvalidRecordLengthError a length/count is negative or larger than the bytes around it
  RecordVarintError        a varint is longer than its type allows
  CorruptRecordError       any other inconsistency inside a complete batch (base class of all
                           of these: catch it to handle every corrupt-data case)
  UnsupportedCodecError    compression codec id 5..7 (or zstd in format v0/v1)
  DecompressionError       compressed payload is corrupt
  DecompressionLimitError  a batch would decompress to more than the bound
A partial batch at the end of the input (a broker cuts responses at max bytes) is NOT an
error: decoding stops there and reports it (partial_trailing_bytes, incomplete_batch_size).

Decompression bound (max_decompressed_bytes, per batch): None selects the default policy
max(64 MiB, 64 x the batch's compressed size); an int is an absolute bound.  The output is
never allocated beyond bound + 1 bytes (see kcore.compression).

Threads: the CRC, decompression and the scan of every batch run without the GIL; only
Record / consumer-record object creation (per-record paths) holds it.
"""
from __future__ import annotations

from typing import Generic, Iterable, Iterator, Mapping, TypeVar

# Re-exported from the modules that define them (kcore.records stays the one import).
from kcore.builder import RecordBatchBuilder as RecordBatchBuilder
from kcore.builder import control_record as control_record
from kcore.builder import encode_batch as encode_batch
from kcore.columnar import ColumnarBatch as ColumnarBatch
from kcore.fetchscan import ScannedRecords
from kcore.crc import CRC32C_HARDWARE as CRC32C_HARDWARE
from kcore.crc import crc32_ieee as crc32_ieee
from kcore.crc import crc32c as crc32c
from kcore.crc import crc32c_hw as crc32c_hw
from kcore.crc import crc32c_sw as crc32c_sw
from kcore.layout import CONTROL_ABORT as CONTROL_ABORT
from kcore.layout import CONTROL_COMMIT as CONTROL_COMMIT
from kcore.layout import NO_PRODUCER_ID as NO_PRODUCER_ID
from kcore.layout import TIMESTAMP_CREATE_TIME as TIMESTAMP_CREATE_TIME
from kcore.layout import TIMESTAMP_LOG_APPEND_TIME as TIMESTAMP_LOG_APPEND_TIME
from kcore.layout import TIMESTAMP_NONE as TIMESTAMP_NONE

Header = tuple[str, bytes | None]
# AbortedTransaction of a Fetch response: (producer_id, first_offset) or the decoded dict
AbortedTransaction = tuple[int, int] | Mapping[str, int]
_R = TypeVar("_R")


class Record:
    """One record.  Immutable; not tracked by the cyclic GC; picklable.

    Batch-level fields are copied onto every record: leader_epoch (-1 = unknown),
    producer_id/producer_epoch (-1 = none), is_transactional, is_control and control_type
    (0 abort marker, 1 commit marker, other KRaft control types, -1 for data records).
    topic/partition are whatever the caller passed to decode_records (None/-1 by default),
    so a Record can serve directly as a consumer record.
    """
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def timestamp_type(self) -> int:
        """-1 none (v0), 0 CreateTime, 1 LogAppendTime."""
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> list[Header]:
        """Header keys decoded as UTF-8 (malformed bytes become U+FFFD, as in Java)."""
    @property
    def leader_epoch(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def control_type(self) -> int: ...
    @property
    def topic(self) -> str | None: ...
    @property
    def partition(self) -> int: ...
    @property
    def serialized_key_size(self) -> int:
        """len(key), -1 for a null key (kafka-python's ConsumerRecord field)."""
    @property
    def serialized_value_size(self) -> int: ...


class BatchInfo:
    """One v2 batch, or one top-level legacy message (a compressed wrapper counts as one).

    record_start/record_end: the slice of DecodeResult.records (or of the columnar rows) this
    batch produced; empty when its records were skipped (control batch with skip_control,
    aborted transaction, all offsets below fetch_offset).
    """
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int:
        """base offset + last offset delta (v2); the wrapper's offset (v0/v1)."""
    @property
    def next_offset(self) -> int:
        """last_offset + 1: where the next fetch starts (holds for compacted batches too)."""
    @property
    def partition_leader_epoch(self) -> int: ...
    @property
    def magic(self) -> int: ...
    @property
    def crc(self) -> int: ...
    @property
    def attributes(self) -> int: ...
    @property
    def codec(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
    @property
    def timestamp_type(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    @property
    def control_type(self) -> int:
        """Type of the batch's control record (0 abort, 1 commit); -1 if not a control batch."""
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def first_timestamp(self) -> int:
        """The batch's base timestamp field (the delete horizon when has_delete_horizon)."""
    @property
    def max_timestamp(self) -> int: ...
    @property
    def has_delete_horizon(self) -> bool: ...
    @property
    def delete_horizon_ms(self) -> int:
        """-1 unless attribute bit 6 is set (KIP-534)."""
    @property
    def record_count(self) -> int:
        """Declared record count (v2); inner message count for a legacy wrapper."""
    @property
    def position(self) -> int:
        """Byte offset of the batch in the input."""
    @property
    def size_in_bytes(self) -> int: ...
    @property
    def record_start(self) -> int: ...
    @property
    def record_end(self) -> int: ...
    @property
    def aborted(self) -> bool:
        """Skipped as part of an aborted transaction (read_committed filtering)."""


class DecodeResult(Generic[_R]):
    """Result of decode_records (records are Record objects) or decode_consumer_records
    (records are instances of its record_cls).  Iterating yields the records."""
    @property
    def records(self) -> list[_R]: ...
    @property
    def batches(self) -> list[BatchInfo]: ...
    @property
    def next_offset(self) -> int:
        """Last offset of the last complete batch + 1; -1 when no batch was complete."""
    @property
    def bytes_consumed(self) -> int:
        """Bytes of complete batches (bytes_consumed + partial_trailing_bytes == len(input))."""
    @property
    def partial_trailing_bytes(self) -> int:
        """Bytes of a trailing batch cut off by the fetch size (not an error)."""
    @property
    def incomplete_batch_size(self) -> int:
        """Full size of that trailing batch if its 12-byte prefix was present, else -1."""
    @property
    def first_batch_incomplete(self) -> bool:
        """No batch was complete and bytes were left: the fetch size is smaller than the
        first batch (tell the user to raise max.partition.fetch.bytes to at least
        incomplete_batch_size, as Java's RecordTooLargeException does)."""
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[_R]: ...


def decode_records(
    data: bytes | bytearray | memoryview | None,
    *,
    check_crcs: bool = True,
    max_decompressed_bytes: int | None = None,
    skip_control: bool = False,
    fetch_offset: int = -1,
    aborted_transactions: Iterable[AbortedTransaction] | None = None,
    topic: str | None = None,
    partition: int = -1,
) -> DecodeResult[Record]:
    """Decode one partition's fetched bytes into Record objects.

    skip_control: leave control records (transaction markers) out of `records` (their
    batches still appear in `batches` with control_type set).
    fetch_offset: drop records with a smaller offset (a fetch returns whole batches, which
    can start before the requested offset).
    aborted_transactions: when given (even empty), apply Kafka's read_committed rule with
    the Fetch response's aborted transactions: data batches of an aborted transaction are
    skipped (BatchInfo.aborted) and an abort marker ends its producer's aborted range.
    topic/partition: copied onto every Record.
    """


def decode_consumer_records(
    data: bytes | bytearray | memoryview | None,
    record_cls: type[_R],
    topic: str | None,
    partition: int,
    *,
    check_crcs: bool = True,
    max_decompressed_bytes: int | None = None,
    fetch_offset: int = -1,
    aborted_transactions: Iterable[AbortedTransaction] | None = None,
    gc_untrack: bool = True,
) -> DecodeResult[_R]:
    """Decode one partition's fetched bytes straight into consumer records: ONE object per
    record, built in C (no Record, no Python conversion loop).

    record_cls: a namedtuple class with kafka-python's 13 ConsumerRecord fields
    (the consumer's ConsumerRecord), or any tuple subclass with ``__slots__ = ()`` and 13
    ``_fields``; TypeError otherwise.  Each record is
    ``record_cls(topic, partition, leader_epoch, offset, timestamp, timestamp_type, key,
    value, headers, None, serialized_key_size, serialized_value_size,
    serialized_header_size)`` with key/value as bytes (None when null), headers a new list
    of (str, bytes | None) per record (empty list without headers), sizes -1 for a null
    key/value and a header size of -1 without headers (else the UTF-8 bytes of the keys as
    decoded plus the value bytes).  Equal to decode_records(skip_control=True, ...) converted
    field by field; the other results (batches, next_offset, partial bytes) and every error
    are the same as decode_records'.  Control records are always left out.

    gc_untrack (default True): the records, their header lists and header pairs are not
    tracked by the cyclic garbage collector.  They refer only to str/int/bytes/None and
    their own headers list, so nothing can form a cycle through them unless the
    application puts an object that refers back to the record into its headers list
    (``rec.headers.append(rec)``): such a cycle is never collected (break it by clearing
    the list).  Tracked, every record and empty list is walked by each generation-0
    collection (one every ~350 records at the default threshold), and the records a
    consumer keeps buffered again by every older-generation collection: measured on 1 M x
    100 B records through KafkaConsumer.poll(), 0.9-1.06 us of CPU per record tracked
    against 0.42-0.46 us untracked.  Pass False to keep ordinary GC tracking.
    """


def decode_columnar(
    data: bytes | bytearray | memoryview | None,
    *,
    check_crcs: bool = True,
    max_decompressed_bytes: int | None = None,
    skip_control: bool = True,
    fetch_offset: int = -1,
    aborted_transactions: Iterable[AbortedTransaction] | None = None,
    scanned: ScannedRecords | None = None,
) -> ColumnarBatch:
    """Decode one partition's fetched bytes into a ColumnarBatch (same options as
    decode_records; control records are skipped by default here). ``scanned``: a receive
    thread's scan of these same bytes (kcore.fetchscan), from which the arrays are made
    without decoding again when it can stand in for the decode (it is used up either way)."""


def consumer_records(
    batch: ColumnarBatch,
    record_cls: type[_R],
    topic: str | None,
    partition: int,
    start: int,
    stop: int,
    *,
    gc_untrack: bool = True,
    views: bool = False,
) -> list[_R]:
    """Rows start..stop-1 of a decode_columnar result (made with skip_control=True) as
    consumer records: a new list of new record_cls instances, each exactly as
    decode_consumer_records builds it from the same bytes (same fields, same types, each
    with its own headers list, its batch's partition leader epoch; record_cls and
    gc_untrack as there).

    For a consumer handing records out a few hundred at a time: the bytes are validated
    and CRC-checked once (decode_columnar, which raises every decoding error), and each
    poll makes only its own records, which the application then reads while they are
    still in the CPU's cache (decode_consumer_records makes every record of a fetched
    partition at once: ~3 MB of objects for a 1 MB answer). The records own their bytes:
    they stay valid after the batch is gone.

    views=True: each key and value is a read-only memoryview into the batch's data instead
    of a bytes copy (headers stay bytes). A view holds that data (the buffer the batch was
    decoded from, or its decompressed copy) alive for as long as it is referenced, so it
    stays valid after the batch is gone, and never points into freed memory.

    IndexError unless 0 <= start <= stop <= batch.num_records; TypeError for a record_cls
    decode_consumer_records refuses; TypeError or ValueError, never a crash, for a batch
    whose batches list was changed so that a row has no batch.
    """


_T = TypeVar("_T", bound=type)


def record_type(cls: _T) -> _T:
    """A compiled twin of the namedtuple class cls (made by collections.namedtuple): a new
    tuple subclass with cls's name, module, qualname, fields, docs and methods (__new__,
    _make, _replace, _asdict, __repr__, __getnewargs__, __match_args__, ...), so instances
    unpack, compare, hash, pickle and print as cls's do.

    Two differences, both for the per-record path: each field is a read-only member
    descriptor at its tuple slot (CPython specialises ``rec.value`` as an instance-slot
    read; namedtuple's getters cannot be specialised), and freed instances keep their
    memory on a bounded free list (up to 32,768 per field count) that consumer_records and
    decode_consumer_records take from. A Python subclass of the result works as a
    namedtuple subclass does; its instances are freed normally. Assigning a field raises
    AttributeError, as for a namedtuple.

    TypeError unless cls is a direct tuple subclass with ``__slots__ = ()`` and str fields;
    ValueError for more than 32 fields.
    """


def record_freelist_len(fields: int) -> int:
    """How many freed record-type instances with this many fields wait for reuse (0 where
    the free list is not used: free-threaded and 3.14+ builds)."""


def record_freelist_clear() -> None:
    """Give the memory of every freed record-type instance, and of the empty headers lists
    kept from freed consumer records for the next ones, back to the allocator."""
