"""kcore.messages (the compiled schema-driven codec) and the kclient.protocol API.

Known byte vectors built by hand, the codec's documented semantics (defaults, versions,
tagged fields, nullability, zero-copy records), header-version rules, the ApiVersions
fallbacks, and hostile input. The per-message hypothesis round trips against an independent
reference codec live in tests/test_messages_roundtrip.py.
"""
from __future__ import annotations

import struct
import tracemalloc
import uuid

import pytest

from kclient import protocol
from kclient.errors import (BufferUnderflowError, IllegalArgumentError, InvalidLengthError,
                            KafkaError, ProtocolError, UnsupportedVersionError)
from kclient.protocol import (CLIENT_VERSIONS, ApiKey, decode_request, decode_response,
                              encode_request, encode_response, negotiate,
                              response_correlation_id)
from kclient.protocol.messages import REQUESTS, RESPONSES
from kclient.protocol.schema import Field as F, Message
from kcore import messages as codec

# --------------------------------------------------------------------------- inline messages
ITEM = [F("k", "string"), F("v", "int64", default=7)]
KITCHEN = Message(99, "KitchenRequest", "request", "0-2", "2+", [
    F("b", "bool"),
    F("i8", "int8"),
    F("i16", "int16"),
    F("u16", "uint16"),
    F("i32", "int32", default=-1),
    F("i64", "int64"),
    F("f64", "float64"),
    F("id", "uuid"),
    F("s", "string"),
    F("ns", "string", nullable_versions="0+"),
    F("by", "bytes"),
    F("rec", "records", nullable_versions="0+"),
    F("ints", "[]int32"),
    F("names", "[]string", nullable_versions="1+"),
    F("items", "[]Item", fields=ITEM),
    F("opt", "Opt", nullable_versions="0+", fields=[F("x", "int32")]),
    F("new_field", "int32", "1+"),
    F("ignorable_new", "int32", "1+", ignorable=True),
    F("tagged_a", "int32", "2+", tagged_versions="2+", tag=5, default=-1),
    F("tagged_s", "string", "2+", tagged_versions="2+", tag=1, nullable_versions="2+"),
])

U = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")
BODY = {
    "b": True, "i8": -1, "i16": 2, "u16": 65535, "i32": 3, "i64": -4, "f64": 0.5, "id": U,
    "s": "hé", "ns": None, "by": b"\x01\x02", "rec": b"RECS", "ints": [1, -1],
    "names": ["x"], "items": [{"k": "a", "v": 1}, {"k": "", "v": 7}], "opt": {"x": 9},
}


def classic_kitchen_bytes() -> bytes:
    """KITCHEN v0 encoding of BODY, spelled out field by field."""
    return b"".join([
        b"\x01", b"\xff", b"\x00\x02", b"\xff\xff", struct.pack(">i", 3), struct.pack(">q", -4),
        struct.pack(">d", 0.5), U.bytes,
        b"\x00\x03h\xc3\xa9",                      # string (int16 length)
        b"\xff\xff",                               # null string
        b"\x00\x00\x00\x02\x01\x02",              # bytes (int32 length)
        b"\x00\x00\x00\x04RECS",                  # records
        b"\x00\x00\x00\x02" + struct.pack(">ii", 1, -1),
        b"\x00\x00\x00\x01\x00\x01x",             # []string
        b"\x00\x00\x00\x02" b"\x00\x01a" + struct.pack(">q", 1) + b"\x00\x00" + struct.pack(">q", 7),
        b"\x01" + struct.pack(">i", 9),            # nullable struct: present marker + fields
    ])


def test_known_vector_classic():
    assert codec.encode(KITCHEN, 0, BODY) == classic_kitchen_bytes()


def test_known_vector_flexible():
    body = dict(BODY, new_field=6, ignorable_new=0, tagged_a=300, tagged_s="t")
    want = b"".join([
        b"\x01", b"\xff", b"\x00\x02", b"\xff\xff", struct.pack(">i", 3), struct.pack(">q", -4),
        struct.pack(">d", 0.5), U.bytes,
        b"\x04h\xc3\xa9",                          # compact string: uvarint(len + 1)
        b"\x00",                                   # compact null string
        b"\x03\x01\x02",                           # compact bytes
        b"\x05RECS",                               # compact records
        b"\x03" + struct.pack(">ii", 1, -1),
        b"\x02\x02x",                              # compact []string
        b"\x03" b"\x02a" + struct.pack(">q", 1) + b"\x00" b"\x01" + struct.pack(">q", 7) + b"\x00",
        b"\x01" + struct.pack(">i", 9) + b"\x00",  # struct tags inside the nullable struct
        struct.pack(">i", 6), struct.pack(">i", 0),
        b"\x02" b"\x01\x02\x02t" b"\x05\x04" + struct.pack(">i", 300),   # tags ascending
    ])
    assert codec.encode(KITCHEN, 2, body) == want
    got = codec.decode(KITCHEN, 2, want)
    assert got == dict(body, rec=got["rec"]) and bytes(got["rec"]) == b"RECS"


@pytest.mark.parametrize("version", [0, 1, 2])
def test_kitchen_roundtrip_every_version(version):
    body = dict(BODY)
    if version >= 1:
        body.update(new_field=1, ignorable_new=2, names=None)
    if version >= 2:
        body.update(tagged_a=-7, tagged_s=None)
    data = codec.encode(KITCHEN, version, body)
    got = codec.decode(KITCHEN, version, data, True)
    assert isinstance(got["rec"], memoryview) and bytes(got["rec"]) == b"RECS"
    assert got == dict(body, rec=got["rec"])
    assert list(got) == [f.name for f in KITCHEN.fields if f.in_version(version)]


def test_omitted_fields_take_defaults():
    got = codec.decode(KITCHEN, 2, codec.encode(KITCHEN, 2, {}))
    assert got == {
        "b": False, "i8": 0, "i16": 0, "u16": 0, "i32": -1, "i64": 0, "f64": 0.0,
        "id": uuid.UUID(int=0), "s": "", "ns": None, "by": b"", "rec": None, "ints": [],
        "names": None, "items": [], "opt": None, "new_field": 0, "ignorable_new": 0,
        "tagged_a": -1, "tagged_s": None,
    }
    # defaults at a version where names is not nullable: an empty list, and a fresh one
    a = codec.decode(KITCHEN, 0, codec.encode(KITCHEN, 0, {}))
    b = codec.decode(KITCHEN, 0, codec.encode(KITCHEN, 0, {}))
    assert a["names"] == [] and a["names"] is not b["names"]
    # struct elements take their defaults too
    data = codec.encode(KITCHEN, 0, {"items": [{}]})
    assert codec.decode(KITCHEN, 0, data)["items"] == [{"k": "", "v": 7}]


def test_tagged_field_equal_to_default_is_not_written():
    plain = codec.encode(KITCHEN, 2, {})
    assert plain.endswith(b"\x00")
    assert codec.encode(KITCHEN, 2, {"tagged_a": -1, "tagged_s": None}) == plain
    assert codec.encode(KITCHEN, 2, {"tagged_s": ""}) == plain[:-1] + b"\x01\x01\x01\x01"


def test_unknown_tags_are_skipped_and_known_tags_read_in_any_order():
    plain = codec.encode(KITCHEN, 2, {})
    tags = (b"\x03" b"\x05\x04" + struct.pack(">i", 42) + b"\x63\x03abc" b"\x01\x02\x02z")
    got = codec.decode(KITCHEN, 2, plain[:-1] + tags)
    assert got["tagged_a"] == 42 and got["tagged_s"] == "z"
    # a known tag's value may not read past its declared size
    with pytest.raises(BufferUnderflowError):
        codec.decode(KITCHEN, 2, plain[:-1] + b"\x01\x05\x02\x00\x00\x00\x2a")


def test_fields_a_version_lacks():
    # non-default value for a non-ignorable field the version lacks: refused (Java's rule)
    with pytest.raises(UnsupportedVersionError, match="new_field"):
        codec.encode(KITCHEN, 0, {"new_field": 5})
    with pytest.raises(UnsupportedVersionError):
        codec.encode(KITCHEN, 1, {"tagged_a": 5})
    # its default, None, or an ignorable field: silently dropped
    plain = codec.encode(KITCHEN, 0, {})
    assert codec.encode(KITCHEN, 0, {"new_field": 0, "ignorable_new": 123}) == plain
    assert codec.encode(KITCHEN, 1, {"tagged_a": -1, "tagged_s": None}) == codec.encode(KITCHEN, 1, {})


@pytest.mark.parametrize("body,match", [
    ({"bogus": 1}, "bogus"),
    ({"i8": 128}, "i8"),
    ({"u16": -1}, "u16"),
    ({"i32": "x"}, "i32"),
    ({"s": None}, "'s'"),
    ({"s": b"bytes"}, "'s'"),
    ({"by": "text"}, "by"),
    ({"id": b"short"}, "id"),
    ({"ints": 5}, "ints"),
    ({"ints": "abc"}, "ints"),
    ({"items": [{"k": "a", "zz": 1}]}, "zz"),
    ({"items": [5]}, "Item"),
    ({"opt": 3}, "Opt"),
    ({"names": None}, "names"),            # not nullable at v0
    ({"b": None}, "'b'"),
])
def test_bad_values_raise_illegal_argument(body, match):
    with pytest.raises(IllegalArgumentError, match=match):
        codec.encode(KITCHEN, 0, body)


def test_records_decode_to_zero_copy_views():
    data = bytearray(codec.encode(KITCHEN, 0, {"rec": b"ABCD"}))
    got = codec.decode(KITCHEN, 0, data)
    rec = got["rec"]
    assert isinstance(rec, memoryview) and rec.obj is data and bytes(rec) == b"ABCD"
    data[data.index(b"ABCD")] = ord("Z")
    assert bytes(rec) == b"ZBCD"
    assert codec.decode(KITCHEN, 0, codec.encode(KITCHEN, 0, {"rec": None}))["rec"] is None


def test_program_cache_and_version_check():
    assert codec.compile_message(KITCHEN, 1) is codec.compile_message(KITCHEN, 1)
    assert codec.compile_message(KITCHEN, 1) is not codec.compile_message(KITCHEN, 2)
    with pytest.raises(UnsupportedVersionError):
        codec.compile_message(KITCHEN, 3)
    bad = Message(98, "BadRequest", "request", "0", "none", [F("x", "int33")])
    with pytest.raises(ValueError):
        codec.compile_message(bad, 0)


# --------------------------------------------------------------------------- hostile bodies
def test_truncated_at_every_prefix():
    data = codec.encode(KITCHEN, 2, dict(BODY, tagged_a=5))
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            codec.decode(KITCHEN, 2, data[:cut])


def test_absurd_counts_and_lengths_raise_before_allocating():
    head = codec.encode(KITCHEN, 0, {})
    ints_at = len(head) - 3 * 4 - 1          # ints, names, items counts then the opt marker
    for off in (0, 4, 8):
        corrupt = bytearray(head)
        corrupt[ints_at + off:ints_at + off + 4] = struct.pack(">i", 2**31 - 1)
        tracemalloc.start()
        try:
            with pytest.raises(InvalidLengthError):
                codec.decode(KITCHEN, 0, bytes(corrupt))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 1_000_000
    # a null (-1) count for an array that is not nullable at this version
    corrupt = bytearray(head)
    corrupt[ints_at:ints_at + 4] = struct.pack(">i", -1)
    with pytest.raises(InvalidLengthError):
        codec.decode(KITCHEN, 0, bytes(corrupt))


def test_struct_array_count_bound_uses_element_size():
    # each Item takes >= 10 bytes (int16 string length + int64): 5 items cannot fit in 40
    prog = codec.compile_message(KITCHEN, 0)
    assert prog.min_size > 0
    head = bytearray(codec.encode(KITCHEN, 0, {}))
    items_at = len(head) - 4 - 1
    data = head[:items_at] + struct.pack(">i", 5) + bytes(40)
    with pytest.raises(InvalidLengthError):
        codec.decode(KITCHEN, 0, bytes(data))


# --------------------------------------------------------------------------- kclient.protocol
def test_api_key_enum_and_client_versions():
    assert {int(k) for k in ApiKey} == set(REQUESTS) == set(CLIENT_VERSIONS)
    for key, msg in REQUESTS.items():
        assert CLIENT_VERSIONS[key] == (msg.versions()[0], msg.versions()[-1])
    assert ApiKey.API_VERSIONS == 18 and ApiKey.CONSUMER_GROUP_HEARTBEAT == 68
    assert set(protocol.__all__) == {
        "ApiKey", "CLIENT_VERSIONS", "encode_request", "decode_response",
        "response_correlation_id", "encode_response", "decode_request", "negotiate"}


def test_negotiate():
    ours = CLIENT_VERSIONS
    got = negotiate({1: (0, 17), 18: (0, 2), 0: (0, 2), 999: (0, 5), 68: (1, 1)})
    assert got == {1: min(17, ours[1][1]), 18: 2, 68: 1}       # Produce 0-2: below our floor 3
    assert negotiate({}) == {}


def test_api_versions_v0_request_frame_by_hand():
    frame = encode_request(ApiKey.API_VERSIONS, 0, 1, "kclient", {})
    assert frame == bytes.fromhex("00000011" "0012" "0000" "00000001" "0007") + b"kclient"
    assert decode_request(frame[4:]) == (18, 0, 1, "kclient", {})


def test_api_versions_v3_request_uses_header_v2_and_compact_body():
    frame = encode_request(18, 3, 2, "kc", {"client_software_name": "kclient",
                                            "client_software_version": "0.1"})
    want = (bytes.fromhex("0012" "0003" "00000002" "0002") + b"kc" + b"\x00"
            + b"\x08kclient" + b"\x040.1" + b"\x00")
    assert frame == struct.pack(">i", len(want)) + want


def test_api_versions_v3_response_header_is_v0():
    body = (b"\x00\x00" + b"\x02" + bytes.fromhex("0012 0000 0004") + b"\x00"
            + b"\x00\x00\x00\x00"
            + b"\x02" + b"\x01\x08" + struct.pack(">q", 5) + b"\x09\x02\xab\xcd")
    frame = struct.pack(">i", 77) + body                      # no header tag byte
    got = decode_response(18, 3, frame)
    assert got == {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
                   "throttle_time_ms": 0, "supported_features": [], "finalized_features_epoch": 5,
                   "finalized_features": [], "zk_migration_ready": False}
    tags_len = 1 + (1 + 1 + 8) + (1 + 1 + 2)
    assert encode_response(18, 3, 77, got)[4:] == (
        frame[:-tags_len] + b"\x01\x01\x08" + struct.pack(">q", 5))
    assert response_correlation_id(frame) == 77


def _fallback_expect(version):
    want = {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 2}]}
    full = codec.compile_message(RESPONSES[18], version).default()
    full.update(want)
    return full


@pytest.mark.parametrize("version", [1, 3, 4])
def test_api_versions_unsupported_answer_in_v0_form(version):
    # Apache Kafka: error 35 and its api keys in v0 form, whatever version was asked
    frame = struct.pack(">i", 5) + bytes.fromhex("0023" "00000001" "0012 0000 0002")
    assert decode_response(18, version, frame) == _fallback_expect(version)


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_unsupported_answer_in_librdkafka_mock_form(version):
    # librdkafka's mock: error 35, a one-byte raw count, untagged entries, int32 throttle
    frame = struct.pack(">i", 5) + bytes.fromhex("0023" "01" "0012 0000 0002" "00000000")
    assert decode_response(18, version, frame) == _fallback_expect(version)


@pytest.mark.parametrize("n_keys", range(8))
def test_api_versions_error_35_in_requested_form_still_decodes(n_keys):
    # sizes chosen so that some of these also fit the other forms' lengths
    body = {"error_code": 35, "throttle_time_ms": 9, "api_keys": [
        {"api_key": 18 + i, "min_version": 0, "max_version": 3} for i in range(n_keys)]}
    for version in (3, 4):
        frame = encode_response(18, version, 1, body)[4:]
        got = decode_response(18, version, frame)
        assert got["api_keys"] == body["api_keys"] and got["throttle_time_ms"] == 9


def test_flexible_request_and_response_header_versions():
    hb = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    v4 = encode_request(ApiKey.HEARTBEAT, 4, 9, "c", hb)      # flexible: header v2
    v3 = encode_request(ApiKey.HEARTBEAT, 3, 9, "c", dict(hb, group_instance_id=None))
    assert v4[4:15] == bytes.fromhex("000c0004" "00000009" "0001") + b"c" and v4[15] == 0
    assert v3[4:15] == bytes.fromhex("000c0003" "00000009" "0001") + b"c" and v3[15:17] == b"\x00\x01"
    # response header v1 for flexible Heartbeat: unknown header tags are skipped
    frame = struct.pack(">i", 9) + b"\x01\x07\x01\xee" + struct.pack(">ih", 0, 27) + b"\x00"
    assert decode_response(12, 4, frame) == {"throttle_time_ms": 0, "error_code": 27}
    assert encode_response(12, 4, 9, {"error_code": 27})[4:] == (
        struct.pack(">i", 9) + b"\x00" + struct.pack(">ih", 0, 27) + b"\x00")


def fetch_body(version, records=b"R" * 100, n=8):
    topic = {"topic": "t", "partitions": [
        {"partition_index": p, "high_watermark": 100 + p, "records": records,
         "aborted_transactions": [{"producer_id": 1, "first_offset": 2}] if p == 0 else None}
        for p in range(n)]}
    if version >= 13:
        topic = {"topic_id": U, "partitions": topic["partitions"]}
    body = {"throttle_time_ms": 1, "responses": [topic]}
    if version >= 7:
        body["session_id"] = 3
    return body


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16, 18])
def test_fetch_response_roundtrip_and_zero_copy(version):
    frame = bytearray(encode_response(ApiKey.FETCH, version, 5, fetch_body(version))[4:])
    got = decode_response(1, version, frame)
    parts = got["responses"][0]["partitions"]
    assert [p["partition_index"] for p in parts] == list(range(8))
    assert all(bytes(p["records"]) == b"R" * 100 for p in parts)
    assert all(p["records"].obj is frame for p in parts)
    assert parts[0]["aborted_transactions"] == [{"producer_id": 1, "first_offset": 2}]
    if version >= 12:
        assert parts[1]["current_leader"] == {"leader_id": -1, "leader_epoch": -1}
        assert parts[1]["current_leader"] is not parts[2]["current_leader"]
    if version >= 13:
        assert got["responses"][0]["topic_id"] == U


def test_fetch_request_ignorable_and_non_ignorable_fields():
    base = {"max_wait_ms": 500, "min_bytes": 1, "topics": []}
    # rack_id (11+) is ignorable: dropped at v10; last_fetched_epoch (12+) is not
    assert encode_request(1, 10, 1, "c", dict(base, rack_id="r1")) == encode_request(1, 10, 1, "c", base)
    part = {"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1 << 20}
    ok = dict(base, topics=[{"topic": "t", "partitions": [dict(part, last_fetched_epoch=-1)]}])
    encode_request(1, 11, 1, "c", ok)
    bad = dict(base, topics=[{"topic": "t", "partitions": [dict(part, last_fetched_epoch=4)]}])
    with pytest.raises(UnsupportedVersionError, match="last_fetched_epoch"):
        encode_request(1, 11, 1, "c", bad)
    with pytest.raises(IllegalArgumentError, match="isolation_level"):
        encode_request(1, 11, 1, "c", dict(base, isolation_level=300))


def test_produce_request_records_take_any_bytes_like():
    records = bytes(range(200))
    body = {"acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": memoryview(records)},
                                         {"index": 1, "records": bytearray(records)}]}]}
    frame = encode_request(ApiKey.PRODUCE, 9, 3, "c", body)
    _, _, _, _, got = decode_request(frame[4:])
    assert [bytes(p["records"]) for p in got["topic_data"][0]["partition_data"]] == [records] * 2


def test_unknown_api_or_version():
    with pytest.raises(UnsupportedVersionError):
        encode_request(1, 99, 1, "c", {})
    with pytest.raises(UnsupportedVersionError):
        decode_response(1, 3, b"\x00" * 10)          # below Fetch's floor
    with pytest.raises(UnsupportedVersionError):
        decode_request(bytes.fromhex("03e70000" "00000001" "ffff"))   # api key 999
    for frame in (b"", b"\x00", b"\x00\x12\x00"):
        with pytest.raises(ProtocolError):
            decode_request(frame)


@pytest.mark.parametrize("kind,key", [(k, key) for k in ("request", "response")
                                      for key in sorted(REQUESTS)])
def test_every_message_every_version_default_roundtrip(kind, key):
    table = REQUESTS if kind == "request" else RESPONSES
    for v in table[key].versions():
        prog = codec.compile_message(table[key], v)
        want = prog.default()
        if kind == "request":
            frame = encode_request(key, v, 1, "c", {})
            assert decode_request(frame[4:])[4] == want
        else:
            frame = encode_response(key, v, 1, {})
            assert decode_response(key, v, frame[4:]) == want


def test_decode_errors_are_kafka_errors():
    frame = encode_response(1, 12, 5, fetch_body(12))[4:]
    for cut in range(0, len(frame), 7):
        with pytest.raises(KafkaError):
            decode_response(1, 12, frame[:cut])
