"""Kafka's record compression codecs through cramjam, with a bounded output.

Codec ids: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (5..7 raise UnsupportedCodecError).

Decompression writes into a window of a buffer this module owns, sized from the size the
payload announces (snappy preamble, xerial block preambles, lz4 frame content size, zstd
frame content size, gzip ISIZE) or from a guess (16 x compressed size), growing x4 up to
bound + 1 bytes: output reaching bound + 1 bytes raises DecompressionLimitError, so a
bomb never costs more than the bound.  A declared size above the bound fails before any
decompression.  cramjam releases the GIL while it works.

Snappy is read raw or in xerial framing ("\\x82SNAPPY\\x00", two int32 versions, then
blocks of int32 length + raw snappy) and written in xerial framing; lz4 is the frame
format, written with independent blocks (Java's Lz4BlockInputStream needs them).
"""
from __future__ import annotations

DEFAULT_MIN_BOUND: int      # 64 MiB
DEFAULT_RATIO_BOUND: int    # 64: default bound = max(DEFAULT_MIN_BOUND, 64 x compressed size)
CODEC_NAMES: tuple[str, ...]
XERIAL_MAGIC: bytes
XERIAL_BLOCK: int


def compress(codec: int, data: bytes | bytearray | memoryview,
             level: int | None = None) -> bytes:
    """Compress with codec id 0..4 (0 returns the bytes unchanged)."""


def decompress(codec: int, data: bytes | bytearray | memoryview,
               max_bytes: int | None = None) -> bytes:
    """Decompress one payload.  max_bytes: None = default policy, else an absolute bound.

    Raises DecompressionLimitError, DecompressionError or UnsupportedCodecError.
    """


def codec_name(codec: int) -> str: ...


def xxh32_digest(data: bytes | bytearray | memoryview, seed: int = 0) -> int:
    """XXH32 (used by lz4 frame checksums)."""


def lz4_header_checksum(frame: bytes) -> int:
    """The correct header-checksum byte of an lz4 frame descriptor."""
