# cython: language_level=3
"""Checksums of Kafka record batches: CRC32C (v2 batches) and CRC32 (legacy messages).

The C implementations are in crc32c.h (SSE4.2 instruction when present, else slicing-by-8
tables); this module owns their one-time table setup, so every other module calls them
through the C functions declared in crc.pxd.
"""
from libc.stdint cimport uint8_t, uint32_t

cdef extern from "crc32c.h" nogil:
    void kc_crc_init()
    uint32_t kc_crc32c(uint32_t crc, const uint8_t* p, size_t n)
    uint32_t kc_crc32c_sw(uint32_t crc, const uint8_t* p, size_t n)
    uint32_t kc_crc32c_hw(uint32_t crc, const uint8_t* p, size_t n)
    uint32_t kc_crc32_ieee(uint32_t crc, const uint8_t* p, size_t n)
    int kc_crc32c_has_hw()

kc_crc_init()

__all__ = ["CRC32C_HARDWARE", "crc32c", "crc32c_sw", "crc32c_hw", "crc32_ieee"]

CRC32C_HARDWARE = bool(kc_crc32c_has_hw())


cdef uint32_t crc32c_update(uint32_t crc, const uint8_t* p, size_t n) noexcept nogil:
    return kc_crc32c(crc, p, n)


cdef uint32_t crc32_ieee_update(uint32_t crc, const uint8_t* p, size_t n) noexcept nogil:
    return kc_crc32_ieee(crc, p, n)


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
