# cimport interface of kcore.scan: validation of record-batch bodies into position arrays.
# Everything here but cols_prereserve/cols_release runs without the GIL and touches no
# Python object; errors are reported through ScanErr and raised by the caller.
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

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

# Positions of every record (and header) found so far, as parallel C arrays.
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

# What scan_v2 needs from the batch header.
ctypedef struct V2Ctx:
    int64_t base_offset
    int64_t base_ts
    int64_t max_ts
    bint log_append
    int8_t ts_type
    int64_t min_offset      # records below this offset are dropped (the fetch position)

# One legacy v0/v1 message; key/val point into the parsed bytes.
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


cdef inline int64_t add_wrap(int64_t a, int64_t b) noexcept nogil:
    # Hostile deltas may overflow; wrap instead of invoking undefined behaviour.
    return <int64_t>(<uint64_t>a + <uint64_t>b)


# ---- arrays (GIL-free growth; the pooled variants need the GIL)
cdef int cols_reserve(RecCols* c, Py_ssize_t extra) noexcept nogil
# Size the record arrays for `count` records from kcore.pool (count capped at 2**20).
cdef int cols_prereserve(RecCols* c, Py_ssize_t count) except -1
# Give every array back to kcore.pool (NULL entries were handed over) and zero `c`.
cdef void cols_release(RecCols* c) noexcept

# ---- v2
# Validate `count` records in region[0:rlen] and append their positions, stored as
# (address - origin) + bias, to `c`. Returns E_OK or an error code (details in err).
cdef int scan_v2(const uint8_t* region, size_t rlen, int32_t count, V2Ctx* ctx,
                 const uint8_t* origin, int64_t bias, RecCols* c, ScanErr* err) noexcept nogil
# Type of the first control record of a control batch (key: version int16, type int16).
cdef int control_type_of(const uint8_t* region, size_t rlen, int* out, ScanErr* err) noexcept nogil

# ---- legacy v0/v1
cdef int parse_legacy(const uint8_t* p, size_t avail, LegacyMsg* m, ScanErr* err) noexcept nogil
cdef bint legacy_crc_ok(const uint8_t* p, LegacyMsg* m) noexcept nogil
cdef int store_one(RecCols* c, int64_t offset, int64_t ts, int8_t ts_type, LegacyMsg* m,
                   const uint8_t* origin, int64_t bias) noexcept nogil
# The message set inside a compressed wrapper `w`: complete messages only, no nesting.
cdef int scan_legacy_inner(const uint8_t* region, size_t rlen, LegacyMsg* w, bint check_crcs,
                           int64_t min_offset, const uint8_t* origin, int64_t bias,
                           RecCols* c, int64_t* first_offset, int32_t* count_out,
                           ScanErr* err) noexcept nogil
