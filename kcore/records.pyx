# cython: language_level=3
"""Kafka record batches: decode (per record or columnar) and encode.

Layout knowledge lives here once: RecordBatch v2 (magic 2) and the legacy message sets
v0/v1 still found in logs written before an in-place upgrade.

How a fetch response's "records" bytes are decoded:
  1. walk the entries (12-byte offset+length prefix, then magic at byte 16);
     a trailing entry longer than the bytes left is the partial batch a broker leaves when it
     cuts a response at max bytes: not an error, reported as partial_trailing_bytes;
  2. per batch, under `nogil`: CRC, then a scan that validates every length and varint and
     records positions into C arrays (RecCols); compressed batches are first decompressed
     into a bounded buffer by kcore.compression (cramjam releases the GIL itself);
  3. with the GIL: only object creation (per-record paths: Record objects, or the consumer's
     namedtuples built directly in C by decode_consumer_records), or nothing at all beyond
     handing the arrays over as buffers (columnar path).
Anything inconsistent inside a complete batch raises a kcore.errors.CorruptRecordError
subclass (CrcMismatchError, InvalidRecordLengthError, RecordVarintError, ...).
"""
cimport cython
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBuffer_FillInfo,
                             PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND,
                             PyBUF_STRIDES)
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                          uint64_t, intptr_t, INT32_MAX)
from cpython.object cimport PyObject, PyTypeObject
from cpython.unicode cimport PyUnicode_AsUTF8String
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset

from kcore.compression cimport (GrowBuf, growbuf_reserve, growbuf_free, growbuf_shrink,
                                decompression_limit, decompress_append)
from kcore.compression cimport compress as _compress

from kcore.errors import (
    CorruptRecordError,
    CrcMismatchError,
    InvalidRecordLengthError,
    RecordVarintError,
    UnsupportedCodecError,
)

cdef extern from "crc32c.h" nogil:
    void kc_crc_init()
    uint32_t kc_crc32c(uint32_t crc, const uint8_t* p, size_t n)
    uint32_t kc_crc32c_sw(uint32_t crc, const uint8_t* p, size_t n)
    uint32_t kc_crc32c_hw(uint32_t crc, const uint8_t* p, size_t n)
    uint32_t kc_crc32_ieee(uint32_t crc, const uint8_t* p, size_t n)
    int kc_crc32c_has_hw()

kc_crc_init()

# Consumer-record construction in plain C: one tuple-subclass instance per record, filled in
# place (no intermediate Record, no argument tuple).  Written here rather than in Cython so
# that each slot costs one store and no temporary reference juggling.
cdef extern from *:
    """
    static PyObject* kc_consumer_record(
            PyTypeObject* tp, PyObject* topic, PyObject* partition, PyObject* epoch,
            long long offset, PyObject* ts, int ts_type,
            const char* kp, Py_ssize_t klen, const char* vp, Py_ssize_t vlen,
            PyObject* headers, long long hsize, int untrack)
    {
        /* (topic, partition, leader_epoch, offset, timestamp, timestamp_type, key, value,
           headers, checksum, serialized_key_size, serialized_value_size,
           serialized_header_size): kafka-python's ConsumerRecord field order. */
        PyObject* t = tp->tp_alloc(tp, 13);
        PyObject* o;
        if (t == NULL)
            return NULL;
        if (untrack)
            PyObject_GC_UnTrack(t);
        Py_INCREF(topic); PyTuple_SET_ITEM(t, 0, topic);
        Py_INCREF(partition); PyTuple_SET_ITEM(t, 1, partition);
        Py_INCREF(epoch); PyTuple_SET_ITEM(t, 2, epoch);
        if ((o = PyLong_FromLongLong(offset)) == NULL) goto fail;
        PyTuple_SET_ITEM(t, 3, o);
        Py_INCREF(ts); PyTuple_SET_ITEM(t, 4, ts);
        if ((o = PyLong_FromLong(ts_type)) == NULL) goto fail;
        PyTuple_SET_ITEM(t, 5, o);
        if (klen < 0) { o = Py_None; Py_INCREF(o); }
        else if ((o = PyBytes_FromStringAndSize(kp, klen)) == NULL) goto fail;
        PyTuple_SET_ITEM(t, 6, o);
        if (vlen < 0) { o = Py_None; Py_INCREF(o); }
        else if ((o = PyBytes_FromStringAndSize(vp, vlen)) == NULL) goto fail;
        PyTuple_SET_ITEM(t, 7, o);
        if (headers != NULL) { o = headers; Py_INCREF(o); }
        else {
            if ((o = PyList_New(0)) == NULL) goto fail;
            if (untrack)
                PyObject_GC_UnTrack(o);
        }
        PyTuple_SET_ITEM(t, 8, o);
        Py_INCREF(Py_None); PyTuple_SET_ITEM(t, 9, Py_None);
        if ((o = PyLong_FromSsize_t(klen)) == NULL) goto fail;
        PyTuple_SET_ITEM(t, 10, o);
        if ((o = PyLong_FromSsize_t(vlen)) == NULL) goto fail;
        PyTuple_SET_ITEM(t, 11, o);
        if ((o = PyLong_FromLongLong(hsize)) == NULL) goto fail;
        PyTuple_SET_ITEM(t, 12, o);
        return t;
    fail:
        Py_DECREF(t);   /* unset slots are NULL: tuple dealloc skips them */
        return NULL;
    }

    static inline void kc_gc_untrack(PyObject* o) {
        if (PyObject_GC_IsTracked(o))
            PyObject_GC_UnTrack(o);
    }
    static inline int kc_tuple_like(PyTypeObject* tp) {
        /* A tuple subclass adding no C fields, __dict__ or __weakref__ (namedtuple's
           __slots__ = ()): tp_alloc(tp, n) yields a tuple of n NULL slots we may fill. */
        return PyType_IsSubtype(tp, &PyTuple_Type) && tp != &PyTuple_Type
            && tp->tp_basicsize == PyTuple_Type.tp_basicsize
            && tp->tp_itemsize == PyTuple_Type.tp_itemsize
            && tp->tp_dictoffset == 0 && tp->tp_weaklistoffset == 0
            && tp->tp_alloc != NULL;
    }
    static inline int kc_is_ascii(PyObject* s) { return PyUnicode_IS_ASCII(s); }
    """
    object kc_consumer_record(PyTypeObject* tp, object topic, object partition, object epoch,
                              long long offset, object ts, int ts_type,
                              const char* kp, Py_ssize_t klen, const char* vp, Py_ssize_t vlen,
                              PyObject* headers, long long hsize, int untrack)
    void kc_gc_untrack(object o) noexcept
    bint kc_tuple_like(PyTypeObject* tp) noexcept
    bint kc_is_ascii(object s) noexcept

CRC32C_HARDWARE = bool(kc_crc32c_has_hw())

cdef enum:
    V2_HEADER = 61              # bytes before the first record of a v2 batch
    LOG_OVERHEAD = 12           # offset int64 + length int32 in front of every entry
    LEGACY_MIN_SIZE = 14        # crc + magic + attributes + key length + value length
    MIN_RECORD_BYTES = 7        # length varint + the six one-byte minimum fields

TIMESTAMP_NONE = -1
TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
NO_PRODUCER_ID = -1


cdef uint32_t crc32c_update(uint32_t crc, const uint8_t* p, size_t n) noexcept nogil:
    return kc_crc32c(crc, p, n)


cdef inline const uint8_t* _buf_ptr(const uint8_t[::1] v) noexcept:
    return &v[0] if v.shape[0] else <const uint8_t*>b""


ctypedef uint32_t (*_crc_fn)(uint32_t, const uint8_t*, size_t) noexcept nogil


cdef uint32_t _crc_of(_crc_fn fn, object data, uint32_t crc) except? 0xffffffff:
    # One buffer-protocol wrapper for every checksum below; the sum itself runs without the GIL.
    cdef const uint8_t[::1] v = memoryview(data).cast("B")
    cdef const uint8_t* p = _buf_ptr(v)
    cdef size_t n = v.shape[0]
    with nogil:
        crc = fn(crc, p, n)
    return crc


def crc32c(data, uint32_t crc=0) -> int:
    """CRC32C of a bytes-like object, continuing from `crc` (chains like zlib.crc32)."""
    return _crc_of(kc_crc32c, data, crc)


def crc32c_sw(data, uint32_t crc=0) -> int:
    """CRC32C through the slicing-by-8 tables (for tests and benchmarks)."""
    return _crc_of(kc_crc32c_sw, data, crc)


def crc32c_hw(data, uint32_t crc=0) -> int:
    """CRC32C through the SSE4.2 instruction; RuntimeError when the CPU lacks it."""
    if not kc_crc32c_has_hw():
        raise RuntimeError("this CPU has no SSE4.2 crc32 instruction")
    return _crc_of(kc_crc32c_hw, data, crc)


def crc32_ieee(data, uint32_t crc=0) -> int:
    """CRC32 (IEEE, as zlib.crc32) used by legacy message sets."""
    return _crc_of(kc_crc32_ieee, data, crc)


# ============================================================================ byte helpers
cdef inline uint32_t rd_u32(const uint8_t* p) noexcept nogil:
    return ((<uint32_t>p[0]) << 24) | ((<uint32_t>p[1]) << 16) | ((<uint32_t>p[2]) << 8) | p[3]


cdef inline int32_t rd_i32(const uint8_t* p) noexcept nogil:
    return <int32_t>rd_u32(p)


cdef inline int16_t rd_i16(const uint8_t* p) noexcept nogil:
    return <int16_t>(((<uint16_t>p[0]) << 8) | p[1])


cdef inline int64_t rd_i64(const uint8_t* p) noexcept nogil:
    return <int64_t>(((<uint64_t>rd_u32(p)) << 32) | rd_u32(p + 4))


cdef inline void wr_u32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF


cdef inline void wr_i64(uint8_t* p, int64_t v) noexcept nogil:
    wr_u32(p, <uint32_t>((<uint64_t>v) >> 32))
    wr_u32(p + 4, <uint32_t>(<uint64_t>v))


cdef inline void wr_i16(uint8_t* p, int16_t v) noexcept nogil:
    p[0] = (<uint16_t>v) >> 8
    p[1] = (<uint16_t>v) & 0xFF


cdef inline int64_t add_wrap(int64_t a, int64_t b) noexcept nogil:
    # Hostile deltas may overflow; wrap instead of invoking undefined behaviour.
    return <int64_t>(<uint64_t>a + <uint64_t>b)


# ============================================================================ scan state
cdef enum:
    E_OK = 0
    E_CORRUPT = 1       # CorruptRecordError: fields that do not add up
    E_LENGTH = 2        # InvalidRecordLengthError: negative / oversized length or count
    E_VARINT = 3        # RecordVarintError
    E_NOMEM = 4
    E_CRC = 5           # CrcMismatchError (legacy inner messages)
    E_CODEC = 6         # UnsupportedCodecError (legacy inner messages)

ctypedef struct ScanErr:
    int code
    const char* what
    int64_t value
    int64_t index       # record index in its batch, -1 when not about one record

ctypedef struct RecCols:
    int64_t* offset
    int64_t* timestamp
    int8_t* ts_type
    int64_t* key_pos
    int32_t* key_len
    int64_t* val_pos
    int32_t* val_len
    int32_t* hdr_start      # n + 1 entries: record i owns headers [hdr_start[i], hdr_start[i+1])
    Py_ssize_t n
    Py_ssize_t cap
    int64_t* hk_pos
    int32_t* hk_len
    int64_t* hv_pos
    int32_t* hv_len
    Py_ssize_t nh
    Py_ssize_t caph


cdef inline int _set_err(ScanErr* e, int code, const char* what, int64_t value,
                         int64_t index) noexcept nogil:
    e.code = code
    e.what = what
    e.value = value
    e.index = index
    return code


cdef inline bint _grow(void** p, size_t nbytes) noexcept nogil:
    cdef void* q = realloc(p[0], nbytes if nbytes else 1)
    if q == NULL:
        return False
    p[0] = q
    return True


cdef int cols_reserve(RecCols* c, Py_ssize_t extra) noexcept nogil:
    cdef Py_ssize_t need = c.n + extra
    cdef Py_ssize_t cap
    if extra < 0 or need > INT32_MAX:
        return -1
    if need <= c.cap:
        return 0
    cap = c.cap * 2
    if cap < need:
        cap = need
    if cap < 16:
        cap = 16
    if not (_grow(<void**>&c.offset, cap * 8) and _grow(<void**>&c.timestamp, cap * 8)
            and _grow(<void**>&c.ts_type, cap) and _grow(<void**>&c.key_pos, cap * 8)
            and _grow(<void**>&c.key_len, cap * 4) and _grow(<void**>&c.val_pos, cap * 8)
            and _grow(<void**>&c.val_len, cap * 4)
            and _grow(<void**>&c.hdr_start, (cap + 1) * 4)):
        return -1
    if c.cap == 0:
        c.hdr_start[0] = 0
    c.cap = cap
    return 0


cdef int cols_reserve_h(RecCols* c, Py_ssize_t extra) noexcept nogil:
    cdef Py_ssize_t need = c.nh + extra
    cdef Py_ssize_t cap
    if extra < 0 or need > INT32_MAX:
        return -1
    if need <= c.caph:
        return 0
    cap = c.caph * 2
    if cap < need:
        cap = need
    if cap < 16:
        cap = 16
    if not (_grow(<void**>&c.hk_pos, cap * 8) and _grow(<void**>&c.hk_len, cap * 4)
            and _grow(<void**>&c.hv_pos, cap * 8) and _grow(<void**>&c.hv_len, cap * 4)):
        return -1
    c.caph = cap
    return 0


# ---------------------------------------------------------------------------- block pool
# Fresh memory costs a page fault per 4 KiB on first touch (~30% of the perf samples of a
# columnar decode before this pool): freed array blocks are kept here (bounded) and handed
# to the next decode.
# Only touched with the GIL held (take/give happen outside `nogil` sections).
cdef enum:
    POOL_SLOTS = 48

cdef void* _pool_ptr[POOL_SLOTS]
cdef size_t _pool_size[POOL_SLOTS]
cdef int _pool_count = 0
cdef size_t _pool_total = 0
cdef size_t POOL_MAX_TOTAL = 64 << 20
cdef size_t POOL_MAX_BLOCK = 16 << 20
cdef size_t POOL_MIN_BLOCK = 16 << 10


cdef void _pool_drop(int i) noexcept:
    global _pool_count, _pool_total
    _pool_total -= _pool_size[i]
    _pool_count -= 1
    _pool_ptr[i] = _pool_ptr[_pool_count]
    _pool_size[i] = _pool_size[_pool_count]


cdef void* pool_take(size_t need, size_t* got) noexcept:
    cdef int i, best = -1
    cdef void* p
    if need >= POOL_MIN_BLOCK:
        for i in range(_pool_count):
            if need <= _pool_size[i] <= 2 * need + (64 << 10):
                if best < 0 or _pool_size[i] < _pool_size[best]:
                    best = i
    if best >= 0:
        p = _pool_ptr[best]
        got[0] = _pool_size[best]
        _pool_drop(best)
        return p
    got[0] = need
    return malloc(need if need else 1)


cdef void pool_give(void* p, size_t size) noexcept:
    global _pool_count, _pool_total
    if p == NULL:
        return
    if size < POOL_MIN_BLOCK or size > POOL_MAX_BLOCK:
        free(p)
        return
    while _pool_count and (_pool_count == POOL_SLOTS or _pool_total + size > POOL_MAX_TOTAL):
        free(_pool_ptr[0])                      # evict the oldest-placed block
        _pool_drop(0)
    _pool_ptr[_pool_count] = p
    _pool_size[_pool_count] = size
    _pool_count += 1
    _pool_total += size


def _pool_stats():
    """(blocks, bytes) currently held by the array pool (for tests)."""
    return _pool_count, _pool_total


cdef int cols_prereserve(RecCols* c, Py_ssize_t count) except -1:
    """With the GIL: size the record arrays for `count` records from the pool.

    `count` comes from batch headers, so it is capped: beyond the cap the scan grows the
    arrays from the records actually present."""
    cdef size_t got
    if count > (1 << 20):
        count = 1 << 20
    if count <= c.cap:
        return 0
    if c.cap == 0 and c.offset == NULL:
        c.offset = <int64_t*>pool_take(count * 8, &got)
        c.timestamp = <int64_t*>pool_take(count * 8, &got)
        c.ts_type = <int8_t*>pool_take(count, &got)
        c.key_pos = <int64_t*>pool_take(count * 8, &got)
        c.key_len = <int32_t*>pool_take(count * 4, &got)
        c.val_pos = <int64_t*>pool_take(count * 8, &got)
        c.val_len = <int32_t*>pool_take(count * 4, &got)
        c.hdr_start = <int32_t*>pool_take((count + 1) * 4, &got)
        if (c.offset == NULL or c.timestamp == NULL or c.ts_type == NULL or c.key_pos == NULL
                or c.key_len == NULL or c.val_pos == NULL or c.val_len == NULL
                or c.hdr_start == NULL):
            raise MemoryError()
        c.hdr_start[0] = 0
        c.cap = count
        return 0
    if cols_reserve(c, count - c.n) < 0:
        raise MemoryError()
    return 0


cdef void cols_release(RecCols* c) noexcept:
    """With the GIL: give the arrays back to the pool (NULL entries were handed over)."""
    cdef size_t cap = <size_t>c.cap, caph = <size_t>c.caph
    pool_give(c.offset, cap * 8)
    pool_give(c.timestamp, cap * 8)
    pool_give(c.ts_type, cap)
    pool_give(c.key_pos, cap * 8)
    pool_give(c.key_len, cap * 4)
    pool_give(c.val_pos, cap * 8)
    pool_give(c.val_len, cap * 4)
    pool_give(c.hdr_start, (cap + 1) * 4)
    pool_give(c.hk_pos, caph * 8)
    pool_give(c.hk_len, caph * 4)
    pool_give(c.hv_pos, caph * 8)
    pool_give(c.hv_len, caph * 4)
    memset(c, 0, sizeof(RecCols))


# ---------------------------------------------------------------------------- varints
# Kafka varints are zigzag-encoded; at most 5 bytes (int32) or 10 bytes (int64).
cdef inline int rd_varint(const uint8_t** pp, const uint8_t* end, int32_t* out) noexcept nogil:
    cdef const uint8_t* p = pp[0]
    cdef uint32_t v, b
    cdef int shift
    if p < end and p[0] < 0x80:         # one-byte fast path (most lengths and deltas)
        v = p[0]
        pp[0] = p + 1
        out[0] = <int32_t>((v >> 1) ^ (0u - (v & 1)))
        return E_OK
    v = 0
    shift = 0
    while True:
        if p >= end:
            return E_CORRUPT
        b = p[0]
        p += 1
        v |= (b & 0x7F) << shift
        if not (b & 0x80):
            break
        shift += 7
        if shift > 28:
            return E_VARINT
    pp[0] = p
    out[0] = <int32_t>((v >> 1) ^ (0u - (v & 1)))
    return E_OK


cdef inline int rd_varlong(const uint8_t** pp, const uint8_t* end, int64_t* out) noexcept nogil:
    cdef const uint8_t* p = pp[0]
    cdef uint64_t v = 0, b
    cdef int shift = 0
    if p < end and p[0] < 0x80:
        v = p[0]
        pp[0] = p + 1
        out[0] = <int64_t>((v >> 1) ^ (<uint64_t>0 - (v & 1)))
        return E_OK
    while True:
        if p >= end:
            return E_CORRUPT
        b = p[0]
        p += 1
        v |= (b & 0x7F) << shift
        if not (b & 0x80):
            break
        shift += 7
        if shift > 63:
            return E_VARINT
    pp[0] = p
    out[0] = <int64_t>((v >> 1) ^ (<uint64_t>0 - (v & 1)))
    return E_OK


cdef inline int _varint_err(ScanErr* e, int rc, const char* field, int64_t idx) noexcept nogil:
    if rc == E_VARINT:
        return _set_err(e, E_VARINT, field, 0, idx)
    return _set_err(e, E_CORRUPT, field, 0, idx)


# ---------------------------------------------------------------------------- v2 records
ctypedef struct V2Ctx:
    int64_t base_offset
    int64_t base_ts
    int64_t max_ts
    bint log_append
    int8_t ts_type
    int64_t min_offset


cdef int scan_v2(const uint8_t* region, size_t rlen, int32_t count, V2Ctx* ctx,
                 const uint8_t* origin, int64_t bias, RecCols* c, ScanErr* err) noexcept nogil:
    """Validate `count` records in region[0:rlen] and append their positions to `c`.

    Positions are stored as (address - origin) + bias, so one scanner serves the per-record
    path (absolute addresses) and the columnar path (offsets into its data buffer).
    Array pointers live in locals: the module is built with -fno-strict-aliasing, so a store
    through `c->x[i]` would otherwise force every other field of `c` to be reloaded.
    """
    cdef const uint8_t* p = region
    cdef const uint8_t* end = region + rlen
    cdef const uint8_t* rend
    cdef int32_t rec_len, off_delta, klen, vlen, hcount, hkl, hvl
    cdef int64_t ts_delta, off
    cdef int rc
    cdef Py_ssize_t i, j, k, n, nh
    cdef int64_t base_offset = ctx.base_offset, base_ts = ctx.base_ts, max_ts = ctx.max_ts
    cdef int64_t min_offset = ctx.min_offset
    cdef bint log_append = ctx.log_append
    cdef int8_t ts_type = ctx.ts_type
    cdef int64_t* a_off
    cdef int64_t* a_ts
    cdef int8_t* a_tt
    cdef int64_t* a_kp
    cdef int32_t* a_kl
    cdef int64_t* a_vp
    cdef int32_t* a_vl
    cdef int32_t* a_hs
    cdef int64_t* h_kp
    cdef int32_t* h_kl
    cdef int64_t* h_vp
    cdef int32_t* h_vl
    cdef int64_t delta = bias - <int64_t><intptr_t>origin
    if count < 0:
        return _set_err(err, E_LENGTH, "negative record count", count, -1)
    if <size_t>count > rlen // MIN_RECORD_BYTES:
        return _set_err(err, E_CORRUPT, "record count exceeds the records present", count, -1)
    if cols_reserve(c, count) < 0:
        return _set_err(err, E_NOMEM, "record arrays", count, -1)
    a_off = c.offset
    a_ts = c.timestamp
    a_tt = c.ts_type
    a_kp = c.key_pos
    a_kl = c.key_len
    a_vp = c.val_pos
    a_vl = c.val_len
    a_hs = c.hdr_start
    h_kp = c.hk_pos
    h_kl = c.hk_len
    h_vp = c.hv_pos
    h_vl = c.hv_len
    n = c.n
    nh = c.nh
    for i in range(count):
        rc = rd_varint(&p, end, &rec_len)
        if rc:
            return _varint_err(err, rc, "record length", i)
        if rec_len < 0:
            return _set_err(err, E_LENGTH, "negative record length", rec_len, i)
        if rec_len > end - p:
            return _set_err(err, E_LENGTH, "record length exceeds the batch", rec_len, i)
        rend = p + rec_len
        if p >= rend:
            return _set_err(err, E_CORRUPT, "empty record", 0, i)
        p += 1                                   # record attributes: unused by Kafka
        rc = rd_varlong(&p, rend, &ts_delta)
        if rc:
            return _varint_err(err, rc, "timestamp delta", i)
        rc = rd_varint(&p, rend, &off_delta)
        if rc:
            return _varint_err(err, rc, "offset delta", i)
        rc = rd_varint(&p, rend, &klen)
        if rc:
            return _varint_err(err, rc, "key length", i)
        if klen < -1:
            return _set_err(err, E_LENGTH, "negative key length", klen, i)
        if klen > rend - p:
            return _set_err(err, E_LENGTH, "key length exceeds the record", klen, i)
        a_kl[n] = klen
        a_kp[n] = <int64_t><intptr_t>p + delta
        if klen > 0:
            p += klen
        rc = rd_varint(&p, rend, &vlen)
        if rc:
            return _varint_err(err, rc, "value length", i)
        if vlen < -1:
            return _set_err(err, E_LENGTH, "negative value length", vlen, i)
        if vlen > rend - p:
            return _set_err(err, E_LENGTH, "value length exceeds the record", vlen, i)
        a_vl[n] = vlen
        a_vp[n] = <int64_t><intptr_t>p + delta
        if vlen > 0:
            p += vlen
        rc = rd_varint(&p, rend, &hcount)
        if rc:
            return _varint_err(err, rc, "header count", i)
        k = nh
        if hcount:
            if hcount < 0:
                return _set_err(err, E_LENGTH, "negative header count", hcount, i)
            if hcount > (rend - p) // 2:
                return _set_err(err, E_LENGTH, "header count exceeds the record", hcount, i)
            if k + hcount > c.caph:
                c.nh = nh
                if cols_reserve_h(c, hcount) < 0:
                    return _set_err(err, E_NOMEM, "header arrays", hcount, i)
                h_kp = c.hk_pos
                h_kl = c.hk_len
                h_vp = c.hv_pos
                h_vl = c.hv_len
            for j in range(hcount):
                rc = rd_varint(&p, rend, &hkl)
                if rc:
                    return _varint_err(err, rc, "header key length", i)
                if hkl < 0:
                    return _set_err(err, E_LENGTH, "negative header key length", hkl, i)
                if hkl > rend - p:
                    return _set_err(err, E_LENGTH, "header key length exceeds the record", hkl, i)
                h_kl[k] = hkl
                h_kp[k] = <int64_t><intptr_t>p + delta
                p += hkl
                rc = rd_varint(&p, rend, &hvl)
                if rc:
                    return _varint_err(err, rc, "header value length", i)
                if hvl < -1:
                    return _set_err(err, E_LENGTH, "negative header value length", hvl, i)
                if hvl > rend - p:
                    return _set_err(err, E_LENGTH, "header value length exceeds the record", hvl, i)
                h_vl[k] = hvl
                h_vp[k] = <int64_t><intptr_t>p + delta
                if hvl > 0:
                    p += hvl
                k += 1
        if p != rend:
            return _set_err(err, E_CORRUPT, "record length does not match its fields",
                            rec_len, i)
        # Continue from rend (known as soon as the length varint is read) rather than from p
        # (known only after every field): the next record's loads need not wait for this one.
        p = rend
        off = add_wrap(base_offset, off_delta)
        if off < min_offset:
            continue                             # before the fetch position: drop, headers too
        a_off[n] = off
        a_ts[n] = max_ts if log_append else add_wrap(base_ts, ts_delta)
        a_tt[n] = ts_type
        a_hs[n] = <int32_t>nh
        a_hs[n + 1] = <int32_t>k
        nh = k
        n += 1
    c.n = n
    c.nh = nh
    if p != end:
        return _set_err(err, E_CORRUPT, "bytes left after the declared record count",
                        end - p, -1)
    return E_OK


cdef int control_type_of(const uint8_t* region, size_t rlen, int* out, ScanErr* err) noexcept nogil:
    """Type of the first control record of a control batch (key: version int16, type int16)."""
    cdef const uint8_t* p = region
    cdef const uint8_t* end = region + rlen
    cdef const uint8_t* rend
    cdef int32_t rec_len, tmp, klen
    cdef int64_t tmp64
    cdef int rc
    rc = rd_varint(&p, end, &rec_len)
    if rc:
        return _varint_err(err, rc, "control record length", 0)
    if rec_len < 0 or rec_len > end - p:
        return _set_err(err, E_LENGTH, "control record length exceeds the batch", rec_len, 0)
    rend = p + rec_len
    if p >= rend:
        return _set_err(err, E_CORRUPT, "empty control record", 0, 0)
    p += 1
    rc = rd_varlong(&p, rend, &tmp64)
    if rc == E_OK:
        rc = rd_varint(&p, rend, &tmp)
    if rc == E_OK:
        rc = rd_varint(&p, rend, &klen)
    if rc:
        return _varint_err(err, rc, "control record header", 0)
    if klen < 4 or klen > rend - p:
        return _set_err(err, E_CORRUPT, "control record key shorter than 4 bytes", klen, 0)
    out[0] = rd_i16(p + 2)
    return E_OK


# ---------------------------------------------------------------------------- legacy v0/v1
ctypedef struct LegacyMsg:
    int64_t offset
    int32_t size
    uint32_t crc
    int magic
    int attr
    int64_t timestamp
    const uint8_t* key
    int32_t klen
    const uint8_t* val
    int32_t vlen


cdef int parse_legacy(const uint8_t* p, size_t avail, LegacyMsg* m, ScanErr* err) noexcept nogil:
    """Parse one legacy message (offset, size, crc, magic, attributes, [timestamp], key, value)."""
    cdef const uint8_t* q
    cdef const uint8_t* end
    if avail < LOG_OVERHEAD:
        return _set_err(err, E_CORRUPT, "truncated message header", <int64_t>avail, -1)
    m.offset = rd_i64(p)
    m.size = rd_i32(p + 8)
    if m.size < LEGACY_MIN_SIZE:
        return _set_err(err, E_LENGTH, "message size below the minimum of 14", m.size, -1)
    if <size_t>m.size > avail - LOG_OVERHEAD:
        return _set_err(err, E_CORRUPT, "message size exceeds the bytes present", m.size, -1)
    end = p + LOG_OVERHEAD + m.size
    m.crc = rd_u32(p + 12)
    m.magic = p[16]
    m.attr = p[17]
    q = p + 18
    if m.magic == 1:
        if end - q < 8:
            return _set_err(err, E_CORRUPT, "message too short for its timestamp", m.size, -1)
        m.timestamp = rd_i64(q)
        q += 8
    elif m.magic == 0:
        m.timestamp = -1
    else:
        return _set_err(err, E_CORRUPT, "unknown message magic", m.magic, -1)
    if end - q < 4:
        return _set_err(err, E_CORRUPT, "message too short for its key length", m.size, -1)
    m.klen = rd_i32(q)
    q += 4
    if m.klen < -1:
        return _set_err(err, E_LENGTH, "negative key length", m.klen, -1)
    if m.klen > end - q:
        return _set_err(err, E_LENGTH, "key length exceeds the message", m.klen, -1)
    m.key = q
    if m.klen > 0:
        q += m.klen
    if end - q < 4:
        return _set_err(err, E_CORRUPT, "message too short for its value length", m.size, -1)
    m.vlen = rd_i32(q)
    q += 4
    if m.vlen < -1:
        return _set_err(err, E_LENGTH, "negative value length", m.vlen, -1)
    if m.vlen > end - q:
        return _set_err(err, E_LENGTH, "value length exceeds the message", m.vlen, -1)
    m.val = q
    if m.vlen > 0:
        q += m.vlen
    if q != end:
        return _set_err(err, E_CORRUPT, "message size does not match its fields", m.size, -1)
    return E_OK


cdef inline bint legacy_crc_ok(const uint8_t* p, LegacyMsg* m) noexcept nogil:
    return kc_crc32_ieee(0, p + 16, <size_t>(m.size - 4)) == m.crc


cdef int store_one(RecCols* c, int64_t offset, int64_t ts, int8_t ts_type, LegacyMsg* m,
                   const uint8_t* origin, int64_t bias) noexcept nogil:
    cdef Py_ssize_t n
    if cols_reserve(c, 1) < 0:
        return -1
    n = c.n
    c.offset[n] = offset
    c.timestamp[n] = ts
    c.ts_type[n] = ts_type
    c.key_len[n] = m.klen
    c.key_pos[n] = (m.key - origin) + bias
    c.val_len[n] = m.vlen
    c.val_pos[n] = (m.val - origin) + bias
    c.hdr_start[n] = <int32_t>c.nh
    c.hdr_start[n + 1] = <int32_t>c.nh
    c.n = n + 1
    return 0


cdef int scan_legacy_inner(const uint8_t* region, size_t rlen, LegacyMsg* w, bint check_crcs,
                           int64_t min_offset, const uint8_t* origin, int64_t bias,
                           RecCols* c, int64_t* first_offset, int32_t* count_out,
                           ScanErr* err) noexcept nogil:
    """The message set inside a compressed wrapper: complete messages only, no nesting."""
    cdef const uint8_t* p = region
    cdef const uint8_t* end = region + rlen
    cdef int32_t size
    cdef int32_t count = 0
    cdef int64_t last_rel = 0, base = 0, off, ts
    cdef int8_t ts_type
    cdef LegacyMsg m
    cdef int rc
    # Pass 1: framing only.  v1 inner offsets are relative to the last one, so find it first.
    while p < end:
        if end - p < LOG_OVERHEAD:
            return _set_err(err, E_CORRUPT, "truncated message inside a compressed wrapper",
                            end - p, count)
        size = rd_i32(p + 8)
        if size < LEGACY_MIN_SIZE:
            return _set_err(err, E_LENGTH, "inner message size below the minimum of 14",
                            size, count)
        if size > end - p - LOG_OVERHEAD:
            return _set_err(err, E_CORRUPT, "inner message exceeds its compressed wrapper",
                            size, count)
        last_rel = rd_i64(p)
        count += 1
        p += LOG_OVERHEAD + size
    if count == 0:
        return _set_err(err, E_CORRUPT, "compressed wrapper holds no messages", 0, -1)
    count_out[0] = count
    if w.magic > 0:
        base = w.offset - last_rel
    if cols_reserve(c, count) < 0:
        return _set_err(err, E_NOMEM, "record arrays", count, -1)
    p = region
    count = 0
    while p < end:
        rc = parse_legacy(p, <size_t>(end - p), &m, err)
        if rc:
            err.index = count
            return rc
        if check_crcs and not legacy_crc_ok(p, &m):
            return _set_err(err, E_CRC, "inner message CRC mismatch", m.crc, count)
        if m.attr & 0x07:
            return _set_err(err, E_CORRUPT, "nested compression inside a compressed wrapper",
                            m.attr & 0x07, count)
        off = add_wrap(base, m.offset) if w.magic > 0 else m.offset
        if count == 0:
            first_offset[0] = off
        if m.magic == 0:
            ts = -1
            ts_type = -1
        elif w.magic > 0 and (w.attr & 0x08):
            ts = w.timestamp                     # LogAppendTime: the broker's time on the wrapper
            ts_type = 1
        else:
            ts = m.timestamp
            ts_type = 0
        if off >= min_offset:
            if store_one(c, off, ts, ts_type, &m, origin, bias) < 0:
                return _set_err(err, E_NOMEM, "record arrays", count, -1)
        count += 1
        p += LOG_OVERHEAD + m.size
    return E_OK


# ============================================================================ Python objects
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
        return bool(self.attributes & 0x40)

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


# ---------------------------------------------------------------------------- C arrays
cdef class _CArray:
    """A read-only 1-D buffer over malloc'd memory it owns (numpy.frombuffer / pa.py_buffer)."""
    cdef void* ptr
    cdef Py_ssize_t nbytes
    cdef Py_ssize_t itemsize
    cdef bytes fmt
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]
    cdef size_t capb            # bytes actually allocated at ptr (>= nbytes)

    def __dealloc__(self):
        pool_give(self.ptr, self.capb)

    def __getbuffer__(self, Py_buffer* view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("columnar buffers are read-only")
        view.buf = self.ptr
        view.obj = self
        view.len = self.nbytes
        view.readonly = 1
        view.itemsize = self.itemsize
        view.format = PyBytes_AS_STRING(self.fmt) if (flags & PyBUF_FORMAT) else NULL
        view.ndim = 1
        view.shape = self.shape if (flags & PyBUF_ND) == PyBUF_ND else NULL
        view.strides = self.strides if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def __len__(self):
        return self.shape[0]


cdef _CArray _carray(void* ptr, Py_ssize_t count, Py_ssize_t itemsize, bytes fmt,
                     size_t capb):
    """Take ownership of ptr (count items, capb bytes allocated); NULL becomes a 1-byte block."""
    cdef _CArray a = _CArray.__new__(_CArray)
    if ptr == NULL:
        ptr = malloc(1)
        if ptr == NULL:
            raise MemoryError()
        count = 0
        capb = 1
    a.ptr = ptr
    a.capb = capb
    a.nbytes = count * itemsize
    a.itemsize = itemsize
    a.fmt = fmt
    a.shape[0] = count
    a.strides[0] = itemsize
    return a


cdef _CArray _new_carray(Py_ssize_t count, Py_ssize_t itemsize, bytes fmt):
    cdef size_t got
    cdef void* p = pool_take(count * itemsize, &got)
    if p == NULL:
        raise MemoryError()
    return _carray(p, count, itemsize, fmt, got)


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
            length = rd_i32(p + 8)
            if length < LEGACY_MIN_SIZE or length > remaining - LOG_OVERHEAD:
                break
            est = 1
            if p[16] == 2:
                if length + LOG_OVERHEAD < V2_HEADER:
                    self.owned = self.columnar
                    break
                count = rd_i32(p + 57)
                est = length // MIN_RECORD_BYTES
                if rd_i16(p + 21) & 7:
                    self.owned = self.columnar
                    est *= 4                    # a guess at the compression ratio
                if 0 <= count < est:
                    est = count
            elif p[17] & 7:
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
            length = rd_i32(p + 8)
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
            magic = <int8_t>p[16]
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
        if total < V2_HEADER:
            raise InvalidRecordLengthError(
                f"batch at byte {pos}: v2 batch size {total} is below the header size "
                f"{V2_HEADER}")
        base_offset = rd_i64(p)
        stored = rd_u32(p + 17)
        if self.check_crcs:
            with nogil:
                computed = kc_crc32c(0, p + 21, <size_t>(total - 21))
            if computed != stored:
                raise CrcMismatchError(
                    f"batch at byte {pos}, base offset {base_offset}: CRC32C {computed:#010x} "
                    f"does not match the stored {stored:#010x}")
        attrs = <uint16_t>rd_i16(p + 21)
        codec = attrs & 7
        if codec > 4:
            raise UnsupportedCodecError(
                f"batch at byte {pos}, base offset {base_offset}: unknown compression codec "
                f"id {codec}")
        lod = rd_i32(p + 23)
        count = rd_i32(p + 57)
        pid = rd_i64(p + 43)
        last_offset = add_wrap(base_offset, lod)
        b = self.new_batch(pos, total)
        b.base_offset = base_offset
        b.last_offset = last_offset
        b.partition_leader_epoch = rd_i32(p + 12)
        b.magic = 2
        b.crc = stored
        b.attributes = attrs
        b.codec = codec
        b.timestamp_type = (attrs >> 3) & 1
        b.is_transactional = (attrs >> 4) & 1
        b.is_control = (attrs >> 5) & 1
        b.first_timestamp = rd_i64(p + 27)
        b.max_timestamp = rd_i64(p + 35)
        if attrs & 0x40:
            b.delete_horizon_ms = b.first_timestamp
        b.producer_id = pid
        b.producer_epoch = rd_i16(p + 51)
        b.base_sequence = rd_i32(p + 53)
        b.record_count = count
        if count < 0:
            raise InvalidRecordLengthError(
                f"batch at byte {pos}, base offset {base_offset}: negative record count "
                f"{count}")
        self.batches.append(b)
        self.next_offset = add_wrap(last_offset, 1)

        region = p + V2_HEADER
        rlen = <size_t>(total - V2_HEADER)
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
                if ctype == CONTROL_ABORT:
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
            self.raise_scan(rd_i64(p), pos)
        if not ok:
            raise CrcMismatchError(
                f"message at byte {pos}, offset {m.offset}: CRC32 does not match the stored "
                f"{m.crc:#010x}")
        codec = m.attr & 7
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
        b.timestamp_type = ((m.attr >> 3) & 1) if m.magic > 0 else -1
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
                r.control_type = rd_i16(<const uint8_t*><intptr_t>c.key_pos[i] + 2)
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
                rec = kc_consumer_record(
                    tp, topic, part, epoch, c.offset[i], ts_obj, c.ts_type[i],
                    <const char*><intptr_t>c.key_pos[i], c.key_len[i],
                    <const char*><intptr_t>c.val_pos[i], c.val_len[i],
                    <PyObject*>hl, hsize, untrack)
            else:
                rec = kc_consumer_record(
                    tp, topic, part, epoch, c.offset[i], ts_obj, c.ts_type[i],
                    <const char*><intptr_t>c.key_pos[i], c.key_len[i],
                    <const char*><intptr_t>c.val_pos[i], c.val_len[i],
                    NULL, -1, untrack)
            out.append(rec)
        self.last_ts_obj = ts_obj
        self.last_ts = last_ts
        c.n = 0
        c.nh = 0
        return 0

    cdef list headers_sized(self, Py_ssize_t hs, Py_ssize_t he, int64_t* size):
        """headers_of, plus kafka-python's serialized_header_size (UTF-8 bytes of the keys
        as decoded, plus the value bytes), with the pairs and the list untracked if asked."""
        cdef RecCols* c = &self.cols
        cdef list hl = []
        cdef Py_ssize_t k
        cdef int64_t total = 0
        cdef object hv, pair
        cdef bint untrack = self.untrack
        for k in range(hs, he):
            hk = PyUnicode_DecodeUTF8(<const char*><intptr_t>c.hk_pos[k], c.hk_len[k],
                                      "replace")
            if kc_is_ascii(hk):
                total += c.hk_len[k]
            else:   # as re-encoded: differs from the raw length where bad bytes became U+FFFD
                total += len(PyUnicode_AsUTF8String(hk))
            if c.hv_len[k] >= 0:
                hv = PyBytes_FromStringAndSize(<const char*><intptr_t>c.hv_pos[k], c.hv_len[k])
                total += c.hv_len[k]
            else:
                hv = None
            pair = (hk, hv)
            kc_gc_untrack(pair)         # (str, bytes|None) can never be part of a cycle
            hl.append(pair)
        if untrack:
            kc_gc_untrack(hl)
        size[0] = total
        return hl

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
    if not isinstance(record_cls, type) or not kc_tuple_like(<PyTypeObject*>record_cls):
        raise TypeError(f"record_cls must be a namedtuple class (a tuple subclass with "
                        f"__slots__ = ()), got {record_cls!r}")
    fields = getattr(record_cls, "_fields", None)
    if not isinstance(fields, tuple) or len(fields) != 13:
        raise TypeError(f"record_cls must have kafka-python's 13 ConsumerRecord fields, "
                        f"got {fields!r}")
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


def decode_columnar(data, *, bint check_crcs=True, max_decompressed_bytes=None,
                    bint skip_control=True, int64_t fetch_offset=-1,
                    aborted_transactions=None):
    """Decode one partition's fetched bytes into contiguous arrays (see records.pyi)."""
    cdef _Decoder d = _make_decoder(data, check_crcs, max_decompressed_bytes, skip_control,
                                    fetch_offset, aborted_transactions, True)
    cdef ColumnarBatch cb = ColumnarBatch.__new__(ColumnarBatch)
    cdef RecCols* c = &d.cols
    cdef Py_ssize_t n, cap, caph
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
    # Hand the arrays over: from here the ColumnarBatch owns them.
    cap = c.cap
    caph = c.caph
    cb._offsets = _carray(c.offset, n, 8, b"q", cap * 8); c.offset = NULL
    cb._timestamps = _carray(c.timestamp, n, 8, b"q", cap * 8); c.timestamp = NULL
    cb._ts_types = _carray(c.ts_type, n, 1, b"b", cap); c.ts_type = NULL
    cb._key_pos = _carray(c.key_pos, n, 8, b"q", cap * 8); c.key_pos = NULL
    cb._key_len = _carray(c.key_len, n, 4, b"i", cap * 4); c.key_len = NULL
    cb._val_pos = _carray(c.val_pos, n, 8, b"q", cap * 8); c.val_pos = NULL
    cb._val_len = _carray(c.val_len, n, 4, b"i", cap * 4); c.val_len = NULL
    cb._hdr_start = _carray(c.hdr_start, n + 1, 4, b"i", (cap + 1) * 4); c.hdr_start = NULL
    cb._hk_pos = _carray(c.hk_pos, c.nh, 8, b"q", caph * 8); c.hk_pos = NULL
    cb._hk_len = _carray(c.hk_len, c.nh, 4, b"i", caph * 4); c.hk_len = NULL
    cb._hv_pos = _carray(c.hv_pos, c.nh, 8, b"q", caph * 8); c.hv_pos = NULL
    cb._hv_len = _carray(c.hv_len, c.nh, 4, b"i", caph * 4); c.hv_len = NULL
    if d.owned:
        growbuf_shrink(&d.scratch)
        cb._data = _carray(d.scratch.data, d.scratch.len, 1, b"B", d.scratch.cap)
        d.scratch.data = NULL
        d.scratch.len = d.scratch.cap = 0
    else:
        cb._data = memoryview(data).cast("B") if data is not None else memoryview(b"")
    return cb


# ============================================================================ columnar
cdef int64_t gather(const uint8_t* data, const int64_t* pos, const int32_t* lens,
                    Py_ssize_t n, void* offsets, bint wide, uint8_t* out,
                    uint8_t* validity) noexcept nogil:
    """Copy variable-length values into Arrow layout; returns the null count."""
    cdef Py_ssize_t i
    cdef int64_t o = 0, nulls = 0
    cdef int32_t ln
    for i in range(n):
        if wide:
            (<int64_t*>offsets)[i] = o
        else:
            (<int32_t*>offsets)[i] = <int32_t>o
        ln = lens[i]
        if ln < 0:
            nulls += 1
            validity[i >> 3] &= ~(1 << (i & 7))
            continue
        validity[i >> 3] |= 1 << (i & 7)
        if ln:
            memcpy(out + o, data + pos[i], ln)
            o += ln
    if wide:
        (<int64_t*>offsets)[n] = o
    else:
        (<int32_t*>offsets)[n] = <int32_t>o
    return nulls


cdef int64_t make_views(const int64_t* pos, const int32_t* lens, Py_ssize_t n,
                        const uint8_t* data, uint8_t* views, uint8_t* validity) noexcept nogil:
    """Arrow binary_view entries pointing into `data` (buffer index 0): no value is copied."""
    cdef Py_ssize_t i
    cdef int64_t nulls = 0
    cdef int32_t ln, zero = 0
    cdef int32_t off32
    cdef uint8_t* v
    for i in range(n):
        v = views + 16 * i
        memset(v, 0, 16)
        ln = lens[i]
        if ln < 0:
            nulls += 1
            validity[i >> 3] &= ~(1 << (i & 7))
            continue
        validity[i >> 3] |= 1 << (i & 7)
        memcpy(v, &ln, 4)
        if ln <= 12:
            memcpy(v + 4, data + pos[i], ln)
        else:
            memcpy(v + 4, data + pos[i], 4)
            memcpy(v + 8, &zero, 4)
            off32 = <int32_t>pos[i]
            memcpy(v + 12, &off32, 4)
    return nulls


@cython.final
cdef class ColumnarBatch:
    """One partition's records as contiguous arrays (no Python object per record).

    Every array is a read-only buffer (memoryview / numpy.frombuffer / pa.py_buffer):
      offsets, timestamps (int64), timestamp_types (int8),
      key_offsets/value_offsets (int64) + key_lengths/value_lengths (int32, -1 = null),
      positions into `data`; header_starts (int32, num_records + 1): record i owns headers
      header_starts[i] .. header_starts[i+1]-1 of header_key_offsets/lengths (int32) and
      header_value_offsets/lengths (-1 = null).
    `data` is the caller's input itself when no batch was compressed (zero_copy), else one
    owned buffer holding every batch's (decompressed) records.
    """

    def __len__(self):
        return self.num_records

    @property
    def offsets(self):
        return memoryview(self._offsets)

    @property
    def timestamps(self):
        return memoryview(self._timestamps)

    @property
    def timestamp_types(self):
        return memoryview(self._ts_types)

    @property
    def key_offsets(self):
        return memoryview(self._key_pos)

    @property
    def key_lengths(self):
        return memoryview(self._key_len)

    @property
    def value_offsets(self):
        return memoryview(self._val_pos)

    @property
    def value_lengths(self):
        return memoryview(self._val_len)

    @property
    def header_starts(self):
        return memoryview(self._hdr_start)

    @property
    def header_key_offsets(self):
        return memoryview(self._hk_pos)

    @property
    def header_key_lengths(self):
        return memoryview(self._hk_len)

    @property
    def header_value_offsets(self):
        return memoryview(self._hv_pos)

    @property
    def header_value_lengths(self):
        return memoryview(self._hv_len)

    @property
    def data(self):
        return memoryview(self._data)

    def __repr__(self):
        return (f"ColumnarBatch(num_records={self.num_records}, batches={len(self.batches)}, "
                f"next_offset={self.next_offset}, zero_copy={self.zero_copy})")

    cdef object _binary(self, object pa, object posa_, object lena_, Py_ssize_t n,
                        bint view, object typ):
        cdef _CArray posa = <_CArray>posa_
        cdef _CArray lena = <_CArray>lena_
        cdef Py_buffer db
        cdef const int64_t* pos = <const int64_t*>posa.ptr
        cdef const int32_t* lens = <const int32_t*>lena.ptr
        cdef Py_ssize_t i
        cdef int64_t total = 0, nulls
        cdef bint wide
        cdef _CArray valid, offs, out, views
        PyObject_GetBuffer(self._data, &db, PyBUF_SIMPLE)
        try:
            valid = _new_carray((n + 7) // 8, 1, b"B")
            memset(valid.ptr, 0, valid.nbytes)
            if view and db.len <= INT32_MAX:
                views = _new_carray(n, 16, b"B")
                with nogil:
                    nulls = make_views(pos, lens, n, <const uint8_t*>db.buf,
                                       <uint8_t*>views.ptr, <uint8_t*>valid.ptr)
                btype = pa.binary_view() if typ == pa.binary() else pa.string_view()
                return pa.Array.from_buffers(
                    btype, n, [pa.py_buffer(valid) if nulls else None, pa.py_buffer(views),
                               pa.py_buffer(self._data)], null_count=nulls)
            with nogil:
                for i in range(n):
                    if lens[i] > 0:
                        total += lens[i]
            wide = total > INT32_MAX
            offs = _new_carray(n + 1, 8 if wide else 4, b"q" if wide else b"i")
            out = _new_carray(total, 1, b"B")
            with nogil:
                nulls = gather(<const uint8_t*>db.buf, pos, lens, n, offs.ptr, wide,
                               <uint8_t*>out.ptr, <uint8_t*>valid.ptr)
            if wide:
                typ = pa.large_binary() if typ == pa.binary() else pa.large_string()
            return pa.Array.from_buffers(
                typ, n, [pa.py_buffer(valid) if nulls else None, pa.py_buffer(offs),
                         pa.py_buffer(out)], null_count=nulls)
        finally:
            PyBuffer_Release(&db)

    def to_arrow(self, *, bint binary_view=False):
        """A pyarrow.RecordBatch: offset int64, timestamp int64, key binary, value binary,
        headers list<struct<key: string, value: binary>>.

        offset, timestamp and the headers' list offsets are zero-copy views of this batch's
        arrays.  Keys and values are gathered into Arrow's contiguous layout (one memcpy per
        value, GIL released), or with binary_view=True exposed as binary_view arrays that
        point straight into `data` (zero-copy; needs a consumer that reads binary_view).
        """
        import pyarrow as pa
        n = self.num_records
        nh = self.num_headers
        offset = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self._offsets)])
        timestamp = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self._timestamps)])
        key = self._binary(pa, self._key_pos, self._key_len, n, binary_view, pa.binary())
        value = self._binary(pa, self._val_pos, self._val_len, n, binary_view, pa.binary())
        hkey = self._binary(pa, self._hk_pos, self._hk_len, nh, False, pa.string())
        try:
            hkey.validate(full=True)
        except pa.ArrowInvalid:
            # Malformed UTF-8 in a header key: decode like the per-record path (U+FFFD).
            raw = self._binary(pa, self._hk_pos, self._hk_len, nh, False, pa.binary())
            hkey = pa.array([b.decode("utf-8", "replace") for b in raw.to_pylist()],
                            pa.string())
        hval = self._binary(pa, self._hv_pos, self._hv_len, nh, binary_view, pa.binary())
        struct_type = pa.struct([pa.field("key", hkey.type, nullable=False),
                                 pa.field("value", hval.type)])
        entries = pa.StructArray.from_arrays([hkey, hval], fields=list(struct_type))
        headers = pa.Array.from_buffers(pa.list_(struct_type), n,
                                        [None, pa.py_buffer(self._hdr_start)],
                                        children=[entries])
        schema = pa.schema([
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", pa.int64(), nullable=False),
            pa.field("key", key.type),
            pa.field("value", value.type),
            pa.field("headers", headers.type, nullable=False),
        ])
        return pa.RecordBatch.from_arrays([offset, timestamp, key, value, headers],
                                          schema=schema)


# ============================================================================ encoding
cdef inline uint32_t zz32(int32_t v) noexcept nogil:
    return (<uint32_t>v << 1) ^ <uint32_t>(v >> 31)


cdef inline uint64_t zz64(int64_t v) noexcept nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


cdef inline int uvarint_size(uint64_t v) noexcept nogil:
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline uint8_t* put_uvarint(uint8_t* p, uint64_t v) noexcept nogil:
    while v >= 0x80:
        p[0] = <uint8_t>(v | 0x80)
        v >>= 7
        p += 1
    p[0] = <uint8_t>v
    return p + 1


cdef int _get_bytes(object obj, Py_buffer* view, const char* what) except -1:
    """Borrow a read-only view of a bytes-like value (caller releases it)."""
    if isinstance(obj, str):
        raise TypeError(f"{what.decode()} must be bytes-like or None, not str")
    PyObject_GetBuffer(obj, view, PyBUF_SIMPLE)
    if view.len > INT32_MAX:
        PyBuffer_Release(view)
        raise ValueError(f"{what.decode()} is longer than 2**31-1 bytes")
    return 0


cdef class _BorrowedView:
    """Read-only buffer over memory owned elsewhere (the builder's records), for one call."""
    cdef const uint8_t* ptr
    cdef Py_ssize_t size

    @staticmethod
    cdef _BorrowedView wrap(const uint8_t* ptr, size_t size):
        cdef _BorrowedView v = _BorrowedView.__new__(_BorrowedView)
        v.ptr = ptr if ptr != NULL else <const uint8_t*>b""
        v.size = size
        return v

    def __getbuffer__(self, Py_buffer* view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("read-only")
        PyBuffer_FillInfo(view, self, <void*>self.ptr, self.size, 1, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass


@cython.final
cdef class RecordBatchBuilder:
    """Accumulates records for one v2 batch; build() writes the header and (compressed) body.

    Records are encoded as they are appended, so `size_in_bytes` is exact (uncompressed) at
    any time: a producer can close a batch when it reaches batch.size.
    """

    def __cinit__(self, *, base_timestamp=None):
        memset(&self._buf, 0, sizeof(GrowBuf))
        self._count = 0
        self._has_base_ts = base_timestamp is not None
        self._base_ts = base_timestamp if base_timestamp is not None else -1
        self._max_ts = -1
        self._last_delta = -1

    def __dealloc__(self):
        growbuf_free(&self._buf)

    def __len__(self):
        return self._count

    @property
    def size_in_bytes(self):
        return V2_HEADER + self._buf.len

    def append(self, int64_t timestamp_ms, key, value, headers=None, offset_delta=None):
        """Encode one record; returns its encoded size in bytes."""
        cdef Py_buffer kb, vb
        cdef bint have_k = False, have_v = False
        cdef int32_t delta
        cdef int64_t ts_delta
        cdef Py_ssize_t body, klen = -1, vlen = -1, need, i, nh = 0
        cdef uint8_t* p
        cdef list hk_bytes = None
        cdef list hv_objs = None
        cdef int32_t hvlen
        cdef Py_ssize_t total
        if self._count == INT32_MAX:
            raise OverflowError("a batch holds at most 2**31-1 records")
        delta = self._count if offset_delta is None else offset_delta
        if not self._has_base_ts:
            self._base_ts = timestamp_ms
            self._has_base_ts = True
        ts_delta = <int64_t>(<uint64_t>timestamp_ms - <uint64_t>self._base_ts)
        try:
            if key is not None:
                _get_bytes(key, &kb, b"key")
                have_k = True
                klen = kb.len
            if value is not None:
                _get_bytes(value, &vb, b"value")
                have_v = True
                vlen = vb.len
            body = (1 + uvarint_size(zz64(ts_delta)) + uvarint_size(zz32(delta))
                    + uvarint_size(zz32(<int32_t>klen)) + (klen if klen > 0 else 0)
                    + uvarint_size(zz32(<int32_t>vlen)) + (vlen if vlen > 0 else 0))
            if headers:
                hk_bytes = []
                hv_objs = []
                for h in headers:
                    hk, hv = h
                    hkb = hk.encode("utf-8") if isinstance(hk, str) else bytes(hk)
                    if hv is not None and isinstance(hv, str):
                        raise TypeError("header values must be bytes-like or None, not str")
                    hvo = bytes(hv) if hv is not None else None
                    hk_bytes.append(hkb)
                    hv_objs.append(hvo)
                    body += uvarint_size(zz32(len(hkb))) + len(hkb)
                    hvlen = -1 if hvo is None else len(hvo)
                    body += uvarint_size(zz32(hvlen)) + (hvlen if hvlen > 0 else 0)
                nh = len(hk_bytes)
            body += uvarint_size(zz32(<int32_t>nh))
            if body > INT32_MAX:
                raise ValueError("record is longer than 2**31-1 bytes")
            total = uvarint_size(zz32(<int32_t>body)) + body
            if growbuf_reserve(&self._buf, total) < 0:
                raise MemoryError()
            p = self._buf.data + self._buf.len
            p = put_uvarint(p, zz32(<int32_t>body))
            p[0] = 0                                   # record attributes
            p += 1
            p = put_uvarint(p, zz64(ts_delta))
            p = put_uvarint(p, zz32(delta))
            p = put_uvarint(p, zz32(<int32_t>klen))
            if klen > 0:
                memcpy(p, kb.buf, klen)
                p += klen
            p = put_uvarint(p, zz32(<int32_t>vlen))
            if vlen > 0:
                memcpy(p, vb.buf, vlen)
                p += vlen
            p = put_uvarint(p, zz32(<int32_t>nh))
            for i in range(nh):
                hkb = hk_bytes[i]
                p = put_uvarint(p, zz32(<int32_t>len(hkb)))
                memcpy(p, PyBytes_AS_STRING(hkb), len(hkb))
                p += len(hkb)
                hvo = hv_objs[i]
                if hvo is None:
                    p = put_uvarint(p, zz32(-1))
                else:
                    p = put_uvarint(p, zz32(<int32_t>len(hvo)))
                    memcpy(p, PyBytes_AS_STRING(hvo), len(hvo))
                    p += len(hvo)
        finally:
            if have_k:
                PyBuffer_Release(&kb)
            if have_v:
                PyBuffer_Release(&vb)
        self._buf.len += total
        self._count += 1
        self._last_delta = delta
        if self._count == 1 or timestamp_ms > self._max_ts:
            self._max_ts = timestamp_ms
        return total

    def build(self, *, int64_t base_offset=0, int codec=0, compression_level=None,
              int timestamp_type=0, int64_t producer_id=-1, int producer_epoch=-1,
              int base_sequence=-1, bint transactional=False, bint control=False,
              int partition_leader_epoch=-1, max_timestamp=None, last_offset_delta=None,
              bint has_delete_horizon=False):
        """The whole batch (61-byte header + records) as bytes, CRC32C filled in."""
        cdef bytes payload = None
        cdef const uint8_t* body
        cdef size_t blen
        cdef Py_ssize_t total
        cdef bytes out
        cdef uint8_t* p
        cdef int attrs
        cdef int64_t max_ts
        cdef int32_t lod
        if not 0 <= codec <= 4:
            raise UnsupportedCodecError(f"unknown compression codec id {codec}")
        if timestamp_type not in (0, 1):
            raise ValueError("timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime)")
        if codec:
            payload = _compress(codec, memoryview(_BorrowedView.wrap(self._buf.data,
                                                                     self._buf.len)),
                                compression_level)
            body = <const uint8_t*>PyBytes_AS_STRING(payload)
            blen = len(payload)
        else:
            if self._buf.data != NULL:
                body = self._buf.data
            else:
                body = <const uint8_t*>b""
            blen = self._buf.len
        total = V2_HEADER + <Py_ssize_t>blen
        if total - LOG_OVERHEAD > INT32_MAX:
            raise ValueError("batch is larger than 2**31-1 bytes")
        if max_timestamp is not None:
            max_ts = max_timestamp
        else:
            max_ts = self._max_ts if self._count else -1
        if last_offset_delta is not None:
            lod = last_offset_delta
        else:
            lod = self._last_delta if self._count else 0
        attrs = (codec | (timestamp_type << 3) | (transactional << 4) | (control << 5)
                 | (has_delete_horizon << 6))
        out = PyBytes_FromStringAndSize(NULL, total)
        p = <uint8_t*>PyBytes_AS_STRING(out)
        wr_i64(p, base_offset)
        wr_u32(p + 8, <uint32_t>(total - LOG_OVERHEAD))
        wr_u32(p + 12, <uint32_t>partition_leader_epoch)
        p[16] = 2
        wr_i16(p + 21, <int16_t>attrs)
        wr_u32(p + 23, <uint32_t>lod)
        wr_i64(p + 27, self._base_ts if (self._has_base_ts) else -1)
        wr_i64(p + 35, max_ts)
        wr_i64(p + 43, producer_id)
        wr_i16(p + 51, <int16_t>producer_epoch)
        wr_u32(p + 53, <uint32_t>base_sequence)
        wr_u32(p + 57, <uint32_t>self._count)
        if blen:
            memcpy(p + V2_HEADER, body, blen)
        with nogil:
            wr_u32(p + 17, kc_crc32c(0, p + 21, <size_t>(total - 21)))
        return out


def encode_batch(records, *, int64_t base_offset=0, int codec=0, int timestamp_type=0,
                 int64_t producer_id=-1, int producer_epoch=-1, int base_sequence=-1,
                 bint transactional=False, bint control=False, int partition_leader_epoch=-1,
                 compression_level=None, base_timestamp=None, max_timestamp=None,
                 last_offset_delta=None, bint has_delete_horizon=False):
    """Encode records [(offset_delta | None, timestamp_ms, key, value, headers), ...] as
    one v2 batch (see records.pyi)."""
    cdef RecordBatchBuilder b = RecordBatchBuilder(base_timestamp=base_timestamp)
    for r in records:
        b.append(r[1], r[2], r[3], r[4] if len(r) > 4 else None, r[0])
    return b.build(base_offset=base_offset, codec=codec, compression_level=compression_level,
                   timestamp_type=timestamp_type, producer_id=producer_id,
                   producer_epoch=producer_epoch, base_sequence=base_sequence,
                   transactional=transactional, control=control,
                   partition_leader_epoch=partition_leader_epoch,
                   max_timestamp=max_timestamp, last_offset_delta=last_offset_delta,
                   has_delete_horizon=has_delete_horizon)


def control_record(int control_type, int coordinator_epoch=0, int version=0):
    """(key, value) of an end-transaction marker: control_type 0 abort, 1 commit."""
    cdef bytes key = PyBytes_FromStringAndSize(NULL, 4)
    cdef bytes value = PyBytes_FromStringAndSize(NULL, 6)
    cdef uint8_t* k = <uint8_t*>PyBytes_AS_STRING(key)
    cdef uint8_t* v = <uint8_t*>PyBytes_AS_STRING(value)
    wr_i16(k, <int16_t>version)
    wr_i16(k + 2, <int16_t>control_type)
    wr_i16(v, 0)
    wr_u32(v + 2, <uint32_t>coordinator_epoch)
    return key, value
