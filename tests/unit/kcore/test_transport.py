"""kcore.transport: size prefixes against a plain-Python reference, and connect / send all /
receive one frame against a scripted peer (a socketpair, or a listener on 127.0.0.1), with
hostile input: negative, oversized and truncated frames."""
from __future__ import annotations

import errno
import fcntl
import os
import random
import select
import socket
import struct
import threading
import time

import pytest

from kcore.errors import FrameTooLargeError, InvalidLengthError, KafkaConnectionError
from kcore.transport import Connection, frame_size

DEADLINE_MS = 5000


def reference_frame_size(prefix: bytes, bound: int) -> int:
    (n,) = struct.unpack(">i", prefix)
    if n < 0:
        raise InvalidLengthError(f"negative frame size {n}")
    if n > bound:
        raise FrameTooLargeError(f"frame of {n} bytes exceeds the limit of {bound} bytes")
    return n


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except (InvalidLengthError, FrameTooLargeError) as exc:
        return (type(exc).__name__, str(exc))


@pytest.fixture
def pair():
    """(Connection over one end, the peer's socket at the other)."""
    ours, peer = socket.socketpair()
    conn = Connection(ours.fileno())
    yield conn, peer
    conn.close()
    ours.close()
    peer.close()


# ---------------------------------------------------------------- size prefixes
@pytest.mark.parametrize("prefix, bound", [
    (b"\x00\x00\x00\x00", 0), (b"\x00\x00\x00\x01", 0), (b"\x00\x00\x01\x00", 256), (b"\x00\x00\x01\x01", 256),
    (b"\x7f\xff\xff\xff", 0x7fffffff), (b"\x80\x00\x00\x00", 0x7fffffff), (b"\xff\xff\xff\xff", 100),
    (b"\x06\x40\x00\x01", 104857600),
])
def test_frame_size_matches_reference_on_vectors(prefix, bound):
    assert outcome(frame_size, prefix, bound) == outcome(reference_frame_size, prefix, bound)


def test_frame_size_matches_reference_on_random_prefixes():
    rng = random.Random(7)
    for _ in range(20000):
        prefix = rng.randbytes(4)
        bound = rng.choice([0, 1, 4096, 1 << 20, 0x7fffffff, rng.randrange(0, 1 << 31)])
        assert outcome(frame_size, prefix, bound) == outcome(reference_frame_size, prefix, bound)


def test_frame_size_refuses_bad_arguments():
    for prefix in (b"", b"\x00\x00\x00", b"\x00\x00\x00\x00\x00"):
        with pytest.raises(ValueError, match="4 bytes"):
            frame_size(prefix, 10)
    for bound in (-1, 1 << 31):
        with pytest.raises(ValueError, match="max_frame_bytes"):
            frame_size(b"\x00\x00\x00\x00", bound)


# ---------------------------------------------------------------- receive one frame
def test_frames_arrive_whole_and_in_order(pair):
    conn, peer = pair
    payloads = [b"", b"x", bytes(range(256)) * 3, os.urandom(70000)]
    stream = b"".join(framed(p) for p in payloads)
    sender = threading.Thread(target=peer.sendall, args=(stream,))
    sender.start()
    got = [conn.recv_frame(1 << 20, DEADLINE_MS) for _ in payloads]
    sender.join()
    assert got == payloads


def test_a_read_never_goes_past_its_frame(pair):
    conn, peer = pair
    peer.sendall(framed(b"first") + framed(b"second"))
    assert conn.recv_frame(100, DEADLINE_MS) == b"first"
    # What follows the frame is still in the socket, for whoever reads it next.
    assert peer_fd_read(conn.fd, len(framed(b"second"))) == framed(b"second")


def peer_fd_read(fd: int, n: int) -> bytes:
    """n bytes still waiting in our end of the connection (read past the transport)."""
    out = b""
    deadline = time.monotonic() + DEADLINE_MS / 1000
    while len(out) < n:
        remaining = deadline - time.monotonic()
        assert remaining > 0, "bytes did not arrive"
        if select.select([fd], [], [], remaining)[0]:
            out += os.read(fd, n - len(out))
    return out


def test_random_streams_cut_anywhere_match_the_reference():
    rng = random.Random(11)
    for _ in range(30):
        payloads = [rng.randbytes(rng.choice([0, 1, 3, 4, 5, 100, 5000, 70000])) for _ in range(rng.randint(1, 12))]
        stream = b"".join(framed(p) for p in payloads)
        cuts = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 20))))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
        ours, peer = socket.socketpair()
        conn = Connection(ours.fileno())
        sender = threading.Thread(target=lambda: [peer.sendall(c) for c in chunks])
        sender.start()
        try:
            assert [conn.recv_frame(1 << 17, DEADLINE_MS) for _ in payloads] == payloads
        finally:
            sender.join()
            ours.close()
            peer.close()


def test_negative_length_is_refused_before_the_body_is_read(pair):
    conn, peer = pair
    peer.sendall(struct.pack(">i", -5) + b"body")
    with pytest.raises(InvalidLengthError, match="negative frame size -5"):
        conn.recv_frame(100, DEADLINE_MS)
    with pytest.raises(InvalidLengthError, match="negative frame size -5"):   # the stream stays failed
        conn.recv_frame(100, DEADLINE_MS)
    assert peer_fd_read(conn.fd, 4) == b"body"


@pytest.mark.parametrize("length", [101, 0x7fffffff])
def test_oversized_length_is_refused_before_anything_is_read_into(pair, length):
    conn, peer = pair
    peer.sendall(struct.pack(">i", length) + b"body")
    for _ in range(2):      # the stream stays failed: nothing is read for the refused frame
        with pytest.raises(FrameTooLargeError, match=f"frame of {length} bytes exceeds the limit of 100 bytes"):
            conn.recv_frame(100, DEADLINE_MS)
    assert peer_fd_read(conn.fd, 4) == b"body"


def test_a_frame_accepted_under_a_larger_bound_is_not_read_into_a_smaller_one(pair):
    conn, peer = pair
    peer.sendall(struct.pack(">i", 1000) + b"a" * 10)
    with pytest.raises(TimeoutError):
        conn.recv_frame(1000, 100)
    with pytest.raises(FrameTooLargeError, match="frame of 1000 bytes exceeds the limit of 100 bytes"):
        conn.recv_frame(100, DEADLINE_MS)


def test_a_frame_at_the_bound_is_taken(pair):
    conn, peer = pair
    peer.sendall(framed(b"y" * 100))
    assert conn.recv_frame(100, DEADLINE_MS) == b"y" * 100


@pytest.mark.parametrize("sent, message", [
    (b"", "connection closed by the peer$"),
    (b"\x00\x00", "after part of a frame size prefix"),
    (struct.pack(">i", 10) + b"abc", "after 3 of the 10 bytes of a frame"),
])
def test_truncated_streams_end_with_what_arrived(pair, sent, message):
    conn, peer = pair
    peer.sendall(sent)
    peer.shutdown(socket.SHUT_WR)
    for _ in range(2):
        with pytest.raises(KafkaConnectionError, match=message):
            conn.recv_frame(100, DEADLINE_MS)


def test_a_timeout_leaves_the_frame_to_the_next_call(pair):
    conn, peer = pair
    whole = framed(b"0123456789")
    peer.sendall(whole[:7])
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        conn.recv_frame(100, 200)
    assert time.monotonic() - start >= 0.15
    peer.sendall(whole[7:])
    assert conn.recv_frame(100, DEADLINE_MS) == b"0123456789"


def test_a_wake_fd_ends_the_wait_and_the_frame_goes_on(pair):
    conn, peer = pair
    r, w = os.pipe()
    try:
        peer.sendall(framed(b"abcdef")[:6])
        os.write(w, b"\x01")
        start = time.monotonic()
        assert conn.recv_frame(100, DEADLINE_MS, r) is None
        assert time.monotonic() - start < DEADLINE_MS / 2000
        os.read(r, 1)
        peer.sendall(framed(b"abcdef")[6:])
        assert conn.recv_frame(100, DEADLINE_MS, r) == b"abcdef"
    finally:
        os.close(r)
        os.close(w)


def test_waiting_for_a_frame_releases_the_gil(pair):
    conn, _peer = pair
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    counter = threading.Thread(target=count)
    counter.start()
    try:
        with pytest.raises(TimeoutError):
            conn.recv_frame(100, 300)
    finally:
        stop.set()
        counter.join()
    assert ticks > 1000


# ---------------------------------------------------------------- send all
def test_send_all_writes_everything(pair):
    conn, peer = pair
    data = os.urandom(8 << 20)
    received = bytearray()

    def read():
        while len(received) < len(data):
            chunk = peer.recv(1 << 16)
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    conn.send_all(data, DEADLINE_MS)
    reader.join()
    assert bytes(received) == data


def test_send_all_times_out_when_the_peer_does_not_read(pair):
    conn, _peer = pair
    with pytest.raises(TimeoutError):
        conn.send_all(b"z" * (64 << 20), 200)


def test_send_to_a_closed_peer_is_an_error_not_a_signal(pair):
    conn, peer = pair
    peer.close()
    with pytest.raises(OSError) as info:
        conn.send_all(b"z" * 100000, DEADLINE_MS)
    assert info.value.errno in (errno.EPIPE, errno.ECONNRESET)


def test_a_closed_connection_is_refused():
    conn = Connection()
    with pytest.raises(ValueError, match="closed"):
        conn.recv_frame(10, 10)
    with pytest.raises(ValueError, match="closed"):
        conn.send_all(b"x", 10)


# ---------------------------------------------------------------- connect
def test_connect_and_exchange_with_a_listener():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    conn = Connection.open("127.0.0.1", port, DEADLINE_MS)
    try:
        listener.settimeout(DEADLINE_MS / 1000)
        peer, _ = listener.accept()
        with peer:
            peer.settimeout(DEADLINE_MS / 1000)
            conn.send_all(framed(b"request"), DEADLINE_MS)
            assert peer.recv(100) == framed(b"request")
            peer.sendall(framed(b"response"))
            assert conn.recv_frame(100, DEADLINE_MS) == b"response"
        s = socket.socket(fileno=os.dup(conn.fd))
        try:
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert fcntl.fcntl(conn.fd, fcntl.F_GETFL) & os.O_NONBLOCK
        finally:
            s.close()
    finally:
        conn.close()
        listener.close()
    assert conn.fd == -1


def test_connect_refused_names_the_errno():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    with pytest.raises(OSError) as info:
        Connection.open("127.0.0.1", port, DEADLINE_MS)
    assert info.value.errno == errno.ECONNREFUSED
    assert f"127.0.0.1:{port}" in str(info.value)


def test_connect_to_a_name_that_does_not_resolve_fails():
    with pytest.raises(OSError, match="cannot connect to no-such-host.invalid:9092"):
        Connection.open("no-such-host.invalid", 9092, DEADLINE_MS)


@pytest.mark.parametrize("port", [0, 65536])
def test_connect_refuses_bad_ports(port):
    with pytest.raises(ValueError, match="port"):
        Connection.open("127.0.0.1", port, 100)
