"""kcore.layout: the named field offsets read the fields of real batches and messages."""
from __future__ import annotations

import struct
import zlib

from kcore import layout as L
from kcore import records as R


def test_v2_offsets_read_the_fields_of_an_encoded_batch():
    raw = R.encode_batch([(None, 1_000, b"k", b"v", []), (None, 1_500, None, b"w", [])],
                         base_offset=1234, producer_id=77, producer_epoch=5, base_sequence=9,
                         partition_leader_epoch=3, transactional=True, timestamp_type=1)
    assert struct.unpack_from(">q", raw, L.ENTRY_BASE_OFFSET)[0] == 1234
    assert struct.unpack_from(">i", raw, L.ENTRY_LENGTH)[0] == len(raw) - L.LOG_OVERHEAD
    assert struct.unpack_from(">i", raw, L.V2_PARTITION_LEADER_EPOCH)[0] == 3
    assert raw[L.ENTRY_MAGIC] == 2
    assert struct.unpack_from(">I", raw, L.V2_CRC)[0] == R.crc32c(raw[L.V2_ATTRIBUTES:])
    attrs = struct.unpack_from(">h", raw, L.V2_ATTRIBUTES)[0]
    assert attrs & L.ATTR_TRANSACTIONAL and attrs & L.ATTR_TIMESTAMP_TYPE
    assert not attrs & (L.ATTR_CONTROL | L.ATTR_DELETE_HORIZON | L.ATTR_CODEC_MASK)
    assert struct.unpack_from(">i", raw, L.V2_LAST_OFFSET_DELTA)[0] == 1
    assert struct.unpack_from(">q", raw, L.V2_BASE_TIMESTAMP)[0] == 1_000
    assert struct.unpack_from(">q", raw, L.V2_MAX_TIMESTAMP)[0] == 1_500
    assert struct.unpack_from(">q", raw, L.V2_PRODUCER_ID)[0] == 77
    assert struct.unpack_from(">h", raw, L.V2_PRODUCER_EPOCH)[0] == 5
    assert struct.unpack_from(">i", raw, L.V2_BASE_SEQUENCE)[0] == 9
    assert struct.unpack_from(">i", raw, L.V2_RECORD_COUNT)[0] == 2
    assert L.V2_HEADER_SIZE == L.V2_RECORD_COUNT + 4 == 61


def test_legacy_offsets_read_the_fields_of_a_v1_message():
    # v1 message built by hand from the protocol docs: crc, magic, attributes, timestamp,
    # key, value.
    body = struct.pack(">bbq", 1, 0x08, 42) + struct.pack(">i", -1) + struct.pack(">i", 3) + b"abc"
    msg = struct.pack(">I", zlib.crc32(body)) + body
    raw = struct.pack(">qi", 7, len(msg)) + msg
    assert raw[L.ENTRY_MAGIC] == 1 and raw[L.LEGACY_ATTRIBUTES] == 0x08
    assert struct.unpack_from(">I", raw, L.LEGACY_CRC)[0] == R.crc32_ieee(raw[L.ENTRY_MAGIC:])
    assert struct.unpack_from(">q", raw, L.LEGACY_TIMESTAMP)[0] == 42
    assert L.LEGACY_MIN_SIZE == 4 + 1 + 1 + 4 + 4
    rec = R.decode_records(raw).records[0]
    assert (rec.offset, rec.timestamp, rec.timestamp_type, rec.value) == (7, 42, 1, b"abc")


def test_public_values_are_the_records_constants():
    assert (R.TIMESTAMP_NONE, R.TIMESTAMP_CREATE_TIME, R.TIMESTAMP_LOG_APPEND_TIME) == (-1, 0, 1)
    assert (R.CONTROL_ABORT, R.CONTROL_COMMIT, R.NO_PRODUCER_ID) == (0, 1, -1)
