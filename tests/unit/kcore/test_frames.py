"""kcore.frames: request/response headers against hand-built bytes, and FrameSplitter
against a plain-Python splitter under arbitrary chunking and hostile size prefixes."""
from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kclient.errors import BufferUnderflowError, FrameTooLargeError, InvalidLengthError
from kcore import frames
from kcore.frames import FrameSplitter

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)


# --------------------------------------------------------------------------- headers
def test_request_header_versions_known_bytes():
    base = "0012" "0003" "0000002a"          # ApiVersions v3, correlation id 42
    assert frames.encode_request_header(18, 3, 42, "kc", 0).hex() == base
    assert frames.encode_request_header(18, 3, 42, "kc", 1).hex() == base + "0002" + "6b63"
    assert frames.encode_request_header(18, 3, 42, "kc", 2).hex() == base + "0002" "6b63" "00"
    # client_id stays a classic nullable string in v2 (not compact)
    assert frames.encode_request_header(18, 3, 42, None, 2).hex() == base + "ffff" "00"


def test_request_header_decode():
    raw = bytes.fromhex("000c0004" "00000007" "0003616263" "01" "05" "01" "ff") + b"body"
    # v2: the tagged section holds one unknown tag (5, size 1) that is skipped
    assert frames.decode_request_header(raw, 2) == (12, 4, 7, "abc", 17)
    assert frames.decode_request_header(raw, 1) == (12, 4, 7, "abc", 13)
    assert frames.peek_request_api(raw) == (12, 4)
    for cut in range(11):
        with pytest.raises(BufferUnderflowError):
            frames.decode_request_header(raw[:cut], 1)


def test_response_header_versions():
    assert frames.encode_response_header(-5, 0).hex() == "fffffffb"
    assert frames.encode_response_header(-5, 1).hex() == "fffffffb00"
    tagged = bytes.fromhex("00000009" "02" "00" "01" "aa" "07" "00") + b"rest"
    assert frames.decode_response_header(tagged, 1) == (9, 10)
    assert frames.decode_response_header(tagged, 0) == (9, 4)
    assert frames.response_correlation_id(tagged) == 9
    with pytest.raises(BufferUnderflowError):
        frames.response_correlation_id(b"\x00\x00\x01")
    with pytest.raises(BufferUnderflowError):
        frames.decode_response_header(bytes.fromhex("00000009" "01" "00" "05" "aa"), 1)


# --------------------------------------------------------------------------- splitter
def ref_split(stream: bytes) -> tuple[list[bytes], int]:
    """Plain-Python reference: complete frames and the number of leftover bytes."""
    out, pos = [], 0
    while len(stream) - pos >= 4:
        (n,) = struct.unpack_from(">i", stream, pos)
        if len(stream) - pos - 4 < n:
            break
        out.append(stream[pos + 4:pos + 4 + n])
        pos += 4 + n
    return out, len(stream) - pos


def framed(payloads) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def feed_all(splitter, stream, cuts):
    got = []
    prev = 0
    for c in sorted(set(cuts)) + [len(stream)]:
        got.extend(bytes(f) for f in splitter.feed(stream[prev:c]))
        prev = c
    return got


@SETTINGS
@given(payloads=st.lists(st.binary(max_size=300), max_size=12),
       cuts=st.lists(st.integers(0, 4000), max_size=30),
       last=st.binary(max_size=20), keep=st.integers(0, 23))
def test_splitter_matches_reference_for_any_chunking(payloads, cuts, last, keep):
    tail = framed([last])
    stream = framed(payloads) + tail[:min(keep, len(tail) - 1)]   # an incomplete last frame
    cuts = [c for c in cuts if c <= len(stream)]
    want, leftover = ref_split(stream)
    fs = FrameSplitter(1000)
    assert feed_all(fs, stream, cuts) == want
    assert fs.buffered_bytes == leftover


def test_one_byte_at_a_time_and_everything_at_once():
    payloads = [b"", b"a", b"xyz" * 100, bytes(range(256)) * 40]
    stream = framed(payloads)
    fs = FrameSplitter(1 << 20)
    got = []
    for i in range(len(stream)):
        got.extend(bytes(f) for f in fs.feed(stream[i:i + 1]))
    assert got == payloads
    assert [bytes(f) for f in FrameSplitter(1 << 20).feed(stream)] == payloads


def test_large_frames_from_immutable_chunks_are_zero_copy():
    big = bytes(range(256)) * 64                      # 16 KiB
    stream = framed([big, b"small", big])
    out = FrameSplitter(1 << 20).feed(stream)
    assert [bytes(f) for f in out] == [big, b"small", big]
    assert isinstance(out[0], memoryview) and out[0].obj is stream
    assert isinstance(out[1], bytes)


def test_frames_from_mutable_chunks_are_copies():
    big = b"q" * 10000
    chunk = bytearray(framed([big]))
    (frame,) = FrameSplitter(1 << 20).feed(chunk)
    chunk[4:8] = b"ZZZZ"                              # the caller reuses its receive buffer
    assert bytes(frame) == big


def test_split_frame_is_assembled_once():
    size = 4 << 20
    payload = bytes(range(256)) * (size // 256)
    stream = framed([payload])
    fs = FrameSplitter(8 << 20)
    tracemalloc.start()
    try:
        outs = [fs.feed(stream[i:i + 65536]) for i in range(0, len(stream), 65536)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert all(o == [] for o in outs[:-1]) and len(outs[-1]) == 1
    assert bytes(outs[-1][0]) == payload
    # one buffer of the final size plus one chunk: no growing/concatenating copies
    assert peak < size + 3 * 65536 + 100_000
    assert fs.buffered_bytes == 0 and fs.pending_frame_size is None


def test_pending_state_is_reported():
    fs = FrameSplitter(100)
    assert fs.feed(b"\x00\x00") == []
    assert fs.buffered_bytes == 2 and fs.pending_frame_size is None
    assert fs.feed(b"\x00\x0aabc") == []
    assert fs.buffered_bytes == 7 and fs.pending_frame_size == 10
    assert fs.feed(b"defghij\x00") == [b"abcdefghij"]
    assert fs.buffered_bytes == 1
    fs.reset()
    assert fs.buffered_bytes == 0


@pytest.mark.parametrize("prefix,error", [
    (struct.pack(">i", -1), InvalidLengthError),
    (struct.pack(">i", -(2**31)), InvalidLengthError),
    (struct.pack(">i", 2**31 - 1), FrameTooLargeError),
    (struct.pack(">i", 1001), FrameTooLargeError),
])
def test_hostile_prefix_raises_before_allocating(prefix, error):
    for split in range(5):                    # prefix whole or cut at every byte
        fs = FrameSplitter(1000)
        tracemalloc.start()
        try:
            with pytest.raises(error):
                fs.feed(prefix[:split])
                fs.feed(prefix[split:] + b"x" * 10)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 100_000
        # the stream can no longer be framed: the splitter stays failed until reset()
        with pytest.raises(error):
            fs.feed(framed([b"ok"]))
        fs.reset()
        assert fs.feed(framed([b"ok"])) == [b"ok"]


def test_frame_at_exact_limit_is_accepted():
    fs = FrameSplitter(10)
    assert fs.feed(framed([b"0123456789"])) == [b"0123456789"]
    with pytest.raises(FrameTooLargeError):
        FrameSplitter(10).feed(framed([b"0123456789X"]))


def test_splitter_accepts_memoryview_and_bytearray_chunks():
    stream = framed([b"abc", b"defg"])
    fs = FrameSplitter(100)
    got = fs.feed(memoryview(stream)[:5]) + fs.feed(bytearray(stream[5:]))
    assert [bytes(f) for f in got] == [b"abc", b"defg"]


def test_bad_max_frame_bytes():
    with pytest.raises(ValueError):
        FrameSplitter(-1)
    with pytest.raises(ValueError):
        FrameSplitter(2**31)
