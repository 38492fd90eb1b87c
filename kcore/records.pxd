# cimport interface of kcore.records: decoded records and batch metadata of Kafka record
# batches (v2) and legacy message sets (v0/v1).
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, intptr_t


cdef class Record:
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly int timestamp_type
    cdef readonly object key
    cdef readonly object value
    cdef object _headers
    cdef readonly int leader_epoch
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly bint is_transactional
    cdef readonly bint is_control
    cdef readonly int control_type
    cdef readonly object topic
    cdef readonly int partition


cdef class BatchInfo:
    cdef readonly int64_t base_offset
    cdef readonly int64_t last_offset
    cdef readonly int partition_leader_epoch
    cdef readonly int magic
    cdef readonly uint32_t crc
    cdef readonly int attributes
    cdef readonly int codec
    cdef readonly int timestamp_type
    cdef readonly bint is_transactional
    cdef readonly bint is_control
    cdef readonly int control_type
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int base_sequence
    cdef readonly int64_t first_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t delete_horizon_ms
    cdef readonly int record_count
    cdef readonly Py_ssize_t position
    cdef readonly Py_ssize_t size_in_bytes
    cdef readonly Py_ssize_t record_start
    cdef readonly Py_ssize_t record_end
    cdef readonly bint aborted


cdef class DecodeResult:
    cdef readonly list records
    cdef readonly list batches
    cdef readonly int64_t next_offset
    cdef readonly Py_ssize_t bytes_consumed
    cdef readonly Py_ssize_t partial_trailing_bytes
    cdef readonly Py_ssize_t incomplete_batch_size


# A decode_columnar result's arrays, checked to hold its rows (and headers).
cdef struct Columns:
    Py_ssize_t n
    Py_ssize_t nh
    const int64_t* offs
    const int64_t* tss
    const int8_t* tst
    const int64_t* kp
    const int32_t* kl
    const int64_t* vp
    const int32_t* vl
    const int32_t* hs
    const int64_t* hkp
    const int32_t* hkl
    const int64_t* hvp
    const int32_t* hvl


# kc_record_type_new (kcore/recordtype.h) of the module that makes the type.
ctypedef object (*record_type_maker)(const char* qualified_name, object fields)


cdef object compiled_twin(object cls, str caller, record_type_maker make)
cdef Columns columns_of(object batch) except *
cdef BatchInfo batch_of_row(list batches, Py_ssize_t* lo, Py_ssize_t i)
cdef list header_list(intptr_t base, Py_ssize_t dlen, const int64_t* hkp, const int32_t* hkl,
                      const int64_t* hvp, const int32_t* hvl, Py_ssize_t hs, Py_ssize_t he,
                      bint untrack, int64_t* size)


cdef inline bint span_ok(int64_t pos, int32_t length, Py_ssize_t size) noexcept:
    """A (position, length) pair lies inside data of `size` bytes (length -1: null)."""
    return length < 0 or (pos >= 0 and pos <= size and length <= size - pos)


cdef inline object row_headers(const Columns* col, Py_ssize_t i, intptr_t base, Py_ssize_t dlen,
                               bint untrack, int64_t* hsize):
    """Row i's headers list (with its serialized size in hsize), or None if it has none (hsize
    -1), its key, value and headers first checked to lie inside the data."""
    if not (span_ok(col.kp[i], col.kl[i], dlen) and span_ok(col.vp[i], col.vl[i], dlen)):
        raise ValueError(f"ColumnarBatch: row {i}'s key or value lies outside its data")
    if col.hs[i + 1] > col.hs[i]:
        if col.hs[i] < 0 or col.hs[i + 1] > col.nh:
            raise ValueError(f"ColumnarBatch: row {i}'s headers are out of range")
        return header_list(base, dlen, col.hkp, col.hkl, col.hvp, col.hvl, col.hs[i],
                           col.hs[i + 1], untrack, hsize)
    hsize[0] = -1
    return None
