"""Every declared message at every valid version: schema checks, a plain-Python reference codec,
and the compiled codec (kclient.protocol) checked against it.

The reference encoder/decoder below is written from the protocol guide's layouts and the
declarations in kclient.protocol.messages, independently of kcore: it uses only ``struct``.
For each (message, version) hypothesis draws bodies from a strategy derived from the schema
and checks
  * reference: encode -> decode gives the body back (validates the strategies and the reference);
  * codec: encode_request/encode_response bytes == reference bytes;
  * codec: decode of the codec's own frame and of the reference frame == the body;
  * codec: a frame cut short raises a kclient.errors.ProtocolError;
  * codec: an empty body encodes every default exactly like the reference;
  * codec: a field the version lacks is dropped when default or ignorable, else refused.
"""
from __future__ import annotations

import re
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kclient.errors import ProtocolError
from kclient.protocol.messages import API_NAMES, REQUESTS, RESPONSES, response_header_version
from kclient.protocol.schema import Field, Message, Versions

ZERO_UUID = uuid.UUID(int=0)

# ---------------------------------------------------------------------------------------------
# reference codec (pure Python)

_FIXED = {"bool": ">?", "int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i",
          "int64": ">q", "float64": ">d"}


def _uvarint(n: int) -> bytes:
    assert n >= 0
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zero(f: Field, v: int):
    """The zero value of f's type at version v (a struct's zero has every field's default)."""
    if f.is_array:
        return []
    t = f.type
    if t in ("int8", "int16", "uint16", "int32", "int64"):
        return 0
    if t == "float64":
        return 0.0
    if t == "bool":
        return False
    if t == "string":
        return ""
    if t in ("bytes", "records"):
        return b""
    if t == "uuid":
        return ZERO_UUID
    return {s.name: default_value(s, v) for s in f.fields if s.in_version(v)}


def default_value(f: Field, v: int):
    """schema.Field semantics: default None -> null if nullable at v, else the zero value."""
    if f.default is None:
        if f.nullable_in(v):
            return None
        return _zero(f, v)
    if isinstance(f.default, list):
        return list(f.default)
    return f.default


def norm(f: Field, value, v: int):
    """Canonical form for comparison: bytes-likes -> bytes, uuids -> uuid.UUID, structs -> dicts
    holding exactly the fields present at v."""
    if value is None:
        return None
    if f.is_array:
        return [_norm_elem(f, x, v) for x in value]
    return _norm_elem(f, value, v)


def _norm_elem(f: Field, x, v: int):
    t = f.element_type
    if f.is_struct:
        return {s.name: norm(s, x[s.name] if s.name in x else default_value(s, v), v)
                for s in f.fields if s.in_version(v)}
    if t in ("bytes", "records"):
        return bytes(x)
    if t == "uuid":
        return x if isinstance(x, uuid.UUID) else uuid.UUID(bytes=bytes(x))
    return x


def norm_body(msg: Message, body: dict, v: int) -> dict:
    return {f.name: norm(f, body[f.name] if f.name in body else default_value(f, v), v)
            for f in msg.fields if f.in_version(v)}


class RefWriter:
    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.out = bytearray()

    def fixed(self, fmt: str, x) -> None:
        self.out += struct.pack(fmt, x)

    def length(self, n: int | None, classic_fmt: str) -> None:
        """Length/count prefix: classic int16/int32 (-1 = null) or compact uvarint(n + 1)."""
        if self.flexible:
            self.out += _uvarint(0 if n is None else n + 1)
        else:
            self.fixed(classic_fmt, -1 if n is None else n)


def _write_value(w: RefWriter, f: Field, value, v: int) -> None:
    if f.is_array:
        if value is None:
            w.length(None, ">i")
            return
        w.length(len(value), ">i")
        for x in value:
            _write_elem(w, f, x, v)
        return
    if f.is_struct and f.nullable_in(v):
        # a nullable struct carries an int8 presence marker (-1 null, 1 present)
        if value is None:
            w.fixed(">b", -1)
            return
        w.fixed(">b", 1)
    _write_elem(w, f, value, v)


def _write_elem(w: RefWriter, f: Field, x, v: int) -> None:
    t = f.element_type
    if f.is_struct:
        write_struct(w, f.fields, x, v)
    elif t in _FIXED:
        w.fixed(_FIXED[t], x)
    elif t == "uuid":
        w.out += _norm_elem(f, x, v).bytes
    elif t == "string":
        if x is None:
            w.length(None, ">h")
        else:
            raw = x.encode("utf-8")
            w.length(len(raw), ">h")
            w.out += raw
    elif t in ("bytes", "records"):
        if x is None:
            w.length(None, ">i")
        else:
            raw = bytes(x)
            w.length(len(raw), ">i")
            w.out += raw
    else:
        raise AssertionError(f"unknown type {t}")


def write_struct(w: RefWriter, fields: list[Field], body: dict, v: int) -> None:
    tagged = []
    for f in fields:
        if not f.in_version(v):
            continue
        value = body[f.name] if f.name in body else default_value(f, v)
        if w.flexible and f.tagged_in(v):
            # like Kafka's generated code, a tagged field equal to its default is not written
            if norm(f, value, v) != norm(f, default_value(f, v), v):
                tagged.append((f.tag, f, value))
            continue
        _write_value(w, f, value, v)
    if w.flexible:
        w.out += _uvarint(len(tagged))
        for tag, f, value in sorted(tagged, key=lambda t: t[0]):
            sub = RefWriter(True)
            _write_value(sub, f, value, v)
            w.out += _uvarint(tag) + _uvarint(len(sub.out)) + sub.out


class RefReader:
    def __init__(self, data: bytes, flexible: bool, pos: int = 0, end: int | None = None) -> None:
        self.data = bytes(data)
        self.pos = pos
        self.end = len(self.data) if end is None else end
        self.flexible = flexible

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise ValueError("truncated")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def fixed(self, fmt: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def uvarint(self) -> int:
        n = shift = 0
        while True:
            b = self.take(1)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7
            if shift > 35:
                raise ValueError("varint too long")

    def length(self, classic_fmt: str) -> int | None:
        if self.flexible:
            n = self.uvarint()
            return None if n == 0 else n - 1
        n = self.fixed(classic_fmt)
        return None if n < 0 else n


def _read_value(r: RefReader, f: Field, v: int):
    if f.is_array:
        n = r.length(">i")
        if n is None:
            return _null(f, v)
        return [_read_elem(r, f, v) for _ in range(n)]
    if f.is_struct and f.nullable_in(v):
        if r.fixed(">b") < 0:
            return None
    return _read_elem(r, f, v)


def _read_elem(r: RefReader, f: Field, v: int):
    t = f.element_type
    if f.is_struct:
        return read_struct(r, f.fields, v)
    if t in _FIXED:
        return r.fixed(_FIXED[t])
    if t == "uuid":
        return uuid.UUID(bytes=r.take(16))
    if t == "string":
        n = r.length(">h")
        if n is None:
            return _null(f, v)
        return r.take(n).decode("utf-8")
    if t in ("bytes", "records"):
        n = r.length(">i")
        return _null(f, v) if n is None else r.take(n)
    raise AssertionError(f"unknown type {t}")


def _null(f: Field, v: int) -> None:
    if not f.nullable_in(v):
        raise ValueError(f"{f.name} is null but not nullable at v{v}")
    return None


def read_struct(r: RefReader, fields: list[Field], v: int) -> dict:
    out = {}
    by_tag = {}
    for f in fields:
        if not f.in_version(v):
            continue
        if r.flexible and f.tagged_in(v):
            by_tag[f.tag] = f
            out[f.name] = default_value(f, v)
            continue
        out[f.name] = _read_value(r, f, v)
    if r.flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            end = r.pos + size
            if tag in by_tag:
                sub = RefReader(r.data, True, r.pos, end)
                out[by_tag[tag].name] = _read_value(sub, by_tag[tag], v)
                if sub.pos != end:
                    raise ValueError("tagged field size mismatch")
            r.take(size)
    return out


def _header_string(client_id: str | None) -> bytes:
    # client_id is a classic nullable string in every request header version
    if client_id is None:
        return struct.pack(">h", -1)
    raw = client_id.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def ref_encode_request(api_key: int, v: int, correlation_id: int, client_id: str | None,
                       body: dict) -> bytes:
    msg = REQUESTS[api_key]
    w = RefWriter(msg.is_flexible(v))
    write_struct(w, msg.fields, body, v)
    header = struct.pack(">hhi", api_key, v, correlation_id) + _header_string(client_id)
    if msg.is_flexible(v):
        header += b"\x00"  # request header v2: empty tagged fields
    payload = header + bytes(w.out)
    return struct.pack(">i", len(payload)) + payload


def ref_encode_response(api_key: int, v: int, correlation_id: int, body: dict) -> bytes:
    msg = RESPONSES[api_key]
    w = RefWriter(msg.is_flexible(v))
    write_struct(w, msg.fields, body, v)
    header = struct.pack(">i", correlation_id)
    if response_header_version(api_key, v) == 1:
        header += b"\x00"
    payload = header + bytes(w.out)
    return struct.pack(">i", len(payload)) + payload


def ref_decode_request(frame: bytes, exact: bool = True):
    api_key, v, corr, n = struct.unpack_from(">hhih", frame, 0)
    pos = 10
    client_id = None
    if n >= 0:
        client_id = frame[pos:pos + n].decode("utf-8")
        pos += n
    msg = REQUESTS[api_key]
    r = RefReader(frame, msg.is_flexible(v), pos)
    if msg.is_flexible(v):
        for _ in range(r.uvarint()):
            r.uvarint()
            r.take(r.uvarint())
    body = read_struct(r, msg.fields, v)
    if exact and r.pos != len(r.data):
        raise ValueError("trailing bytes")
    return api_key, v, corr, client_id, body


def ref_decode_response(api_key: int, v: int, frame: bytes, exact: bool = True) -> dict:
    """exact=False ignores bytes after the body, as the Java client does."""
    msg = RESPONSES[api_key]
    r = RefReader(frame, msg.is_flexible(v), 4)
    if response_header_version(api_key, v) == 1:
        for _ in range(r.uvarint()):
            r.uvarint()
            r.take(r.uvarint())
    body = read_struct(r, msg.fields, v)
    if exact and r.pos != len(r.data):
        raise ValueError("trailing bytes")
    return body


# ---------------------------------------------------------------------------------------------
# hypothesis strategies derived from the schema

_INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _elem_strategy(f: Field, v: int) -> st.SearchStrategy:
    t = f.element_type
    if f.is_struct:
        return struct_strategy(f.fields, v)
    if t in _INT_RANGES:
        bits = _INT_RANGES[t]
        return st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if t == "uint16":
        return st.integers(0, 0xFFFF)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return st.text(max_size=8)
    if t == "bytes":
        return st.binary(max_size=12)
    if t == "records":
        return st.binary(max_size=40)
    if t == "uuid":
        return st.uuids(allow_nil=True)
    raise AssertionError(f"unknown type {t}")


def field_strategy(f: Field, v: int) -> st.SearchStrategy:
    if f.is_array:
        s = st.lists(_elem_strategy(f, v), max_size=2 if f.is_struct else 3)
    else:
        s = _elem_strategy(f, v)
    if f.nullable_in(v):
        s = st.one_of(st.none(), s)
    return s


def struct_strategy(fields: list[Field], v: int) -> st.SearchStrategy:
    return st.fixed_dictionaries({f.name: field_strategy(f, v) for f in fields if f.in_version(v)})


# ---------------------------------------------------------------------------------------------
# schema checks (no codec needed)

ALL = [(kind, key, v)
       for kind, table in (("request", REQUESTS), ("response", RESPONSES))
       for key in sorted(table) for v in table[key].versions()]
ALL_IDS = [f"{API_NAMES[key]}{kind.capitalize()}-v{v}" for kind, key, v in ALL]

EXPECTED_KEYS = {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 23, 32, 36, 37, 42,
                 44, 68, 71, 72, 76, 77, 78, 79, 90, 91, 92}


def _walk(fields, path=()):
    for f in fields:
        yield path + (f.name,), f
        yield from _walk(f.fields, path + (f.name,))


def test_declared_apis():
    assert set(REQUESTS) == EXPECTED_KEYS == set(RESPONSES) == set(API_NAMES)
    for key in EXPECTED_KEYS:
        req, resp = REQUESTS[key], RESPONSES[key]
        assert (req.api_key, req.kind, resp.api_key, resp.kind) == (key, "request", key, "response")
        assert req.name == API_NAMES[key] + "Request" and resp.name == API_NAMES[key] + "Response"
        assert req.valid_versions == resp.valid_versions
        assert req.flexible_versions == resp.flexible_versions


# Kafka 4 floors (KIP-896, plus Metadata v0-3 and JoinGroup v0-1 restored in 4.0/4.1) and the
# current maxima, as in the public JSON definitions the declarations were generated from.
EXPECTED_RANGES = {
    0: ("3-13", "9+"), 1: ("4-18", "12+"), 2: ("1-11", "6+"), 3: ("0-13", "9+"),
    8: ("2-10", "8+"), 9: ("1-10", "6+"), 10: ("0-6", "3+"), 11: ("0-9", "6+"),
    12: ("0-4", "4+"), 13: ("0-5", "4+"), 14: ("0-5", "4+"), 15: ("0-6", "5+"),
    16: ("0-5", "3+"), 17: ("0-1", "none"), 18: ("0-4", "3+"), 19: ("2-7", "5+"),
    20: ("1-6", "4+"), 21: ("0-2", "2+"), 23: ("2-4", "4+"), 36: ("0-2", "2+"), 37: ("0-3", "2+"),
    68: ("0-1", "0+"), 76: ("1", "0+"), 77: ("1", "0+"), 78: ("1-2", "0+"), 79: ("1-2", "0+"),
    90: ("0-1", "0+"), 91: ("0", "0+"), 92: ("0", "0+"),
}

# What the test brokers advertise (measured with ApiVersions v0; see test_messages_vectors.py).
TANSU_MAX = {0: 11, 1: 17, 2: 9, 3: 12, 8: 9, 9: 9, 10: 6, 11: 9, 12: 4, 13: 5, 14: 5, 15: 5,
             16: 5, 17: 1, 18: 4, 19: 7, 20: 6, 21: 2, 36: 2}
MOCK_RANGES = {0: (0, 10), 1: (0, 16), 2: (0, 7), 3: (0, 13), 8: (0, 9), 9: (0, 6), 10: (0, 3),
               11: (0, 6), 12: (0, 5), 13: (0, 4), 14: (0, 4), 18: (0, 2), 23: (2, 2), 68: (1, 1)}


def test_version_ranges():
    for key, (valid, flexible) in EXPECTED_RANGES.items():
        assert (REQUESTS[key].valid_versions, REQUESTS[key].flexible_versions) == (valid, flexible)


def test_brokers_versions_covered():
    for key, hi in TANSU_MAX.items():
        lo_ours = REQUESTS[key].versions()[0]
        assert lo_ours <= hi, f"{API_NAMES[key]}: our floor {lo_ours} above Tansu's max {hi}"
    assert REQUESTS[1].versions()[-1] >= 17 and REQUESTS[11].versions()[-1] >= 9
    assert REQUESTS[12].versions()[-1] >= 4 and REQUESTS[8].versions()[-1] >= 9
    assert REQUESTS[3].versions()[-1] >= 12
    for key, (lo, hi) in MOCK_RANGES.items():
        ours = REQUESTS[key].versions()
        assert ours[0] <= hi and lo <= ours[-1], f"{API_NAMES[key]}: no common version with the mock"


_SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


@pytest.mark.parametrize("kind,key,v", ALL, ids=ALL_IDS)
def test_schema_well_formed(kind, key, v):
    msg = (REQUESTS if kind == "request" else RESPONSES)[key]
    flexible = msg.is_flexible(v)

    def check(fields, where):
        names = [f.name for f in fields if f.in_version(v)]
        assert len(names) == len(set(names)), f"{where}: duplicate field names {names}"
        tags = [f.tag for f in fields if f.in_version(v) and f.tagged_in(v)]
        assert len(tags) == len(set(tags)), f"{where}: duplicate tags"
        for f in fields:
            assert _SNAKE.match(f.name), f.name
            assert not Versions.parse(f.versions).is_empty()
            if f.tagged_in(v):
                assert flexible and f.tag is not None, f"{where}.{f.name}: tagged in a classic version"
            if f.is_struct:
                assert f.fields, f"{where}.{f.name}: struct without fields"
                check(f.fields, f"{where}.{f.name}")
            else:
                assert not f.fields
            if f.default is not None and not f.is_array and not f.is_struct:
                zero = _zero(f, v)
                assert isinstance(f.default, type(zero)), f"{where}.{f.name}: default {f.default!r}"

    check(msg.fields, msg.name)


def test_known_field_facts():
    # a few facts that are easy to get wrong when converting the JSON by hand
    fetch = {f.name: f for f in REQUESTS[1].fields}
    assert fetch["max_bytes"].default == 0x7FFFFFFF
    assert fetch["replica_id"].versions == "0-14" and fetch["replica_id"].default == -1
    assert fetch["cluster_id"].tag == 0 and fetch["replica_state"].tag == 1
    parts = {f.name: f for f in {f.name: f for f in fetch["topics"].fields}["partitions"].fields}
    assert parts["high_watermark"].default == 9223372036854775807
    assert parts["replica_directory_id"].type == "uuid" and parts["replica_directory_id"].tag == 0
    cgh = {f.name: f for f in RESPONSES[68].fields}
    # commonStructs TopicPartitions is inlined into the nullable Assignment struct
    assign = cgh["assignment"]
    assert assign.nullable_versions == "0+" and assign.default is None
    tp = assign.fields[0]
    assert tp.type == "[]TopicPartitions" and [f.name for f in tp.fields] == ["topic_id", "partitions"]
    meta = {f.name: f for f in REQUESTS[3].fields}
    assert meta["topics"].nullable_versions == "1+" and meta["topics"].default == []
    assert meta["allow_auto_topic_creation"].default is True
    api = {f.name: f for f in RESPONSES[18].fields}
    assert api["finalized_features_epoch"].default == -1 and api["finalized_features_epoch"].tag == 1
    assert response_header_version(18, 4) == 0 and response_header_version(12, 4) == 1
    assert response_header_version(12, 3) == 0


# ---------------------------------------------------------------------------------------------
# reference self-check and codec checks

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _codec():
    try:
        from kclient import protocol
        return protocol.encode_request, protocol.decode_request, protocol.encode_response, protocol.decode_response
    except (ImportError, AttributeError) as e:  # a missing codec is a failure, not a skip
        pytest.fail(f"kclient.protocol codec not available: {e}")


def _message(kind, key):
    return (REQUESTS if kind == "request" else RESPONSES)[key]


def _check_decoded(msg, got, v, want):
    """The codec may or may not return fields the version lacks; if it does, they hold defaults."""
    extra = set(got) - {f.name for f in msg.fields if f.in_version(v)}
    for name in extra:
        f = next((x for x in msg.fields if x.name == name), None)
        assert f is not None, f"decoded unknown field {name!r}"
    assert norm_body(msg, got, v) == want


def _truncations(frame: bytes) -> list[int]:
    n = len(frame)
    cuts = {0, 1, n // 2, n - 1} | {n * i // 7 for i in range(1, 7)}
    return sorted(c for c in cuts if 0 <= c < n)


@pytest.mark.parametrize("kind,key,v", ALL, ids=ALL_IDS)
def test_reference_and_codec_roundtrip(kind, key, v):
    """Each drawn body checks the reference against itself (encode -> decode gives the body back:
    the strategies and the reference are sound) and then the codec against the reference. One
    drawn set serves both checks: drawing the bodies is most of the time."""
    encode_request, decode_request, encode_response, decode_response = _codec()
    msg = _message(kind, key)
    seen_truncation = [False]

    @SETTINGS
    @given(body=struct_strategy(msg.fields, v), corr=st.integers(-(1 << 31), (1 << 31) - 1))
    def run(body, corr):
        want = norm_body(msg, body, v)
        if kind == "request":
            ref = ref_encode_request(key, v, corr, "kclient-test", body)
            assert struct.unpack(">i", ref[:4])[0] == len(ref) - 4
            k2, v2, c2, cid, got = ref_decode_request(ref[4:])
            assert (k2, v2, c2, cid) == (key, v, corr, "kclient-test")
            assert norm_body(msg, got, v) == want, "reference: decode(encode(body)) != body"
            out = bytes(encode_request(key, v, corr, "kclient-test", body))
            assert out == ref, f"encode_request bytes differ:\n codec {out.hex()}\n ref   {ref.hex()}"
            for frame in (out[4:], ref[4:]):
                k2, v2, c2, cid, got = decode_request(frame)
                assert (k2, v2, c2, cid) == (key, v, corr, "kclient-test")
                _check_decoded(msg, got, v, want)
            frame = ref[4:]
            decode = decode_request
            args = ()
        else:
            ref = ref_encode_response(key, v, corr, body)
            assert norm_body(msg, ref_decode_response(key, v, ref[4:]), v) == want, \
                "reference: decode(encode(body)) != body"
            out = bytes(encode_response(key, v, corr, body))
            assert out == ref, f"encode_response bytes differ:\n codec {out.hex()}\n ref   {ref.hex()}"
            for frame in (out[4:], ref[4:]):
                _check_decoded(msg, decode_response(key, v, frame), v, want)
            frame = ref[4:]
            decode = decode_response
            args = (key, v)
        if not seen_truncation[0]:
            seen_truncation[0] = True
            for cut in _truncations(frame):
                if kind == "request" and cut < 4:
                    continue  # too short to name a message: any ProtocolError is fine, checked below
                with pytest.raises(ProtocolError):
                    decode(*args, frame[:cut])

    run()


@pytest.mark.parametrize("kind,key,v", ALL, ids=ALL_IDS)
def test_codec_defaults(kind, key, v):
    """An empty body encodes every field's default, exactly like the reference."""
    encode_request, decode_request, encode_response, decode_response = _codec()
    msg = _message(kind, key)
    want = norm_body(msg, {}, v)
    if kind == "request":
        out = bytes(encode_request(key, v, 7, None, {}))
        assert out == ref_encode_request(key, v, 7, None, {})
        k2, v2, corr, cid, got = decode_request(out[4:])
        assert (k2, v2, corr, cid) == (key, v, 7, None)
    else:
        out = bytes(encode_response(key, v, 7, {}))
        assert out == ref_encode_response(key, v, 7, {})
        got = decode_response(key, v, out[4:])
    _check_decoded(msg, got, v, want)


def _non_default(f: Field, v: int):
    """A value of f (built at version v, where f exists) that differs from f's default."""
    if f.is_array:
        elem = _zero(Field(f.name, f.element_type, f.versions, fields=f.fields), v)
        return [elem]
    if f.is_struct:
        value = _zero(f, v)
        for s in f.fields:
            if s.in_version(v) and not s.is_struct and not s.is_array:
                value[s.name] = _non_default(s, v)
                return value
        return None
    d = default_value(f, v)
    t = f.type
    if t in ("int8", "int16", "uint16", "int32", "int64"):
        return d - 1 if d > 0 else d + 1
    if t == "bool":
        return not d
    if t == "float64":
        return d + 1.0
    if t == "string":
        return "x"
    if t in ("bytes", "records"):
        return b"x"
    if t == "uuid":
        return uuid.UUID(int=1)
    raise AssertionError(t)


@pytest.mark.parametrize("kind,key,v", ALL, ids=ALL_IDS)
def test_codec_fields_absent_from_version(kind, key, v):
    """A field the version lacks: dropped if default or ignorable, else UnsupportedVersionError
    (the Java client's rule: a feature the broker cannot receive is never silently lost)."""
    from kclient.errors import UnsupportedVersionError
    encode_request, _, encode_response, _ = _codec()
    msg = _message(kind, key)

    def enc(body):
        if kind == "request":
            return encode_request(key, v, 3, "c", body)
        return encode_response(key, v, 3, body)

    plain = enc({})
    for f in msg.fields:
        if f.in_version(v):
            continue
        fv = Versions.parse(f.versions).low
        assert enc({f.name: default_value(f, fv)}) == plain, f.name
        value = _non_default(f, fv)
        if value is None:
            continue
        if f.ignorable:
            assert enc({f.name: value}) == plain, f.name
        else:
            with pytest.raises(UnsupportedVersionError):
                enc({f.name: value})


def test_codec_short_request_frames():
    _, decode_request, _, _ = _codec()
    for frame in (b"", b"\x00", b"\x00\x12\x00"):
        with pytest.raises(ProtocolError):
            decode_request(frame)
