# cimport interface of kcore.columnar: the ColumnarBatch that kcore.records.decode_columnar fills.
from libc.stdint cimport int64_t


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
