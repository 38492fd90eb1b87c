"""Hostile record bytes: truncation, bad lengths, bad varints, CRC mismatches, bombs.

Every case must raise a specific kclient.errors class (or report a partial trailing batch,
which is not an error), never crash, never allocate from an unchecked length.
"""
from __future__ import annotations

import gc
import gzip
import struct
import sys
import threading
import zlib

import cramjam
import psutil
import pytest

from kclient.errors import (CorruptRecordError, CrcMismatchError, DecompressionError,
                            DecompressionLimitError, InvalidRecordLengthError, KafkaError,
                            RecordVarintError)
from kcore import records as R
from test_records import ref_legacy_message, ref_varint

BASE = R.encode_batch(
    [(None, 1000 + i, b"key%d" % i, b"value-%d" % i * 3, [("h%d" % i, b"x" * i), ("n", None)])
     for i in range(6)], base_offset=50, partition_leader_epoch=2)


def batch_with(region: bytes, *, count: int, codec: int = 0, attrs_extra: int = 0,
               fix_crc: bool = True, base_offset: int = 0) -> bytes:
    """A v2 batch around an arbitrary (maybe malformed) records region."""
    after_crc = struct.pack(">hiqqqhii", codec | attrs_extra, max(count - 1, 0), 1000, 1000,
                            -1, -1, -1, count) + region
    crc = R.crc32c(after_crc) if fix_crc else 0xDEADBEEF
    head = struct.pack(">iBI", -1, 2, crc)
    return struct.pack(">qi", base_offset, len(head) + len(after_crc)) + head + after_crc


def region_of(blob: bytes) -> bytes:
    return blob[61:]


def record(body: bytes) -> bytes:
    return ref_varint(len(body)) + body


def decode_both(data, **kw):
    """Run both decoders; they must agree on raising (returns the per-record result)."""
    err1 = err2 = None
    try:
        res = R.decode_records(data, **kw)
    except KafkaError as e:
        err1 = e
    try:
        R.decode_columnar(data, **kw)
    except KafkaError as e:
        err2 = e
    assert type(err1) is type(err2), (err1, err2)
    if err1:
        raise err1
    return res


# ----------------------------------------------------------------------------- truncation
def test_every_prefix_of_a_fetch_is_partial_not_an_error():
    legacy = ref_legacy_message(56, 1, b"k", b"legacy", timestamp=7)
    zstd = R.encode_batch([(None, 5, None, b"z" * 100, [])], base_offset=57, codec=4)
    data = BASE + legacy + zstd
    ends = [len(BASE), len(BASE) + len(legacy), len(data)]
    for cut in range(len(data) + 1):
        res = decode_both(data[:cut])
        complete = sum(1 for e in ends if e <= cut)
        assert len(res.batches) == complete
        assert res.bytes_consumed + res.partial_trailing_bytes == cut
        assert len(res.records) == [0, 6, 7, 8][complete]


def test_truncated_records_inside_a_complete_batch_raise():
    region = region_of(BASE)
    for cut in range(len(region)):
        blob = batch_with(region[:cut], count=6)
        with pytest.raises(CorruptRecordError):
            decode_both(blob)
        with pytest.raises(CorruptRecordError):
            decode_both(batch_with(region[:cut], count=6, fix_crc=False), check_crcs=False)


def test_batch_length_fields():
    neg = bytearray(BASE)
    neg[8:12] = struct.pack(">i", -5)
    with pytest.raises(InvalidRecordLengthError):
        decode_both(bytes(neg))
    small = bytearray(BASE)
    small[8:12] = struct.pack(">i", 13)
    with pytest.raises(InvalidRecordLengthError):
        decode_both(bytes(small))
    v2_too_small = bytearray(BASE[:12 + 40])
    v2_too_small[8:12] = struct.pack(">i", 40)            # complete, but below the v2 header
    with pytest.raises(InvalidRecordLengthError):
        decode_both(bytes(v2_too_small))
    huge = bytearray(BASE)
    huge[8:12] = struct.pack(">i", 2**31 - 1)             # claims 2 GiB: a partial batch
    res = decode_both(bytes(huge))
    assert res.records == [] and res.first_batch_incomplete
    assert res.incomplete_batch_size == 2**31 - 1 + 12


def test_unknown_magic():
    for magic in (3, 7, 0xFF):
        blob = bytearray(BASE)
        blob[16] = magic
        with pytest.raises(CorruptRecordError):
            decode_both(bytes(blob))


# ----------------------------------------------------------------------------- lengths
@pytest.mark.parametrize("body,error", [
    # attributes, ts delta, offset delta, key length, ...
    (b"\x00\x00\x00" + ref_varint(2**31 - 1) + b"k", InvalidRecordLengthError),
    (b"\x00\x00\x00" + ref_varint(-2) + ref_varint(1) + b"v\x00", InvalidRecordLengthError),
    (b"\x00\x00\x00\x01" + ref_varint(2**31 - 1) + b"v", InvalidRecordLengthError),
    (b"\x00\x00\x00\x01" + ref_varint(-7), InvalidRecordLengthError),
    (b"\x00\x00\x00\x01\x00" + ref_varint(2**31 - 1), InvalidRecordLengthError),      # headers
    (b"\x00\x00\x00\x01\x00" + ref_varint(-1), InvalidRecordLengthError),
    (b"\x00\x00\x00\x01\x00\x02" + ref_varint(-1) + b"\x00", InvalidRecordLengthError),  # null hkey
    (b"\x00\x00\x00\x01\x00\x02" + ref_varint(100) + b"ab\x00", InvalidRecordLengthError),
    (b"\x00\x00\x00\x01\x00\x02\x02h" + ref_varint(-3), InvalidRecordLengthError),
    (b"\x00\x00\x00\x01\x00\x02\x02h" + ref_varint(2**31 - 1), InvalidRecordLengthError),
    (b"\x00\x00\x00\x01\x00\x00\x99", CorruptRecordError),   # bytes after the headers
    (b"\x00", CorruptRecordError),                           # fields missing
    (b"", CorruptRecordError),                               # empty record
])
def test_bad_lengths_inside_a_record(body, error):
    # padded so the batch passes the "at least 7 bytes per record" pre-check
    with pytest.raises(error):
        decode_both(batch_with(record(body + b"\x00\x00\x00"), count=1))
    with pytest.raises(CorruptRecordError):
        decode_both(batch_with(record(body), count=1))


def test_record_length_varint_out_of_range():
    with pytest.raises(InvalidRecordLengthError):
        decode_both(batch_with(ref_varint(-1) + b"\x00" * 10, count=1))
    with pytest.raises(InvalidRecordLengthError):
        decode_both(batch_with(ref_varint(2**31 - 1) + b"\x00" * 10, count=1))


def test_record_count_mismatch():
    region = region_of(BASE)
    for count in (7, 8, 100, 2**31 - 1):
        with pytest.raises(CorruptRecordError):
            decode_both(batch_with(region, count=count))
    for count in (0, 1, 5):
        with pytest.raises(CorruptRecordError):          # records left over
            decode_both(batch_with(region, count=count))
    with pytest.raises(InvalidRecordLengthError):
        decode_both(batch_with(region, count=-1))


# ----------------------------------------------------------------------------- varints
@pytest.mark.parametrize("where", range(5))
def test_overlong_varints(where):
    fields = [b"\x00", b"\x00", b"\x02k", b"\x02v", b"\x00"]   # ts, offset, key, value, headers
    if where == 0:
        fields[0] = b"\xff" * 10 + b"\x01"                       # varlong longer than 10 bytes
    else:
        fields[where] = b"\x80\x80\x80\x80\x80\x01" + fields[where][1:]
    with pytest.raises(RecordVarintError):
        decode_both(batch_with(record(b"\x00" + b"".join(fields)), count=1))
    assert issubclass(RecordVarintError, CorruptRecordError)


def test_overlong_record_length_varint():
    with pytest.raises(RecordVarintError):
        decode_both(batch_with(b"\xff\xff\xff\xff\xff\x01" + b"\x00" * 20, count=1))


@pytest.mark.parametrize("where", range(5))
def test_varints_with_bits_beyond_their_type(where):
    # Longest allowed length, but the last byte carries bits an int32 (5th byte > 0x0f) or
    # int64 (10th byte > 0x01) cannot hold: rejected, not truncated to a different value.
    fields = [b"\x00", b"\x00", b"\x02k", b"\x02v", b"\x00"]   # ts, offset, key, value, headers
    if where == 0:
        fields[0] = b"\x80" * 9 + b"\x02"
    else:
        fields[where] = b"\x80\x80\x80\x80\x10" + fields[where][1:]
    with pytest.raises(RecordVarintError):
        decode_both(batch_with(record(b"\x00" + b"".join(fields)), count=1))


# ----------------------------------------------------------------------------- CRC
def test_crc_mismatch_v2_and_legacy():
    for i in (21, 30, 61, len(BASE) - 1):
        bad = bytearray(BASE)
        bad[i] ^= 0x01
        with pytest.raises(CrcMismatchError):
            decode_both(bytes(bad))
    bad = bytearray(BASE)
    bad[17] ^= 0x80
    with pytest.raises(CrcMismatchError):
        decode_both(bytes(bad))
    assert len(decode_both(bytes(bad), check_crcs=False).records) == 6
    msg = bytearray(ref_legacy_message(0, 1, b"k", b"v", timestamp=1))
    msg[-1] ^= 1
    with pytest.raises(CrcMismatchError):
        decode_both(bytes(msg))
    inner = bytearray(ref_legacy_message(0, 1, b"k", b"v", timestamp=1))
    inner[-1] ^= 1
    wrapper = ref_legacy_message(0, 1, None, gzip.compress(bytes(inner)), attributes=1,
                                 timestamp=1)
    with pytest.raises(CrcMismatchError):
        decode_both(wrapper)


# ----------------------------------------------------------------------------- legacy
def test_legacy_hostile_fields():
    def msg_raw(magic, body_after_attrs, attrs=0):
        body = struct.pack(">bb", magic, attrs) + body_after_attrs
        m = struct.pack(">I", zlib.crc32(body)) + body
        return struct.pack(">qi", 0, len(m)) + m
    with pytest.raises(InvalidRecordLengthError):
        decode_both(msg_raw(0, struct.pack(">i", 2**31 - 1) + b"k" + struct.pack(">i", -1)))
    with pytest.raises(InvalidRecordLengthError):
        decode_both(msg_raw(0, struct.pack(">ii", -1, -5)))
    with pytest.raises(CorruptRecordError):
        decode_both(msg_raw(0, struct.pack(">ii", -1, -1) + b"extra"))
    with pytest.raises(CorruptRecordError):
        decode_both(msg_raw(1, struct.pack(">ii", -1, -1)))   # v1 without room for the timestamp
    with pytest.raises(CorruptRecordError):                   # compressed wrapper, null value
        decode_both(ref_legacy_message(0, 1, None, None, attributes=1, timestamp=1))
    nested = ref_legacy_message(0, 1, None, gzip.compress(
        ref_legacy_message(0, 1, None, b"x", timestamp=1)), attributes=1, timestamp=1)
    with pytest.raises(CorruptRecordError):                   # compression inside compression
        decode_both(ref_legacy_message(0, 1, None, gzip.compress(nested),
                                       attributes=1, timestamp=1))
    truncated_inner = ref_legacy_message(0, 1, None, b"abcdef", timestamp=1)[:-3]
    with pytest.raises(CorruptRecordError):
        decode_both(ref_legacy_message(0, 1, None, gzip.compress(truncated_inner),
                                       attributes=1, timestamp=1))
    with pytest.raises(CorruptRecordError):                   # wrapper around nothing
        decode_both(ref_legacy_message(0, 1, None, gzip.compress(b""),
                                       attributes=1, timestamp=1))


def test_control_batch_with_short_key():
    blob = R.encode_batch([(None, 1, b"\x00", b"", [])], control=True, producer_id=1,
                          transactional=True)
    with pytest.raises(CorruptRecordError):
        decode_both(blob)


# ----------------------------------------------------------------------------- compression
def test_garbage_compressed_region():
    for codec in (1, 2, 3, 4):
        with pytest.raises(DecompressionError):
            decode_both(batch_with(b"\x00garbage\xff" * 20, count=1, codec=codec))


def test_compressed_region_with_bad_records():
    region = region_of(BASE)
    for codec in (1, 2, 3, 4):
        from test_records import ref_compress
        with pytest.raises(CorruptRecordError):
            decode_both(batch_with(ref_compress(codec, region[:-3]), count=6, codec=codec))
        with pytest.raises(CorruptRecordError):
            decode_both(batch_with(ref_compress(codec, region), count=9, codec=codec))


def _zstd_zeros(mib: int) -> bytes:
    c = cramjam.zstd.Compressor(level=1)
    chunk = bytes(1 << 20)
    for _ in range(mib):
        c.compress(chunk)
    return bytes(c.finish())        # streamed: no content-size field to give the game away


def _lz4_zeros(mib: int) -> bytes:
    c = cramjam.lz4.Compressor(block_linked=False)
    chunk = bytes(1 << 20)
    for _ in range(mib):
        c.compress(chunk)
    return bytes(c.finish())


def _gzip_zeros(mib: int) -> bytes:
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    return b"".join([co.compress(chunk) for _ in range(mib)] + [co.flush()])


@pytest.mark.parametrize("codec,payload_fn", [(4, _zstd_zeros), (3, _lz4_zeros),
                                              (1, _gzip_zeros)])
def test_decompression_bomb_in_a_batch(codec, payload_fn):
    payload = payload_fn(16)                                   # 16 MiB of zeros
    blob = batch_with(payload, count=1, codec=codec)
    with pytest.raises(DecompressionLimitError):
        decode_both(blob, max_decompressed_bytes=1 << 20)
    with pytest.raises(DecompressionLimitError):
        decode_both(blob, max_decompressed_bytes=(16 << 20) - 1)
    # within the bound, the zeros are decompressed and then rejected as records
    with pytest.raises(CorruptRecordError) as ei:
        decode_both(blob, max_decompressed_bytes=16 << 20)
    assert not isinstance(ei.value, DecompressionError)


def test_bomb_does_not_allocate_the_expanded_size():
    payload = _zstd_zeros(1024)                                 # 1 GiB of zeros in ~32 KB
    assert len(payload) < 64 << 10
    blob = batch_with(payload, count=1, codec=4)
    proc = psutil.Process()
    gc.collect()
    before = proc.memory_info().rss
    peak = [before]
    stop = threading.Event()

    def sample():                 # decompression releases the GIL, so this keeps sampling
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            stop.wait(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for fn in (R.decode_records, R.decode_columnar):
            for _ in range(3):
                with pytest.raises(DecompressionLimitError):
                    fn(blob)                                   # default bound: 64 MiB
    finally:
        stop.set()
        sampler.join()
    grew = peak[0] - before
    assert grew < 200 << 20, f"RSS peaked {grew >> 20} MiB above the start for a 1 GiB bomb"


def test_snappy_bomb_declared_in_preamble():
    raw = bytes(cramjam.snappy.compress_raw(b"\x00" * 1000))
    fake = ref_varint_u(3 << 30) + raw[2:]                    # preamble replaced: claims 3 GiB
    with pytest.raises(DecompressionLimitError):
        decode_both(batch_with(fake, count=1, codec=2))


def ref_varint_u(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def test_negative_bound_rejected():
    with pytest.raises(ValueError):
        R.decode_records(BASE, max_decompressed_bytes=-1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect through ctypes, as on Linux")
def test_records_that_end_against_an_unreadable_page_decode_without_touching_it():
    """The scan reads ahead of the record it is on (prefetch hints for the records to come):
    a batch whose last byte is the last readable byte of memory decodes as usual, and
    malformed variants of it raise as usual, without the process faulting on the page after."""
    import ctypes
    import mmap
    page = mmap.PAGESIZE
    batch = R.encode_batch([(None, 1000 + i, None, b"v" * (i % 50)) for i in range(40)], base_offset=7)
    truncated = batch_with(region_of(batch)[:-3], count=40)
    region = mmap.mmap(-1, 2 * page + len(batch) // page * page + page)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    guard = len(region) - page
    assert libc.mprotect(base + guard, page, 0) == 0  # PROT_NONE, ctypes.get_errno()
    try:
        view = memoryview(region)
        for blob in (batch, truncated):
            start = guard - len(blob)
            view[start:guard] = blob
            data = view[start:guard]
            if blob is batch:
                cols = R.decode_columnar(data)
                assert len(cols) == 40 and list(cols.offsets) == list(range(7, 47))
                assert [r.offset for r in R.decode_records(data)] == list(range(7, 47))
            else:
                with pytest.raises(KafkaError):
                    R.decode_columnar(data)
        del data, cols, view
        gc.collect()
    finally:
        libc.mprotect(base + guard, page, mmap.PROT_READ | mmap.PROT_WRITE)
    region.close()
