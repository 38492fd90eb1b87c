"""kcore.wire: every primitive against plain-Python references and known byte vectors, plus
hostile input (truncation, negative and huge lengths, over-long varints)."""
from __future__ import annotations

import array
import math
import struct
import tracemalloc
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kclient.errors import BufferUnderflowError, InvalidLengthError, ProtocolError, VarintError
from kcore import wire
from kcore.wire import Reader, Writer

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, database=None)

I8 = st.integers(-(2**7), 2**7 - 1)
I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
U16 = st.integers(0, 2**16 - 1)
U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)


# --------------------------------------------------------------------------- references
def ref_uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ref_read_uvarint(data: bytes, max_bytes: int) -> tuple[int, int]:
    value = 0
    for i, b in enumerate(data[:max_bytes]):
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return value, i + 1
    raise ValueError("bad varint")


def ref_zigzag(n: int, bits: int) -> int:
    return ((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1)


def ref_unzigzag(u: int) -> int:
    return (u >> 1) ^ -(u & 1)


def roundtrip(write, read, value):
    w = Writer(16)
    getattr(w, write)(value)
    data = w.getvalue()
    r = Reader(data)
    got = getattr(r, read)()
    assert r.remaining_bytes == 0
    return data, got


# --------------------------------------------------------------------------- known vectors
@pytest.mark.parametrize("value,encoded", [
    (0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (16383, "ff7f"),
    (16384, "808001"), (2**32 - 1, "ffffffff0f"),
])
def test_uvarint_known_vectors(value, encoded):
    assert wire.encode_uvarint(value).hex() == encoded
    assert wire.decode_uvarint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@pytest.mark.parametrize("value,encoded", [
    (0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (2, "04"), (-64, "7f"), (64, "8001"),
    (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f"),
])
def test_zigzag_varint_known_vectors(value, encoded):
    assert wire.encode_varint(value).hex() == encoded
    assert wire.decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


def test_varlong_extremes():
    assert wire.encode_varlong(-(2**63)).hex() == "ff" * 9 + "01"
    assert wire.encode_varlong(2**63 - 1).hex() == "fe" + "ff" * 8 + "01"
    assert wire.decode_varlong(bytes.fromhex("ff" * 9 + "01")) == (-(2**63), 10)
    assert wire.encode_uvarint(2**64 - 1).hex() == "ff" * 9 + "01"


def test_fixed_width_known_vectors():
    w = Writer()
    w.int8(-2)
    w.int16(0x1234)
    w.uint16(0xFFFE)
    w.int32(-2)
    w.uint32(0xDEADBEEF)
    w.int64(0x0102030405060708)
    w.boolean(True)
    w.float64(1.5)
    assert w.getvalue().hex() == ("fe" "1234" "fffe" "fffffffe" "deadbeef" "0102030405060708"
                                  "01" "3ff8000000000000")


def test_string_and_bytes_known_vectors():
    w = Writer()
    w.string("abc")
    w.nullable_string(None)
    w.compact_string("abc")
    w.compact_nullable_string(None)
    w.bytes(b"\x01")
    w.nullable_bytes(None)
    w.compact_bytes(b"\x01")
    w.compact_nullable_bytes(None)
    w.array_len(2)
    w.array_len(-1)
    w.compact_array_len(2)
    w.compact_array_len(-1)
    assert w.getvalue().hex() == ("0003616263" "ffff" "04616263" "00" "0000000101" "ffffffff"
                                  "0201" "00" "00000002" "ffffffff" "03" "00")


# --------------------------------------------------------------------------- round trips
@SETTINGS
@given(U32)
def test_uvarint_matches_reference(n):
    data, got = roundtrip("uvarint", "uvarint", n)
    assert data == ref_uvarint(n) and got == n
    assert ref_read_uvarint(data, 5) == (n, len(data))


@SETTINGS
@given(U64)
def test_uvarlong_matches_reference(n):
    data, got = roundtrip("uvarlong", "uvarlong", n)
    assert data == ref_uvarint(n) and got == n


@SETTINGS
@given(I32)
def test_varint_matches_reference(n):
    data, got = roundtrip("varint", "varint", n)
    assert data == ref_uvarint(ref_zigzag(n, 32)) and got == n
    assert ref_unzigzag(ref_read_uvarint(data, 5)[0]) == n


@SETTINGS
@given(I64)
def test_varlong_matches_reference(n):
    data, got = roundtrip("varlong", "varlong", n)
    assert data == ref_uvarint(ref_zigzag(n, 64)) and got == n


@SETTINGS
@given(st.binary(max_size=64))
def test_compiled_varint_decoder_never_disagrees_with_reference(data):
    """Arbitrary bytes: the compiled decoder returns what the reference returns, or raises
    a ProtocolError exactly where the reference rejects the input."""
    try:
        want = ref_read_uvarint(data, 5)
        if want[0] >= 2**32:
            want = None   # 5th byte above 0x0f: does not fit 32 bits
    except ValueError:
        want = None
    if want is None:
        with pytest.raises(ProtocolError):
            wire.decode_uvarint(data)
    else:
        assert wire.decode_uvarint(data) == want


@pytest.mark.parametrize("kind,fmt,strategy", [
    ("int8", ">b", I8), ("int16", ">h", I16), ("uint16", ">H", U16), ("int32", ">i", I32),
    ("uint32", ">I", U32), ("int64", ">q", I64),
])
def test_fixed_width_matches_struct(kind, fmt, strategy):
    @SETTINGS
    @given(strategy)
    def run(n):
        data, got = roundtrip(kind, kind, n)
        assert data == struct.pack(fmt, n) and got == n

    run()


@SETTINGS
@given(st.floats(allow_nan=True))
def test_float64_matches_struct(x):
    data, got = roundtrip("float64", "float64", x)
    assert data == struct.pack(">d", x)
    assert (math.isnan(got) and math.isnan(x)) or got == x


@SETTINGS
@given(st.booleans())
def test_bool_roundtrip(b):
    data, got = roundtrip("boolean", "boolean", b)
    assert data == (b"\x01" if b else b"\x00") and got is b


def test_bool_reads_any_nonzero_as_true():
    assert Reader(b"\x02").boolean() is True


@SETTINGS
@given(st.text(max_size=40))
def test_strings_roundtrip(s):
    raw = s.encode("utf-8")
    data, got = roundtrip("string", "string", s)
    assert data == struct.pack(">h", len(raw)) + raw and got == s
    data, got = roundtrip("compact_string", "compact_string", s)
    assert data == ref_uvarint(len(raw) + 1) + raw and got == s
    assert roundtrip("nullable_string", "nullable_string", s)[1] == s
    assert roundtrip("compact_nullable_string", "compact_nullable_string", s)[1] == s


def test_null_strings_and_bytes():
    for name in ("nullable_string", "compact_nullable_string", "nullable_bytes",
                 "compact_nullable_bytes"):
        assert roundtrip(name, name, None)[1] is None


@SETTINGS
@given(st.binary(max_size=300))
def test_bytes_roundtrip(b):
    data, got = roundtrip("bytes", "bytes", b)
    assert data == struct.pack(">i", len(b)) + b and got == b
    data, got = roundtrip("compact_bytes", "compact_bytes", b)
    assert data == ref_uvarint(len(b) + 1) + b and got == b
    assert roundtrip("nullable_bytes", "nullable_bytes", bytearray(b))[1] == b
    assert roundtrip("compact_nullable_bytes", "compact_nullable_bytes", memoryview(b))[1] == b


@SETTINGS
@given(st.uuids(allow_nil=True))
def test_uuid_roundtrip(u):
    data, got = roundtrip("uuid", "uuid", u)
    assert data == u.bytes and got == u and isinstance(got, uuid.UUID)
    assert roundtrip("uuid", "uuid", u.bytes)[1] == u


@SETTINGS
@given(st.integers(-1, 2**31 - 1))
def test_array_len_roundtrip(n):
    w = Writer()
    w.array_len(n)
    w.compact_array_len(n)
    data = w.getvalue()
    assert data[:4] == struct.pack(">i", n)
    assert data[4:] == ref_uvarint(n + 1)
    # the reader checks a count against the bytes left: give it enough (min size 0 -> 1)
    r = Reader(data + bytes(max(n, 0)) if n < 4096 else data)
    if n < 4096:
        assert r.array_len(1) == n
    else:
        with pytest.raises(InvalidLengthError):
            r.array_len(1)


@SETTINGS
@given(st.dictionaries(st.integers(0, 2**32 - 1), st.binary(max_size=20), max_size=5))
def test_tagged_fields_roundtrip(fields):
    w = Writer()
    w.tagged_fields(fields)
    w.int8(7)
    data = w.getvalue()
    expect = ref_uvarint(len(fields)) + b"".join(
        ref_uvarint(t) + ref_uvarint(len(fields[t])) + fields[t] for t in sorted(fields))
    assert data == expect + b"\x07"
    r = Reader(data)
    assert r.tagged_fields() == fields and r.int8() == 7
    r = Reader(data)
    r.skip_tagged()
    assert r.int8() == 7


def test_writer_grows_past_initial_capacity():
    w = Writer(16)
    for i in range(10000):
        w.int32(i)
    data = w.getvalue()
    assert len(w) == len(data) == 40000
    assert struct.unpack(">10000i", data) == tuple(range(10000))


def test_varint_helpers_match_reference():
    values = list(range(-70000, 70000, 7)) + [2**31 - 1, -(2**31)]
    data = b"".join(ref_uvarint(ref_zigzag(v, 32)) for v in values)
    assert wire.decode_varints(data, len(values)) == values
    assert wire.sum_varints(data) == (len(values), sum(values))


# --------------------------------------------------------------------------- Reader buffers
def test_reader_accepts_buffer_types_and_windows():
    raw = struct.pack(">iii", 1, 2, 3)
    for data in (raw, bytearray(raw), memoryview(raw), memoryview(array.array("i", [0, 0, 0]))):
        r = Reader(data)
        assert r.remaining_bytes == 12
    r = Reader(raw, 4, 8)
    assert (r.pos, r.end) == (4, 8)
    assert r.int32() == 2
    assert (r.pos, r.remaining_bytes) == (8, 0)
    with pytest.raises(BufferUnderflowError):
        r.int8()
    r.seek(4)
    assert r.int32() == 2
    with pytest.raises(ValueError):
        r.seek(9)                  # past the window
    with pytest.raises(ValueError):
        r.seek(-1)
    with pytest.raises(AttributeError):
        r.pos = -100               # no unchecked repositioning from Python
    with pytest.raises(ValueError):
        Reader(raw, 8, 4)
    with pytest.raises(ValueError):
        Reader(raw, 0, 13)


def test_view_is_zero_copy_and_keeps_owner_alive():
    buf = bytearray(b"\x00\x00\x00\x03abcxyz")
    r = Reader(buf)
    n = r.int32()
    v = r.view(n)
    assert bytes(v) == b"abc"
    with pytest.raises(BufferError):
        buf.extend(b"!")            # the reader's export pins the bytearray
    del r
    buf[4] = ord("z")
    assert bytes(v) == b"zbc"      # same memory, no copy

    def make():
        return Reader(b"\x00\x01" + b"x" * 100)

    r = make()                     # the only reference to the bytes is the reader's
    r.int16()
    view = r.view(100)
    del r
    assert bytes(view) == b"x" * 100


def test_view_of_typed_memoryview_is_bytes():
    data = memoryview(array.array("H", [0x0102, 0x0304]))
    r = Reader(data)
    v = r.view(4)
    assert v.format == "B" and len(v) == 4


# --------------------------------------------------------------------------- hostile input
ENCODED = {}


def _samples():
    w = Writer()
    cases = [
        ("int8", 5), ("int16", -300), ("uint16", 65000), ("int32", -70000), ("uint32", 2**32 - 2),
        ("int64", -(2**40)), ("float64", 2.25), ("boolean", True), ("uvarint", 2**31),
        ("uvarlong", 2**60), ("varint", -(2**30)), ("varlong", 2**50), ("string", "héllo"),
        ("nullable_string", "x"), ("compact_string", "abc"), ("compact_nullable_string", "q"),
        ("bytes", b"12345"), ("nullable_bytes", b"9"), ("compact_bytes", b"\x00\x01"),
        ("compact_nullable_bytes", b"zz"), ("uuid", uuid.UUID(int=12345)),
    ]
    out = []
    for name, value in cases:
        w = Writer()
        getattr(w, name)(value)
        out.append((name, w.getvalue()))
    return out


@pytest.mark.parametrize("name,data", _samples(), ids=[n for n, _ in _samples()])
def test_truncated_at_every_prefix_raises_underflow(name, data):
    for cut in range(len(data)):
        r = Reader(data[:cut])
        with pytest.raises(BufferUnderflowError):
            getattr(r, name)()


@pytest.mark.parametrize("data,reader,error", [
    (struct.pack(">h", -2), "nullable_string", InvalidLengthError),
    (struct.pack(">h", -1), "string", InvalidLengthError),
    (struct.pack(">h", -32768), "string", InvalidLengthError),
    (struct.pack(">i", -1), "bytes", InvalidLengthError),
    (struct.pack(">i", -2), "nullable_bytes", InvalidLengthError),
    (b"\x00", "compact_string", InvalidLengthError),        # null where not nullable
    (b"\x00", "compact_bytes", InvalidLengthError),
    (struct.pack(">i", -2), "array_len", InvalidLengthError),
    (struct.pack(">i", -(2**31)), "array_len", InvalidLengthError),
    (ref_uvarint(0x8001) + b"a" * 0x8000, "compact_string", InvalidLengthError),  # > int16
])
def test_negative_and_invalid_lengths(data, reader, error):
    with pytest.raises(error):
        getattr(Reader(data), reader)()


def _assert_small_allocation(fn, exc):
    tracemalloc.start()
    try:
        with pytest.raises(exc):
            fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"allocated {peak} bytes for a hostile length"


@pytest.mark.parametrize("reader,prefix", [
    ("bytes", struct.pack(">i", 2**31 - 1)),
    ("nullable_bytes", struct.pack(">i", 2**31 - 1)),
    ("compact_bytes", ref_uvarint(2**32 - 1)),
    ("compact_nullable_bytes", ref_uvarint(2**32 - 1)),
    ("string", struct.pack(">h", 2**15 - 1)),
    ("compact_string", ref_uvarint(2**15)),
])
def test_huge_lengths_raise_without_allocating(reader, prefix):
    _assert_small_allocation(lambda: getattr(Reader(prefix + b"abc"), reader)(),
                             BufferUnderflowError)


@pytest.mark.parametrize("reader,prefix", [
    ("array_len", struct.pack(">i", 2**31 - 1)),
    ("compact_array_len", ref_uvarint(2**32 - 1)),
])
def test_absurd_array_counts_raise_before_allocation(reader, prefix):
    _assert_small_allocation(lambda: getattr(Reader(prefix + bytes(100)), reader)(),
                             InvalidLengthError)
    # the bound uses the element's minimum size: 30 elements of >= 4 bytes need 120 bytes
    r = Reader(struct.pack(">i", 30) + bytes(100))
    with pytest.raises(InvalidLengthError):
        r.array_len(4)
    assert Reader(struct.pack(">i", 25) + bytes(100)).array_len(4) == 25


def test_absurd_tagged_field_count():
    with pytest.raises(InvalidLengthError):
        Reader(ref_uvarint(2**31) + bytes(10)).tagged_fields()
    with pytest.raises(BufferUnderflowError):
        Reader(b"\x01\x05\xff\xff\xff\xff\x0f").skip_tagged()   # field size beyond the end


@pytest.mark.parametrize("data,reader", [
    (b"\xff" * 11, "uvarlong"),                   # 11-byte varint
    (b"\xff" * 10 + b"\x00", "varlong"),
    (b"\xff" * 9 + b"\x02", "uvarlong"),          # 10th byte carries bits beyond 64
    (b"\xff" * 6, "uvarint"),                     # 6-byte 32-bit varint
    (b"\xff" * 4 + b"\x10", "uvarint"),           # 5th byte carries bits beyond 32
    (b"\x80" * 5 + b"\x00", "varint"),
])
def test_bad_varints(data, reader):
    with pytest.raises(VarintError):
        getattr(Reader(data), reader)()


def test_truncated_varint_is_underflow_not_varint_error():
    for data in (b"", b"\x80", b"\xff\xff\xff\xff"):
        with pytest.raises(BufferUnderflowError):
            Reader(data).uvarint()
    with pytest.raises(BufferUnderflowError):
        wire.decode_varints(b"\x02\x80", 2)
    with pytest.raises(VarintError):
        wire.sum_varints(b"\x02" + b"\xff" * 6)


def test_invalid_utf8_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        Reader(b"\x00\x02\xc3\x28").string()
    with pytest.raises(ProtocolError):
        Reader(b"\x03\xff\xfe").compact_string()


def test_writer_rejects_out_of_range_values():
    w = Writer()
    with pytest.raises(OverflowError):
        w.int8(128)
    with pytest.raises(OverflowError):
        w.int32(2**31)
    with pytest.raises(OverflowError):
        w.uint16(-1)
    with pytest.raises(TypeError):
        w.string(None)
    with pytest.raises(TypeError):
        w.bytes(None)
    with pytest.raises(ValueError):
        w.uuid(b"short")
    with pytest.raises(OverflowError):
        w.string("x" * 40000)
    assert len(w) == 0
