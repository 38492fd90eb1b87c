# cython: language_level=3
"""C-level interface of kcore.wire: bounds-checked Kafka primitive readers and writers.

Two layers:
* nogil pointer helpers (``load_be*``, ``store_be*``, ``read_*varint*_ptr``,
  ``write_uvarint*_ptr``, ``zigzag*``, ``read_sized_ptr``, ``skip_tagged_fields_ptr``) for tight
  loops over raw memory (record batches, the GIL-free codecs).
  The readers return the number of bytes consumed (> 0) or WIRE_UNDERFLOW / WIRE_BAD_VARINT;
  they never touch a Python object, so callers may run them under ``with nogil``.
* ``Reader`` / ``Writer`` cdef classes whose inline methods raise kcore.errors exceptions
  (BufferUnderflowError, InvalidLengthError, VarintError) through the ``raise_*`` functions.

Reader positions are absolute offsets into the underlying buffer, so ``Reader.read_view``
slices are zero-copy views of the original object.
"""
cimport cython
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                          uint64_t)
from libc.string cimport memcpy
from cpython.buffer cimport Py_buffer

cdef enum:
    WIRE_UNDERFLOW = -1     # input ended inside the value
    WIRE_BAD_VARINT = -2    # varint longer than its type allows
    MAX_UVARINT32_BYTES = 5
    MAX_UVARINT64_BYTES = 10


# ------------------------------------------------------------------ nogil pointer helpers
cdef object uuid_from(const uint8_t* p)   # a 16-byte topic id as a cached uuid.UUID


cdef inline uint16_t load_be16(const uint8_t* p) noexcept nogil:
    return <uint16_t>((<uint16_t>p[0] << 8) | p[1])

cdef inline uint32_t load_be32(const uint8_t* p) noexcept nogil:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8)
            | <uint32_t>p[3])

cdef inline uint64_t load_be64(const uint8_t* p) noexcept nogil:
    return (<uint64_t>load_be32(p) << 32) | <uint64_t>load_be32(p + 4)

cdef inline void store_be16(uint8_t* p, uint16_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 8)
    p[1] = <uint8_t>v

cdef inline void store_be32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v

cdef inline void store_be64(uint8_t* p, uint64_t v) noexcept nogil:
    store_be32(p, <uint32_t>(v >> 32))
    store_be32(p + 4, <uint32_t>v)

cdef inline int32_t zigzag_decode32(uint32_t n) noexcept nogil:
    return <int32_t>((n >> 1) ^ (<uint32_t>0 - (n & 1)))

cdef inline int64_t zigzag_decode64(uint64_t n) noexcept nogil:
    return <int64_t>((n >> 1) ^ (<uint64_t>0 - (n & 1)))

cdef inline uint32_t zigzag_encode32(int32_t v) noexcept nogil:
    return (<uint32_t>v << 1) ^ <uint32_t>(v >> 31)

cdef inline uint64_t zigzag_encode64(int64_t v) noexcept nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


cdef inline int read_uvarint32_ptr(const uint8_t* p, const uint8_t* end,
                                   uint32_t* out) noexcept nogil:
    """Unsigned 32-bit varint (at most 5 bytes, the 5th <= 0x0f)."""
    cdef uint32_t value = 0
    cdef uint32_t b
    cdef int i = 0
    if p < end and p[0] < 0x80:       # one-byte fast path (lengths, counts, small ints)
        out[0] = p[0]
        return 1
    while True:
        if p + i >= end:
            return WIRE_UNDERFLOW
        b = p[i]
        if i == 4:
            if b > 0x0f:
                return WIRE_BAD_VARINT
            out[0] = value | (b << 28)
            return 5
        value |= (b & 0x7f) << (7 * i)
        i += 1
        if b < 0x80:
            out[0] = value
            return i


cdef inline int read_uvarint64_ptr(const uint8_t* p, const uint8_t* end,
                                   uint64_t* out) noexcept nogil:
    """Unsigned 64-bit varint (at most 10 bytes, the 10th <= 0x01)."""
    cdef uint64_t value = 0
    cdef uint64_t b
    cdef int i = 0
    if p < end and p[0] < 0x80:
        out[0] = p[0]
        return 1
    while True:
        if p + i >= end:
            return WIRE_UNDERFLOW
        b = p[i]
        if i == 9:
            if b > 0x01:
                return WIRE_BAD_VARINT
            out[0] = value | (b << 63)
            return 10
        value |= (b & 0x7f) << (7 * i)
        i += 1
        if b < 0x80:
            out[0] = value
            return i


cdef inline int read_uvarint_ptr(const uint8_t* p, const uint8_t* end,
                                 uint64_t* out) noexcept nogil:
    """Alias of read_uvarint64_ptr (unsigned varlong, up to 10 bytes)."""
    return read_uvarint64_ptr(p, end, out)


cdef inline int read_varint_ptr(const uint8_t* p, const uint8_t* end,
                                int32_t* out) noexcept nogil:
    """Zigzag-encoded signed 32-bit varint (record lengths, deltas, header counts)."""
    cdef uint32_t u = 0
    cdef int n = read_uvarint32_ptr(p, end, &u)
    if n > 0:
        out[0] = zigzag_decode32(u)
    return n


cdef inline int read_varlong_ptr(const uint8_t* p, const uint8_t* end,
                                 int64_t* out) noexcept nogil:
    """Zigzag-encoded signed 64-bit varint (timestamp deltas)."""
    cdef uint64_t u = 0
    cdef int n = read_uvarint64_ptr(p, end, &u)
    if n > 0:
        out[0] = zigzag_decode64(u)
    return n


cdef inline int skip_tagged_fields_ptr(const uint8_t** pp, const uint8_t* end, int truncated,
                                       int malformed) noexcept nogil:
    """Skip the tagged-field section at pp[0] and advance pp[0] past it: 0, else the caller's
    ``truncated`` (the input ends inside it) or ``malformed`` (a bad varint) code."""
    cdef const uint8_t* p = pp[0]
    cdef uint32_t count, tag, size
    cdef int k = read_uvarint32_ptr(p, end, &count)
    if k <= 0:
        return truncated if p >= end else malformed
    p += k
    while count > 0:
        k = read_uvarint32_ptr(p, end, &tag)
        if k <= 0:
            return truncated if p >= end else malformed
        p += k
        k = read_uvarint32_ptr(p, end, &size)
        if k <= 0:
            return truncated if p >= end else malformed
        p += k
        if size > <uint32_t>(end - p):
            return truncated
        p += size
        count -= 1
    pp[0] = p
    return 0


cdef inline int read_sized_ptr(const uint8_t** pp, const uint8_t* end, bint compact, int length_size,
                               bint nullable, const uint8_t** value, Py_ssize_t* value_len,
                               int truncated, int malformed) noexcept nogil:
    """The STRING / BYTES field at pp[0]: compact (unsigned varint, length + 1) or after an int16
    (length_size 2) or int32 (4) length, where -1 (compact: 0) is null if nullable. Sets value
    and value_len (NULL and -1 for null) and advances pp[0] past it: 0, else the caller's
    ``truncated`` (the input ends inside it) or ``malformed`` code."""
    cdef const uint8_t* p = pp[0]
    cdef uint32_t u
    cdef int64_t n
    cdef int k
    if compact:
        k = read_uvarint32_ptr(p, end, &u)
        if k <= 0:
            return truncated if p >= end else malformed
        p += k
        n = <int64_t>u - 1
    elif length_size == 2:
        if end - p < 2:
            return truncated
        n = <int16_t>load_be16(p)
        p += 2
    else:
        if end - p < 4:
            return truncated
        n = <int32_t>load_be32(p)
        p += 4
    if n < 0:
        if n != -1 or not nullable:
            return malformed
        value[0] = NULL
        value_len[0] = -1
        pp[0] = p
        return 0
    if n > end - p:
        return truncated
    value[0] = p
    value_len[0] = <Py_ssize_t>n
    pp[0] = p + n
    return 0


cdef inline int uvarint_size(uint64_t v) noexcept nogil:
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline int write_uvarint_ptr(uint8_t* p, uint64_t v) noexcept nogil:
    """Write an unsigned varint; p must have room for uvarint_size(v) (<= 10) bytes."""
    cdef int i = 0
    while v >= 0x80:
        p[i] = <uint8_t>((v & 0x7f) | 0x80)
        v >>= 7
        i += 1
    p[i] = <uint8_t>v
    return i + 1


cdef inline int write_varint_ptr(uint8_t* p, int32_t v) noexcept nogil:
    return write_uvarint_ptr(p, zigzag_encode32(v))


cdef inline int write_varlong_ptr(uint8_t* p, int64_t v) noexcept nogil:
    return write_uvarint_ptr(p, zigzag_encode64(v))


# ------------------------------------------------------------------ error raisers (in wire.pyx)
# They always raise and return -1; the inline methods below call them on the cold path.
cdef int raise_underflow(Py_ssize_t need, Py_ssize_t have) except -1
cdef int raise_varint(int code, Py_ssize_t have) except -1
cdef int raise_invalid_length(str what, int64_t length, Py_ssize_t limit) except -1


# ------------------------------------------------------------------ Reader
@cython.final
cdef class Reader:
    cdef Py_buffer _view
    cdef bint _has_view
    cdef readonly object owner     # the object whose memory ``buf`` points into (kept alive)
    cdef object _mv                # flat 'B' memoryview of owner, made on first read_view
    cdef const uint8_t* buf
    cdef readonly Py_ssize_t pos   # absolute offset of the next byte
    cdef readonly Py_ssize_t end   # absolute offset one past the last readable byte

    # -- non-inline helpers (wire.pyx)
    cdef object read_string(self)
    cdef object read_nullable_string(self)
    cdef object read_compact_string(self)
    cdef object read_compact_nullable_string(self)
    cdef object read_bytes(self)
    cdef object read_nullable_bytes(self)
    cdef object read_compact_bytes(self)
    cdef object read_compact_nullable_bytes(self)
    cdef object read_uuid(self)
    cdef object read_view(self, Py_ssize_t n)
    cdef object read_raw(self, Py_ssize_t n)
    cdef object read_tagged_fields(self)
    cdef int skip_tagged_fields(self) except -1
    cdef object _decode_utf8(self, Py_ssize_t n)

    cdef inline Py_ssize_t remaining(self) noexcept:
        return self.end - self.pos

    cdef inline int need(self, Py_ssize_t n) except -1:
        if n > self.end - self.pos:
            return raise_underflow(n, self.end - self.pos)
        return 0

    cdef inline int skip(self, Py_ssize_t n) except -1:
        if n < 0:
            return raise_invalid_length("skip", n, self.end - self.pos)
        if n > self.end - self.pos:
            return raise_underflow(n, self.end - self.pos)
        self.pos += n
        return 0

    cdef inline int8_t read_int8(self) except? -1:
        if self.pos >= self.end:
            raise_underflow(1, 0)
        self.pos += 1
        return <int8_t>self.buf[self.pos - 1]

    cdef inline bint read_bool(self) except? -1:
        return self.read_int8() != 0

    cdef inline int16_t read_int16(self) except? -1:
        if 2 > self.end - self.pos:
            raise_underflow(2, self.end - self.pos)
        self.pos += 2
        return <int16_t>load_be16(self.buf + self.pos - 2)

    cdef inline uint16_t read_uint16(self) except? 0xffff:
        if 2 > self.end - self.pos:
            raise_underflow(2, self.end - self.pos)
        self.pos += 2
        return load_be16(self.buf + self.pos - 2)

    cdef inline int32_t read_int32(self) except? -1:
        if 4 > self.end - self.pos:
            raise_underflow(4, self.end - self.pos)
        self.pos += 4
        return <int32_t>load_be32(self.buf + self.pos - 4)

    cdef inline uint32_t read_uint32(self) except? 0xffffffff:
        if 4 > self.end - self.pos:
            raise_underflow(4, self.end - self.pos)
        self.pos += 4
        return load_be32(self.buf + self.pos - 4)

    cdef inline int64_t read_int64(self) except? -1:
        if 8 > self.end - self.pos:
            raise_underflow(8, self.end - self.pos)
        self.pos += 8
        return <int64_t>load_be64(self.buf + self.pos - 8)

    cdef inline double read_float64(self) except? -1.0:
        cdef uint64_t bits
        if 8 > self.end - self.pos:
            raise_underflow(8, self.end - self.pos)
        bits = load_be64(self.buf + self.pos)
        self.pos += 8
        cdef double d
        memcpy(&d, &bits, 8)
        return d

    cdef inline uint32_t read_uvarint(self) except? 0xffffffff:
        cdef uint32_t v = 0
        cdef int n = read_uvarint32_ptr(self.buf + self.pos, self.buf + self.end, &v)
        if n < 0:
            raise_varint(n, self.end - self.pos)
        self.pos += n
        return v

    cdef inline uint64_t read_uvarlong(self) except? 0xffffffffffffffff:
        cdef uint64_t v = 0
        cdef int n = read_uvarint64_ptr(self.buf + self.pos, self.buf + self.end, &v)
        if n < 0:
            raise_varint(n, self.end - self.pos)
        self.pos += n
        return v

    cdef inline int32_t read_varint(self) except? -1:
        return zigzag_decode32(self.read_uvarint())

    cdef inline int64_t read_varlong(self) except? -1:
        return zigzag_decode64(self.read_uvarlong())

    cdef inline Py_ssize_t read_array_len(self, Py_ssize_t min_elem_size) except -2:
        """int32 element count; -1 means null (the caller decides whether null is allowed).
        A count the remaining bytes cannot hold raises InvalidLengthError before anything
        is allocated for it."""
        cdef int32_t n = self.read_int32()
        if n < 0:
            if n == -1:
                return -1
            return raise_invalid_length("array count", n, self.end - self.pos)
        if min_elem_size < 1:
            min_elem_size = 1
        if <int64_t>n * min_elem_size > self.end - self.pos:
            return raise_invalid_length("array count", n, self.end - self.pos)
        return n

    cdef inline Py_ssize_t read_compact_array_len(self, Py_ssize_t min_elem_size) except -2:
        """uvarint count+1 (0 = null, returned as -1), bounded like read_array_len."""
        cdef uint32_t u = self.read_uvarint()
        if u == 0:
            return -1
        if min_elem_size < 1:
            min_elem_size = 1
        if <int64_t>(u - 1) * min_elem_size > self.end - self.pos:
            return raise_invalid_length("compact array count", <int64_t>u - 1,
                                        self.end - self.pos)
        return <Py_ssize_t>(u - 1)

    cdef inline Py_ssize_t read_bytes_len(self, bint nullable) except -2:
        """int32 length of bytes/records; -1 (null) only when nullable."""
        cdef int32_t n = self.read_int32()
        if n < 0:
            if n == -1 and nullable:
                return -1
            return raise_invalid_length("bytes length", n, self.end - self.pos)
        if n > self.end - self.pos:
            return raise_underflow(n, self.end - self.pos)
        return n

    cdef inline Py_ssize_t read_compact_bytes_len(self, bint nullable) except -2:
        cdef uint32_t u = self.read_uvarint()
        if u == 0:
            if nullable:
                return -1
            return raise_invalid_length("compact bytes length", -1, self.end - self.pos)
        if <int64_t>(u - 1) > self.end - self.pos:
            return raise_underflow(<Py_ssize_t>(u - 1), self.end - self.pos)
        return <Py_ssize_t>(u - 1)


# ------------------------------------------------------------------ Writer
@cython.final
cdef class Writer:
    cdef uint8_t* buf
    cdef Py_ssize_t pos      # bytes written so far
    cdef Py_ssize_t cap

    cdef int _grow(self, Py_ssize_t n) except -1
    cdef int write_string(self, object s) except -1
    cdef int write_nullable_string(self, object s) except -1
    cdef int write_compact_string(self, object s) except -1
    cdef int write_compact_nullable_string(self, object s) except -1
    cdef int write_bytes(self, object b) except -1
    cdef int write_nullable_bytes(self, object b) except -1
    cdef int write_compact_bytes(self, object b) except -1
    cdef int write_compact_nullable_bytes(self, object b) except -1
    cdef int write_uuid(self, object u) except -1
    cdef int write_raw(self, const uint8_t* p, Py_ssize_t n) except -1
    cdef int write_buffer(self, object b) except -1
    cdef int write_tagged_fields(self, object fields) except -1
    cdef bytes getvalue_c(self)

    cdef inline int ensure(self, Py_ssize_t n) except -1:
        if n > self.cap - self.pos:
            return self._grow(n)
        return 0

    cdef inline int write_int8(self, int8_t v) except -1:
        self.ensure(1)
        self.buf[self.pos] = <uint8_t>v
        self.pos += 1
        return 0

    cdef inline int write_bool(self, bint v) except -1:
        return self.write_int8(1 if v else 0)

    cdef inline int write_int16(self, int16_t v) except -1:
        self.ensure(2)
        store_be16(self.buf + self.pos, <uint16_t>v)
        self.pos += 2
        return 0

    cdef inline int write_uint16(self, uint16_t v) except -1:
        self.ensure(2)
        store_be16(self.buf + self.pos, v)
        self.pos += 2
        return 0

    cdef inline int write_int32(self, int32_t v) except -1:
        self.ensure(4)
        store_be32(self.buf + self.pos, <uint32_t>v)
        self.pos += 4
        return 0

    cdef inline int write_uint32(self, uint32_t v) except -1:
        self.ensure(4)
        store_be32(self.buf + self.pos, v)
        self.pos += 4
        return 0

    cdef inline int write_int64(self, int64_t v) except -1:
        self.ensure(8)
        store_be64(self.buf + self.pos, <uint64_t>v)
        self.pos += 8
        return 0

    cdef inline int write_float64(self, double v) except -1:
        cdef uint64_t bits
        memcpy(&bits, &v, 8)
        self.ensure(8)
        store_be64(self.buf + self.pos, bits)
        self.pos += 8
        return 0

    cdef inline int write_uvarint(self, uint64_t v) except -1:
        self.ensure(MAX_UVARINT64_BYTES)
        self.pos += write_uvarint_ptr(self.buf + self.pos, v)
        return 0

    cdef inline int write_varint(self, int32_t v) except -1:
        return self.write_uvarint(zigzag_encode32(v))

    cdef inline int write_varlong(self, int64_t v) except -1:
        return self.write_uvarint(zigzag_encode64(v))

    cdef inline int write_array_len(self, Py_ssize_t n) except -1:
        """int32 count; -1 for a null array."""
        return self.write_int32(<int32_t>n)

    cdef inline int write_compact_array_len(self, Py_ssize_t n) except -1:
        """uvarint count+1; pass -1 for a null array."""
        return self.write_uvarint(<uint64_t>(n + 1))

    cdef inline Py_ssize_t reserve(self, Py_ssize_t n) except -1:
        """Skip n bytes to be patched later (e.g. a size prefix); returns their offset."""
        self.ensure(n)
        self.pos += n
        return self.pos - n

    cdef inline void patch_int32(self, Py_ssize_t at, int32_t v) noexcept:
        store_be32(self.buf + at, <uint32_t>v)
