"""kcore.compression: Kafka's codecs through cramjam, framing details and the output bound."""
from __future__ import annotations

import gzip
import os
import random
import struct
import zlib

import cramjam
import pytest

from kclient.errors import (CorruptRecordError, DecompressionError, DecompressionLimitError,
                            UnsupportedCodecError)
from kcore import compression as C
from kcore import records as R
from test_records import _releases_gil, ref_compress, ref_decompress, ref_xerial

CODECS = [1, 2, 3, 4]
rng = random.Random(77)
SAMPLES = [b"", b"a", rng.randbytes(1000), b"kafka " * 20_000, rng.randbytes(200_000),
           (b"abc" * 1000 + rng.randbytes(50)) * 40]


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_and_reference_interop(codec):
    for data in SAMPLES:
        packed = C.compress(codec, data)
        assert C.decompress(codec, packed) == data
        assert ref_decompress(codec, packed) == data          # other decoders read ours
        assert C.decompress(codec, ref_compress(codec, data)) == data
        assert C.decompress(codec, memoryview(packed)) == data
        assert C.compress(codec, memoryview(data)) is not None


def test_codec_none_and_names():
    assert C.compress(0, b"xy") == b"xy" and C.decompress(0, b"xy") == b"xy"
    assert [C.codec_name(i) for i in range(5)] == ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec):
    with pytest.raises(UnsupportedCodecError):
        C.decompress(codec, b"abc")
    with pytest.raises(UnsupportedCodecError):
        C.compress(codec, b"abc")


def test_snappy_xerial_framing_layout():
    data = bytes(range(256)) * 300                            # 76,800 bytes: 3 blocks
    packed = C.compress(2, data)
    assert packed[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack(">ii", packed[8:16]) == (1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4:pos + 4 + n])))
        pos += 4 + n
    assert [len(b) for b in blocks] == [32768, 32768, 11264] and b"".join(blocks) == data
    assert packed == ref_xerial(data)


def test_snappy_raw_and_xerial_both_decode():
    data = b"hello snappy " * 5000
    assert C.decompress(2, bytes(cramjam.snappy.compress_raw(data))) == data
    assert C.decompress(2, ref_xerial(data)) == data
    assert C.decompress(2, ref_xerial(b"")) == b""


def test_lz4_frames_use_independent_blocks():
    # Java's Lz4BlockInputStream decodes every block on its own: linked blocks would break it.
    packed = C.compress(3, b"0123456789" * 30_000)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    assert packed[4] & 0x20, "block independence flag must be set"
    assert C.lz4_header_checksum(packed) == packed[6]
    # cramjam's own default frames (linked blocks) decode too
    linked = bytes(cramjam.lz4.compress(b"xyz" * 50_000))
    assert not linked[4] & 0x20
    assert C.decompress(3, linked) == b"xyz" * 50_000


# XXH32 reference values (xxHash test suite / widely published).
@pytest.mark.parametrize("data,seed,expected", [
    (b"", 0, 0x02CC5D05),
    (b"abc", 0, 0x32D153FF),
    (b"", 1, 0x0B2CB792),
])
def test_xxh32_vectors(data, seed, expected):
    assert C.xxh32_digest(data, seed) == expected


def test_xxh32_agrees_with_lz4_frames_written_by_cramjam():
    for size in (0, 10, 100_000):
        for kw in ({}, {"content_checksum": True}, {"block_linked": False}):
            c = cramjam.lz4.Compressor(**kw)
            c.compress(os.urandom(size))
            frame = bytes(c.finish())
            assert C.lz4_header_checksum(frame) == frame[6]


def _lz4_with_content_size(data: bytes, declared: int) -> bytes:
    """A valid lz4 frame whose descriptor carries a content size field."""
    c = cramjam.lz4.Compressor(block_linked=False)
    c.compress(data)
    frame = bytearray(c.finish())
    flg, bd = frame[4], frame[5]
    body = frame[7:]
    desc = bytes([flg | 0x08, bd]) + struct.pack("<Q", declared)
    hc = (C.xxh32_digest(desc) >> 8) & 0xFF
    return bytes(frame[:4]) + desc + bytes([hc]) + bytes(body)


def test_size_hints_from_headers():
    data = b"q" * 100_000
    framed = _lz4_with_content_size(data, len(data))
    assert C.decompress(3, framed) == data
    # A declared size beyond the bound fails before anything is decompressed.
    with pytest.raises(DecompressionLimitError):
        C.decompress(3, _lz4_with_content_size(data, 10**9), max_bytes=1 << 20)
    z = bytes(cramjam.zstd.compress(data))                  # one-shot: carries the size
    assert z[4] & 0xC0, "expected a Frame_Content_Size field"
    with pytest.raises(DecompressionLimitError):
        C.decompress(4, z, max_bytes=50_000)
    raw = bytes(cramjam.snappy.compress_raw(data))
    with pytest.raises(DecompressionLimitError):
        C.decompress(2, raw, max_bytes=99_999)
    assert C.decompress(2, raw, max_bytes=100_000) == data


@pytest.mark.parametrize("codec", CODECS)
def test_bound_is_exact(codec):
    data = bytes(range(256)) * 1000                          # 256,000 bytes
    packed = C.compress(codec, data)
    assert C.decompress(codec, packed, max_bytes=len(data)) == data
    with pytest.raises(DecompressionLimitError):
        C.decompress(codec, packed, max_bytes=len(data) - 1)
    with pytest.raises(DecompressionLimitError):
        C.decompress(codec, packed, max_bytes=0)
    assert C.decompress(codec, C.compress(codec, b""), max_bytes=0) == b""


def test_gzip_multi_member_and_zstd_multi_frame():
    g = gzip.compress(b"abc") + gzip.compress(b"defgh" * 10_000)
    assert C.decompress(1, g) == b"abc" + b"defgh" * 10_000
    z = bytes(cramjam.zstd.compress(b"a" * 10)) + bytes(cramjam.zstd.compress(b"b" * 70_000))
    assert C.decompress(4, z) == b"a" * 10 + b"b" * 70_000


@pytest.mark.parametrize("codec", CODECS)
def test_garbage_and_truncation_are_decompression_errors(codec):
    packed = C.compress(codec, b"some text to squeeze " * 500)
    bad_inputs = [b"", b"garbage" * 30, packed[: len(packed) // 2], packed[:5]]
    if codec != 2:      # b"\x00" is a valid empty raw snappy block
        bad_inputs += [b"\x00", bytes([packed[0] ^ 0xFF]) + packed[1:]]
    for bad in bad_inputs:
        with pytest.raises(DecompressionError) as ei:
            C.decompress(codec, bad)
        assert not isinstance(ei.value, DecompressionLimitError)
        assert isinstance(ei.value, CorruptRecordError)


def test_xerial_block_lengths_are_checked():
    packed = bytearray(C.compress(2, b"x" * 100_000))
    packed[16:20] = struct.pack(">i", 10**9)                # block longer than the input
    with pytest.raises(DecompressionError):
        C.decompress(2, bytes(packed))
    with pytest.raises(DecompressionError):
        C.decompress(2, bytes(packed[:18]))                 # length field truncated


def test_default_bound_policy():
    assert C.DEFAULT_MIN_BOUND == 64 << 20 and C.DEFAULT_RATIO_BOUND == 64
    c = cramjam.zstd.Compressor(level=1)
    for _ in range(65):
        c.compress(bytes(1 << 20))
    bomb = bytes(c.finish())                                 # 65 MiB of zeros, no size field
    assert len(bomb) < 64 << 10
    with pytest.raises(DecompressionLimitError):
        C.decompress(4, bomb)
    assert len(C.decompress(4, bomb, max_bytes=65 << 20)) == 65 << 20


def test_decompression_releases_the_gil():
    data = os.urandom(1 << 20) * 24
    for codec in CODECS:
        packed = C.compress(codec, data)
        assert _releases_gil(lambda: [C.decompress(codec, packed) for _ in range(3)]), codec


def test_compressed_batches_in_records():
    records = [(None, 10 + i, b"k%d" % i, b"v" * i, []) for i in range(200)]
    for codec in CODECS:
        for level in (None, 1):
            blob = R.encode_batch(records, codec=codec, compression_level=level)
            res = R.decode_records(blob)
            assert res.batches[0].codec == codec
            assert [(r.key, r.value) for r in res.records] == [(k, v) for _, _, k, v, _ in records]


def test_batch_with_unknown_codec_id():
    for codec in (5, 6, 7):
        blob = bytearray(R.encode_batch([(None, 1, None, b"x", [])]))
        blob[22] = (blob[22] & ~7) | codec
        blob[17:21] = struct.pack(">I", R.crc32c(bytes(blob[21:])))
        with pytest.raises(UnsupportedCodecError):
            R.decode_records(bytes(blob))
        with pytest.raises(UnsupportedCodecError):
            R.decode_columnar(bytes(blob))
    with pytest.raises(UnsupportedCodecError):          # zstd is not valid in format v0/v1
        from test_records import ref_legacy_message
        R.decode_records(ref_legacy_message(0, 1, None, b"x", attributes=4, timestamp=1))


def test_legacy_lz4_checksum_repair_only_for_v0():
    from test_records import ref_legacy_message
    inner = ref_legacy_message(0, 1, None, b"payload", timestamp=5)
    frame = bytearray(ref_compress(3, inner))
    frame[6] ^= 0x5A                                       # wrong header checksum
    v1 = ref_legacy_message(0, 1, None, bytes(frame), attributes=3, timestamp=5)
    with pytest.raises(DecompressionError):
        R.decode_records(v1)                               # v1 producers wrote it correctly
    inner0 = ref_legacy_message(0, 0, None, b"payload")
    frame0 = bytearray(ref_compress(3, inner0))
    frame0[6] ^= 0x5A
    v0 = ref_legacy_message(0, 0, None, bytes(frame0), attributes=3)
    assert [r.value for r in R.decode_records(v0).records] == [b"payload"]


def test_zlib_reference_agrees_on_gzip_output():
    data = b"gzip interop " * 1000
    assert zlib.decompress(C.compress(1, data), 31) == data
