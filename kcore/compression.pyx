# cython: language_level=3
"""Kafka record compression codecs (gzip, snappy, lz4, zstd) through cramjam, with a bound.

Why the bound works without allocating the unbounded output: every codec decompresses
*into a window of a caller-owned buffer* (cramjam's ``decompress_into`` / snappy's
``decompress_raw_into``), and a codec that runs out of window stops with "failed to write
whole buffer" instead of growing anything.  The window starts at the size announced by the
data when the format has one (snappy preamble, xerial block preambles, lz4 frame content
size, zstd frame content size, gzip ISIZE) or at a guess (16 x the compressed size: the
lz4/zstd frames of librdkafka and Java carry no size), and grows x4 (a short window costs a
full re-decompression) up to ``limit + 1`` bytes; output that fills ``limit + 1`` bytes is
a decompression bomb.  The window is reserved with malloc/realloc, whose large untouched
pages are not resident, so a bomb costs at most ``limit + 1`` resident bytes.

cramjam releases the GIL while it (de)compresses (measured: a second Python thread keeps
running at full speed during ``decompress_into`` for all four codecs; tested in
tests/test_records_codecs.py).  cramjam has no xerial snappy: its blocks are decoded here
one by one with ``decompress_raw_into``, each sized exactly by its preamble.
"""
from cpython.buffer cimport PyBuffer_FillInfo, PyBUF_WRITABLE
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport realloc, free
from libc.string cimport memcpy

import cramjam

from kcore.errors import (
    DecompressionError,
    DecompressionLimitError,
    UnsupportedCodecError,
)

DEFAULT_MIN_BOUND = 64 * 1024 * 1024
DEFAULT_RATIO_BOUND = 64
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
XERIAL_MAGIC = b"\x82SNAPPY\x00"
# snappy-java (the Java client's snappy) frames 32 KiB chunks.
XERIAL_BLOCK = 32 * 1024

cdef size_t _MIN_WINDOW = 64 * 1024
cdef size_t _BIG_WINDOW = 64 * 1024 * 1024
cdef size_t _HARD_MAX = (<size_t>1) << 31    # Kafka sizes are int32: no batch decompresses past 2 GiB
cdef object _CramjamError = cramjam.DecompressionError
cdef object _zstd_into = cramjam.zstd.decompress_into
cdef object _lz4_into = cramjam.lz4.decompress_into
cdef object _gzip_into = cramjam.gzip.decompress_into
cdef object _snappy_raw_into = cramjam.snappy.decompress_raw_into


# ----------------------------------------------------------------------------- GrowBuf
cdef int growbuf_reserve(GrowBuf* b, size_t extra) noexcept nogil:
    cdef size_t need, cap
    cdef uint8_t* p
    if extra > ((<size_t>-1) >> 2) or b.len > ((<size_t>-1) >> 2):
        return -1
    need = b.len + extra
    if need <= b.cap and b.data != NULL:
        return 0
    cap = b.cap * 2 if b.cap else 256
    if cap < need:
        cap = need
    p = <uint8_t*>realloc(b.data, cap if cap else 1)
    if p == NULL:
        return -1
    b.data = p
    b.cap = cap
    return 0


cdef void growbuf_free(GrowBuf* b) noexcept nogil:
    free(b.data)
    b.data = NULL
    b.len = 0
    b.cap = 0


cdef void growbuf_shrink(GrowBuf* b) noexcept nogil:
    cdef size_t want = b.len if b.len else 1
    cdef uint8_t* p
    if b.data != NULL and b.cap > want:
        p = <uint8_t*>realloc(b.data, want)
        if p != NULL:
            b.data = p
            b.cap = want


cdef class _RawView:
    """A buffer-protocol window over C memory, handed to cramjam for one call only."""
    cdef uint8_t* ptr
    cdef Py_ssize_t size
    cdef bint writable
    cdef int exports

    def __getbuffer__(self, Py_buffer* view, int flags):
        if (flags & PyBUF_WRITABLE) and not self.writable:
            raise BufferError("read-only window")
        PyBuffer_FillInfo(view, self, <void*>self.ptr, self.size, not self.writable, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1


cdef _RawView _window(const uint8_t* p, size_t n, bint writable):
    cdef _RawView v = _RawView.__new__(_RawView)
    v.ptr = <uint8_t*>p
    v.size = <Py_ssize_t>n
    v.writable = writable
    return v


# ----------------------------------------------------------------------------- size hints
cdef inline uint32_t _rd_le32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0]) | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t _rd_le64(const uint8_t* p) noexcept nogil:
    return (<uint64_t>_rd_le32(p)) | ((<uint64_t>_rd_le32(p + 4)) << 32)


cdef inline uint32_t _rd_be32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | (<uint32_t>p[3])


cdef int64_t _snappy_preamble(const uint8_t* p, size_t n) noexcept nogil:
    """Uncompressed length stored at the start of a raw snappy block, -1 if malformed."""
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef size_t i = 0
    while i < n and i < 5:
        v |= (<uint64_t>(p[i] & 0x7F)) << shift
        if not (p[i] & 0x80):
            return <int64_t>v if v <= 0xFFFFFFFFu else -1
        shift += 7
        i += 1
    return -1


cdef int64_t _zstd_content_size(const uint8_t* p, size_t n) noexcept nogil:
    """Frame_Content_Size of the first zstd frame, -1 when absent or unreadable."""
    cdef uint8_t fhd
    cdef int fcs_flag, single, did_flag
    cdef size_t pos
    cdef int fcs_size
    if n < 6 or _rd_le32(p) != 0xFD2FB528u:
        return -1
    fhd = p[4]
    fcs_flag = fhd >> 6
    single = (fhd >> 5) & 1
    did_flag = fhd & 3
    pos = 5
    if not single:
        pos += 1
    if did_flag == 1:
        pos += 1
    elif did_flag == 2:
        pos += 2
    elif did_flag == 3:
        pos += 4
    if fcs_flag == 0:
        fcs_size = 1 if single else 0
    elif fcs_flag == 1:
        fcs_size = 2
    elif fcs_flag == 2:
        fcs_size = 4
    else:
        fcs_size = 8
    if fcs_size == 0 or pos + fcs_size > n:
        return -1
    if fcs_size == 1:
        return p[pos]
    if fcs_size == 2:
        return (<int64_t>p[pos] | (<int64_t>p[pos + 1] << 8)) + 256
    if fcs_size == 4:
        return _rd_le32(p + pos)
    return <int64_t>(_rd_le64(p + pos) & ((<uint64_t>-1) >> 1))


cdef int64_t _lz4_content_size(const uint8_t* p, size_t n) noexcept nogil:
    if n < 15 or _rd_le32(p) != 0x184D2204u or not (p[4] & 0x08):
        return -1
    return <int64_t>(_rd_le64(p + 6) & ((<uint64_t>-1) >> 1))


cdef extern from *:
    """
    #define KC_XXH_P1 2654435761U
    #define KC_XXH_P2 2246822519U
    #define KC_XXH_P3 3266489917U
    #define KC_XXH_P4 668265263U
    #define KC_XXH_P5 374761393U
    """
    uint32_t KC_XXH_P1, KC_XXH_P2, KC_XXH_P3, KC_XXH_P4, KC_XXH_P5


cdef inline uint32_t _rotl(uint32_t x, int r) noexcept nogil:
    return (x << r) | (x >> (32 - r))


cdef uint32_t xxh32(const uint8_t* p, size_t n, uint32_t seed) noexcept nogil:
    """XXH32 (lz4 frame checksums), from the published algorithm description."""
    cdef uint32_t P1 = KC_XXH_P1, P2 = KC_XXH_P2, P3 = KC_XXH_P3
    cdef uint32_t P4 = KC_XXH_P4, P5 = KC_XXH_P5
    cdef const uint8_t* end = p + n
    cdef uint32_t v1, v2, v3, v4, h
    if n >= 16:
        v1 = seed + P1 + P2
        v2 = seed + P2
        v3 = seed
        v4 = seed - P1
        while p + 16 <= end:
            v1 = _rotl(v1 + _rd_le32(p) * P2, 13) * P1
            v2 = _rotl(v2 + _rd_le32(p + 4) * P2, 13) * P1
            v3 = _rotl(v3 + _rd_le32(p + 8) * P2, 13) * P1
            v4 = _rotl(v4 + _rd_le32(p + 12) * P2, 13) * P1
            p += 16
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
    else:
        h = seed + P5
    h += <uint32_t>n
    while p + 4 <= end:
        h = _rotl(h + _rd_le32(p) * P3, 17) * P4
        p += 4
    while p < end:
        h = _rotl(h + p[0] * P5, 11) * P1
        p += 1
    h ^= h >> 15
    h *= P2
    h ^= h >> 13
    h *= P3
    h ^= h >> 16
    return h


def xxh32_digest(data, uint32_t seed=0):
    """XXH32 of a bytes-like object (exposed for tests)."""
    cdef const uint8_t[::1] v = memoryview(data).cast("B")
    cdef const uint8_t* p = &v[0] if v.shape[0] else <const uint8_t*>b""
    return xxh32(p, v.shape[0], seed)


def lz4_header_checksum(frame) -> int:
    """The correct HC byte of an lz4 frame descriptor (exposed for tests)."""
    cdef bytes b = bytes(frame[:15])
    cdef const uint8_t* p = b
    if len(b) < 7:
        raise DecompressionError("lz4: frame header truncated")
    cdef size_t dlen = 2 + (8 if (p[4] & 0x08) else 0) + (4 if (p[4] & 0x01) else 0)
    if 4 + dlen >= <size_t>len(b):
        raise DecompressionError("lz4: frame header truncated")
    return (xxh32(p + 4, dlen, 0) >> 8) & 0xFF


# ----------------------------------------------------------------------------- bound policy
cdef size_t decompression_limit(object max_bytes, size_t compressed_len) except? 0:
    cdef size_t lim
    if max_bytes is None:
        lim = compressed_len * DEFAULT_RATIO_BOUND
        if lim < <size_t>DEFAULT_MIN_BOUND:
            lim = DEFAULT_MIN_BOUND
    else:
        if max_bytes < 0:
            raise ValueError("max_decompressed_bytes must be >= 0")
        lim = <size_t>min(max_bytes, _HARD_MAX - 1)
    if lim >= _HARD_MAX:
        lim = _HARD_MAX - 1
    return lim


# ----------------------------------------------------------------------------- decompression
cdef inline bint _output_full(str msg):
    # Rust's io::ErrorKind::WriteZero text, and snappy's too-small-output message.
    return "failed to write whole buffer" in msg or "smaller than required" in msg


cdef Py_ssize_t _bounded_into(object fn, str name, const uint8_t* src, size_t n,
                              GrowBuf* out, size_t limit, int64_t hint) except -1:
    """Run fn(src, window) with a window that grows until the output fits or passes limit."""
    cdef size_t cap
    cdef object written
    cdef _RawView win
    cdef _RawView inp = _window(src, n, False)
    if hint >= 0:
        cap = <size_t>hint if <uint64_t>hint <= limit else limit + 1
    else:
        # No size in the header (librdkafka's and Java's lz4/zstd frames): guess generously.
        # An untouched reservation is address space, not memory; a short guess costs a
        # second full decompression.
        cap = n * 16
        if cap > _BIG_WINDOW:
            cap = max(_BIG_WINDOW, n * 4)      # big batches: keep the reservation modest
        if cap < _MIN_WINDOW:
            cap = _MIN_WINDOW
        if cap > limit + 1:
            cap = limit + 1
    while True:
        if growbuf_reserve(out, cap) < 0:
            raise MemoryError()
        win = _window(out.data + out.len, cap, True)
        try:
            written = fn(inp, win)
        except _CramjamError as e:
            msg = str(e)
            if not _output_full(msg):
                if not msg.startswith(name):
                    msg = f"{name}: {msg}"
                raise DecompressionError(msg) from None
            if cap > limit:
                raise DecompressionLimitError(
                    f"{name}: decompressed size exceeds the bound of {limit} bytes "
                    f"(max_decompressed_bytes)") from None
            cap = cap * 4 if cap >= _MIN_WINDOW else _MIN_WINDOW
            if cap > limit + 1:
                cap = limit + 1
            continue
        finally:
            if win.exports or inp.exports:   # cramjam must not keep our memory past the call
                raise DecompressionError(f"{name}: codec kept a reference to its buffers")
        if written > limit:
            raise DecompressionLimitError(
                f"{name}: decompressed size exceeds the bound of {limit} bytes "
                f"(max_decompressed_bytes)")
        out.len += <size_t>written
        return written


cdef Py_ssize_t _xerial_append(const uint8_t* src, size_t n, GrowBuf* out, size_t limit) except -1:
    cdef size_t pos = 16, start = out.len
    cdef uint32_t blen
    cdef int64_t raw
    cdef object written
    while pos < n:
        if n - pos < 4:
            raise DecompressionError("snappy: xerial block length truncated")
        blen = _rd_be32(src + pos)
        pos += 4
        if blen > n - pos:
            raise DecompressionError(
                f"snappy: xerial block of {blen} bytes exceeds the {n - pos} bytes left")
        raw = _snappy_preamble(src + pos, blen)
        if raw < 0:
            raise DecompressionError("snappy: corrupt block preamble")
        if <uint64_t>raw > limit - (out.len - start):
            raise DecompressionLimitError(
                f"snappy: decompressed size exceeds the bound of {limit} bytes "
                f"(max_decompressed_bytes)")
        if growbuf_reserve(out, <size_t>raw) < 0:
            raise MemoryError()
        try:
            written = _snappy_raw_into(_window(src + pos, blen, False),
                                       _window(out.data + out.len, <size_t>raw, True))
        except _CramjamError as e:
            raise DecompressionError(f"snappy (xerial block): {e}") from None
        if written != raw:
            raise DecompressionError("snappy: block shorter than its preamble")
        out.len += <size_t>raw
        pos += blen
    return <Py_ssize_t>(out.len - start)


cdef Py_ssize_t decompress_append(int codec, const uint8_t* src, size_t n, GrowBuf* out,
                                  size_t limit, bint legacy_lz4_hc=False) except -1:
    cdef int64_t hint
    cdef bytearray patched
    cdef uint8_t* q
    cdef size_t dlen
    if limit >= _HARD_MAX:
        limit = _HARD_MAX - 1
    if codec == CODEC_GZIP:
        # ISIZE (last 4 bytes) is the size mod 2**32 of the last member only: a hint.
        hint = _rd_le32(src + n - 4) if n >= 18 else -1
        return _bounded_into(_gzip_into, "gzip", src, n, out, limit, hint)
    if codec == CODEC_SNAPPY:
        if n >= 16 and src[0] == 0x82 and XERIAL_MAGIC == (<const char*>src)[:8]:
            return _xerial_append(src, n, out, limit)
        hint = _snappy_preamble(src, n)
        if hint < 0:
            raise DecompressionError("snappy: corrupt preamble")
        if <uint64_t>hint > limit:
            raise DecompressionLimitError(
                f"snappy: decompressed size {hint} exceeds the bound of {limit} bytes "
                f"(max_decompressed_bytes)")
        return _bounded_into(_snappy_raw_into, "snappy", src, n, out, limit, hint)
    if codec == CODEC_LZ4:
        hint = _lz4_content_size(src, n)
        if hint > <int64_t>limit:
            raise DecompressionLimitError(
                f"lz4: declared content size {hint} exceeds the bound of {limit} bytes "
                f"(max_decompressed_bytes)")
        if legacy_lz4_hc and n >= 7 and _rd_le32(src) == 0x184D2204u:
            dlen = 2 + (8 if (src[4] & 0x08) else 0) + (4 if (src[4] & 0x01) else 0)
            if 4 + dlen < n:
                patched = bytearray((<const char*>src)[:n])
                q = <uint8_t*>(<char*>patched)
                q[4 + dlen] = (xxh32(q + 4, dlen, 0) >> 8) & 0xFF
                return _bounded_into(_lz4_into, "lz4", q, n, out, limit, hint)
        return _bounded_into(_lz4_into, "lz4", src, n, out, limit, hint)
    if codec == CODEC_ZSTD:
        hint = _zstd_content_size(src, n)
        if hint > <int64_t>limit:
            raise DecompressionLimitError(
                f"zstd: declared content size {hint} exceeds the bound of {limit} bytes "
                f"(max_decompressed_bytes)")
        return _bounded_into(_zstd_into, "zstd", src, n, out, limit, hint)
    raise UnsupportedCodecError(f"unknown compression codec id {codec}")


def decompress(int codec, data, max_bytes=None) -> bytes:
    """Decompress one Kafka-compressed payload; see decompress_append for the errors."""
    cdef GrowBuf out
    cdef const uint8_t[::1] v
    cdef const uint8_t* p
    cdef size_t n
    if codec == CODEC_NONE:
        return bytes(data)
    if not 1 <= codec <= 4:
        raise UnsupportedCodecError(f"unknown compression codec id {codec}")
    v = memoryview(data).cast("B")
    n = v.shape[0]
    p = &v[0] if n else <const uint8_t*>b""
    out.data = NULL
    out.len = 0
    out.cap = 0
    try:
        decompress_append(codec, p, n, &out, decompression_limit(max_bytes, n))
        return (<char*>out.data)[:out.len] if out.len else b""
    finally:
        growbuf_free(&out)


# ----------------------------------------------------------------------------- compression
cdef bytes _xerial_compress(object data):
    cdef const uint8_t[::1] v = memoryview(data).cast("B")
    cdef Py_ssize_t n = v.shape[0], pos = 0, end
    parts = [XERIAL_MAGIC, b"\x00\x00\x00\x01\x00\x00\x00\x01"]
    mv = memoryview(v)
    compress_raw = cramjam.snappy.compress_raw
    while pos < n:
        end = min(pos + XERIAL_BLOCK, n)
        block = bytes(compress_raw(mv[pos:end]))
        parts.append(len(block).to_bytes(4, "big"))
        parts.append(block)
        pos = end
    return b"".join(parts)


cpdef bytes compress(int codec, object data, object level=None):
    """Compress `data` with Kafka codec id 1..4 (0 returns the bytes unchanged)."""
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == CODEC_SNAPPY:
        return _xerial_compress(data)
    if codec == CODEC_LZ4:
        # Independent blocks: the Java client's Lz4BlockInputStream decodes each block alone.
        c = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        c.compress(data if type(data) is bytes else bytes(data))   # this API takes bytes only
        return bytes(c.finish())
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise UnsupportedCodecError(f"unknown compression codec id {codec}")


def codec_name(int codec) -> str:
    if 0 <= codec < 5:
        return CODEC_NAMES[codec]
    raise UnsupportedCodecError(f"unknown compression codec id {codec}")
