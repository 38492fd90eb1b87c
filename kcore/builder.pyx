# cython: language_level=3
"""The RecordBatch v2 encoder: RecordBatchBuilder (record by record, exact size at any time)
and encode_batch / control_record.

Byte order and varints come from kcore.wire, field positions from kcore.layout, the
checksum from kcore.crc and compression from kcore.compression.
"""
cimport cython
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBuffer_FillInfo,
                             PyBUF_SIMPLE, PyBUF_WRITABLE)
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, INT32_MAX
from libc.string cimport memcpy, memset

from kcore.compression cimport GrowBuf, growbuf_reserve, growbuf_free
from kcore.compression cimport compress as _compress
from kcore.crc cimport crc32c_update
from kcore.layout cimport (ENTRY_BASE_OFFSET, ENTRY_LENGTH, ENTRY_MAGIC, LOG_OVERHEAD,
                           V2_PARTITION_LEADER_EPOCH, V2_CRC, V2_ATTRIBUTES,
                           V2_LAST_OFFSET_DELTA, V2_BASE_TIMESTAMP, V2_MAX_TIMESTAMP,
                           V2_PRODUCER_ID, V2_PRODUCER_EPOCH, V2_BASE_SEQUENCE,
                           V2_RECORD_COUNT, V2_HEADER_SIZE, ATTR_TIMESTAMP_TYPE,
                           ATTR_TRANSACTIONAL, ATTR_CONTROL, ATTR_DELETE_HORIZON)
from kcore.wire cimport (store_be16, store_be32, store_be64, uvarint_size, write_uvarint_ptr,
                         zigzag_encode32, zigzag_encode64)

from kcore.errors import UnsupportedCodecError

__all__ = ["RecordBatchBuilder", "encode_batch", "control_record"]


cdef int _get_bytes(object obj, Py_buffer* view, const char* what) except -1:
    """Borrow a read-only view of a bytes-like value (caller releases it)."""
    if isinstance(obj, str):
        raise TypeError(f"{what.decode()} must be bytes-like or None, not str")
    PyObject_GetBuffer(obj, view, PyBUF_SIMPLE)
    if view.len > INT32_MAX:
        PyBuffer_Release(view)
        raise ValueError(f"{what.decode()} is longer than 2**31-1 bytes")
    return 0


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL


cdef bint _simple_headers(object headers) except -1:
    """A list of (str, bytes | None) tuples, each value shorter than 2**31."""
    if type(headers) is not list:
        return False
    for h in <list>headers:
        if type(h) is not tuple or len(<tuple>h) != 2:
            return False
        hv = (<tuple>h)[1]
        if type((<tuple>h)[0]) is not str or (hv is not None and (type(hv) is not bytes
                                                                  or len(<bytes>hv) > INT32_MAX)):
            return False
    return True


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
        return V2_HEADER_SIZE + self._buf.len

    def append(self, int64_t timestamp_ms, key, value, headers=None, offset_delta=None):
        """Encode one record; returns its encoded size in bytes."""
        if offset_delta is None:
            return self.add(timestamp_ms, key, value, headers, 0, False)
        return self.add(timestamp_ms, key, value, headers, offset_delta, True)

    cdef Py_ssize_t add(self, int64_t timestamp_ms, object key, object value, object headers,
                        int32_t offset_delta, bint has_delta) except -1:
        """append() without the Python call (the producer's accumulator appends through it)."""
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
        cdef bint simple
        cdef const char* hk_ptr
        cdef Py_ssize_t hk_len
        if self._count == INT32_MAX:
            raise OverflowError("a batch holds at most 2**31-1 records")
        delta = offset_delta if has_delta else self._count
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
            body = (1 + uvarint_size(zigzag_encode64(ts_delta)) + uvarint_size(zigzag_encode32(delta))
                    + uvarint_size(zigzag_encode32(<int32_t>klen)) + (klen if klen > 0 else 0)
                    + uvarint_size(zigzag_encode32(<int32_t>vlen)) + (vlen if vlen > 0 else 0))
            simple = headers is not None and _simple_headers(headers)
            if simple:
                # (str, bytes | None) pairs in a list, the usual shape: read in place, no copies.
                for h in <list>headers:
                    hk_ptr = PyUnicode_AsUTF8AndSize((<tuple>h)[0], &hk_len)
                    hvo = (<tuple>h)[1]
                    body += uvarint_size(zigzag_encode32(<int32_t>hk_len)) + hk_len
                    hvlen = -1 if hvo is None else <int32_t>len(<bytes>hvo)
                    body += uvarint_size(zigzag_encode32(hvlen)) + (hvlen if hvlen > 0 else 0)
                nh = len(<list>headers)
            elif headers:
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
                    body += uvarint_size(zigzag_encode32(len(hkb))) + len(hkb)
                    hvlen = -1 if hvo is None else len(hvo)
                    body += uvarint_size(zigzag_encode32(hvlen)) + (hvlen if hvlen > 0 else 0)
                nh = len(hk_bytes)
            body += uvarint_size(zigzag_encode32(<int32_t>nh))
            if body > INT32_MAX:
                raise ValueError("record is longer than 2**31-1 bytes")
            total = uvarint_size(zigzag_encode32(<int32_t>body)) + body
            if growbuf_reserve(&self._buf, total) < 0:
                raise MemoryError()
            p = self._buf.data + self._buf.len
            p += write_uvarint_ptr(p, zigzag_encode32(<int32_t>body))
            p[0] = 0                                   # record attributes
            p += 1
            p += write_uvarint_ptr(p, zigzag_encode64(ts_delta))
            p += write_uvarint_ptr(p, zigzag_encode32(delta))
            p += write_uvarint_ptr(p, zigzag_encode32(<int32_t>klen))
            if klen > 0:
                memcpy(p, kb.buf, klen)
                p += klen
            p += write_uvarint_ptr(p, zigzag_encode32(<int32_t>vlen))
            if vlen > 0:
                memcpy(p, vb.buf, vlen)
                p += vlen
            p += write_uvarint_ptr(p, zigzag_encode32(<int32_t>nh))
            if simple:
                for h in <list>headers:
                    hk_ptr = PyUnicode_AsUTF8AndSize((<tuple>h)[0], &hk_len)
                    p += write_uvarint_ptr(p, zigzag_encode32(<int32_t>hk_len))
                    memcpy(p, hk_ptr, hk_len)
                    p += hk_len
                    hvo = (<tuple>h)[1]
                    if hvo is None:
                        p += write_uvarint_ptr(p, zigzag_encode32(-1))
                    else:
                        hvlen = <int32_t>len(<bytes>hvo)
                        p += write_uvarint_ptr(p, zigzag_encode32(hvlen))
                        memcpy(p, PyBytes_AS_STRING(hvo), hvlen)
                        p += hvlen
                nh = 0
            for i in range(nh):
                hkb = hk_bytes[i]
                p += write_uvarint_ptr(p, zigzag_encode32(<int32_t>len(hkb)))
                memcpy(p, PyBytes_AS_STRING(hkb), len(hkb))
                p += len(hkb)
                hvo = hv_objs[i]
                if hvo is None:
                    p += write_uvarint_ptr(p, zigzag_encode32(-1))
                else:
                    p += write_uvarint_ptr(p, zigzag_encode32(<int32_t>len(hvo)))
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
        """The whole batch (V2_HEADER_SIZE-byte header + records) as bytes, CRC32C filled in."""
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
        total = V2_HEADER_SIZE + <Py_ssize_t>blen
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
        attrs = (codec | (ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
                 | (ATTR_TRANSACTIONAL if transactional else 0) | (ATTR_CONTROL if control else 0)
                 | (ATTR_DELETE_HORIZON if has_delete_horizon else 0))
        out = PyBytes_FromStringAndSize(NULL, total)
        p = <uint8_t*>PyBytes_AS_STRING(out)
        store_be64(p + ENTRY_BASE_OFFSET, <uint64_t>base_offset)
        store_be32(p + ENTRY_LENGTH, <uint32_t>(total - LOG_OVERHEAD))
        store_be32(p + V2_PARTITION_LEADER_EPOCH, <uint32_t>partition_leader_epoch)
        p[ENTRY_MAGIC] = 2
        store_be16(p + V2_ATTRIBUTES, <uint16_t>attrs)
        store_be32(p + V2_LAST_OFFSET_DELTA, <uint32_t>lod)
        store_be64(p + V2_BASE_TIMESTAMP, <uint64_t>(self._base_ts if self._has_base_ts else -1))
        store_be64(p + V2_MAX_TIMESTAMP, <uint64_t>max_ts)
        store_be64(p + V2_PRODUCER_ID, <uint64_t>producer_id)
        store_be16(p + V2_PRODUCER_EPOCH, <uint16_t>producer_epoch)
        store_be32(p + V2_BASE_SEQUENCE, <uint32_t>base_sequence)
        store_be32(p + V2_RECORD_COUNT, <uint32_t>self._count)
        if blen:
            memcpy(p + V2_HEADER_SIZE, body, blen)
        with nogil:
            store_be32(p + V2_CRC, crc32c_update(0, p + V2_ATTRIBUTES, <size_t>(total - V2_ATTRIBUTES)))
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
    store_be16(k, <uint16_t>version)
    store_be16(k + 2, <uint16_t>control_type)
    store_be16(v, 0)
    store_be32(v + 2, <uint32_t>coordinator_epoch)
    return key, value
