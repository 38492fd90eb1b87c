# cython: language_level=3
"""A bounded write buffer for the request encoders that run without the GIL (kcore.groupcodec,
kcore.sasl); inline, no module.

A write that does not fit sets ``overflow`` and writes nothing, and every later write is then
a no-op, so an encoder writes its whole request and checks once, in wb_finish."""
from libc.stdint cimport int16_t, int32_t, uint8_t, uint16_t, uint32_t
from libc.string cimport memcpy

from kcore.wire cimport store_be16, store_be32, write_uvarint_ptr


ctypedef struct wbuf:
    uint8_t* p
    Py_ssize_t cap
    Py_ssize_t n
    int overflow


cdef inline void wb_init(wbuf* b, uint8_t* out, Py_ssize_t cap) noexcept nogil:
    b.p = out
    b.cap = cap
    b.n = 0
    b.overflow = 0


cdef inline void wb_raw(wbuf* b, const void* src, Py_ssize_t n) noexcept nogil:
    if b.overflow or n > b.cap - b.n:
        b.overflow = 1
        return
    if n:
        memcpy(b.p + b.n, src, n)
    b.n += n


cdef inline void wb_i16(wbuf* b, int16_t v) noexcept nogil:
    cdef uint8_t tmp[2]
    store_be16(tmp, <uint16_t>v)
    wb_raw(b, tmp, 2)


cdef inline void wb_i32(wbuf* b, int32_t v) noexcept nogil:
    cdef uint8_t tmp[4]
    store_be32(tmp, <uint32_t>v)
    wb_raw(b, tmp, 4)


cdef inline void wb_uvarint(wbuf* b, uint32_t v) noexcept nogil:
    cdef uint8_t tmp[10]
    wb_raw(b, tmp, write_uvarint_ptr(tmp, v))


cdef inline void wb_str(wbuf* b, const char* s, Py_ssize_t n, bint compact) noexcept nogil:
    # NULL or n < 0 writes null (a nullable string); callers bound n to 32767 (int16 length).
    if s == NULL or n < 0:
        if compact:
            wb_uvarint(b, 0)
        else:
            wb_i16(b, -1)
        return
    if compact:
        wb_uvarint(b, <uint32_t>(n + 1))
    else:
        wb_i16(b, <int16_t>n)
    wb_raw(b, s, n)


cdef inline void wb_request_header(wbuf* b, int api_key, int version, int32_t correlation_id,
                                   const char* client_id, Py_ssize_t client_id_len,
                                   bint flexible) noexcept nogil:
    """Size placeholder (see wb_finish) and request header v1, or v2 when flexible."""
    wb_i32(b, 0)
    wb_i16(b, <int16_t>api_key)
    wb_i16(b, <int16_t>version)
    wb_i32(b, correlation_id)
    wb_str(b, client_id, client_id_len, False)   # the header's client id is never compact
    if flexible:
        wb_uvarint(b, 0)                         # request header v2: no tagged fields


cdef inline Py_ssize_t wb_finish(wbuf* b, Py_ssize_t overflow_code) noexcept nogil:
    """The frame's length with its size prefix filled in, or overflow_code if it did not fit."""
    if b.overflow:
        return overflow_code
    store_be32(b.p, <uint32_t>(b.n - 4))
    return b.n
