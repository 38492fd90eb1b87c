# cimport interface of kcore.builder: the v2 record-batch encoder.
from libc.stdint cimport int32_t, int64_t
from kcore.compression cimport GrowBuf


cdef class RecordBatchBuilder:
    cdef GrowBuf _buf
    cdef int32_t _count
    cdef int64_t _base_ts
    cdef bint _has_base_ts
    cdef int64_t _max_ts
    cdef int32_t _last_delta

    cdef Py_ssize_t add(self, int64_t timestamp_ms, object key, object value, object headers,
                        int32_t offset_delta, bint has_delta) except -1
