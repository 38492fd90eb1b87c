"""kcore.records: CRC32C, RecordBatch v2 and legacy v0/v1 decode/encode, columnar output.

The reference implementations below (ref_*) are plain Python written from the Kafka protocol
documentation, independent of kcore: they decode what kcore encodes and encode what kcore
decodes, so a bug shared by kcore's encoder and decoder still shows.  Other test modules
import them (`from test_records import ...`).
"""
from __future__ import annotations

import gzip
import os
import pickle
import random
import struct
import sys
import threading
import zlib

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kclient.errors import CorruptRecordError, CrcMismatchError, KafkaError
from kcore import records as R

# ============================================================================ reference code
_CRC32C_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def ref_crc32c(data: bytes, crc: int = 0) -> int:
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC32C_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def ref_varint(value: int) -> bytes:
    """Zigzag varint (Kafka's signed varint/varlong encoding)."""
    u = (value << 1) ^ (value >> 63)
    u &= (1 << 64) - 1
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def ref_read_varint(buf: bytes, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    shift = 0
    u = 0
    for _ in range(max_bytes):
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if not b & 0x80:
            return (u >> 1) ^ -(u & 1), pos
        shift += 7
    raise ValueError("varint too long")


def ref_xerial(data: bytes) -> bytes:
    out = [b"\x82SNAPPY\x00", struct.pack(">ii", 1, 1)]
    for i in range(0, len(data), 32 * 1024):
        block = bytes(cramjam.snappy.compress_raw(data[i:i + 32 * 1024]))
        out.append(struct.pack(">i", len(block)) + block)
    return b"".join(out)


def ref_compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.compress(data)
    if codec == 2:
        return ref_xerial(data)
    if codec == 3:
        c = cramjam.lz4.Compressor(block_linked=False)
        c.compress(data)
        return bytes(c.finish())
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(codec)


def ref_decompress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.decompress(data)
    if codec == 2:
        if data[:8] == b"\x82SNAPPY\x00":
            out, pos = [], 16
            while pos < len(data):
                (n,) = struct.unpack_from(">i", data, pos)
                out.append(bytes(cramjam.snappy.decompress_raw(data[pos + 4:pos + 4 + n])))
                pos += 4 + n
            return b"".join(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.decompress(data))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(codec)


def ref_record(offset_delta: int, ts_delta: int, key, value, headers) -> bytes:
    body = bytearray(b"\x00")                       # attributes
    body += ref_varint(ts_delta) + ref_varint(offset_delta)
    body += ref_varint(-1) if key is None else ref_varint(len(key)) + key
    body += ref_varint(-1) if value is None else ref_varint(len(value)) + value
    body += ref_varint(len(headers))
    for hk, hv in headers:
        hkb = hk.encode()
        body += ref_varint(len(hkb)) + hkb
        body += ref_varint(-1) if hv is None else ref_varint(len(hv)) + hv
    return ref_varint(len(body)) + bytes(body)


def ref_encode_batch(records, *, base_offset=0, codec=0, timestamp_type=0, producer_id=-1,
                     producer_epoch=-1, base_sequence=-1, transactional=False, control=False,
                     partition_leader_epoch=-1, base_timestamp=None, max_timestamp=None,
                     last_offset_delta=None) -> bytes:
    """records: [(offset_delta|None, timestamp, key, value, headers)]."""
    if base_timestamp is None:
        base_timestamp = records[0][1] if records else -1
    body = b""
    deltas = []
    for i, (od, ts, k, v, h) in enumerate(records):
        od = i if od is None else od
        deltas.append(od)
        body += ref_record(od, ts - base_timestamp, k, v, h or [])
    if max_timestamp is None:
        max_timestamp = max((r[1] for r in records), default=-1)
    if last_offset_delta is None:
        last_offset_delta = deltas[-1] if deltas else 0
    payload = ref_compress(codec, body)
    attrs = codec | (timestamp_type << 3) | (int(transactional) << 4) | (int(control) << 5)
    after_crc = struct.pack(">hiqqqhii", attrs, last_offset_delta, base_timestamp,
                            max_timestamp, producer_id, producer_epoch, base_sequence,
                            len(records)) + payload
    crc = ref_crc32c(after_crc)
    head = struct.pack(">iBI", partition_leader_epoch, 2, crc)
    return struct.pack(">qi", base_offset, len(head) + len(after_crc)) + head + after_crc


def ref_legacy_message(offset: int, magic: int, key, value, *, attributes=0,
                       timestamp=None) -> bytes:
    """One v0/v1 message: offset, size, crc32, magic, attributes, [timestamp], key, value."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += struct.pack(">i", -1) if key is None else struct.pack(">i", len(key)) + key
    body += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    msg = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(msg)) + msg


def ref_decode(data: bytes) -> tuple[list[dict], list[tuple]]:
    """Plain-Python decoder: (batches, records); stops at a partial trailing entry."""
    batches, records = [], []
    pos = 0
    while len(data) - pos >= 12:
        base_offset, length = struct.unpack_from(">qi", data, pos)
        if 12 + length > len(data) - pos:
            break
        magic = data[pos + 16]
        end = pos + 12 + length
        if magic == 2:
            (ple, _m, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq,
             count) = struct.unpack_from(">iBIhiqqqhii", data, pos + 12)
            assert ref_crc32c(data[pos + 21:end]) == crc
            codec = attrs & 7
            ts_type = (attrs >> 3) & 1
            control = bool(attrs & 0x20)
            region = ref_decompress(codec, data[pos + 61:end])
            batches.append(dict(base_offset=base_offset, last_offset=base_offset + lod,
                                producer_id=pid, producer_epoch=pepoch,
                                base_sequence=bseq, transactional=bool(attrs & 0x10),
                                control=control, codec=codec, count=count,
                                leader_epoch=ple, first_timestamp=base_ts,
                                max_timestamp=max_ts, timestamp_type=ts_type))
            p = 0
            for _ in range(count):
                ln, p = ref_read_varint(region, p)
                rend = p + ln
                p += 1
                tsd, p = ref_read_varint(region, p, 10)
                od, p = ref_read_varint(region, p)
                kl, p = ref_read_varint(region, p)
                key = None if kl < 0 else region[p:p + kl]
                p += max(kl, 0)
                vl, p = ref_read_varint(region, p)
                value = None if vl < 0 else region[p:p + vl]
                p += max(vl, 0)
                hc, p = ref_read_varint(region, p)
                headers = []
                for _ in range(hc):
                    hkl, p = ref_read_varint(region, p)
                    hk = region[p:p + hkl].decode()
                    p += hkl
                    hvl, p = ref_read_varint(region, p)
                    hv = None if hvl < 0 else region[p:p + hvl]
                    p += max(hvl, 0)
                    headers.append((hk, hv))
                assert p == rend
                ts = max_ts if ts_type == 1 else base_ts + tsd
                records.append((base_offset + od, ts, ts_type, key, value, headers, ple, pid,
                                control))
            assert p == len(region)
        else:
            crc, = struct.unpack_from(">I", data, pos + 12)
            assert zlib.crc32(data[pos + 16:end]) == crc
            attrs = data[pos + 17]
            q = pos + 18
            ts = -1
            if magic == 1:
                ts, = struct.unpack_from(">q", data, q)
                q += 8
            kl, = struct.unpack_from(">i", data, q)
            key = None if kl < 0 else data[q + 4:q + 4 + kl]
            q += 4 + max(kl, 0)
            vl, = struct.unpack_from(">i", data, q)
            value = None if vl < 0 else data[q + 4:q + 4 + vl]
            ts_type = ((attrs >> 3) & 1) if magic else -1
            if attrs & 7:
                _b, inner = ref_decode(ref_decompress(attrs & 7, value))
                last_rel = inner[-1][0]
                for r in inner:
                    off = base_offset - last_rel + r[0] if magic else r[0]
                    rts = ts if (magic and ts_type == 1) else r[1]
                    records.append((off, rts, ts_type if magic else -1) + r[3:])
            else:
                records.append((base_offset, ts, ts_type, key, value, [], -1, -1, False))
            batches.append(dict(base_offset=base_offset, last_offset=base_offset, magic=magic))
        pos = end
    return batches, records


def as_tuple(r: R.Record) -> tuple:
    return (r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers,
            r.leader_epoch, r.producer_id, r.is_control)


def columnar_rows(cb: R.ColumnarBatch) -> list[tuple]:
    """Rebuild (offset, timestamp, timestamp_type, key, value, headers) from the buffers."""
    data = bytes(cb.data)
    off, ts, tt = cb.offsets.tolist(), cb.timestamps.tolist(), cb.timestamp_types.tolist()
    kp, kl = cb.key_offsets.tolist(), cb.key_lengths.tolist()
    vp, vl = cb.value_offsets.tolist(), cb.value_lengths.tolist()
    hs = cb.header_starts.tolist()
    hkp, hkl = cb.header_key_offsets.tolist(), cb.header_key_lengths.tolist()
    hvp, hvl = cb.header_value_offsets.tolist(), cb.header_value_lengths.tolist()
    assert len(hs) == cb.num_records + 1 and hs[0] == 0 and hs[-1] == cb.num_headers
    rows = []
    for i in range(cb.num_records):
        headers = [(data[hkp[j]:hkp[j] + hkl[j]].decode(),
                    None if hvl[j] < 0 else data[hvp[j]:hvp[j] + hvl[j]])
                   for j in range(hs[i], hs[i + 1])]
        rows.append((off[i], ts[i], tt[i], None if kl[i] < 0 else data[kp[i]:kp[i] + kl[i]],
                     None if vl[i] < 0 else data[vp[i]:vp[i] + vl[i]], headers))
    return rows


def arrow_rows(cb: R.ColumnarBatch, binary_view=False) -> list[tuple]:
    rb = cb.to_arrow(binary_view=binary_view)
    rb.validate(full=True)
    cols = rb.to_pydict()
    return [(cols["offset"][i], cols["timestamp"][i], cols["key"][i], cols["value"][i],
             [(h["key"], h["value"]) for h in cols["headers"][i]])
            for i in range(rb.num_rows)]


# ============================================================================ CRC32C
# RFC 3720 (iSCSI) appendix B.4 test vectors and the common "123456789" check value.
CRC32C_VECTORS = [
    (b"", 0x00000000),
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


@pytest.mark.parametrize("data,expected", CRC32C_VECTORS)
def test_crc32c_known_vectors(data, expected):
    assert R.crc32c(data) == expected
    assert R.crc32c_sw(data) == expected
    assert ref_crc32c(data) == expected
    if R.CRC32C_HARDWARE:
        assert R.crc32c_hw(data) == expected


def test_crc32c_hardware_and_table_agree_on_random_data():
    if not R.CRC32C_HARDWARE:
        pytest.skip("no SSE4.2 on this CPU: only the table path exists")
    rng = random.Random(1234)
    blob = rng.randbytes(200_000)
    # every alignment and the boundaries of the 3-way split (768 = 3 * 256, 24576 = 3 * 8192)
    sizes = [0, 1, 7, 8, 9, 15, 16, 255, 256, 767, 768, 769, 1535, 1536, 24575, 24576, 24577,
             49152, 73729, 199_990]
    for n in sizes:
        for off in range(9):
            chunk = blob[off:off + n]
            assert R.crc32c_hw(chunk) == R.crc32c_sw(chunk), (n, off)
    for _ in range(300):
        n = rng.randrange(0, 100_000)
        off = rng.randrange(0, 64)
        chunk = blob[off:off + n]
        assert R.crc32c_hw(chunk) == R.crc32c_sw(chunk)


def test_crc32c_matches_reference_and_chains():
    rng = random.Random(5)
    for n in (1, 5, 64, 1000, 4099):
        data = rng.randbytes(n)
        assert R.crc32c(data) == ref_crc32c(data)
        cut = n // 3
        assert R.crc32c(data[cut:], R.crc32c(data[:cut])) == R.crc32c(data)
        assert R.crc32c_sw(data[cut:], R.crc32c_sw(data[:cut])) == R.crc32c(data)
    # accepts any contiguous buffer
    assert R.crc32c(bytearray(b"123456789")) == 0xE3069283
    assert R.crc32c(memoryview(b"xx123456789")[2:]) == 0xE3069283


def test_crc32_ieee_matches_zlib():
    rng = random.Random(9)
    for n in (0, 1, 3, 8, 100, 10_000, 65_537):
        data = rng.randbytes(n)
        assert R.crc32_ieee(data) == zlib.crc32(data)
        assert R.crc32_ieee(data[n // 2:], R.crc32_ieee(data[:n // 2])) == zlib.crc32(data)


# ============================================================================ known vectors
# One uncompressed v2 batch with one record, assembled by hand field by field.
KNOWN_V2 = bytes.fromhex(
    "0000000000000005"      # baseOffset = 5
    "0000003e"              # batchLength = 62 (bytes after this field)
    "00000007"              # partitionLeaderEpoch = 7
    "02"                    # magic = 2
    "7cab2e54"              # CRC32C of everything from attributes to the end
    "0000"                  # attributes: codec none, CreateTime, not transactional/control
    "00000000"              # lastOffsetDelta = 0
    "0000018bcfe56800"      # baseTimestamp = 1700000000000
    "0000018bcfe56800"      # maxTimestamp = 1700000000000
    "0000000000000009"      # producerId = 9
    "0003"                  # producerEpoch = 3
    "0000000b"              # baseSequence = 11
    "00000001"              # record count = 1
    "18"                    # record length = 12 (zigzag varint)
    "00"                    # record attributes
    "00"                    # timestampDelta = 0
    "00"                    # offsetDelta = 0
    "02" "6b"               # key length 1, key "k"
    "04" "7631"             # value length 2, value "v1"
    "02"                    # header count = 1
    "02" "68"               # header key length 1, key "h"
    "01"                    # header value length -1 (null)
)


def test_known_v2_batch_vector():
    assert ref_crc32c(KNOWN_V2[21:]) == 0x7CAB2E54
    res = R.decode_records(KNOWN_V2)
    assert len(res.records) == 1
    r = res.records[0]
    assert (r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers) == \
        (5, 1700000000000, 0, b"k", b"v1", [("h", None)])
    assert (r.leader_epoch, r.producer_id, r.producer_epoch, r.is_transactional,
            r.is_control, r.control_type) == (7, 9, 3, False, False, -1)
    (b,) = res.batches
    assert (b.base_offset, b.last_offset, b.partition_leader_epoch, b.magic, b.crc,
            b.attributes, b.codec, b.producer_id, b.producer_epoch, b.base_sequence,
            b.record_count, b.first_timestamp, b.max_timestamp, b.size_in_bytes) == \
        (5, 5, 7, 2, 0x7CAB2E54, 0, 0, 9, 3, 11, 1, 1700000000000, 1700000000000, 74)
    assert res.next_offset == 6 and res.partial_trailing_bytes == 0
    assert res.bytes_consumed == len(KNOWN_V2)
    out = R.encode_batch([(0, 1700000000000, b"k", b"v1", [("h", None)])], base_offset=5,
                         partition_leader_epoch=7, producer_id=9, producer_epoch=3,
                         base_sequence=11)
    assert out == KNOWN_V2


# Legacy v0 message (offset 3, key "k", value "v0") and v1 message (timestamp 1000).
KNOWN_V0 = bytes.fromhex(
    "0000000000000003"      # offset
    "00000011"              # message size = 17
    "165764b1"              # CRC32 (IEEE) of magic..end
    "00"                    # magic 0
    "00"                    # attributes
    "00000001" "6b"         # key length 1, "k"
    "00000002" "7630"       # value length 2, "v0"
)
KNOWN_V1 = bytes.fromhex(
    "0000000000000004"      # offset
    "00000018"              # message size = 24
    "b790ad74"              # CRC32 (IEEE)
    "01"                    # magic 1
    "00"                    # attributes: CreateTime
    "00000000000003e8"      # timestamp 1000
    "ffffffff"              # null key
    "00000002" "7631"       # value "v1"
)


def test_known_legacy_vectors():
    assert KNOWN_V0 == ref_legacy_message(3, 0, b"k", b"v0")
    assert KNOWN_V1 == ref_legacy_message(4, 1, None, b"v1", timestamp=1000)
    res = R.decode_records(KNOWN_V0 + KNOWN_V1)
    assert [as_tuple(r) for r in res.records] == [
        (3, -1, -1, b"k", b"v0", [], -1, -1, False),
        (4, 1000, 0, None, b"v1", [], -1, -1, False),
    ]
    assert [(b.magic, b.base_offset, b.last_offset, b.crc) for b in res.batches] == [
        (0, 3, 3, 0x165764B1), (1, 4, 4, 0xB790AD74)]
    assert res.next_offset == 5
    cb = R.decode_columnar(KNOWN_V0 + KNOWN_V1)
    assert cb.zero_copy
    assert columnar_rows(cb) == [(3, -1, -1, b"k", b"v0", []), (4, 1000, 0, None, b"v1", [])]


@pytest.mark.parametrize("codec", [1, 2, 3])
@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_compressed_wrappers(codec, magic):
    # v1 inner messages carry relative offsets 0..n-1; v0 inner messages absolute ones.
    n = 5
    base = 100
    inner = b"".join(
        ref_legacy_message(i if magic else base + i, magic, b"k%d" % i, b"value-%d" % i * 20,
                           timestamp=2000 + i)
        for i in range(n))
    wrapped = ref_compress(codec, inner)
    if codec == 3 and magic == 0:
        # Producers of format v0 computed the lz4 header checksum over the magic too
        # (KAFKA-3160): reproduce that bug; the decoder must repair it.
        hdr = bytearray(wrapped)
        hdr[6] = (hdr[6] + 1) & 0xFF
        wrapped = bytes(hdr)
    outer = ref_legacy_message(base + n - 1, magic, None, wrapped, attributes=codec,
                               timestamp=5000)
    tail = ref_legacy_message(base + n, magic, b"plain", b"after", timestamp=6000)
    res = R.decode_records(outer + tail)
    got = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value) for r in res.records]
    ts_type = 0 if magic else -1
    want = [(base + i, (2000 + i) if magic else -1, ts_type, b"k%d" % i, b"value-%d" % i * 20)
            for i in range(n)]
    want.append((base + n, 6000 if magic else -1, ts_type, b"plain", b"after"))
    assert got == want
    assert [(b.base_offset, b.last_offset, b.codec, b.record_count)
            for b in res.batches] == [(base, base + n - 1, codec, n), (base + n, base + n, 0, 1)]
    cb = R.decode_columnar(outer + tail)
    assert not cb.zero_copy
    assert [row[:5] for row in columnar_rows(cb)] == want


def test_legacy_v1_log_append_time_wrapper():
    inner = b"".join(ref_legacy_message(i, 1, None, b"x%d" % i, timestamp=10 + i)
                     for i in range(3))
    outer = ref_legacy_message(52, 1, None, gzip.compress(inner), attributes=1 | 0x08,
                               timestamp=99999)
    res = R.decode_records(outer)
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in res.records] == [
        (50, 99999, 1), (51, 99999, 1), (52, 99999, 1)]


def test_upgrade_mixture_of_legacy_and_v2():
    data = (KNOWN_V0 + KNOWN_V1
            + R.encode_batch([(None, 10, b"a", b"b", [])], base_offset=5)
            + R.encode_batch([(None, 11, b"c", b"d", [])], base_offset=6, codec=4))
    res = R.decode_records(data)
    assert [r.offset for r in res.records] == [3, 4, 5, 6]
    assert [b.magic for b in res.batches] == [0, 1, 2, 2]
    cb = R.decode_columnar(data)
    assert not cb.zero_copy
    assert [row[:5] for row in columnar_rows(cb)] == [
        (r.offset, r.timestamp, r.timestamp_type, r.key, r.value) for r in res.records]


# ============================================================================ round trips
header_st = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))
record_st = st.tuples(
    st.integers(-2**40, 2**40),                                        # timestamp delta
    st.one_of(st.none(), st.binary(max_size=40)),                      # key
    st.one_of(st.none(), st.binary(max_size=300),
              st.builds(lambda n, b: b * n, st.integers(1000, 20000), st.binary(min_size=1, max_size=4))),
    st.lists(header_st, max_size=4),
)


def _records_from(draw_list, base_ts=1_700_000_000_000):
    return [(None, base_ts + d, k, v, h) for d, k, v, h in draw_list]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_st, min_size=1, max_size=12), st.sampled_from([0, 1, 2, 3, 4]),
       st.integers(0, 2**40), st.booleans())
def test_roundtrip_against_reference(recs, codec, base_offset, txn):
    records = _records_from(recs)
    kw = dict(base_offset=base_offset, codec=codec, transactional=txn, producer_id=77 if txn else -1,
              producer_epoch=1 if txn else -1, base_sequence=5 if txn else -1,
              partition_leader_epoch=3)
    ours = R.encode_batch(records, **kw)
    theirs = ref_encode_batch(records, **kw)
    if codec == 0:
        assert ours == theirs
    want = [(base_offset + i, ts, 0, k, v, list(h), 3, kw["producer_id"], False)
            for i, (_, ts, k, v, h) in enumerate(records)]
    for blob in (ours, theirs):
        res = R.decode_records(blob)
        assert [as_tuple(r) for r in res.records] == want
        assert res.next_offset == base_offset + len(records)
        assert all(r.is_transactional == txn for r in res.records)
        cb = R.decode_columnar(blob)
        assert columnar_rows(cb) == [w[:6] for w in want]
        assert cb.zero_copy == (codec == 0)
    _b, ref_recs = ref_decode(ours)
    assert ref_recs == want


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(record_st, min_size=1, max_size=5), min_size=1, max_size=6),
       st.lists(st.sampled_from([0, 1, 2, 3, 4]), min_size=6, max_size=6))
def test_many_batches_columnar_and_arrow_equal_per_record(batches, codecs):
    blobs, base = [], 0
    for i, recs in enumerate(batches):
        blobs.append(R.encode_batch(_records_from(recs), base_offset=base, codec=codecs[i]))
        base += len(recs)
    data = b"".join(blobs)
    res = R.decode_records(data)
    per_record = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
                  for r in res.records]
    cb = R.decode_columnar(data)
    assert columnar_rows(cb) == per_record
    assert [(b.record_start, b.record_end) for b in cb.batches] == \
        [(b.record_start, b.record_end) for b in res.batches]
    want_arrow = [(o, t, k, v, h) for o, t, _tt, k, v, h in per_record]
    assert arrow_rows(cb) == want_arrow
    assert arrow_rows(cb, binary_view=True) == want_arrow


def test_large_values_and_empty_values_every_codec():
    big = os.urandom(100) * 5000              # 500 KB, compressible
    records = [(None, 1, None, b"", []), (None, 2, b"", None, [("e", b"")]),
               (None, 3, b"k", big, [("h", None)]), (None, 4, None, big[:70_000], [])]
    for codec in range(5):
        blob = R.encode_batch(records, codec=codec)
        res = R.decode_records(blob)
        assert [(r.key, r.value, r.headers) for r in res.records] == \
            [(k, v, h) for _, _, k, v, h in records]
        assert columnar_rows(R.decode_columnar(blob))[2][4] == big


def test_memoryview_slice_input_and_zero_copy_columnar():
    blob = R.encode_batch([(None, 5, b"key", b"value", [])])
    frame = b"\x00" * 7 + blob + b"\xff" * 3
    view = memoryview(frame)[7:7 + len(blob)]
    assert [as_tuple(r) for r in R.decode_records(view).records] == \
        [as_tuple(r) for r in R.decode_records(blob).records]
    cb = R.decode_columnar(view)
    assert cb.zero_copy and cb.data.obj is not None
    assert bytes(cb.data) == blob                          # positions index the input itself
    (kp,), (kl,) = cb.key_offsets.tolist(), cb.key_lengths.tolist()
    assert blob[kp:kp + kl] == b"key"


def test_numpy_frombuffer_on_columnar_arrays():
    np = pytest.importorskip("numpy")
    blob = R.encode_batch([(None, 100 + i, None, b"v%d" % i, []) for i in range(50)],
                          base_offset=1000)
    cb = R.decode_columnar(blob)
    offsets = np.frombuffer(cb.offsets, dtype=np.int64)
    assert offsets.tolist() == list(range(1000, 1050))
    assert np.asarray(cb.timestamps).dtype == np.int64
    assert np.asarray(cb.value_lengths).dtype == np.int32
    assert np.asarray(cb.timestamp_types).dtype == np.int8
    assert not offsets.flags.writeable
    with pytest.raises(ValueError):
        offsets[0] = 1                                    # the buffers are read-only


def test_empty_input_and_none():
    for data in (b"", None, memoryview(b"")):
        res = R.decode_records(data)
        assert (res.records, res.batches, res.next_offset, res.partial_trailing_bytes) == \
            ([], [], -1, 0)
        cb = R.decode_columnar(data)
        assert cb.num_records == 0 and cb.header_starts.tolist() == [0]
        assert cb.to_arrow().num_rows == 0


# ============================================================================ partial batches
def test_partial_trailing_batch_is_not_an_error():
    b1 = R.encode_batch([(None, 1, b"a", b"1", [])], base_offset=0)
    b2 = R.encode_batch([(None, 2, b"b", b"2", []), (None, 3, b"c", b"3", [])], base_offset=1)
    for cut in range(1, len(b2)):
        res = R.decode_records(b1 + b2[:cut])
        assert [r.offset for r in res.records] == [0]
        assert res.partial_trailing_bytes == cut
        assert res.next_offset == 1 and res.bytes_consumed == len(b1)
        assert not res.first_batch_incomplete
        assert res.incomplete_batch_size == (len(b2) if cut >= 12 else -1)
        cb = R.decode_columnar(b1 + b2[:cut])
        assert cb.num_records == 1 and cb.partial_trailing_bytes == cut


def test_first_batch_incomplete_reports_needed_size():
    b = R.encode_batch([(None, 1, None, os.urandom(5000), [])])
    res = R.decode_records(b[:1000])
    assert res.records == [] and res.first_batch_incomplete
    assert res.incomplete_batch_size == len(b) and res.next_offset == -1


# ============================================================================ control / txn
def _control_batch(base_offset, pid, control_type):
    key, value = R.control_record(control_type, coordinator_epoch=4)
    return R.encode_batch([(None, 10, key, value, [])], base_offset=base_offset,
                          producer_id=pid, producer_epoch=0, transactional=True, control=True)


def test_control_records_recognised():
    assert R.control_record(1, 4) == (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x04")
    data = (R.encode_batch([(None, 1, None, b"x", [])], producer_id=5, producer_epoch=0,
                           transactional=True)
            + _control_batch(1, 5, R.CONTROL_COMMIT) + _control_batch(2, 6, R.CONTROL_ABORT))
    res = R.decode_records(data)
    assert [(r.offset, r.is_control, r.control_type) for r in res.records] == [
        (0, False, -1), (1, True, 1), (2, True, 0)]
    assert [(b.is_control, b.control_type) for b in res.batches] == [
        (False, -1), (True, 1), (True, 0)]
    skipped = R.decode_records(data, skip_control=True)
    assert [r.offset for r in skipped.records] == [0]
    assert len(skipped.batches) == 3 and skipped.next_offset == 3
    assert R.decode_columnar(data).num_records == 1           # columnar skips by default
    assert R.decode_columnar(data, skip_control=False).num_records == 3


def ref_read_committed(batches_info, aborted):
    """Java's read_committed rule over (base, last, pid, txn, control, control_type) tuples."""
    aborted = sorted(aborted, key=lambda t: t[1])
    active, keep, i = set(), [], 0
    for base, last, pid, txn, control, ctype in batches_info:
        if pid >= 0:
            while i < len(aborted) and aborted[i][1] <= last:
                active.add(aborted[i][0])
                i += 1
            if control:
                if ctype == 0:
                    active.discard(pid)
                continue
            if txn and pid in active:
                continue
        if not control:
            keep.append(base)
    return keep


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.sampled_from(["data", "commit", "abort"])),
                min_size=1, max_size=12),
       st.lists(st.tuples(st.integers(1, 3), st.integers(0, 14)), max_size=4))
def test_aborted_transactions_filter_matches_java_rule(plan, aborted):
    blobs, info, off = [], [], 0
    for pid, kind in plan:
        if kind == "data":
            blobs.append(R.encode_batch([(None, 1, None, b"p%d" % pid, [])], base_offset=off,
                                        producer_id=pid, producer_epoch=0, transactional=True))
            info.append((off, off, pid, True, False, -1))
        else:
            ctype = 1 if kind == "commit" else 0
            blobs.append(_control_batch(off, pid, ctype))
            info.append((off, off, pid, True, True, ctype))
        off += 1
    data = b"".join(blobs)
    res = R.decode_records(data, aborted_transactions=aborted, skip_control=True)
    assert [r.offset for r in res.records] == ref_read_committed(info, aborted)
    assert [b.base_offset for b in res.batches if b.aborted] == [
        b for b, *_ in info if b not in ref_read_committed(info, aborted) and not _[3]]
    dicts = [{"producer_id": p, "first_offset": f} for p, f in aborted]
    cb = R.decode_columnar(data, aborted_transactions=dicts)
    assert cb.offsets.tolist() == ref_read_committed(info, aborted)


def test_fetch_offset_skips_earlier_records():
    data = (R.encode_batch([(None, i, None, b"%d" % i, [("h", b"%d" % i)]) for i in range(5)],
                           base_offset=10)
            + R.encode_batch([(None, i, None, b"%d" % i, []) for i in range(5)], base_offset=15))
    res = R.decode_records(data, fetch_offset=13)
    assert [r.offset for r in res.records] == [13, 14, 15, 16, 17, 18, 19]
    assert [r.headers for r in res.records][:2] == [[("h", b"3")], [("h", b"4")]]
    res = R.decode_records(data, fetch_offset=16)
    assert [r.offset for r in res.records] == [16, 17, 18, 19]
    assert res.batches[0].record_start == res.batches[0].record_end == 0
    cb = R.decode_columnar(data, fetch_offset=13)
    assert cb.offsets.tolist() == [13, 14, 15, 16, 17, 18, 19]
    assert [h for *_, h in columnar_rows(cb)][:3] == [[("h", b"3")], [("h", b"4")], []]


# ============================================================================ batch fields
def test_log_append_time_uses_max_timestamp():
    blob = R.encode_batch([(None, 1, None, b"a", []), (None, 2, None, b"b", [])],
                          timestamp_type=1, max_timestamp=5555)
    res = R.decode_records(blob)
    assert [(r.timestamp, r.timestamp_type) for r in res.records] == [(5555, 1), (5555, 1)]
    assert R.decode_columnar(blob).timestamps.tolist() == [5555, 5555]


def test_delete_horizon_and_overrides():
    blob = R.encode_batch([(3, 900, None, b"a", [])], base_timestamp=800,
                          has_delete_horizon=True, last_offset_delta=7, base_offset=40)
    res = R.decode_records(blob)
    (b,) = res.batches
    assert b.has_delete_horizon and b.delete_horizon_ms == 800
    assert (b.last_offset, res.next_offset) == (47, 48)
    assert [(r.offset, r.timestamp) for r in res.records] == [(43, 900)]


def test_empty_batch_after_compaction_advances_next_offset():
    blob = R.encode_batch([], base_offset=20, last_offset_delta=4)
    res = R.decode_records(blob)
    assert res.records == [] and res.next_offset == 25
    assert res.batches[0].record_count == 0


def test_builder_sizes_and_errors():
    b = R.RecordBatchBuilder()
    assert len(b) == 0 and b.size_in_bytes == 61
    n = b.append(1000, b"k", b"v", [("h", b"x")])
    assert b.size_in_bytes == 61 + n
    b.append(1001, None, None)
    out = b.build(base_offset=3)
    assert len(out) == b.size_in_bytes
    assert [r.offset for r in R.decode_records(out).records] == [3, 4]
    with pytest.raises(TypeError):
        b.append(1, "str key", b"v")
    with pytest.raises(TypeError):
        b.append(1, None, b"v", [("h", "str value")])
    with pytest.raises(KafkaError):
        b.build(codec=5)


def test_record_api_pickle_and_repr():
    res = R.decode_records(R.encode_batch([(None, 5, b"k", b"v", [("a", b"1")])]),
                           topic="orders", partition=3)
    r = res.records[0]
    assert (r.topic, r.partition) == ("orders", 3)
    assert r.serialized_key_size == 1 and r.serialized_value_size == 1
    assert r.headers is r.headers
    r2 = pickle.loads(pickle.dumps(r))
    assert as_tuple(r2) == as_tuple(r) and r2.topic == "orders"
    assert "offset=0" in repr(r) and "BatchInfo" in repr(res.batches[0])
    assert "DecodeResult" in repr(res) and len(res) == 1 and list(res) == res.records
    r0 = R.decode_records(R.encode_batch([(None, 5, None, None, [])])).records[0]
    assert r0.headers == [] and r0.serialized_key_size == -1 and r0.serialized_value_size == -1


def test_array_pool_stays_bounded():
    blob = R.encode_batch([(None, i, None, b"x" * 10, []) for i in range(20_000)])
    for _ in range(20):
        R.decode_columnar(blob).to_arrow()
        R.decode_records(blob)
    blocks, held = R._pool_stats()
    from kcore.pool import POOL_SLOTS, pool_clear, pool_limits
    # pool_limits, not the default POOL_MAX_TOTAL: a consumer made earlier in this process may
    # have raised the limit (pool_reserve) for its fetch answers.
    assert blocks <= POOL_SLOTS and held <= pool_limits()[1]
    pool_clear()
    assert R._pool_stats() == (0, 0)


# The pool is process-wide: this check runs where it starts empty.
_POOL_CLASSES_CHECK = """
from kcore import records as R
from kcore.pool import pool_stats
blobs = [R.encode_batch([(None, i, None, b"x", []) for i in range(n)]) for n in range(4650, 5120, 7)]
for _ in range(3):
    for blob in blobs:
        R.decode_columnar(blob)
blocks, held = pool_stats()
# One decode's arrays (7 of at least 16 KiB): record counts that differ by a few percent
# ask for the same size class, so each decode reuses the blocks the last one gave back.
assert blocks == 7, pool_stats()
"""


def test_array_pool_reuses_blocks_across_slightly_different_record_counts():
    import subprocess
    done = subprocess.run([sys.executable, "-c", _POOL_CLASSES_CHECK], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


# ============================================================================ GIL
def _releases_gil(fn) -> bool:
    """True when `fn` (run in a thread) lets the main thread run before it finishes.

    With a huge switch interval the worker never gives the GIL up on its own: only a
    `nogil` section inside `fn` lets the waiting main thread in.
    """
    started, finished = threading.Event(), threading.Event()

    def work():
        started.set()
        fn()
        finished.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(1000)
    try:
        t = threading.Thread(target=work)
        t.start()
        started.wait()
        ran_first = not finished.is_set()
        t.join()
    finally:
        sys.setswitchinterval(old)
    return ran_first


def test_crc_and_decode_release_the_gil():
    # many nogil windows of a few ms each: the main thread needs to win only one of them
    big = os.urandom(1 << 20) * 16
    assert _releases_gil(lambda: [R.crc32c_sw(big) for _ in range(4)])
    assert _releases_gil(lambda: [R.crc32c(big) for _ in range(40)])
    blob = R.encode_batch([(None, i, None, b"x" * 50, []) for i in range(100_000)])
    assert _releases_gil(lambda: [R.decode_columnar(blob, check_crcs=False) for _ in range(20)])
    assert _releases_gil(lambda: [R.decode_records(blob, check_crcs=False) for _ in range(5)])


@pytest.mark.parametrize("module", ["records", "compression"])
def test_stub_names_exist_at_runtime(module):
    import ast
    import importlib
    import pathlib
    mod = importlib.import_module(f"kcore.{module}")
    tree = ast.parse(pathlib.Path(mod.__file__).with_name(f"{module}.pyi").read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and not item.name.startswith("__"):
                        assert hasattr(getattr(mod, node.name), item.name), (node.name, item.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    missing = [n for n in names if not hasattr(mod, n)
               and n not in ("Header", "RecordTuple", "AbortedTransaction")]
    assert not missing


def test_errors_are_kafka_errors():
    bad = bytearray(KNOWN_V2)
    bad[-1] ^= 0xFF
    with pytest.raises(CrcMismatchError) as ei:
        R.decode_records(bytes(bad))
    assert isinstance(ei.value, CorruptRecordError) and ei.value.errno == 2
