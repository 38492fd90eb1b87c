# cimport interface of kcore.compression: Kafka's record codecs with a bounded output.
from libc.stdint cimport uint8_t, int64_t

cdef enum:
    CODEC_NONE = 0
    CODEC_GZIP = 1
    CODEC_SNAPPY = 2
    CODEC_LZ4 = 3
    CODEC_ZSTD = 4

# A growable byte buffer owned by C code (malloc/realloc).  `cap` may be far larger than
# `len`: untouched pages of a large reservation cost address space, not resident memory.
ctypedef struct GrowBuf:
    uint8_t* data
    size_t len
    size_t cap

# Make room for `extra` more bytes after `len`; returns -1 (nothing changed) on overflow or
# out of memory.
cdef int growbuf_reserve(GrowBuf* b, size_t extra) noexcept nogil
cdef void growbuf_free(GrowBuf* b) noexcept nogil
# Give back unused capacity (keeps at least one byte so data is never NULL).
cdef void growbuf_shrink(GrowBuf* b) noexcept nogil

# The per-batch bound on decompressed bytes: `max_bytes` when it is an int, else the default
# policy max(DEFAULT_MIN_BOUND, DEFAULT_RATIO_BOUND * compressed_len).
cdef size_t decompression_limit(object max_bytes, size_t compressed_len) except? 0

# Decompress src[0:n] (codec 1..4) and append the output to `out`.  Returns the number of
# bytes appended.  Raises DecompressionLimitError (output would exceed `limit`; at most
# limit + 1 bytes are ever written), DecompressionError (corrupt input) or
# UnsupportedCodecError.  `legacy_lz4_hc` repairs the frame-descriptor checksum that
# message format v0 producers computed wrongly (KAFKA-3160).  The GIL is released by the
# codec library while it works.
cdef Py_ssize_t decompress_append(int codec, const uint8_t* src, size_t n, GrowBuf* out,
                                  size_t limit, bint legacy_lz4_hc=*) except -1

# Compress a buffer with one of Kafka's codecs (snappy in xerial framing, lz4 as a frame
# with independent blocks, as the Java client writes them).
cpdef bytes compress(int codec, object data, object level=*)
