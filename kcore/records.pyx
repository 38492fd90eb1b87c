# cython: language_level=3
"""Kafka record batches: decode one partition's fetched bytes per record or into columns.

Layout knowledge: RecordBatch v2 (magic 2) and the legacy message sets v0/v1 still found in
logs written before an in-place upgrade; field positions are named in kcore.layout.
This module runs a decode; its parts live in their own modules:
  kcore.scan      nogil validation of batch bodies into position arrays
  kcore.crc       CRC32C / CRC32 checksums
  kcore.pool      recycled array blocks
  kcore.columnar  ColumnarBatch (the arrays handed over) and its Arrow conversion
  kcore.builder   the encoder (RecordBatchBuilder, encode_batch, control_record)
Their public names are re-exported here, so ``kcore.records`` stays the one import.

How a fetch response's "records" bytes are decoded:
  1. walk the entries (12-byte offset+length prefix, then magic at byte 16);
     a trailing entry longer than the bytes left is the partial batch a broker leaves when it
     cuts a response at max bytes: not an error, reported as partial_trailing_bytes;
  2. per batch, under `nogil`: CRC, then a scan that validates every length and varint and
     records positions into C arrays (RecCols); compressed batches are first decompressed
     into a bounded buffer by kcore.compression (cramjam releases the GIL itself);
  3. with the GIL: only object creation (per-record paths: Record objects, or the consumer's
     namedtuples built directly in C by decode_consumer_records), or nothing at all beyond
     handing the arrays over as buffers (columnar path); consumer_records then builds the
     consumer's namedtuples from those arrays, a slice of rows at a time (the fetcher's
     per-record path: each poll makes only the records it returns).
Anything inconsistent inside a complete batch raises a kcore.errors.CorruptRecordError
subclass (CrcMismatchError, InvalidRecordLengthError, RecordVarintError, ...).
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                          uint64_t, intptr_t, INT32_MAX)
from cpython.object cimport PyObject, PyTypeObject
from cpython.unicode cimport PyUnicode_AsUTF8String
from libc.string cimport memcpy, memset
from cpython.pyport cimport PY_SSIZE_T_MAX

from kcore.columnar cimport ColumnarBatch as _ColumnarBatch
from kcore.consumerrecord cimport (KC_CONSUMER_FIELDS, kc_gc_untrack, kc_is_ascii, kc_record_new,
                                   kc_record_new_ref,
                                   kc_record_type_new, kc_rec_freelist_clear, kc_rec_freelist_len,
                                   kc_tuple_like)
from kcore.compression cimport (GrowBuf, growbuf_reserve, growbuf_free, growbuf_shrink,
                                decompression_limit, decompress_append)
from kcore.crc cimport crc32c_update
from kcore.fetchscan cimport BLOB_DONE, BLOB_SCANNING, BLOB_TAKEN, ScannedRecords, blobscan_step
from kcore.layout cimport (ENTRY_BASE_OFFSET, ENTRY_LENGTH, ENTRY_MAGIC, LOG_OVERHEAD,
                           V2_PARTITION_LEADER_EPOCH, V2_CRC, V2_ATTRIBUTES,
                           V2_LAST_OFFSET_DELTA, V2_BASE_TIMESTAMP, V2_MAX_TIMESTAMP,
                           V2_PRODUCER_ID, V2_PRODUCER_EPOCH, V2_BASE_SEQUENCE,
                           V2_RECORD_COUNT, V2_HEADER_SIZE, MIN_RECORD_BYTES,
                           LEGACY_ATTRIBUTES, LEGACY_MIN_SIZE, ATTR_CODEC_MASK,
                           ATTR_TIMESTAMP_TYPE, ATTR_TRANSACTIONAL, ATTR_CONTROL,
                           ATTR_DELETE_HORIZON)
from kcore.layout cimport TIMESTAMP_NONE as C_TIMESTAMP_NONE, CONTROL_ABORT as C_CONTROL_ABORT
from kcore.pool cimport CArray, carray
from kcore.scan cimport (E_OK, E_CORRUPT, E_LENGTH, E_VARINT, E_NOMEM, E_CRC, E_CODEC,
                         ScanErr, RecCols, V2Ctx, LegacyMsg, add_wrap, cols_prereserve, cols_reserve,
                         cols_release, scan_v2, control_type_of, parse_legacy, legacy_crc_ok,
                         store_one, scan_legacy_inner)
from kcore.wire cimport load_be16, load_be32, load_be64

cdef extern from "Python.h":
    void PyObject_GC_Track(object o)   # the list consumer_records fills untracked
    # Stores a reference the caller owns (no count change): a record goes into its list so.
    void kc_list_put "PyList_SET_ITEM"(object lst, Py_ssize_t i, PyObject* o)

from kcore.errors import (
    CorruptRecordError,
    CrcMismatchError,
    InvalidRecordLengthError,
    RecordVarintError,
    UnsupportedCodecError,
)
# Re-exported: the public record-batch API stays importable from kcore.records.
from kcore.builder import RecordBatchBuilder, control_record, encode_batch
from kcore.columnar import ColumnarBatch
from kcore.crc import CRC32C_HARDWARE, crc32_ieee, crc32c, crc32c_hw, crc32c_sw
from kcore.layout import (CONTROL_ABORT, CONTROL_COMMIT, NO_PRODUCER_ID, TIMESTAMP_CREATE_TIME,
                          TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NONE)
from kcore.pool import pool_stats as _pool_stats

cdef extern from *:
    """
    /* Asks for the cache line at p ahead of its use; never faults, whatever p is. */
    #if defined(__GNUC__)
    #define kc_prefetch(p) __builtin_prefetch((const void*)(p))
    #else
    #define kc_prefetch(p) ((void)(p))
    #endif
    """
    void kc_prefetch(const char* p) noexcept

cdef extern from *:
    """
    /* The buffer address of a memoryview (its view's buf). */
    static inline const char* kc_view_buf(PyObject* mv) {
        return (const char*)PyMemoryView_GET_BUFFER(mv)->buf;
    }
    """
    const char* kc_view_buf(object mv) noexcept


@cython.freelist(8192)
@cython.no_gc
@cython.final
cdef class Record:
    """One Kafka record.  timestamp_type: -1 none (v0), 0 CreateTime, 1 LogAppendTime.

    No GC tracking: a Record refers only to bytes, str and its headers list, so it cannot be
    part of a reference cycle unless a caller puts it inside its own headers list.
    """

    @property
    def headers(self):
        if self._headers is None:
            self._headers = []
        return self._headers

    @property
    def serialized_key_size(self):
        return -1 if self.key is None else len(self.key)

    @property
    def serialized_value_size(self):
        return -1 if self.value is None else len(self.value)

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, "
                f"timestamp_type={self.timestamp_type}, key={self.key!r}, "
                f"value={_short(self.value)}, headers={self.headers!r}"
                + (f", control_type={self.control_type}" if self.is_control else "") + ")")

    def __reduce__(self):
        return (_rebuild_record, (self.offset, self.timestamp, self.timestamp_type, self.key,
                                  self.value, self._headers, self.leader_epoch,
                                  self.producer_id, self.producer_epoch,
                                  self.is_transactional, self.is_control, self.control_type,
                                  self.topic, self.partition))


def _rebuild_record(offset, timestamp, timestamp_type, key, value, headers, leader_epoch,
                    producer_id, producer_epoch, is_transactional, is_control, control_type,
                    topic, partition):
    cdef Record r = Record.__new__(Record)
    r.offset = offset
    r.timestamp = timestamp
    r.timestamp_type = timestamp_type
    r.key = key
    r.value = value
    r._headers = headers
    r.leader_epoch = leader_epoch
    r.producer_id = producer_id
    r.producer_epoch = producer_epoch
    r.is_transactional = is_transactional
    r.is_control = is_control
    r.control_type = control_type
    r.topic = topic
    r.partition = partition
    return r


cdef str _short(object v):
    if v is not None and len(v) > 40:
        return repr(v[:40]) + f"...({len(v)} bytes)"
    return repr(v)


@cython.final
cdef class BatchInfo:
    """Metadata of one batch (v2) or one top-level legacy message (v0/v1, compressed or not).

    record_start/record_end index the records (or columnar rows) this batch produced.
    control_type: 0 abort marker, 1 commit marker, other values for KRaft control
    records, -1 when not a control batch.  aborted: skipped as an aborted transaction.
    """

    @property
    def next_offset(self):
        return self.last_offset + 1

    @property
    def has_delete_horizon(self):
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    def __repr__(self):
        return (f"BatchInfo(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"magic={self.magic}, codec={self.codec}, records={self.record_count}, "
                f"producer_id={self.producer_id}, transactional={self.is_transactional}, "
                f"control={self.is_control}, control_type={self.control_type}, "
                f"aborted={self.aborted})")


@cython.final
cdef class DecodeResult:
    """Records and batch metadata of one partition's fetched bytes.

    next_offset: last offset of the last complete batch + 1 (-1 when none was complete).
    partial_trailing_bytes: bytes of a trailing batch cut off by the fetch size (not an error).
    incomplete_batch_size: the full size of that trailing batch when its header was present,
    else -1; if `first_batch_incomplete`, the fetch size is too small for that batch.
    """

    @property
    def first_batch_incomplete(self):
        return self.partial_trailing_bytes > 0 and not self.batches

    def __len__(self):
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __repr__(self):
        return (f"DecodeResult(records={len(self.records)}, batches={len(self.batches)}, "
                f"next_offset={self.next_offset}, "
                f"partial_trailing_bytes={self.partial_trailing_bytes})")


cdef void v2_batch_info(BatchInfo b, const uint8_t* p) noexcept:
    """Fill b's fields from the v2 batch header at p (position, size and rows are the caller's)."""
    cdef int attrs = load_be16(p + V2_ATTRIBUTES)
    b.base_offset = <int64_t>load_be64(p + ENTRY_BASE_OFFSET)
    b.last_offset = add_wrap(b.base_offset, <int32_t>load_be32(p + V2_LAST_OFFSET_DELTA))
    b.partition_leader_epoch = <int32_t>load_be32(p + V2_PARTITION_LEADER_EPOCH)
    b.magic = 2
    b.crc = load_be32(p + V2_CRC)
    b.attributes = attrs
    b.codec = attrs & ATTR_CODEC_MASK
    b.timestamp_type = (attrs & ATTR_TIMESTAMP_TYPE) != 0
    b.is_transactional = (attrs & ATTR_TRANSACTIONAL) != 0
    b.is_control = (attrs & ATTR_CONTROL) != 0
    b.first_timestamp = <int64_t>load_be64(p + V2_BASE_TIMESTAMP)
    b.max_timestamp = <int64_t>load_be64(p + V2_MAX_TIMESTAMP)
    if attrs & ATTR_DELETE_HORIZON:
        b.delete_horizon_ms = b.first_timestamp
    b.producer_id = <int64_t>load_be64(p + V2_PRODUCER_ID)
    b.producer_epoch = <int16_t>load_be16(p + V2_PRODUCER_EPOCH)
    b.base_sequence = <int32_t>load_be32(p + V2_BASE_SEQUENCE)
    b.record_count = <int32_t>load_be32(p + V2_RECORD_COUNT)


# ============================================================================ the decoder
cdef class _Decoder:
    """State of one decode call (input buffer, options, scratch, arrays, results)."""
    cdef Py_buffer view
    cdef bint have_view
    cdef const uint8_t* data
    cdef Py_ssize_t size
    cdef bint check_crcs, skip_control, columnar, owned
    cdef object max_bytes
    cdef int64_t fetch_offset
    cdef GrowBuf scratch
    cdef RecCols cols
    cdef ScanErr err
    cdef bint read_committed
    cdef list aborted
    cdef Py_ssize_t aborted_idx
    cdef set aborted_pids
    cdef list batches
    cdef list records
    cdef object topic
    cdef int partition
    cdef object record_cls          # consumer-record mode: the namedtuple class (else None)
    cdef object partition_obj
    cdef bint untrack
    cdef int64_t last_ts            # timestamp object reused while records share a timestamp
    cdef object last_ts_obj
    cdef int64_t next_offset
    cdef Py_ssize_t consumed, partial, incomplete
    cdef Py_ssize_t est_total, est_max

    def __cinit__(self):
        self.have_view = False
        memset(&self.scratch, 0, sizeof(GrowBuf))
        memset(&self.cols, 0, sizeof(RecCols))
        self.batches = []
        self.records = []
        self.next_offset = -1
        self.incomplete = -1

    def __dealloc__(self):
        if self.have_view:
            PyBuffer_Release(&self.view)
        growbuf_free(&self.scratch)
        cols_release(&self.cols)

    cdef int open(self, object data, object aborted_transactions) except -1:
        if data is None:
            self.data = <const uint8_t*>b""
            self.size = 0
        else:
            PyObject_GetBuffer(data, &self.view, PyBUF_SIMPLE)
            self.have_view = True
            self.data = <const uint8_t*>self.view.buf
            self.size = self.view.len
        if aborted_transactions is not None:
            self.read_committed = True
            pairs = []
            for t in aborted_transactions:
                if isinstance(t, dict):
                    pairs.append((int(t["first_offset"]), int(t["producer_id"])))
                else:
                    pairs.append((int(t[1]), int(t[0])))
            pairs.sort()
            self.aborted = pairs
            self.aborted_idx = 0
            self.aborted_pids = set()
        return 0

    cdef int raise_scan(self, int64_t batch_offset, Py_ssize_t pos) except -1:
        cdef ScanErr* e = &self.err
        where = f" (batch at byte {pos}, base offset {batch_offset}"
        if e.index >= 0:
            where += f", record {e.index}"
        where += ")"
        what = (<bytes>e.what).decode()
        if e.code == E_NOMEM:
            raise MemoryError(what + where)
        if e.code == E_VARINT:
            raise RecordVarintError(f"malformed varint in {what}" + where)
        if e.code == E_LENGTH:
            raise InvalidRecordLengthError(f"{what}: {e.value}" + where)
        if e.code == E_CRC:
            raise CrcMismatchError(f"{what}: stored {e.value:#010x}" + where)
        if e.code == E_CODEC:
            raise UnsupportedCodecError(f"{what}: {e.value}" + where)
        if e.value:
            raise CorruptRecordError(f"{what}: {e.value}" + where)
        raise CorruptRecordError(f"{what}" + where)

    # ---- top level
    cdef void prepass(self) noexcept:
        """Read only the entry headers: record-count estimates to size the arrays once, and
        (columnar) whether any entry needs decompression, in which case the data is copied
        into one owned buffer; otherwise every position points into the caller's bytes."""
        cdef Py_ssize_t pos = 0, remaining, est
        cdef int32_t length, count
        cdef const uint8_t* p
        self.owned = False
        self.est_total = 0
        self.est_max = 0
        while True:
            remaining = self.size - pos
            if remaining < LOG_OVERHEAD + 5:
                break
            p = self.data + pos
            length = <int32_t>load_be32(p + ENTRY_LENGTH)
            if length < LEGACY_MIN_SIZE or length > remaining - LOG_OVERHEAD:
                break
            est = 1
            if p[ENTRY_MAGIC] == 2:
                if length + LOG_OVERHEAD < V2_HEADER_SIZE:
                    self.owned = self.columnar
                    break
                count = <int32_t>load_be32(p + V2_RECORD_COUNT)
                est = length // MIN_RECORD_BYTES
                if load_be16(p + V2_ATTRIBUTES) & ATTR_CODEC_MASK:
                    self.owned = self.columnar
                    est *= 4                    # a guess at the compression ratio
                if 0 <= count < est:
                    est = count
            elif p[LEGACY_ATTRIBUTES] & ATTR_CODEC_MASK:
                self.owned = self.columnar
            self.est_total += est
            if est > self.est_max:
                self.est_max = est
            pos += LOG_OVERHEAD + length

    cdef int run(self) except -1:
        cdef Py_ssize_t pos = 0, remaining, total
        cdef int32_t length
        cdef int magic
        cdef const uint8_t* p
        while True:
            remaining = self.size - pos
            if remaining == 0:
                break
            p = self.data + pos
            if remaining < LOG_OVERHEAD:
                self.partial = remaining
                break
            length = <int32_t>load_be32(p + ENTRY_LENGTH)
            if length < LEGACY_MIN_SIZE:
                raise InvalidRecordLengthError(
                    f"batch at byte {pos}: size {length} is below the minimum of "
                    f"{LEGACY_MIN_SIZE}")
            total = <Py_ssize_t>length + LOG_OVERHEAD
            if total > remaining:
                # A broker cuts the response at max bytes: the tail is a partial batch.
                self.partial = remaining
                self.incomplete = total
                break
            magic = <int8_t>p[ENTRY_MAGIC]
            if magic == 2:
                self.batch_v2(p, pos, total)
            elif magic == 0 or magic == 1:
                self.batch_legacy(p, pos, total)
            else:
                raise CorruptRecordError(f"batch at byte {pos}: unknown magic {magic}")
            pos += total
        self.consumed = pos
        return 0

    cdef BatchInfo new_batch(self, Py_ssize_t pos, Py_ssize_t total):
        cdef BatchInfo b = BatchInfo.__new__(BatchInfo)
        b.position = pos
        b.size_in_bytes = total
        b.control_type = -1
        b.delete_horizon_ms = -1
        b.partition_leader_epoch = -1
        b.producer_id = -1
        b.producer_epoch = -1
        b.base_sequence = -1
        b.record_start = b.record_end = self.mark()
        return b

    cdef inline Py_ssize_t mark(self):
        return self.cols.n if self.columnar else len(self.records)

    cdef int region_of(self, const uint8_t* src, size_t n, int codec, size_t* start,
                       bint legacy_lz4) except -1:
        """Where a batch's records will be scanned: in place (per-record path and zero-copy
        columnar) or appended to the scratch/data buffer, decompressed when needed.
        Returns 1 when the records are in scratch.data[start : scratch.len]."""
        cdef size_t lim
        if codec and self.columnar and not self.owned:
            raise RuntimeError("kcore.records: compressed batch in zero-copy columnar mode")
        if codec == 0:
            if not self.owned:
                return 0
            start[0] = self.scratch.len
            if growbuf_reserve(&self.scratch, n) < 0:
                raise MemoryError()
            memcpy(self.scratch.data + self.scratch.len, src, n)
            self.scratch.len += n
            return 1
        if not self.owned:
            self.scratch.len = 0       # per-record path: objects are made before the next batch
        start[0] = self.scratch.len
        lim = decompression_limit(self.max_bytes, n)
        decompress_append(codec, src, n, &self.scratch, lim, legacy_lz4)
        return 1

    cdef int batch_v2(self, const uint8_t* p, Py_ssize_t pos, Py_ssize_t total) except -1:
        cdef BatchInfo b
        cdef uint32_t stored, computed
        cdef int attrs, codec, rc, ctype = -1
        cdef int32_t count, lod
        cdef int64_t base_offset, pid, last_offset
        cdef size_t start = 0, rlen
        cdef const uint8_t* region
        cdef const uint8_t* origin
        cdef int64_t bias
        cdef bint in_scratch, skip = False
        cdef V2Ctx ctx
        cdef Py_ssize_t before
        if total < V2_HEADER_SIZE:
            raise InvalidRecordLengthError(
                f"batch at byte {pos}: v2 batch size {total} is below the header size "
                f"{V2_HEADER_SIZE}")
        base_offset = <int64_t>load_be64(p + ENTRY_BASE_OFFSET)
        stored = load_be32(p + V2_CRC)
        if self.check_crcs:
            with nogil:
                computed = crc32c_update(0, p + V2_ATTRIBUTES, <size_t>(total - V2_ATTRIBUTES))
            if computed != stored:
                raise CrcMismatchError(
                    f"batch at byte {pos}, base offset {base_offset}: CRC32C {computed:#010x} "
                    f"does not match the stored {stored:#010x}")
        attrs = load_be16(p + V2_ATTRIBUTES)
        codec = attrs & ATTR_CODEC_MASK
        if codec > 4:
            raise UnsupportedCodecError(
                f"batch at byte {pos}, base offset {base_offset}: unknown compression codec "
                f"id {codec}")
        count = <int32_t>load_be32(p + V2_RECORD_COUNT)
        b = self.new_batch(pos, total)
        v2_batch_info(b, p)
        pid = b.producer_id
        last_offset = b.last_offset
        if count < 0:
            raise InvalidRecordLengthError(
                f"batch at byte {pos}, base offset {base_offset}: negative record count "
                f"{count}")
        self.batches.append(b)
        self.next_offset = add_wrap(last_offset, 1)

        region = p + V2_HEADER_SIZE
        rlen = <size_t>(total - V2_HEADER_SIZE)
        in_scratch = False
        if b.is_control and count > 0:
            in_scratch = self.region_of(region, rlen, codec, &start, False)
            if in_scratch:
                region = self.scratch.data + start
                rlen = self.scratch.len - start
            with nogil:
                rc = control_type_of(region, rlen, &ctype, &self.err)
            if rc:
                self.raise_scan(base_offset, pos)
            b.control_type = ctype
        if self.read_committed and pid >= 0:
            # Java's read_committed rule: producers whose aborted range started at or before
            # this batch's last offset are aborted until their abort marker goes by.
            while (self.aborted_idx < len(self.aborted)
                   and self.aborted[self.aborted_idx][0] <= last_offset):
                self.aborted_pids.add(self.aborted[self.aborted_idx][1])
                self.aborted_idx += 1
            if b.is_control:
                if ctype == C_CONTROL_ABORT:
                    self.aborted_pids.discard(pid)
            elif b.is_transactional and pid in self.aborted_pids:
                b.aborted = True
                skip = True
        if b.is_control and self.skip_control:
            skip = True
        if last_offset < self.fetch_offset:
            skip = True
        if count == 0 and codec == 0 and rlen == 0:
            skip = True
        if skip:
            if in_scratch and self.owned:
                self.scratch.len = start            # drop what was copied for the control type
            return 0
        if not b.is_control:
            in_scratch = self.region_of(region, rlen, codec, &start, False)
            if in_scratch:
                region = self.scratch.data + start
                rlen = self.scratch.len - start
        if self.owned:
            origin = self.scratch.data
            bias = 0
        elif self.columnar:
            origin = self.data
            bias = 0
        else:
            origin = region
            bias = <int64_t><intptr_t>region
        ctx.base_offset = base_offset
        ctx.base_ts = b.first_timestamp
        ctx.max_ts = b.max_timestamp
        ctx.log_append = b.timestamp_type == 1
        ctx.ts_type = <int8_t>b.timestamp_type
        ctx.min_offset = self.fetch_offset
        with nogil:
            rc = scan_v2(region, rlen, count, &ctx, origin, bias, &self.cols, &self.err)
        if rc:
            self.raise_scan(base_offset, pos)
        if not self.columnar:
            self.emit(b)
        b.record_end = self.mark()
        return 0

    cdef int batch_legacy(self, const uint8_t* p, Py_ssize_t pos, Py_ssize_t total) except -1:
        cdef LegacyMsg m
        cdef BatchInfo b
        cdef int rc, codec
        cdef size_t start = 0
        cdef const uint8_t* region
        cdef const uint8_t* origin
        cdef int64_t bias, first = 0
        cdef int32_t count = 1
        cdef bint ok
        with nogil:
            rc = parse_legacy(p, <size_t>total, &m, &self.err)
            ok = (not self.check_crcs) or rc != E_OK or legacy_crc_ok(p, &m)
        if rc:
            self.raise_scan(<int64_t>load_be64(p + ENTRY_BASE_OFFSET), pos)
        if not ok:
            raise CrcMismatchError(
                f"message at byte {pos}, offset {m.offset}: CRC32 does not match the stored "
                f"{m.crc:#010x}")
        codec = m.attr & ATTR_CODEC_MASK
        if codec > 3:
            raise UnsupportedCodecError(
                f"message at byte {pos}, offset {m.offset}: compression codec id {codec} is "
                f"not valid for message format v{m.magic}")
        b = self.new_batch(pos, total)
        b.base_offset = m.offset
        b.last_offset = m.offset
        b.magic = m.magic
        b.crc = m.crc
        b.attributes = m.attr
        b.codec = codec
        b.timestamp_type = ((m.attr & ATTR_TIMESTAMP_TYPE) != 0) if m.magic > 0 else C_TIMESTAMP_NONE
        b.first_timestamp = m.timestamp
        b.max_timestamp = m.timestamp
        b.record_count = 1
        self.batches.append(b)
        self.next_offset = add_wrap(m.offset, 1)
        if codec == 0:
            if m.offset < self.fetch_offset:
                return 0
            if self.owned:
                self.region_of(p, <size_t>total, 0, &start, False)
                region = self.scratch.data + start
                origin = self.scratch.data
                bias = 0
                m.key = region + (m.key - p)
                m.val = region + (m.val - p)
            elif self.columnar:
                origin = self.data
                bias = 0
            else:
                origin = p
                bias = <int64_t><intptr_t>p
            if store_one(&self.cols, m.offset, m.timestamp, <int8_t>b.timestamp_type, &m,
                         origin, bias) < 0:
                raise MemoryError()
        else:
            if m.vlen < 0:
                raise CorruptRecordError(
                    f"message at byte {pos}, offset {m.offset}: compressed wrapper has a null "
                    f"value")
            self.region_of(m.val, <size_t>m.vlen, codec, &start, m.magic == 0)
            region = self.scratch.data + start
            if self.owned:
                origin = self.scratch.data
                bias = 0
            else:
                origin = region
                bias = <int64_t><intptr_t>region
            with nogil:
                rc = scan_legacy_inner(region, self.scratch.len - start, &m, self.check_crcs,
                                       self.fetch_offset, origin, bias, &self.cols, &first,
                                       &count, &self.err)
            if rc:
                self.raise_scan(m.offset, pos)
            b.base_offset = first
            b.record_count = count
        if not self.columnar:
            self.emit(b)
        b.record_end = self.mark()
        return 0

    # ---- object creation (per-record path): the only part that needs the GIL per record
    cdef int emit(self, BatchInfo b) except -1:
        if self.record_cls is not None:
            return self.emit_consumer(b)
        cdef RecCols* c = &self.cols
        cdef Py_ssize_t i, n = c.n
        cdef Record r
        cdef list out = self.records
        cdef object topic = self.topic
        cdef int partition = self.partition
        cdef int leader_epoch = b.partition_leader_epoch
        cdef int64_t pid = b.producer_id
        cdef int pepoch = b.producer_epoch
        cdef bint txn = b.is_transactional
        cdef bint control = b.is_control
        cdef int32_t klen, vlen
        for i in range(n):
            r = Record.__new__(Record)
            r.offset = c.offset[i]
            r.timestamp = c.timestamp[i]
            r.timestamp_type = c.ts_type[i]
            klen = c.key_len[i]
            if klen >= 0:
                r.key = PyBytes_FromStringAndSize(<const char*><intptr_t>c.key_pos[i], klen)
            vlen = c.val_len[i]
            if vlen >= 0:
                r.value = PyBytes_FromStringAndSize(<const char*><intptr_t>c.val_pos[i], vlen)
            if c.hdr_start[i + 1] > c.hdr_start[i]:
                r._headers = self.headers_of(c.hdr_start[i], c.hdr_start[i + 1])
            r.leader_epoch = leader_epoch
            r.producer_id = pid
            r.producer_epoch = pepoch
            r.is_transactional = txn
            r.topic = topic
            r.partition = partition
            if control:
                r.is_control = True
                if klen < 4:
                    raise CorruptRecordError(
                        f"control record at offset {r.offset}: key shorter than 4 bytes")
                r.control_type = <int16_t>load_be16(<const uint8_t*><intptr_t>c.key_pos[i] + 2)
            else:
                r.control_type = -1
            out.append(r)
        c.n = 0
        c.nh = 0
        return 0

    cdef int emit_consumer(self, BatchInfo b) except -1:
        """One record_cls instance per record (control batches never get here: consumer
        mode always skips them)."""
        cdef RecCols* c = &self.cols
        cdef Py_ssize_t i, n = c.n
        cdef PyTypeObject* tp = <PyTypeObject*>self.record_cls
        cdef list out = self.records
        cdef object topic = self.topic
        cdef object part = self.partition_obj
        cdef object epoch = b.partition_leader_epoch
        cdef object ts_obj = self.last_ts_obj
        cdef int64_t last_ts = self.last_ts
        cdef int64_t ts, hsize
        cdef int untrack = self.untrack
        cdef list hl
        cdef int32_t* hs = c.hdr_start
        for i in range(n):
            ts = c.timestamp[i]
            if ts != last_ts or ts_obj is None:
                ts_obj = ts
                last_ts = ts
            if hs[i + 1] > hs[i]:
                hl = self.headers_sized(hs[i], hs[i + 1], &hsize)
                rec = kc_record_new(
                    tp, KC_CONSUMER_FIELDS, topic, part, epoch, c.offset[i], ts_obj, c.ts_type[i],
                    <const char*><intptr_t>c.key_pos[i], c.key_len[i],
                    <const char*><intptr_t>c.val_pos[i], c.val_len[i],
                    <PyObject*>hl, hsize, untrack, NULL, NULL)
            else:
                rec = kc_record_new(
                    tp, KC_CONSUMER_FIELDS, topic, part, epoch, c.offset[i], ts_obj, c.ts_type[i],
                    <const char*><intptr_t>c.key_pos[i], c.key_len[i],
                    <const char*><intptr_t>c.val_pos[i], c.val_len[i],
                    NULL, -1, untrack, NULL, NULL)
            out.append(rec)
        self.last_ts_obj = ts_obj
        self.last_ts = last_ts
        c.n = 0
        c.nh = 0
        return 0

    cdef list headers_sized(self, Py_ssize_t hs, Py_ssize_t he, int64_t* size):
        """headers_of, plus kafka-python's serialized_header_size (UTF-8 bytes of the keys
        as decoded, plus the value bytes), with the pairs and the list untracked if asked.
        The scan's header positions are absolute addresses inside spans it checked, so the
        columnar builder runs over them with base 0 and no limit."""
        cdef RecCols* c = &self.cols
        return header_list(0, PY_SSIZE_T_MAX, c.hk_pos, c.hk_len, c.hv_pos, c.hv_len, hs, he,
                            self.untrack, size)

    cdef list headers_of(self, Py_ssize_t hs, Py_ssize_t he):
        cdef RecCols* c = &self.cols
        cdef list hl = []
        cdef Py_ssize_t k
        cdef object hv
        for k in range(hs, he):
            # Java decodes header keys leniently (malformed UTF-8 becomes U+FFFD); so do we.
            hk = PyUnicode_DecodeUTF8(<const char*><intptr_t>c.hk_pos[k], c.hk_len[k],
                                      "replace")
            if c.hv_len[k] >= 0:
                hv = PyBytes_FromStringAndSize(<const char*><intptr_t>c.hv_pos[k], c.hv_len[k])
            else:
                hv = None
            hl.append((hk, hv))
        return hl


cdef _Decoder _make_decoder(object data, bint check_crcs, object max_decompressed_bytes,
                            bint skip_control, int64_t fetch_offset,
                            object aborted_transactions, bint columnar):
    cdef _Decoder d = _Decoder.__new__(_Decoder)
    if max_decompressed_bytes is not None and max_decompressed_bytes < 0:
        raise ValueError("max_decompressed_bytes must be >= 0")
    d.check_crcs = check_crcs
    d.max_bytes = max_decompressed_bytes
    d.skip_control = skip_control
    d.fetch_offset = fetch_offset
    d.columnar = columnar
    d.open(data, aborted_transactions)
    return d


def decode_records(data, *, bint check_crcs=True, max_decompressed_bytes=None,
                   bint skip_control=False, int64_t fetch_offset=-1,
                   aborted_transactions=None, topic=None, int partition=-1):
    """Decode one partition's fetched "records" bytes into Record objects (see records.pyi)."""
    cdef _Decoder d = _make_decoder(data, check_crcs, max_decompressed_bytes, skip_control,
                                    fetch_offset, aborted_transactions, False)
    cdef DecodeResult res
    d.topic = topic
    d.partition = partition
    d.prepass()
    cols_prereserve(&d.cols, d.est_max)
    d.run()
    res = DecodeResult.__new__(DecodeResult)
    res.records = d.records
    res.batches = d.batches
    res.next_offset = d.next_offset
    res.bytes_consumed = d.consumed
    res.partial_trailing_bytes = d.partial
    res.incomplete_batch_size = d.incomplete
    return res


def decode_consumer_records(data, record_cls, topic, int partition, *, bint check_crcs=True,
                            max_decompressed_bytes=None, int64_t fetch_offset=-1,
                            aborted_transactions=None, bint gc_untrack=True):
    """Decode one partition's fetched bytes straight into consumer records (see records.pyi).

    Same decoding as decode_records(skip_control=True), but every record is ONE record_cls
    instance (a namedtuple with kafka-python's 13 ConsumerRecord fields) built in C.
    """
    cdef _Decoder d
    cdef DecodeResult res
    _check_record_cls(record_cls)
    d = _make_decoder(data, check_crcs, max_decompressed_bytes, True, fetch_offset,
                      aborted_transactions, False)
    d.record_cls = record_cls
    d.topic = topic
    d.partition = partition
    d.partition_obj = partition
    d.untrack = gc_untrack
    d.prepass()
    cols_prereserve(&d.cols, d.est_max)
    d.run()
    res = DecodeResult.__new__(DecodeResult)
    res.records = d.records
    res.batches = d.batches
    res.next_offset = d.next_offset
    res.bytes_consumed = d.consumed
    res.partial_trailing_bytes = d.partial
    res.incomplete_batch_size = d.incomplete
    return res


cdef object compiled_twin(object cls, str caller, record_type_maker make):
    """A compiled twin of the namedtuple class cls, its type made by `make` (the calling
    module's kc_record_type_new: each module's record types recycle their instances through
    that module's free lists, recordtype.h); caller names the function in errors."""
    fields = getattr(cls, "_fields", None) if isinstance(cls, type) else None
    if not (isinstance(cls, type) and issubclass(cls, tuple) and isinstance(fields, tuple)
            and all(type(f) is str for f in fields)):
        raise TypeError(f"{caller} needs a namedtuple class, got {cls!r}")
    if cls.__dict__.get("__slots__", None) != () or cls.__bases__ != (tuple,):
        raise TypeError(f"{caller} needs a namedtuple class made by collections.namedtuple "
                        f"(direct tuple subclass, __slots__ = ()), got {cls!r}")
    t = make(f"{cls.__module__}.{cls.__name__}".encode(), fields)
    skip = set(fields) | {"__dict__", "__weakref__", "__module__", "__qualname__"}
    for name, value in cls.__dict__.items():
        if name not in skip:
            setattr(t, name, value)
    t.__qualname__ = cls.__qualname__
    return t


def record_type(cls):
    """A compiled twin of the namedtuple class cls (see records.pyi)."""
    return compiled_twin(cls, "record_type", kc_record_type_new)


def record_freelist_len(Py_ssize_t fields):
    """How many freed instances of record types with this many fields wait for reuse."""
    return kc_rec_freelist_len(fields)


def record_freelist_clear():
    """Give the memory of every freed record-type instance, and of the empty headers lists
    kept from freed consumer records for the next ones, back to the allocator."""
    kc_rec_freelist_clear()


cdef int _check_record_cls(object record_cls) except -1:
    if not isinstance(record_cls, type) or not kc_tuple_like(<PyTypeObject*>record_cls):
        raise TypeError(f"record_cls must be a namedtuple class (a tuple subclass with "
                        f"__slots__ = ()), got {record_cls!r}")
    fields = getattr(record_cls, "_fields", None)
    if not isinstance(fields, tuple) or len(fields) != 13:
        raise TypeError(f"record_cls must have kafka-python's 13 ConsumerRecord fields, "
                        f"got {fields!r}")
    return 0


cdef const void* _column(object arr, Py_ssize_t items, Py_ssize_t itemsize, str name) except NULL:
    """The memory of one of a ColumnarBatch's arrays, checked to hold `items` items."""
    if type(arr) is not CArray:
        raise TypeError(f"ColumnarBatch.{name} is not a decoded array (was the batch made by "
                        f"decode_columnar?)")
    if (<CArray>arr).itemsize != itemsize or (<CArray>arr).nbytes < items * itemsize:
        raise ValueError(f"ColumnarBatch.{name} holds fewer than {items} items")
    return (<CArray>arr).ptr


cdef Columns columns_of(object batch) except *:
    """batch's arrays (batch: a ColumnarBatch), each checked to hold its rows or headers."""
    cdef _ColumnarBatch cb = batch
    cdef Columns c
    cdef Py_ssize_t n = cb.num_records, nh = cb.num_headers
    c.n = n
    c.nh = nh
    c.offs = <const int64_t*>_column(cb._offsets, n, 8, "offsets")
    c.tss = <const int64_t*>_column(cb._timestamps, n, 8, "timestamps")
    c.tst = <const int8_t*>_column(cb._ts_types, n, 1, "timestamp_types")
    c.kp = <const int64_t*>_column(cb._key_pos, n, 8, "key_offsets")
    c.kl = <const int32_t*>_column(cb._key_len, n, 4, "key_lengths")
    c.vp = <const int64_t*>_column(cb._val_pos, n, 8, "value_offsets")
    c.vl = <const int32_t*>_column(cb._val_len, n, 4, "value_lengths")
    c.hs = <const int32_t*>_column(cb._hdr_start, n + 1, 4, "header_starts")
    c.hkp = c.hvp = NULL
    c.hkl = c.hvl = NULL
    if nh:
        c.hkp = <const int64_t*>_column(cb._hk_pos, nh, 8, "header_key_offsets")
        c.hkl = <const int32_t*>_column(cb._hk_len, nh, 4, "header_key_lengths")
        c.hvp = <const int64_t*>_column(cb._hv_pos, nh, 8, "header_value_offsets")
        c.hvl = <const int32_t*>_column(cb._hv_len, nh, 4, "header_value_lengths")
    return c


cdef BatchInfo batch_of_row(list batches, Py_ssize_t* lo, Py_ssize_t i):
    """The batch of row i of a columnar decode: the first from batches[lo] on whose record_end
    is past it (a skipped batch produced no rows); lo moves past it."""
    cdef Py_ssize_t nb = len(batches)
    cdef BatchInfo b
    while True:
        if lo[0] >= nb:
            raise ValueError(f"ColumnarBatch: row {i} belongs to no batch")
        if type(batches[lo[0]]) is not BatchInfo:
            raise TypeError("ColumnarBatch.batches holds something other than BatchInfo")
        b = <BatchInfo>batches[lo[0]]
        lo[0] += 1
        if b.record_end > i:
            break
    if b.record_start > i:
        raise ValueError(f"ColumnarBatch: row {i} belongs to no batch")
    return b


cdef enum:
    PREFETCH_ROWS = 6       # how many rows ahead consumer_records asks for a value's bytes


def consumer_records(_ColumnarBatch batch not None, record_cls, topic, int partition, Py_ssize_t start,
                     Py_ssize_t stop, *, bint gc_untrack=True, bint views=False):
    """Rows start..stop-1 of a decode_columnar result as consumer records (see records.pyi)."""
    cdef Py_buffer view
    cdef object base_view = None     # views: one memoryview over the data, sliced per record
    cdef PyObject* views_ptr = NULL
    cdef const char* vbase = NULL
    cdef Py_ssize_t n, i, nb, lo, hi, mid, bend = 0, dlen
    cdef Columns col
    cdef intptr_t base
    cdef int64_t ts, last_ts = 0, hsize
    cdef BatchInfo b
    cdef list batches, out
    cdef object ts_obj = None, epoch = None, hl
    cdef object part = partition     # one int object for every record
    cdef PyTypeObject* tp
    cdef int untrack = gc_untrack
    _check_record_cls(record_cls)
    n = batch.num_records
    if start < 0 or stop < start or stop > n:
        raise IndexError(f"rows {start}..{stop} are outside the batch's {n} records")
    out = []
    if start == stop:
        return out
    col = columns_of(batch)
    batches = batch.batches
    if batches is None:
        raise TypeError("ColumnarBatch.batches is not a list")
    nb = len(batches)
    # The batch holding row `start`: the first whose record_end is past it.
    lo = 0
    hi = nb
    while lo < hi:
        mid = (lo + hi) >> 1
        if type(batches[mid]) is not BatchInfo:
            raise TypeError("ColumnarBatch.batches holds something other than BatchInfo")
        if (<BatchInfo>batches[mid]).record_end <= start:
            lo = mid + 1
        else:
            hi = mid
    tp = <PyTypeObject*>record_cls
    # Sized up front and filled in place: appending grew it some seventy times for a poll of
    # 8,192 records, each growth a realloc that may copy it. While slots are still NULL the
    # list is kept out of the cyclic GC (whose callbacks could reach it); a slot not reached
    # when something raises stays NULL, which the list's dealloc skips.
    out = PyList_New(stop - start)
    kc_gc_untrack(out)
    PyObject_GetBuffer(batch._data, &view, PyBUF_SIMPLE)
    try:
        base = <intptr_t>view.buf
        dlen = view.len
        if views:
            # Slices of one memoryview share its managed buffer, which holds the exporter
            # (the fetched frame, or the decompressed data): a record's key and value keep
            # that memory alive, never point into freed memory.
            base_view = memoryview(batch._data)
            if (base_view.ndim != 1 or base_view.format != "B" or not base_view.c_contiguous
                    or base_view.nbytes != dlen):
                base_view = base_view.cast("B")
            if not base_view.readonly:        # the records share the data: none may write it
                base_view = base_view.toreadonly()
            vbase = kc_view_buf(base_view)
            if <intptr_t>vbase != base or len(base_view) != dlen:
                raise ValueError("ColumnarBatch: its data exports different memory to each reader")
            views_ptr = <PyObject*>base_view
        for i in range(start, stop):
            if i >= bend:
                b = batch_of_row(batches, &lo, i)
                bend = b.record_end
                epoch = b.partition_leader_epoch
            ts = col.tss[i]
            if ts != last_ts or ts_obj is None:
                ts_obj = ts
                last_ts = ts
            if i + PREFETCH_ROWS < stop:
                # The value a few rows on: the fetched answer is read once, in order, and
                # is rarely still in the cache by the time its records are made.
                kc_prefetch(<const char*>(base + col.vp[i + PREFETCH_ROWS]))
                kc_prefetch(<const char*>(base + col.vp[i + PREFETCH_ROWS]) + 64)
            hl = row_headers(&col, i, base, dlen, untrack, &hsize)
            kc_list_put(out, i - start, kc_record_new_ref(
                tp, KC_CONSUMER_FIELDS, topic, part, epoch, col.offs[i], ts_obj, col.tst[i],
                <const char*>(base + col.kp[i]), col.kl[i], <const char*>(base + col.vp[i]),
                col.vl[i], NULL if hl is None else <PyObject*>hl, hsize, untrack, views_ptr,
                vbase))
    finally:
        PyBuffer_Release(&view)
    PyObject_GC_Track(out)
    return out


cdef list header_list(intptr_t base, Py_ssize_t dlen, const int64_t* hkp, const int32_t* hkl,
                      const int64_t* hvp, const int32_t* hvl, Py_ssize_t hs, Py_ssize_t he,
                      bint untrack, int64_t* size):
    """A record's headers [(str, bytes | None), ...] from columnar positions (relative to
    base), with kafka-python's serialized_header_size: as _Decoder.headers_sized."""
    cdef list hl = []
    cdef Py_ssize_t k
    cdef int64_t total = 0
    cdef object hv, pair
    for k in range(hs, he):
        if hkl[k] < 0 or not (span_ok(hkp[k], hkl[k], dlen) and span_ok(hvp[k], hvl[k], dlen)):
            raise ValueError(f"ColumnarBatch: header {k} lies outside its data")
        hk = PyUnicode_DecodeUTF8(<const char*>(base + hkp[k]), hkl[k], "replace")
        if kc_is_ascii(hk):
            total += hkl[k]
        else:   # as re-encoded: differs from the raw length where bad bytes became U+FFFD
            total += len(PyUnicode_AsUTF8String(hk))
        if hvl[k] >= 0:
            hv = PyBytes_FromStringAndSize(<const char*>(base + hvp[k]), hvl[k])
            total += hvl[k]
        else:
            hv = None
        pair = (hk, hv)
        kc_gc_untrack(pair)         # (str, bytes|None) can never be part of a cycle
        hl.append(pair)
    if untrack:
        kc_gc_untrack(hl)
    size[0] = total
    return hl


def decode_columnar(data, *, bint check_crcs=True, max_decompressed_bytes=None,
                    bint skip_control=True, int64_t fetch_offset=-1,
                    aborted_transactions=None, ScannedRecords scanned=None):
    """Decode one partition's fetched bytes into contiguous arrays (see records.pyi)."""
    cdef _Decoder d
    cdef _ColumnarBatch cb
    cdef RecCols* c
    cdef Py_ssize_t n, cap, caph
    if scanned is not None:
        cb = _from_scan(data, scanned, check_crcs, fetch_offset, aborted_transactions)
        if cb is not None:
            return cb
    d = _make_decoder(data, check_crcs, max_decompressed_bytes, skip_control, fetch_offset,
                      aborted_transactions, True)
    cb = _ColumnarBatch.__new__(_ColumnarBatch)
    c = &d.cols
    d.prepass()
    cols_prereserve(c, d.est_total)
    d.run()
    if c.cap == 0:
        cols_prereserve(c, 1)          # every array exists; hdr_start has cap + 1 entries
    n = c.n
    c.hdr_start[n] = <int32_t>c.nh
    cb.num_records = n
    cb.num_headers = c.nh
    cb.batches = d.batches
    cb.next_offset = d.next_offset
    cb.bytes_consumed = d.consumed
    cb.partial_trailing_bytes = d.partial
    cb.incomplete_batch_size = d.incomplete
    cb.zero_copy = not d.owned
    _hand_over(cb, c)
    if d.owned:
        growbuf_shrink(&d.scratch)
        cb._data = carray(d.scratch.data, d.scratch.len, 1, b"B", d.scratch.cap)
        d.scratch.data = NULL
        d.scratch.len = d.scratch.cap = 0
    else:
        cb._data = memoryview(data).cast("B") if data is not None else memoryview(b"")
    return cb


cdef _ColumnarBatch _from_scan(object data, ScannedRecords sr, bint check_crcs, int64_t fetch_offset,
                               object aborted_transactions):
    """The ColumnarBatch decode_columnar would make of data, from the receive thread's scan of
    the same bytes (kcore.fetchscan), or None when the scan cannot stand in for the decode:
    not finished cleanly, of other bytes, without the CRC check asked for, for read_committed
    (aborted transactions), or with records or batches before fetch_offset (which the decode
    drops). The scan is used up either way."""
    cdef Py_buffer view
    cdef _ColumnarBatch cb
    cdef RecCols* c = &sr.blob.cols
    cdef BatchInfo b
    cdef list batches
    cdef Py_ssize_t pos, total, rows
    cdef const uint8_t* p
    cdef bint usable
    if (check_crcs and not sr.check_crcs) or aborted_transactions is not None \
            or sr.blob.state == BLOB_TAKEN:
        cols_release(c)
        sr.blob.state = BLOB_TAKEN
        return None
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        usable = <const uint8_t*>view.buf == sr.addr and view.len == sr.blob.length
        if usable and sr.blob.state == BLOB_SCANNING:
            # The batches that arrived last, which the receive thread left to us; arrays
            # from the pool, sized from the first batch, if it scanned none.
            if c.cap == 0 and sr.blob.length >= V2_HEADER_SIZE:
                p = sr.addr
                total = <Py_ssize_t><int32_t>load_be32(p + ENTRY_LENGTH) + LOG_OVERHEAD
                rows = <int32_t>load_be32(p + V2_RECORD_COUNT)
                if V2_HEADER_SIZE <= total <= sr.blob.length and 0 < rows <= total // MIN_RECORD_BYTES:
                    cols_prereserve(c, <Py_ssize_t>((<double>sr.blob.length / total) * rows) + 16)
            with nogil:
                blobscan_step(&sr.blob, sr.addr, sr.blob.length, sr.check_crcs, PY_SSIZE_T_MAX)
        if not usable or sr.blob.state != BLOB_DONE or sr.blob.min_offset < fetch_offset:
            cols_release(c)
            sr.blob.state = BLOB_TAKEN
            return None
        sr.blob.state = BLOB_TAKEN
        # Batch metadata from the headers the scan checked (a few per partition).
        batches = []
        pos = rows = 0
        while pos < sr.blob.pos:
            p = <const uint8_t*>view.buf + pos
            total = <Py_ssize_t><int32_t>load_be32(p + ENTRY_LENGTH) + LOG_OVERHEAD
            b = BatchInfo.__new__(BatchInfo)
            b.position = pos
            b.size_in_bytes = total
            b.control_type = -1
            b.delete_horizon_ms = -1
            v2_batch_info(b, p)
            b.record_start = rows
            rows += b.record_count
            b.record_end = rows
            batches.append(b)
            pos += total
    finally:
        PyBuffer_Release(&view)
    if rows != c.n:
        raise AssertionError(f"kcore.records: scanned {c.n} records where the batches hold {rows}")
    if c.cap == 0 and cols_reserve(c, 1) < 0:
        raise MemoryError()
    c.hdr_start[c.n] = <int32_t>c.nh
    cb = _ColumnarBatch.__new__(_ColumnarBatch)
    cb.num_records = c.n
    cb.num_headers = c.nh
    cb.batches = batches
    cb.next_offset = sr.blob.next_offset
    cb.bytes_consumed = sr.blob.pos
    cb.partial_trailing_bytes = sr.blob.partial
    cb.incomplete_batch_size = sr.blob.incomplete
    cb.zero_copy = True
    _hand_over(cb, c)
    cb._data = memoryview(data).cast("B")
    return cb


cdef int _hand_over(_ColumnarBatch cb, RecCols* c) except -1:
    """Give c's arrays to cb (from here the ColumnarBatch owns them)."""
    cdef Py_ssize_t n = c.n
    cdef Py_ssize_t cap, caph
    cap = c.cap
    caph = c.caph
    cb._offsets = carray(c.offset, n, 8, b"q", cap * 8); c.offset = NULL
    cb._timestamps = carray(c.timestamp, n, 8, b"q", cap * 8); c.timestamp = NULL
    cb._ts_types = carray(c.ts_type, n, 1, b"b", cap); c.ts_type = NULL
    cb._key_pos = carray(c.key_pos, n, 8, b"q", cap * 8); c.key_pos = NULL
    cb._key_len = carray(c.key_len, n, 4, b"i", cap * 4); c.key_len = NULL
    cb._val_pos = carray(c.val_pos, n, 8, b"q", cap * 8); c.val_pos = NULL
    cb._val_len = carray(c.val_len, n, 4, b"i", cap * 4); c.val_len = NULL
    cb._hdr_start = carray(c.hdr_start, n + 1, 4, b"i", (cap + 1) * 4); c.hdr_start = NULL
    cb._hk_pos = carray(c.hk_pos, c.nh, 8, b"q", caph * 8); c.hk_pos = NULL
    cb._hk_len = carray(c.hk_len, c.nh, 4, b"i", caph * 4); c.hk_len = NULL
    cb._hv_pos = carray(c.hv_pos, c.nh, 8, b"q", caph * 8); c.hv_pos = NULL
    cb._hv_len = carray(c.hv_len, c.nh, 4, b"i", caph * 4); c.hv_len = NULL
    return 0
