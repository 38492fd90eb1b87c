"""Wire-layer benchmarks (pytest-benchmark): varint decoding, frame splitting, Fetch decode.

Run:  python -m pytest bench/bench_wire.py --benchmark-only --benchmark-columns=mean,ops
Each compiled case has a plain-Python (or peer client) counterpart in the same group, so
the ratio is measured in one run on the same machine.
"""
from __future__ import annotations

import random
import struct
import uuid

import pytest

from kclient.protocol import decode_response, encode_request, encode_response
from kcore import wire
from kcore.frames import FrameSplitter

# --------------------------------------------------------------------------- varints
N_VARINTS = 10_000


def _zigzag_stream():
    rng = random.Random(1)
    # record-like mix: mostly 1-2 byte deltas/lengths, some larger values
    values = [rng.choice((rng.randint(-60, 60), rng.randint(-8000, 8000), rng.randint(-(2**31), 2**31 - 1)))
              for _ in range(N_VARINTS)]
    out = bytearray()
    for v in values:
        u = ((v << 1) ^ (v >> 31)) & 0xFFFFFFFF
        while u >= 0x80:
            out.append((u & 0x7F) | 0x80)
            u >>= 7
        out.append(u)
    return bytes(out), values


VARINT_DATA, VARINT_VALUES = _zigzag_stream()


def py_decode_varints(data: bytes, count: int) -> list[int]:
    """Plain-Python reference decoder (what a pure-Python client does per varint)."""
    out = []
    pos = 0
    for _ in range(count):
        value = shift = 0
        while True:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
        out.append((value >> 1) ^ -(value & 1))
    return out


@pytest.mark.benchmark(group="varint-decode-10k")
def test_varint_decode_compiled(benchmark):
    out = benchmark(wire.decode_varints, VARINT_DATA, N_VARINTS)
    assert out == VARINT_VALUES


@pytest.mark.benchmark(group="varint-decode-10k")
def test_varint_decode_compiled_nogil_sum(benchmark):
    count, total = benchmark(wire.sum_varints, VARINT_DATA)
    assert (count, total) == (N_VARINTS, sum(VARINT_VALUES))


@pytest.mark.benchmark(group="varint-decode-10k")
def test_varint_decode_python_reference(benchmark):
    out = benchmark(py_decode_varints, VARINT_DATA, N_VARINTS)
    assert out == VARINT_VALUES


# --------------------------------------------------------------------------- frame splitting
CHUNK = 65536


def _stream(n_frames: int, size: int) -> list[bytes]:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    stream = (struct.pack(">i", size) + payload) * n_frames
    return [stream[i:i + CHUNK] for i in range(0, len(stream), CHUNK)]


LARGE_CHUNKS = _stream(32, 1 << 20)          # 32 MiB of 1 MiB frames, 64 KiB reads
SMALL_CHUNKS = _stream(20_000, 200)          # ~4 MiB of 200 B frames, 64 KiB reads


def split_compiled(chunks):
    fs = FrameSplitter(16 << 20)
    n = 0
    for c in chunks:
        n += len(fs.feed(c))
    return n


def split_python_reference(chunks):
    """A straightforward Python splitter over a bytearray buffer."""
    buf = bytearray()
    n = 0
    for c in chunks:
        buf += c
        pos = 0
        while len(buf) - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            if len(buf) - pos - 4 < size:
                break
            bytes(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
            n += 1
        del buf[:pos]
    return n


@pytest.mark.benchmark(group="frame-split-32x1MiB")
def test_frame_splitter_large_frames(benchmark):
    assert benchmark(split_compiled, LARGE_CHUNKS) == 32


@pytest.mark.benchmark(group="frame-split-32x1MiB")
def test_frame_splitter_large_frames_python_reference(benchmark):
    assert benchmark(split_python_reference, LARGE_CHUNKS) == 32


@pytest.mark.benchmark(group="frame-split-20000x200B")
def test_frame_splitter_small_frames(benchmark):
    assert benchmark(split_compiled, SMALL_CHUNKS) == 20_000


@pytest.mark.benchmark(group="frame-split-20000x200B")
def test_frame_splitter_small_frames_python_reference(benchmark):
    assert benchmark(split_python_reference, SMALL_CHUNKS) == 20_000


# --------------------------------------------------------------------------- Fetch response
TOPIC_ID = uuid.UUID(int=0xABCDEF)


def fetch_frame(version: int, record_bytes: int = 64 * 1024) -> bytes:
    topic = {"partitions": [
        {"partition_index": p, "error_code": 0, "high_watermark": 1_000_000,
         "last_stable_offset": 1_000_000, "log_start_offset": 0, "aborted_transactions": None,
         "preferred_read_replica": -1, "records": bytes(record_bytes)} for p in range(8)]}
    if version >= 13:
        topic["topic_id"] = TOPIC_ID
    else:
        topic["topic"] = "bench-topic"
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [topic]}
    return encode_response(1, version, 7, body)[4:]


@pytest.mark.benchmark(group="fetch-response-decode-8-partitions")
@pytest.mark.parametrize("version", [11, 12, 16])
def test_fetch_response_decode(benchmark, version):
    frame = fetch_frame(version)
    body = benchmark(decode_response, 1, version, frame)
    assert len(body["responses"][0]["partitions"]) == 8


@pytest.mark.benchmark(group="fetch-response-decode-8-partitions")
def test_fetch_response_decode_aiokafka_v11(benchmark):
    """Peer: aiokafka's protocol classes decoding the same v11 response body."""
    fetch = pytest.importorskip("aiokafka.protocol.fetch")
    frame = fetch_frame(11)
    body = benchmark(fetch.FetchResponse_v11.decode, frame[4:])
    assert len(body.topics[0][1]) == 8


@pytest.mark.benchmark(group="fetch-request-encode-8-partitions")
@pytest.mark.parametrize("version", [11, 16])
def test_fetch_request_encode(benchmark, version):
    topic = {"partitions": [{"partition": p, "fetch_offset": 1000 * p, "partition_max_bytes": 1 << 20}
                            for p in range(8)]}
    topic["topic_id" if version >= 13 else "topic"] = TOPIC_ID if version >= 13 else "bench-topic"
    body = {"max_wait_ms": 500, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
            "topics": [topic]}
    frame = benchmark(encode_request, 1, version, 9, "kclient", body)
    assert len(frame) > 100
