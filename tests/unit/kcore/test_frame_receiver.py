"""kcore.frames.FrameReceiver over real sockets (socket.socketpair()), against the plain-Python
reference splitter of test_frames; and BrokerConnection's send/receive byte path.

Each piece of a stream is written whole before the receiver reads, so the receiver's reads
see exactly the cuts a test chooses; large transfers use a writer thread.
"""
from __future__ import annotations

import hashlib
import socket
import struct
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kclient.network.connection import BrokerConnection, ExponentialBackoff
from kclient.network.network_config import NetworkClientConfig
from kclient.errors import FrameTooLargeError, InvalidLengthError, KafkaConnectionError
from kclient.network.metadata import Node
from kcore.frames import Frame, FrameReceiver

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None)


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


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    yield a, b
    a.close()
    b.close()


def deliver(rx: FrameReceiver, sock, writer, piece: bytes, drain: bool = False) -> list:
    """Write ``piece``, then receive until the receiver has read all of it."""
    want = rx.received_bytes + len(piece)
    writer.sendall(piece)
    got = []
    calls = 0
    while rx.received_bytes < want:
        got.extend(rx.receive(sock, drain))
        calls += 1
        assert calls < 10 * len(piece) + 10, "receiver makes no progress"
    got.extend(rx.receive(sock, drain))       # nothing more to read: must not block or lose state
    return got


def receive_pieces(rx, sock, writer, stream: bytes, cuts, drain=False) -> list:
    got, prev = [], 0
    for c in sorted(set(cuts)) + [len(stream)]:
        if c > prev:
            got.extend(deliver(rx, sock, writer, stream[prev:c], drain))
        prev = c
    return got


# --------------------------------------------------------------------------- reference
@SETTINGS
@given(payloads=st.lists(st.binary(max_size=300), max_size=12),
       cuts=st.lists(st.integers(0, 4000), max_size=30),
       last=st.binary(max_size=200), keep=st.integers(0, 203),
       buffer_size=st.sampled_from([64, 100, 256, 65536]), drain=st.booleans())
def test_receiver_matches_reference_for_any_cut(payloads, cuts, last, keep, buffer_size, drain):
    tail = framed([last])
    stream = framed(payloads) + tail[:min(keep, len(tail) - 1)]     # an incomplete last frame
    want, leftover = ref_split(stream)
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        rx = FrameReceiver(1000, buffer_size)
        got = receive_pieces(rx, a, b, stream, [c for c in cuts if c <= len(stream)], drain)
        assert got == want
        assert all(type(f) is bytes for f in got)
        assert rx.buffered_bytes == leftover
        assert rx.received_bytes == len(stream)
    finally:
        a.close()
        b.close()


def test_frames_split_across_many_one_byte_reads(pair):
    a, b = pair
    payloads = [b"", b"a", b"xyz" * 100, bytes(range(256)) * 40, b"end"]
    stream = framed(payloads)
    for buffer_size in (64, 65536):
        rx = FrameReceiver(1 << 20, buffer_size)
        got = receive_pieces(rx, a, b, stream, range(1, len(stream)))
        assert got == payloads
        assert rx.buffered_bytes == 0 and rx.pending_frame_size is None


def test_many_frames_per_read(pair):
    a, b = pair
    payloads = [b"%06d" % i * (i % 7) for i in range(2000)]
    stream = framed(payloads)
    rx = FrameReceiver(1 << 20, 1 << 20)          # the whole stream fits one read
    got = deliver(rx, a, b, stream)
    assert got == payloads
    # one read, one call: a non-draining call returns as soon as a read completed frames
    rx2 = FrameReceiver(1 << 20, 1 << 20)
    b.sendall(stream)
    assert rx2.receive(a) == payloads
    assert rx2.received_bytes == len(stream)


def test_pending_state_is_reported(pair):
    a, b = pair
    rx = FrameReceiver(1000, 64)
    assert deliver(rx, a, b, b"\x00\x00") == []
    assert rx.buffered_bytes == 2 and rx.pending_frame_size is None
    assert deliver(rx, a, b, b"\x00\x0aabc") == []
    assert rx.buffered_bytes == 7 and rx.pending_frame_size == 10
    assert deliver(rx, a, b, b"defghij\x00") == [b"abcdefghij"]
    assert rx.buffered_bytes == 1
    # a frame of at least half the buffer is received in place
    assert deliver(rx, a, b, b"\x00\x00\x64" + b"q" * 10) == []
    assert rx.pending_frame_size == 100 and rx.buffered_bytes == 14
    assert deliver(rx, a, b, b"q" * 90) == [b"q" * 100]
    rx.reset()
    assert rx.buffered_bytes == 0 and rx.pending_frame_size is None


# --------------------------------------------------------------------------- large frames
def test_huge_frame_received_intact_into_one_buffer():
    size = 50 * 1024 * 1024
    payload = bytes(range(256)) * (size // 256)
    digest = hashlib.sha256(payload).digest()
    small = [b"before", b"after"]
    header, trailer = framed(small[:1]) + struct.pack(">i", size), framed(small[1:])
    a, b = socket.socketpair()
    a.setblocking(False)
    errors = []

    def write():
        try:
            b.sendall(header)
            b.sendall(payload)
            b.sendall(trailer)
        except OSError as exc:  # pragma: no cover - reported by the main thread
            errors.append(exc)

    rx = FrameReceiver(64 * 1024 * 1024, 65536)
    got: list = []
    import select
    tracemalloc.start()
    writer = threading.Thread(target=write)
    writer.start()
    try:
        while len(got) < 3:
            r, _, _ = select.select([a], [], [], 10)
            assert r, "no data from the writer within 10 s"
            got.extend(rx.receive(a, True))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        writer.join(30)
        a.close()
        b.close()
    assert not errors
    assert got[0] == b"before" and got[2] == b"after"
    assert type(got[1]) is Frame and len(got[1]) == size
    assert hashlib.sha256(got[1]).digest() == digest
    # small change only: never a second copy or a growing buffer (the frame's own block comes
    # from kcore.pool's malloc, which tracemalloc does not see)
    assert peak < size + 1_000_000, peak
    assert rx.received_bytes == len(header) + size + len(trailer)


def test_large_frame_is_immutable_and_not_aliased(pair):
    """Frames handed out never share memory with the receive buffer or each other."""
    a, b = pair
    rx = FrameReceiver(1 << 20, 64)
    first = deliver(rx, a, b, framed([b"A" * 20, b"B" * 200]))
    again = deliver(rx, a, b, framed([b"C" * 20, b"D" * 200]))
    assert first == [b"A" * 20, b"B" * 200] and again == [b"C" * 20, b"D" * 200]
    assert [type(f) for f in first + again] == [bytes, Frame, bytes, Frame]
    for f in first + again:
        assert memoryview(f).readonly
    with pytest.raises(TypeError):
        memoryview(first[1])[0] = 0


def test_large_frames_are_pooled_frames_equal_to_their_bytes(pair):
    """A large frame is a Frame over a kcore.pool block: bytes-like, equal to the bytes the
    plain-Python reference splits out, and its block is reused once the frame is gone."""
    a, b = pair
    rx = FrameReceiver(1 << 24, 65536)
    payloads = [bytes(range(256)) * 400, b"x" * 10, b"\x00" * 100_000]
    stream = framed(payloads)
    got = receive_pieces(rx, a, b, stream, [5, 70_000, 102_411])
    assert got == ref_split(stream)[0] == payloads
    big = got[0]
    assert isinstance(big, Frame) and not isinstance(got[1], Frame)
    assert bytes(big) == payloads[0] and len(big) == len(payloads[0])
    assert big == bytearray(payloads[0]) and big == memoryview(payloads[0])
    assert big != payloads[0][:-1] + b"?" and big != payloads[0][:-1]
    assert memoryview(big).format == "B" and memoryview(big)[3:6].tobytes() == payloads[0][3:6]
    assert struct.unpack_from(">i", big, 4)[0] == struct.unpack_from(">i", payloads[0], 4)[0]
    with pytest.raises(TypeError):
        hash(big)
    assert "Frame of 102400 bytes" in repr(big)
    del got, big
    _in_fresh_process(_POOL_RETURN_CHECK)


def test_recycled_block_never_shows_an_older_frame(pair):
    """A frame received into a recycled block holds exactly its own bytes, however the
    stream is cut (nothing of the block's previous frame leaks through)."""
    a, b = pair
    rx = FrameReceiver(1 << 24, 65536)
    size = 200_000
    for i, fill in enumerate((b"\xaa", b"\x55", b"\x00")):
        payload = fill * (size - 17) + bytes(range(17))
        got = receive_pieces(rx, a, b, framed([payload]), [3, 4, 1000 + i, 150_000])
        assert got == [payload]
        del got


def test_partial_large_frame_dropped_by_reset_returns_its_block(pair):
    a, b = pair
    rx = FrameReceiver(1 << 24, 65536)
    stream = framed([b"z" * 300_000])
    assert receive_pieces(rx, a, b, stream[:100_000], []) == []
    assert rx.pending_frame_size == 300_000
    rx.reset()
    assert rx.buffered_bytes == 0
    _in_fresh_process(_POOL_RESET_CHECK)


# The pool is process-wide and bounded: after other tests filled it, a returned block evicts
# another and the counts say nothing. These checks run where it starts empty.
_POOL_RETURN_CHECK = """
from test_frame_receiver import framed, receive_pieces
from kcore.frames import Frame, FrameReceiver
from kcore.pool import pool_stats
import socket
a, b = socket.socketpair(); a.setblocking(False)
rx = FrameReceiver(1 << 24, 65536)
got = receive_pieces(rx, a, b, framed([b"y" * 102_400, b"x" * 10, b"z" * 100_000]), [5, 70_000])
assert [type(g) is Frame for g in got] == [True, False, True], got
assert pool_stats() == (0, 0), pool_stats()
del got
assert pool_stats() == (2, 2 * 106496), pool_stats()    # both blocks back, in size classes (8 KiB steps)
got = receive_pieces(rx, a, b, framed([b"w" * 101_000]), [])
assert pool_stats() == (1, 106496), pool_stats()        # the next large frame took one of them
"""
_POOL_RESET_CHECK = """
from test_frame_receiver import framed, receive_pieces
from kcore.frames import FrameReceiver
from kcore.pool import pool_stats
import socket
a, b = socket.socketpair(); a.setblocking(False)
rx = FrameReceiver(1 << 24, 65536)
assert receive_pieces(rx, a, b, framed([b"z" * 300_000])[:100_000], []) == []
assert pool_stats() == (0, 0), pool_stats()
rx.reset()
assert pool_stats() == (1, 327680), pool_stats()        # 300,000 rounded up to its size class
"""


def _in_fresh_process(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


class KeepingSocket:
    """A real socket that keeps every buffer recv_into was given (to probe the views)."""

    def __init__(self, sock):
        self.sock = sock
        self.views: list = []

    def recv_into(self, buf):
        self.views.append(buf)
        return self.sock.recv_into(buf)


def test_writable_views_are_released_after_each_read(pair):
    a, b = pair
    rx = FrameReceiver(1 << 20, 64)
    keeper = KeepingSocket(a)
    b.sendall(framed([b"s" * 10, b"L" * 500]))
    got: list = []
    while len(got) < 2:
        got.extend(rx.receive(keeper))
    assert got == [b"s" * 10, b"L" * 500]
    assert len(keeper.views) >= 2
    for view in keeper.views:   # nothing can write into a frame (or the buffer) through them
        with pytest.raises(ValueError):
            view[0] = 0
    assert got[1] == b"L" * 500


class LyingSocket:
    def recv_into(self, buf):
        return len(buf) + 1


def test_recv_into_overrun_is_refused():
    with pytest.raises(ValueError):
        FrameReceiver(1000, 64).receive(LyingSocket())


# --------------------------------------------------------------------------- hostile prefixes
@pytest.mark.parametrize("prefix,error", [
    (struct.pack(">i", -1), InvalidLengthError),
    (struct.pack(">i", -(2**31)), InvalidLengthError),
    (struct.pack(">i", 2**31 - 1), FrameTooLargeError),
    (struct.pack(">i", 1001), FrameTooLargeError),
])
def test_hostile_prefix_raises_before_allocating(prefix, error):
    for split in range(5):                      # prefix whole or cut at every byte
        a, b = socket.socketpair()
        try:
            a.setblocking(False)
            rx = FrameReceiver(1000, 65536)
            assert deliver(rx, a, b, framed([b"ok"])) == [b"ok"]
            tracemalloc.start()
            try:
                with pytest.raises(error):
                    if split:
                        assert deliver(rx, a, b, prefix[:split]) == []
                    deliver(rx, a, b, prefix[split:] + b"x" * 10)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert peak < 100_000, peak
            # the stream can no longer be framed: the receiver stays failed until reset()
            with pytest.raises(error):
                rx.receive(a)
            rx.reset()
            b.sendall(framed([b"again"]))
            assert rx.receive(a) == [b"again"]
        finally:
            a.close()
            b.close()


def test_huge_prefix_under_a_huge_limit_is_not_preallocated_from_the_buffer(pair):
    """Only the frame itself is allocated (at its final size), once its prefix is known."""
    a, b = pair
    rx = FrameReceiver(2**31 - 1, 65536)
    tracemalloc.start()
    try:
        assert deliver(rx, a, b, struct.pack(">i", 8 << 20) + b"z" * 100) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The frame's block comes from kcore.pool (malloc, unseen by tracemalloc): nothing sized
    # by the prefix was allocated through Python, and the frame waits for its bytes.
    assert peak < 100_000
    assert rx.pending_frame_size == 8 << 20 and rx.buffered_bytes == 4 + 100
    assert rx.pending_frame_size == 8 << 20 and rx.buffered_bytes == 104


def test_frame_at_exact_limit_is_accepted(pair):
    a, b = pair
    assert deliver(FrameReceiver(10, 64), a, b, framed([b"0123456789"])) == [b"0123456789"]
    with pytest.raises(FrameTooLargeError):
        deliver(FrameReceiver(10, 64), a, b, framed([b"0123456789X"]))


def test_bad_constructor_arguments():
    for args in ((-1,), (2**31,), (100, 63), (100, 2**31)):
        with pytest.raises(ValueError):
            FrameReceiver(*args)


# --------------------------------------------------------------------------- end of stream
@pytest.mark.parametrize("buffer_size", [64, 65536])
@pytest.mark.parametrize("sent,detail", [
    (b"", "connection closed by the peer"),
    (b"\x00\x00", "part of a frame size prefix"),
    (struct.pack(">i", 20) + b"abc", "3 of the 20 bytes of a frame"),
    (struct.pack(">i", 5000) + b"x" * 1000, "1000 of the 5000 bytes of a frame"),
])
def test_peer_closing_mid_frame_is_a_connection_error(buffer_size, sent, detail):
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        rx = FrameReceiver(1 << 20, buffer_size)
        assert deliver(rx, a, b, framed([b"whole"]) + sent) == [b"whole"]
        b.shutdown(socket.SHUT_WR)
        with pytest.raises(KafkaConnectionError, match="closed by the peer") as info:
            rx.receive(a)
        assert detail in str(info.value)
        with pytest.raises(KafkaConnectionError):    # and again: the stream stays at its end
            rx.receive(a)
    finally:
        a.close()
        b.close()


def test_frames_before_end_of_stream_are_delivered_first(pair):
    a, b = pair
    rx = FrameReceiver(1 << 20, 64)
    b.sendall(framed([b"x" * 28, b"y" * 28]))          # exactly one full 64-byte read
    b.shutdown(socket.SHUT_WR)
    # draining: the full read asks for more, meets the end, still returns both frames
    assert rx.receive(a, True) == [b"x" * 28, b"y" * 28]
    with pytest.raises(KafkaConnectionError, match="closed by the peer"):
        rx.receive(a, True)


# --------------------------------------------------------------------------- blocking / EAGAIN
@pytest.mark.parametrize("buffer_size", [64, 65536])
def test_eagain_in_the_middle_of_a_frame_resumes(pair, buffer_size):
    a, b = pair
    rx = FrameReceiver(1 << 20, buffer_size)
    big = bytes(range(256)) * 20
    stream = framed([b"head", big, b"tail"])
    pieces = [stream[:2], stream[2:10], stream[10:3000], stream[3000:-3], stream[-3:]]
    got = []
    for piece in pieces:
        b.sendall(piece)
        got.extend(rx.receive(a, True))
        with pytest.raises(BlockingIOError):
            a.recv(1, socket.MSG_PEEK)                # the socket is drained: EAGAIN next
        got.extend(rx.receive(a, True))               # EAGAIN is no error and changes nothing
    assert got == [b"head", big, b"tail"]


def test_blocking_socket_returns_once_a_frame_is_complete():
    a, b = socket.socketpair()
    try:
        a.settimeout(5)
        rx = FrameReceiver(1 << 20, 64)
        b.sendall(framed([b"p" * 60]))                # fills the 64-byte buffer exactly
        assert rx.receive(a) == [b"p" * 60]           # returns without reading again
        b.sendall(framed([b"q" * 10]))
        assert rx.receive(a) == [b"q" * 10]
        a.settimeout(0.05)
        with pytest.raises(TimeoutError):             # a timeout propagates ...
            rx.receive(a)
        b.sendall(framed([b"r" * 3]))
        assert rx.receive(a) == [b"r" * 3]            # ... and the receiver resumes
    finally:
        a.close()
        b.close()


def test_blocking_socket_with_a_writer_thread():
    a, b = socket.socketpair()
    payloads = [bytes([i % 251]) * (i * 37 % 5000) for i in range(300)]
    stream = framed(payloads)

    def write():
        for i in range(0, len(stream), 1000):
            b.sendall(stream[i:i + 1000])

    writer = threading.Thread(target=write)
    writer.start()
    try:
        a.settimeout(10)
        rx = FrameReceiver(1 << 20, 4096)
        got = []
        while len(got) < len(payloads):
            got.extend(rx.receive(a))
        assert got == payloads
    finally:
        writer.join(10)
        a.close()
        b.close()


# --------------------------------------------------------------------------- BrokerConnection
def _connection(sock) -> BrokerConnection:
    conn = BrokerConnection(
        Node(1, "scripted", 9092), receiver_factory=lambda: FrameReceiver(1 << 24, 65536),
        socket_factory=lambda node: sock, reconnect_backoff=ExponentialBackoff(10, 100),
        setup_timeout=ExponentialBackoff(1000, 1000))
    conn.start_connect(0)
    return conn


def test_connection_read_reports_frames_activity_and_close():
    a, b = socket.socketpair()
    try:
        conn = _connection(a)
        assert conn.read(5) == [] and conn.last_activity_ms == 0   # EAGAIN: no activity
        b.sendall(framed([b"one", b"two"]) + b"\x00")
        assert conn.read(7) == [b"one", b"two"] and conn.last_activity_ms == 7
        b.sendall(b"\x00\x00\x05ab")
        assert conn.read(9) == [] and conn.last_activity_ms == 9   # bytes, no frame yet
        b.close()
        with pytest.raises(KafkaConnectionError, match=r"node 1 .*closed by the broker.*2 of the 5"):
            conn.read(11)
    finally:
        a.close()


def test_connection_flush_gathers_queued_frames_without_copying():
    """Several queued frames, a full socket and partial writes: every byte arrives once, in
    order, and the queue never holds anything but views of the caller's frames."""
    a, b = socket.socketpair()
    try:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        conn = _connection(a)
        frames = [bytes([i]) * (i * 7919 % 100_000 + 1) for i in range(40)]
        for f in frames:
            conn.enqueue(f)
        conn.enqueue(b"")                               # nothing to send: not queued
        for view in conn._send_queue:
            assert isinstance(view, memoryview) and any(view.obj is f for f in frames)
        want = b"".join(frames)
        received = bytearray()
        b.settimeout(10)
        done = False
        while not done or len(received) < len(want):
            done = conn.flush(1)
            for view in conn._send_queue:               # partly written frames: still views
                assert any(view.obj is f for f in frames)
            if len(received) < len(want):
                received += b.recv(1 << 20)
        assert done and not conn.wants_write
        assert bytes(received) == want
    finally:
        a.close()
        b.close()


# --------------------------------------------------------------------------- NetworkClient
METADATA_KEY = 3


def _wait(cond, what: str, timeout_s: float = 10.0) -> None:
    import time
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        import select
        select.select([], [], [], 0.001)     # yield the CPU between checks


def _big_metadata_response(corr: int) -> bytes:
    from kclient.protocol import encode_response
    return encode_response(METADATA_KEY, 12, corr, {
        "throttle_time_ms": 0, "brokers": [], "cluster_id": "c", "controller_id": 1,
        "topics": [{"name": "topic-%05d" % i, "partitions": []} for i in range(8000)]})


@pytest.fixture
def ready_client():
    """A NetworkClient whose node 1 is READY, its scripted peer, and the node's connection.
    It reads its socket on the polling thread (receive.thread false): the path TLS connections
    take; tests/test_receive_loop.py covers plain connections' receive threads."""
    from test_network_client import ScriptedCluster, connect, known_metadata
    from kclient.clock import FakeClock
    from kclient.network.network_client import NetworkClient
    clock = FakeClock(1_000_000)
    cluster = ScriptedCluster()
    client = NetworkClient(NetworkClientConfig.of({"bootstrap.servers": "broker1:9092", "receive.thread": False}),
                           metadata=known_metadata(clock), clock=clock,
                           socket_factory=cluster.socket_factory)
    connect(client, cluster, 1)
    yield client, cluster.peer(1), client._conns[1]
    client.close()
    cluster.close()


def _send_metadata_request(client, peer, got: list) -> bytes:
    from kclient.network.network_client import ClientRequest
    client.send(ClientRequest(1, METADATA_KEY, {"topics": None, "allow_auto_topic_creation": False},
                              lambda resp, err: got.append((resp, err)), api_version=12))
    _api, _version, corr, _cid, _body = peer.read_request()
    return _big_metadata_response(corr)


def test_one_poll_receives_a_response_arriving_in_many_pieces(ready_client):
    """A poll that has part of a response keeps reading it (within its timeout) rather than
    returning after every socket buffer of it."""
    client, peer, conn = ready_client
    got: list = []
    frame = _send_metadata_request(client, peer, got)
    pieces = [frame[i:i + 20_000] for i in range(0, len(frame), 20_000)]
    peer.send_raw(pieces[0])
    start = conn._receiver.received_bytes

    def write_rest():
        sent = start + len(pieces[0])
        for piece in pieces[1:]:     # each piece only once the client has read the previous
            _wait(lambda: conn._receiver is None or conn._receiver.received_bytes >= sent, "the client to read")
            peer.send_raw(piece)
            sent += len(piece)

    writer = threading.Thread(target=write_rest)
    writer.start()
    try:
        client.poll(20_000)
    finally:
        writer.join(20)
    assert len(got) == 1, "one poll call did not finish receiving the response"
    resp, err = got[0]
    assert err is None and len(resp["topics"]) == 8000
    assert not conn.receiving


def test_wakeup_ends_a_poll_in_the_middle_of_a_response(ready_client):
    client, peer, conn = ready_client
    got: list = []
    frame = _send_metadata_request(client, peer, got)
    peer.send_raw(frame[:50_000])

    def wake():
        _wait(lambda: conn.receiving, "part of the response to arrive")
        client.wakeup()

    waker = threading.Thread(target=wake)
    waker.start()
    try:
        client.poll(20_000)                     # returns on the wakeup, response incomplete
    finally:
        waker.join(20)
    assert got == [] and conn.receiving
    rest = threading.Thread(target=peer.send_raw, args=(frame[50_000:],))   # more than a socket buffer
    rest.start()
    try:
        _wait(lambda: client.poll(100) is not None and got, "the rest of the response")
    finally:
        rest.join(20)
    assert got[0][1] is None and len(got[0][0]["topics"]) == 8000


def test_poll_returns_when_a_partial_response_stalls(ready_client):
    """Within its timeout only: a stalled response does not hold the poll beyond it."""
    client, peer, conn = ready_client
    got: list = []
    frame = _send_metadata_request(client, peer, got)
    peer.send_raw(frame[:1000])
    client.poll(50)
    assert got == [] and conn.receiving and conn._receiver.buffered_bytes == 1000
    rest = threading.Thread(target=peer.send_raw, args=(frame[1000:],))
    rest.start()
    try:
        _wait(lambda: client.poll(100) is not None and got, "the rest of the response")
    finally:
        rest.join(20)
    assert got[0][1] is None


def test_frames_of_nearby_sizes_reuse_one_block(pair):
    """Answers to the same fetches differ by a few bytes: a slightly larger frame still gets
    the block a slightly smaller one left (no fresh memory in the steady state)."""
    _in_fresh_process(_NEARBY_SIZES_CHECK)


_NEARBY_SIZES_CHECK = """
from test_frame_receiver import framed, receive_pieces
from kcore.frames import FrameReceiver
from kcore.pool import pool_stats
import socket
a, b = socket.socketpair(); a.setblocking(False)
rx = FrameReceiver(1 << 24, 65536)
sizes = [120_000, 120_100, 119_900, 120_050]
got = receive_pieces(rx, a, b, framed([b"q" * sizes[0]]), [])
assert got == [b"q" * sizes[0]]
del got
assert pool_stats()[0] == 1, pool_stats()
for n in sizes[1:]:
    got = receive_pieces(rx, a, b, framed([b"r" * n]), [])
    assert got == [b"r" * n]
    assert pool_stats()[0] == 0, (n, pool_stats())   # the one block is in use, none fresh
    del got
    assert pool_stats()[0] == 1, (n, pool_stats())
"""


# --------------------------------------------------------------------------- waiting for a large frame's rest
def test_a_wait_receives_the_rest_of_a_large_frame_in_one_call(pair):
    """With wait_ms, a short read in the middle of a large frame waits (poll, GIL released)
    for the rest: the frame, written in pieces by another thread, comes out of one call."""
    a, b = pair
    rx = FrameReceiver(1 << 24, 4096)
    payload = bytes(range(256)) * 4096                     # 1 MiB
    stream = framed([payload, b"after"])
    b.sendall(stream[:10000])
    first_read = threading.Event()

    def rest():
        first_read.wait(10)
        for i in range(10000, len(stream), 65536):
            b.sendall(stream[i:i + 65536])

    writer = threading.Thread(target=rest)
    writer.start()
    try:
        got: list = []
        # the first call reads what is there and then waits for the rest of the frame
        first_read.set()
        got.extend(rx.receive(a, True, 10000))
        assert got[:1] == [payload]
        writer.join(10)
        while len(got) < 2:
            got.extend(rx.receive(a, True, 10000))
        assert got == [payload, b"after"]
    finally:
        first_read.set()
        writer.join(10)


def test_a_wait_gives_up_when_nothing_more_arrives_and_resumes_later(pair):
    a, b = pair
    rx = FrameReceiver(1 << 20, 64)
    stream = framed([b"x" * 5000])
    b.sendall(stream[:1000])
    assert rx.receive(a, True, 1) == []                     # waited 1 ms for more: none came
    assert rx.pending_frame_size == 5000 and rx.buffered_bytes == 1000
    b.sendall(stream[1000:])
    got: list = []
    while not got:
        got.extend(rx.receive(a, True, 1000))
    assert got == [b"x" * 5000]
    # small frames never wait: a partial small frame returns at once, never asking for the
    # socket's descriptor to wait on it
    b.sendall(framed([b"y" * 10])[:6])
    assert rx.receive(NoWaitSocket(a), True, 60000) == []


class NoWaitSocket:
    """A real socket whose fileno() fails the test: the receiver must not wait on it."""

    def __init__(self, sock):
        self.sock = sock

    def recv_into(self, buf):
        return self.sock.recv_into(buf)

    def fileno(self):
        raise AssertionError("the receiver waited for the rest of a small frame")


def test_a_negative_wait_is_refused(pair):
    with pytest.raises(ValueError, match="wait_ms"):
        FrameReceiver(1000, 64).receive(pair[0], True, -1)


# Frames over 16 MiB are freed unless a consumer asked the pool to keep blocks that large
# (pool_reserve, called by the fetcher with its largest answer): then a 20 MiB frame's block
# is kept for the next answer. Fresh process: the pool is process-wide.
_POOL_RESERVE_CHECK = """
from test_frame_receiver import framed
from kcore.frames import FrameReceiver
from kcore.pool import pool_limits, pool_reserve, pool_stats
import select, socket, threading
a, b = socket.socketpair(); a.setblocking(False)
rx = FrameReceiver(1 << 26, 65536)
def one_frame():
    sender = threading.Thread(target=b.sendall, args=(framed([b"q" * (20 << 20)]),))
    sender.start()
    got = []
    while not got:
        assert select.select([a], [], [], 30)[0], "no data within 30 s"
        got = rx.receive(a)
    sender.join()
    assert len(got) == 1 and len(got[0]) == 20 << 20
    del got
assert pool_limits() == (16 << 20, 64 << 20)
one_frame()
assert pool_stats() == (0, 0), pool_stats()              # over 16 MiB: freed
pool_reserve(24 << 20)
assert pool_limits() == (24 << 20, 64 << 20)             # room for two of them already
one_frame()
blocks, held = pool_stats()
assert blocks == 1 and 20 << 20 <= held <= 24 << 20, pool_stats()
pool_reserve(1 << 20)                                   # limits only grow
assert pool_limits() == (24 << 20, 64 << 20)
for bad in (-1, (1 << 31) + 1):
    try:
        pool_reserve(bad)
    except ValueError as exc:
        assert "pool_reserve: a block size must be 0 to 2147483648 bytes" in str(exc), exc
    else:
        raise AssertionError(bad)
assert pool_limits() == (24 << 20, 64 << 20)             # a refused size changes nothing
"""


def test_pool_reserve_keeps_blocks_of_larger_frames():
    _in_fresh_process(_POOL_RESERVE_CHECK)
