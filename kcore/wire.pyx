# cython: language_level=3
"""Bounds-checked readers and writers for the Kafka protocol's primitive types.

Every read checks the remaining length first: truncated input raises BufferUnderflowError,
a negative or impossible length raises InvalidLengthError before anything is allocated for
it, and an over-long varint raises VarintError. The inline fast paths live in wire.pxd so
other kcore modules compile them into their own loops.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy

import uuid as _uuid_mod

from kcore.errors import BufferUnderflowError, InvalidLengthError, ProtocolError, VarintError

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL

cdef object _UUID = _uuid_mod.UUID
cdef dict _uuid_cache = {}
cdef Py_ssize_t _UUID_CACHE_MAX = 4096   # topic ids repeat in every fetch response


# ------------------------------------------------------------------ error raisers
cdef int raise_underflow(Py_ssize_t need, Py_ssize_t have) except -1:
    raise BufferUnderflowError(f"need {need} bytes, only {have} remain")


cdef int raise_varint(int code, Py_ssize_t have) except -1:
    if code == WIRE_UNDERFLOW:
        raise BufferUnderflowError(f"varint truncated ({have} bytes remain)")
    raise VarintError("varint is longer than its type allows")


cdef int raise_invalid_length(str what, int64_t length, Py_ssize_t limit) except -1:
    raise InvalidLengthError(f"invalid {what} {length} ({limit} bytes remain)")


cdef object uuid_from(const uint8_t* p):
    """The uuid.UUID of the 16 bytes at p, one object per id while the cache holds it."""
    key = PyBytes_FromStringAndSize(<const char*>p, 16)
    u = _uuid_cache.get(key)
    if u is None:
        u = _UUID(bytes=key)
        if len(_uuid_cache) >= _UUID_CACHE_MAX:
            _uuid_cache.clear()
        _uuid_cache[key] = u
    return u


# ------------------------------------------------------------------ Reader
cdef class Reader:
    """Reads Kafka primitives from a bytes-like object (bytes, bytearray, memoryview).

    ``start``/``end`` restrict reading to a window; positions stay absolute offsets into
    ``data``. The Reader holds a buffer export on ``data`` for its whole life, so the
    memory cannot move or disappear under it (a bytearray cannot be resized meanwhile).
    """

    def __cinit__(self, data, Py_ssize_t start=0, end=None):
        PyObject_GetBuffer(data, &self._view, PyBUF_SIMPLE)
        self._has_view = True
        self.owner = data
        self.buf = <const uint8_t*>self._view.buf
        cdef Py_ssize_t size = self._view.len
        cdef Py_ssize_t stop = size if end is None else <Py_ssize_t>end
        if start < 0 or stop < start or stop > size:
            raise ValueError(f"window [{start}:{stop}] outside buffer of {size} bytes")
        self.pos = start
        self.end = stop

    def __dealloc__(self):
        if self._has_view:
            PyBuffer_Release(&self._view)
            self._has_view = False

    # -- cdef helpers used by the inline methods and by kcore.messages
    cdef object _decode_utf8(self, Py_ssize_t n):
        cdef const char* p = <const char*>(self.buf + self.pos)
        try:
            s = PyUnicode_DecodeUTF8(p, n, NULL)
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"string field is not valid UTF-8: {exc}") from None
        self.pos += n
        return s

    cdef object read_string(self):
        cdef int16_t n = self.read_int16()
        if n < 0:
            raise_invalid_length("string length", n, self.end - self.pos)
        self.need(n)
        return self._decode_utf8(n)

    cdef object read_nullable_string(self):
        cdef int16_t n = self.read_int16()
        if n < 0:
            if n == -1:
                return None
            raise_invalid_length("string length", n, self.end - self.pos)
        self.need(n)
        return self._decode_utf8(n)

    cdef object read_compact_string(self):
        cdef Py_ssize_t n = self.read_compact_bytes_len(False)
        if n > 0x7fff:
            raise_invalid_length("compact string length", n, 0x7fff)
        return self._decode_utf8(n)

    cdef object read_compact_nullable_string(self):
        cdef Py_ssize_t n = self.read_compact_bytes_len(True)
        if n < 0:
            return None
        if n > 0x7fff:
            raise_invalid_length("compact string length", n, 0x7fff)
        return self._decode_utf8(n)

    cdef object read_raw(self, Py_ssize_t n):
        self.need(n)
        b = PyBytes_FromStringAndSize(<const char*>(self.buf + self.pos), n)
        self.pos += n
        return b

    cdef object read_bytes(self):
        return self.read_raw(self.read_bytes_len(False))

    cdef object read_nullable_bytes(self):
        cdef Py_ssize_t n = self.read_bytes_len(True)
        if n < 0:
            return None
        return self.read_raw(n)

    cdef object read_compact_bytes(self):
        return self.read_raw(self.read_compact_bytes_len(False))

    cdef object read_compact_nullable_bytes(self):
        cdef Py_ssize_t n = self.read_compact_bytes_len(True)
        if n < 0:
            return None
        return self.read_raw(n)

    cdef object read_uuid(self):
        self.need(16)
        u = uuid_from(self.buf + self.pos)
        self.pos += 16
        return u

    cdef object read_view(self, Py_ssize_t n):
        """Zero-copy memoryview of the next n bytes (keeps the owner alive)."""
        self.need(n)
        if self._mv is None:
            mv = memoryview(self.owner)
            if mv.ndim != 1 or mv.format != "B":
                mv = mv.cast("B")
            self._mv = mv
        v = self._mv[self.pos:self.pos + n]
        self.pos += n
        return v

    cdef int skip_tagged_fields(self) except -1:
        cdef uint32_t count = self.read_uvarint()
        cdef uint32_t i, size
        if <int64_t>count * 2 > self.end - self.pos:   # each field is >= 2 bytes
            raise_invalid_length("tagged field count", count, self.end - self.pos)
        for i in range(count):
            self.read_uvarint()           # tag
            size = self.read_uvarint()
            self.skip(size)
        return 0

    cdef object read_tagged_fields(self):
        cdef uint32_t count = self.read_uvarint()
        cdef uint32_t i, tag, size
        if <int64_t>count * 2 > self.end - self.pos:
            raise_invalid_length("tagged field count", count, self.end - self.pos)
        out = {}
        for i in range(count):
            tag = self.read_uvarint()
            size = self.read_uvarint()
            out[tag] = self.read_raw(size)
        return out

    # -- Python-level API (tests, Python callers); names mirror the C-level read_* methods
    @property
    def remaining_bytes(self):
        return self.end - self.pos

    def int8(self):
        return self.read_int8()

    def boolean(self):
        return self.read_bool()

    def int16(self):
        return self.read_int16()

    def uint16(self):
        return self.read_uint16()

    def int32(self):
        return self.read_int32()

    def uint32(self):
        return self.read_uint32()

    def int64(self):
        return self.read_int64()

    def float64(self):
        return self.read_float64()

    def uvarint(self):
        return self.read_uvarint()

    def uvarlong(self):
        return self.read_uvarlong()

    def varint(self):
        return self.read_varint()

    def varlong(self):
        return self.read_varlong()

    def string(self):
        return self.read_string()

    def nullable_string(self):
        return self.read_nullable_string()

    def compact_string(self):
        return self.read_compact_string()

    def compact_nullable_string(self):
        return self.read_compact_nullable_string()

    def bytes(self):
        return self.read_bytes()

    def nullable_bytes(self):
        return self.read_nullable_bytes()

    def compact_bytes(self):
        return self.read_compact_bytes()

    def compact_nullable_bytes(self):
        return self.read_compact_nullable_bytes()

    def uuid(self):
        return self.read_uuid()

    def array_len(self, Py_ssize_t min_elem_size=1):
        return self.read_array_len(min_elem_size)

    def compact_array_len(self, Py_ssize_t min_elem_size=1):
        return self.read_compact_array_len(min_elem_size)

    def raw(self, Py_ssize_t n):
        if n < 0:
            raise_invalid_length("raw length", n, self.end - self.pos)
        return self.read_raw(n)

    def view(self, Py_ssize_t n):
        if n < 0:
            raise_invalid_length("view length", n, self.end - self.pos)
        return self.read_view(n)

    def seek(self, Py_ssize_t pos):
        """Move to absolute offset ``pos`` (0 <= pos <= end)."""
        if pos < 0 or pos > self.end:
            raise ValueError(f"position {pos} outside [0, {self.end}]")
        self.pos = pos

    def skip_bytes(self, Py_ssize_t n):
        self.skip(n)

    def tagged_fields(self):
        return self.read_tagged_fields()

    def skip_tagged(self):
        self.skip_tagged_fields()


# ------------------------------------------------------------------ Writer
cdef class Writer:
    """Appends Kafka primitives to a growable buffer; ``getvalue()`` returns bytes."""

    def __cinit__(self, Py_ssize_t initial_capacity=256):
        if initial_capacity < 16:
            initial_capacity = 16
        self.buf = <uint8_t*>malloc(initial_capacity)
        if self.buf == NULL:
            raise MemoryError()
        self.cap = initial_capacity
        self.pos = 0

    def __dealloc__(self):
        free(self.buf)
        self.buf = NULL

    cdef int _grow(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t need = self.pos + n
        cdef Py_ssize_t cap = self.cap * 2
        if n < 0 or need < self.pos:
            raise OverflowError("Writer size overflow")
        if cap < need:
            cap = need
        cdef uint8_t* nb = <uint8_t*>realloc(self.buf, cap)
        if nb == NULL:
            raise MemoryError()
        self.buf = nb
        self.cap = cap
        return 0

    cdef int write_raw(self, const uint8_t* p, Py_ssize_t n) except -1:
        self.ensure(n)
        if n >= 65536:           # large payloads (Produce records): let other threads run
            with nogil:
                memcpy(self.buf + self.pos, p, n)
        else:
            memcpy(self.buf + self.pos, p, n)
        self.pos += n
        return 0

    cdef int write_buffer(self, object b) except -1:
        cdef Py_buffer view
        PyObject_GetBuffer(b, &view, PyBUF_SIMPLE)
        try:
            self.write_raw(<const uint8_t*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)
        return 0

    cdef int write_string(self, object s) except -1:
        cdef Py_ssize_t n
        cdef const char* p
        if s is None:
            raise TypeError("string field is not nullable here")
        p = PyUnicode_AsUTF8AndSize(s, &n)
        if n > 0x7fff:
            raise OverflowError(f"string of {n} UTF-8 bytes exceeds 32767")
        self.write_int16(<int16_t>n)
        return self.write_raw(<const uint8_t*>p, n)

    cdef int write_nullable_string(self, object s) except -1:
        if s is None:
            return self.write_int16(-1)
        return self.write_string(s)

    cdef int write_compact_string(self, object s) except -1:
        cdef Py_ssize_t n
        cdef const char* p
        if s is None:
            raise TypeError("string field is not nullable here")
        p = PyUnicode_AsUTF8AndSize(s, &n)
        if n > 0x7fff:
            raise OverflowError(f"string of {n} UTF-8 bytes exceeds 32767")
        self.write_uvarint(<uint64_t>(n + 1))
        return self.write_raw(<const uint8_t*>p, n)

    cdef int write_compact_nullable_string(self, object s) except -1:
        if s is None:
            return self.write_uvarint(0)
        return self.write_compact_string(s)

    cdef int write_bytes(self, object b) except -1:
        cdef Py_buffer view
        if b is None:
            raise TypeError("bytes field is not nullable here")
        PyObject_GetBuffer(b, &view, PyBUF_SIMPLE)
        try:
            if view.len > 0x7fffffff:
                raise OverflowError("bytes field longer than 2**31-1")
            self.write_int32(<int32_t>view.len)
            self.write_raw(<const uint8_t*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)
        return 0

    cdef int write_nullable_bytes(self, object b) except -1:
        if b is None:
            return self.write_int32(-1)
        return self.write_bytes(b)

    cdef int write_compact_bytes(self, object b) except -1:
        cdef Py_buffer view
        if b is None:
            raise TypeError("bytes field is not nullable here")
        PyObject_GetBuffer(b, &view, PyBUF_SIMPLE)
        try:
            if view.len >= 0xffffffff:
                raise OverflowError("compact bytes field longer than 2**32-2")
            self.write_uvarint(<uint64_t>(view.len + 1))
            self.write_raw(<const uint8_t*>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)
        return 0

    cdef int write_compact_nullable_bytes(self, object b) except -1:
        if b is None:
            return self.write_uvarint(0)
        return self.write_compact_bytes(b)

    cdef int write_uuid(self, object u) except -1:
        cdef Py_buffer view
        if isinstance(u, _UUID):
            u = (<object>u).bytes
        elif u is None:
            raise TypeError("uuid field may not be None")
        PyObject_GetBuffer(u, &view, PyBUF_SIMPLE)
        try:
            if view.len != 16:
                raise ValueError(f"uuid must be 16 bytes, got {view.len}")
            self.write_raw(<const uint8_t*>view.buf, 16)
        finally:
            PyBuffer_Release(&view)
        return 0

    cdef int write_tagged_fields(self, object fields) except -1:
        """fields: mapping tag -> bytes-like raw value, written in ascending tag order."""
        if not fields:
            return self.write_uvarint(0)
        tags = sorted(fields)
        self.write_uvarint(len(tags))
        cdef uint32_t tag
        for t in tags:
            tag = t
            self.write_uvarint(tag)
            value = fields[t]
            self.write_uvarint(len(memoryview(value).cast("B")))   # size: not +1
            self.write_buffer(value)
        return 0

    cdef bytes getvalue_c(self):
        return PyBytes_FromStringAndSize(<const char*>self.buf, self.pos)

    # -- Python-level API
    def __len__(self):
        return self.pos

    def getvalue(self):
        return self.getvalue_c()

    def int8(self, int8_t v):
        self.write_int8(v)

    def boolean(self, v):
        self.write_bool(bool(v))

    def int16(self, int16_t v):
        self.write_int16(v)

    def uint16(self, uint16_t v):
        self.write_uint16(v)

    def int32(self, int32_t v):
        self.write_int32(v)

    def uint32(self, uint32_t v):
        self.write_uint32(v)

    def int64(self, int64_t v):
        self.write_int64(v)

    def float64(self, double v):
        self.write_float64(v)

    def uvarint(self, uint32_t v):
        self.write_uvarint(v)

    def uvarlong(self, uint64_t v):
        self.write_uvarint(v)

    def varint(self, int32_t v):
        self.write_varint(v)

    def varlong(self, int64_t v):
        self.write_varlong(v)

    def string(self, s):
        self.write_string(s)

    def nullable_string(self, s):
        self.write_nullable_string(s)

    def compact_string(self, s):
        self.write_compact_string(s)

    def compact_nullable_string(self, s):
        self.write_compact_nullable_string(s)

    def bytes(self, b):
        self.write_bytes(b)

    def nullable_bytes(self, b):
        self.write_nullable_bytes(b)

    def compact_bytes(self, b):
        self.write_compact_bytes(b)

    def compact_nullable_bytes(self, b):
        self.write_compact_nullable_bytes(b)

    def uuid(self, u):
        self.write_uuid(u)

    def array_len(self, Py_ssize_t n):
        if n < -1 or n > 0x7fffffff:
            raise ValueError(f"array count {n} out of range")
        self.write_array_len(n)

    def compact_array_len(self, Py_ssize_t n):
        if n < -1 or n > 0xfffffffe:
            raise ValueError(f"array count {n} out of range")
        self.write_compact_array_len(n)

    def raw(self, b):
        self.write_buffer(b)

    def tagged_fields(self, fields=None):
        self.write_tagged_fields(fields)


# ------------------------------------------------------------------ module-level helpers
def decode_uvarint(data, Py_ssize_t pos=0):
    """(value, next_pos) of the unsigned 32-bit varint at ``pos``."""
    cdef Reader r = Reader(data, pos)
    v = r.read_uvarint()
    return v, r.pos


def decode_uvarlong(data, Py_ssize_t pos=0):
    cdef Reader r = Reader(data, pos)
    v = r.read_uvarlong()
    return v, r.pos


def decode_varint(data, Py_ssize_t pos=0):
    cdef Reader r = Reader(data, pos)
    v = r.read_varint()
    return v, r.pos


def decode_varlong(data, Py_ssize_t pos=0):
    cdef Reader r = Reader(data, pos)
    v = r.read_varlong()
    return v, r.pos


def encode_uvarint(uint64_t v):
    cdef uint8_t tmp[10]
    cdef int n = write_uvarint_ptr(tmp, v)
    return PyBytes_FromStringAndSize(<const char*>tmp, n)


def encode_varint(int32_t v):
    cdef uint8_t tmp[10]
    cdef int n = write_varint_ptr(tmp, v)
    return PyBytes_FromStringAndSize(<const char*>tmp, n)


def encode_varlong(int64_t v):
    cdef uint8_t tmp[10]
    cdef int n = write_varlong_ptr(tmp, v)
    return PyBytes_FromStringAndSize(<const char*>tmp, n)


def decode_varints(data, Py_ssize_t count):
    """Decode ``count`` consecutive zigzag varints into a list (benchmarks and tests:
    exercises the nogil pointer helper the record decoder uses)."""
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef const uint8_t* end
    cdef Py_ssize_t i
    cdef int n = 0
    cdef int32_t v = 0
    cdef int64_t total = 0
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        end = p + view.len
        out = [None] * count if count >= 0 and count <= view.len else None
        if out is None:
            raise_invalid_length("varint count", count, view.len)
        for i in range(count):
            n = read_varint_ptr(p, end, &v)
            if n < 0:
                raise_varint(n, end - p)
            p += n
            out[i] = v
        return out
    finally:
        PyBuffer_Release(&view)


def sum_varints(data):
    """Sum every zigzag varint in ``data`` with the GIL released (benchmark of the raw
    nogil decode loop; returns (count, sum))."""
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef const uint8_t* end
    cdef int n = 0
    cdef int32_t v = 0
    cdef int64_t total = 0
    cdef Py_ssize_t count = 0
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        end = p + view.len
        with nogil:
            while p < end:
                n = read_varint_ptr(p, end, &v)
                if n < 0:
                    break
                p += n
                total += v
                count += 1
        if n < 0:
            raise_varint(n, end - p)
        return count, total
    finally:
        PyBuffer_Release(&view)
