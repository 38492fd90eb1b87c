# cimport interface of kcore.records: Kafka record batches (v2) and legacy message sets (v0/v1).
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t
from kcore.compression cimport GrowBuf


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


cdef class ColumnarBatch:
    cdef readonly Py_ssize_t num_records
    cdef readonly Py_ssize_t num_headers
    cdef readonly list batches
    cdef readonly int64_t next_offset
    cdef readonly Py_ssize_t bytes_consumed
    cdef readonly Py_ssize_t partial_trailing_bytes
    cdef readonly Py_ssize_t incomplete_batch_size
    cdef readonly bint zero_copy
    cdef object _offsets
    cdef object _timestamps
    cdef object _ts_types
    cdef object _key_pos
    cdef object _key_len
    cdef object _val_pos
    cdef object _val_len
    cdef object _hdr_start
    cdef object _hk_pos
    cdef object _hk_len
    cdef object _hv_pos
    cdef object _hv_len
    cdef object _data
    cdef object _binary(self, object pa, object posa_, object lena_, Py_ssize_t n,
                        bint view, object typ)


cdef class RecordBatchBuilder:
    cdef GrowBuf _buf
    cdef int32_t _count
    cdef int64_t _base_ts
    cdef bint _has_base_ts
    cdef int64_t _max_ts
    cdef int32_t _last_delta


# CRC32C of p[0:n] continuing from `crc` (0 to start); hardware-accelerated when available.
cdef uint32_t crc32c_update(uint32_t crc, const uint8_t* p, size_t n) noexcept nogil
