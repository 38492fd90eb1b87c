"""kcore.receive_loop.ReceiveLoop, and the network client's receive threads built on it.

The reference is what was sent: whatever way the byte stream is cut, the loop must hand out
exactly those frames, in order, typed as FrameReceiver types them (bytes below
buffer_size // 2, Frame for frames that do not fit the buffer), and end with FrameReceiver's
errors on hostile prefixes and at end of stream. The peer is the other end of a socketpair.
"""
from __future__ import annotations

import gc
import random
import select
import socket
import struct
import sys
import threading
import time
import uuid

import pytest

from kclient.errors import FrameTooLargeError, InvalidLengthError, KafkaConnectionError
from kcore.frames import Frame
from kcore.pool import pool_clear, pool_stats
from kcore.receive_loop import STASH_BLOCKS, ReceiveLoop
from test_frame_receiver import _send_metadata_request, _wait

BUFFER = 4096


class Running:
    """A ReceiveLoop on one end of a socketpair, its thread started; the peer end to write."""

    def __init__(self, max_frame: int = 1 << 24, buffer_size: int = BUFFER):
        self.sock, self.peer = socket.socketpair()
        self.sock.setblocking(False)
        self.loop = ReceiveLoop(self.sock.fileno(), max_frame, buffer_size)
        self.thread = threading.Thread(target=self.loop.run, daemon=True)
        self.thread.start()
        _wait(lambda: self.loop.running or not self.thread.is_alive(), "the loop to start")

    def take_until(self, count: int, timeout_s: float = 20.0) -> list:
        got: list = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"got {len(got)} of {count} frames")
            select.select([self.loop.wake_fd], [], [], remaining)
            got += self.loop.take()
        return got

    def end(self, timeout_s: float = 20.0) -> BaseException:
        """Frames left, then the error take() raises once the loop ended."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            select.select([self.loop.wake_fd], [], [], 1.0)
            try:
                self.loop.take()
            except BaseException as exc:
                return exc
        raise AssertionError("the loop did not end")

    def close(self) -> None:
        self.loop.stop()
        self.thread.join(20)
        assert not self.thread.is_alive()
        self.loop.close()
        self.sock.close()
        self.peer.close()


@pytest.fixture
def running():
    made: list[Running] = []

    def make(**kw) -> Running:
        r = Running(**kw)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_frames_come_out_whole_and_in_order_however_the_stream_is_cut(running):
    rng = random.Random(7)
    sizes = [0, 1, 3, 100, BUFFER // 2 - 1, BUFFER // 2, BUFFER, 50_000, 700_000, 5] * 4
    rng.shuffle(sizes)
    payloads = [rng.randbytes(n) for n in sizes]
    stream = b"".join(_frame(p) for p in payloads)
    r = running()

    def send():
        pos = 0
        while pos < len(stream):           # pieces of 1 byte to 200 KB, some splitting prefixes
            n = rng.choice((1, 2, 3, 5, 4096, 70_000, 200_000))
            r.peer.sendall(stream[pos:pos + n])
            pos += n
    sender = threading.Thread(target=send)
    sender.start()
    got = r.take_until(len(payloads))
    sender.join(20)
    assert [bytes(g) for g in got] == payloads
    # As FrameReceiver's: bytes below half the buffer; a frame larger than the buffer is a
    # Frame (one in between is a Frame unless it arrived whole in one read).
    assert all(type(g) is bytes for g, p in zip(got, payloads) if len(p) < BUFFER // 2)
    assert all(type(g) is Frame for g, p in zip(got, payloads) if len(p) > BUFFER)
    assert r.loop.received_bytes == len(stream)


def test_wake_fd_is_readable_exactly_while_frames_wait(running):
    r = running()
    assert select.select([r.loop.wake_fd], [], [], 0)[0] == []
    assert r.loop.take() == []
    r.peer.sendall(_frame(b"one") + _frame(b"two"))
    assert select.select([r.loop.wake_fd], [], [], 20)[0] == [r.loop.wake_fd]
    got = r.take_until(2)
    assert got == [b"one", b"two"]
    assert select.select([r.loop.wake_fd], [], [], 0)[0] == []


@pytest.mark.parametrize("tail, message", [
    (b"", "connection closed by the peer"),
    (b"\x00\x00", "after part of a frame size prefix"),
    (struct.pack(">i", 100) + b"x" * 10, "after 10 of the 100 bytes of a frame"),
    (struct.pack(">i", 100_000) + b"x" * 3000, "after 3000 of the 100000 bytes of a frame"),
])
def test_end_of_stream_after_the_frames_says_how_much_of_a_frame_came(running, tail, message):
    r = running()
    r.peer.sendall(_frame(b"whole") + tail)
    r.peer.shutdown(socket.SHUT_WR)
    assert r.take_until(1) == [b"whole"]
    exc = r.end()
    assert isinstance(exc, KafkaConnectionError) and message in str(exc)
    r.thread.join(20)
    assert not r.thread.is_alive()
    with pytest.raises(KafkaConnectionError, match=message):   # and it stays ended
        r.loop.take()


@pytest.mark.parametrize("prefix, error, message", [
    (-1, InvalidLengthError, "negative frame size -1"),
    (-(2**31), InvalidLengthError, "negative frame size"),
    (10_001, FrameTooLargeError, "frame of 10001 bytes exceeds the limit of 10000 bytes"),
    (2**31 - 1, FrameTooLargeError, "exceeds the limit"),
])
def test_a_hostile_prefix_ends_the_loop_after_the_frames_before_it(running, prefix, error, message):
    r = running(max_frame=10_000)
    stream = _frame(b"a") + _frame(b"b" * 9000) + struct.pack(">i", prefix) + b"z" * 64
    r.peer.sendall(stream)
    got = r.take_until(2)
    assert [bytes(g) for g in got] == [b"a", b"b" * 9000]
    exc = r.end()
    assert isinstance(exc, error) and message in str(exc)
    r.thread.join(20)
    assert not r.thread.is_alive()
    # The read that brought the bad prefix is counted too.
    assert len(stream) - 64 <= r.loop.received_bytes <= len(stream)


def test_stop_ends_an_idle_loop_and_take_then_says_so(running):
    r = running()
    r.loop.stop()
    r.thread.join(20)
    assert not r.thread.is_alive() and not r.loop.running
    with pytest.raises(KafkaConnectionError, match="stopped"):
        r.loop.take()
    r.loop.stop()                     # idempotent


def test_a_loop_runs_once_and_closes_only_when_stopped(running):
    r = running()
    with pytest.raises(RuntimeError, match="runs once"):
        r.loop.run()
    with pytest.raises(RuntimeError, match="stop"):
        r.loop.close()
    r.loop.stop()
    r.thread.join(20)
    r.loop.close()
    r.loop.close()                    # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        r.loop.take()
    with pytest.raises(RuntimeError, match="closed"):
        r.loop.run()


def test_a_stopped_loop_never_starts():
    a, b = socket.socketpair()
    try:
        loop = ReceiveLoop(a.fileno())
        loop.stop()
        with pytest.raises(RuntimeError, match="runs once"):
            loop.run()
        loop.close()
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kwargs, message", [
    ({"fd": -1}, "fd must be"),
    ({"fd": 0, "max_frame_bytes": -1}, "max_frame_bytes"),
    ({"fd": 0, "max_frame_bytes": 2**31}, "max_frame_bytes"),
    ({"fd": 0, "buffer_size": 63}, "buffer_size"),
    ({"fd": 0, "buffer_size": 2**31}, "buffer_size"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ReceiveLoop(**kwargs)


def test_a_connection_reset_ends_the_loop_with_its_oserror():
    """A TCP reset (the peer closes with SO_LINGER 0) is a socket error, not end of stream."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        sock = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
    sock.setblocking(False)
    loop = ReceiveLoop(sock.fileno(), 1 << 20, BUFFER)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        peer.sendall(_frame(b"before the reset"))
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()
        thread.join(20)
        assert not thread.is_alive()
        assert loop.take() == [b"before the reset"]
        with pytest.raises(ConnectionResetError):
            loop.take()
    finally:
        loop.stop()
        thread.join(20)
        loop.close()
        sock.close()


def test_large_frames_reuse_pooled_blocks(running):
    """A released frame's block returns to kcore.pool; take() hands pooled blocks to the loop
    for its next frames of that size instead of fresh memory."""
    pool_clear()                  # the pool is process-wide: earlier tests may have filled it
    r = running()
    size = 1 << 20
    r.peer.sendall(_frame(b"\x01" * size))
    first = r.take_until(1)[0]
    assert type(first) is Frame and len(first) == size
    gc.collect()
    blocks_before = pool_stats()[0]
    del first
    assert pool_stats()[0] == blocks_before + 1          # the block went back to the pool
    r.peer.sendall(_frame(b"\x02" * size))
    second = r.take_until(1)[0]
    assert memoryview(second)[0] == 2
    # take() moved the pooled block to the loop's stash (for the frame after this one).
    assert pool_stats()[0] == blocks_before and STASH_BLOCKS >= 1
    r.peer.sendall(_frame(b"\x03" * size))
    third = r.take_until(1)[0]
    assert bytes(third) == b"\x03" * size and bytes(second) == b"\x02" * size


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="huge-page advice is Linux's")
def test_a_fresh_block_for_a_large_frame_starts_on_a_huge_page(running):
    """With no pooled block to reuse, a frame of several huge pages is received into a block
    aligned to 2 MiB (advised to be backed by huge pages, a fault per 2 MiB instead of per
    4 KiB), and arrives whole; a frame below a huge page keeps an ordinary block."""
    np = pytest.importorskip("numpy")
    pool_clear()
    r = running()
    big = bytes(range(256)) * ((5 << 20) // 256) + b"tail"
    small = b"\x07" * (1 << 20)
    r.peer.sendall(_frame(big) + _frame(small))
    got_big, got_small = r.take_until(2)
    assert type(got_big) is Frame and bytes(got_big) == big
    assert np.frombuffer(got_big, dtype=np.uint8).ctypes.data % (2 << 20) == 0
    assert bytes(got_small) == small


# --------------------------------------------------------------------------- NetworkClient
@pytest.fixture
def client_pair():
    """A NetworkClient (receive.thread on, the default) whose node 1 is READY, with its
    scripted peer."""
    from test_network_client import ScriptedCluster, connect, known_metadata
    from kclient.clock import FakeClock
    from kclient.network.network_client import NetworkClient
    from kclient.network.network_config import NetworkClientConfig
    clock = FakeClock(1_000_000)
    cluster = ScriptedCluster()
    client = NetworkClient(NetworkClientConfig.of({"bootstrap.servers": "broker1:9092"}), metadata=known_metadata(clock),
                           clock=clock, socket_factory=cluster.socket_factory)
    connect(client, cluster, 1)
    yield client, cluster.peer(1), client._conns[1]
    client.close()
    cluster.close()


_EARLIER: set = set()     # receive threads of other tests' clients (pooled ones stay alive)


def _receive_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate()
            if t.name.startswith("kclient-receive-") and t not in _EARLIER]


@pytest.fixture(autouse=True)
def _note_earlier_threads():
    _EARLIER.clear()
    _EARLIER.update(t for t in threading.enumerate() if t.name.startswith("kclient-receive-"))


def test_a_ready_plaintext_connection_receives_on_its_own_thread(client_pair):
    client, peer, conn = client_pair
    assert conn.receive_fd >= 0 and [t.name for t in _receive_threads()] == ["kclient-receive-node-1"]
    got: list = []
    frame = _send_metadata_request(client, peer, got)
    pieces = [frame[i:i + 20_000] for i in range(0, len(frame), 20_000)]
    sender = threading.Thread(target=lambda: [peer.send_raw(p) for p in pieces])
    sender.start()
    try:
        _wait(lambda: client.poll(1000) is not None and got, "the response")
    finally:
        sender.join(20)
    resp, err = got[0]
    assert err is None and len(resp["topics"]) == 8000
    assert not conn.receiving            # partial frames are the loop's, never the poll's


def test_frames_waiting_says_whether_a_received_response_awaits_a_poll(client_pair):
    client, peer, conn = client_pair
    got: list = []
    assert not client.frames_waiting()
    peer.send_raw(_send_metadata_request(client, peer, got))
    _wait(client.frames_waiting, "the receive thread to complete the response")
    assert not got                       # received, not yet handled
    client.poll(0)
    assert got and got[0][1] is None
    assert not client.frames_waiting()


def test_requests_still_go_out_while_the_thread_receives(client_pair):
    """The socket is registered for writing only while bytes wait: a request larger than the
    socket buffer goes out over several polls."""
    client, peer, conn = client_pair
    from kclient.network.network_client import ClientRequest
    got: list = []
    big = {"topics": [{"name": "t" * 200 + str(i), "topic_id": uuid.UUID(int=0)} for i in range(20_000)],
           "allow_auto_topic_creation": False}
    client.send(ClientRequest(1, 3, big, lambda resp, err: got.append((resp, err)), api_version=12))
    requests: list = []
    reader = threading.Thread(target=lambda: requests.append(peer.read_request(timeout=20)))
    reader.start()
    _wait(lambda: client.poll(10) is not None and not reader.is_alive(), "the request to arrive")
    api, _version, corr, _cid, body = requests[0]
    assert api == 3 and len(body["topics"]) == 20_000
    assert not conn.wants_write


def test_the_broker_closing_mid_response_fails_the_request_and_stops_the_thread(client_pair):
    client, peer, conn = client_pair
    got: list = []
    frame = _send_metadata_request(client, peer, got)
    peer.send_raw(frame[:5000])
    peer.close()
    _wait(lambda: client.poll(100) is not None and got, "the request to fail")
    resp, err = got[0]
    assert resp is None and isinstance(err, KafkaConnectionError)
    assert "closed" in str(err)
    assert conn.receive_fd == -1 and _receive_threads() == []


def test_closing_the_client_stops_its_receive_threads(client_pair):
    client, _peer, conn = client_pair
    assert len(_receive_threads()) == 1
    client.close()
    assert _receive_threads() == [] and conn.receive_fd == -1


def test_receive_thread_false_reads_on_the_polling_thread():
    from test_network_client import ScriptedCluster, connect, known_metadata
    from kclient.clock import FakeClock
    from kclient.network.network_client import NetworkClient
    from kclient.network.network_config import NetworkClientConfig
    clock = FakeClock(1_000_000)
    cluster = ScriptedCluster()
    client = NetworkClient(NetworkClientConfig.of({"bootstrap.servers": "broker1:9092", "receive.thread": False}),
                           metadata=known_metadata(clock), clock=clock,
                           socket_factory=cluster.socket_factory)
    try:
        connect(client, cluster, 1)
        assert client._conns[1].receive_fd == -1 and _receive_threads() == []
    finally:
        client.close()
        cluster.close()


def test_a_forked_child_cannot_stop_or_use_its_parents_loop(running):
    """The pipes are shared with a forked child: its stop() must not end the parent's loop
    (kclient.spark's workers abandon inherited clients, which frees them there)."""
    import os
    r = running()
    r.peer.sendall(_frame(b"before"))
    assert r.take_until(1) == [b"before"]
    pid = os.fork()
    if pid == 0:                                   # the child: never returns into pytest
        code = 1
        try:
            r.loop.stop()                          # a no-op here
            try:
                r.loop.take()
            except RuntimeError as exc:
                code = 0 if "forked" in str(exc) else 2
            r.loop.close()                         # frees only the child's copies
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert r.loop.running
    r.peer.sendall(_frame(b"after"))
    assert r.take_until(1) == [b"after"]


def test_a_full_stash_gives_its_oldest_block_back_for_a_newer_size(running):
    """Blocks of a size no longer received must not keep blocks of the current size out."""
    pool_clear()
    r = running()
    small, large = 1 << 20, 3 << 20

    def receive(size, count):
        r.peer.sendall(b"".join(_frame(b"s" * size) for _ in range(count)))
        got = r.take_until(count)
        assert all(len(g) == size for g in got)
        return got

    first = receive(small, 2)
    del first                                       # two small blocks in the pool
    second = receive(small, 2)                      # take() stashes both pooled blocks
    assert len(r.loop.stashed) == STASH_BLOCKS == 2
    assert all(small <= s < large for s in r.loop.stashed)
    del second
    big = receive(large, 1)                         # no pooled block of this size yet
    del big
    big = receive(large, 1)                         # now there is: the oldest small one leaves
    oldest_small, newest = r.loop.stashed
    assert small <= oldest_small < large <= newest
    del big


# --------------------------------------------------------------------------- Fetch scans
def _fetch_frame(corr: int, version: int = 12, batches: int = 40) -> tuple[bytes, list[bytes]]:
    """A size-prefixed Fetch response (two partitions of 100-record batches) and the records
    bytes of each partition."""
    from kclient.protocol import encode_response
    from kcore.records import encode_batch
    blobs = [b"".join(encode_batch([(None, 1_700_000_000_000 + i, None, b"v" * 90, []) for i in range(100)],
                                   base_offset=p * 1000 + 100 * b) for b in range(batches))
             for p in range(2)]
    body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "t", "partitions": [
        {"partition_index": p, "error_code": 0, "high_watermark": 10_000, "last_stable_offset": 10_000,
         "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1, "records": blob}
        for p, blob in enumerate(blobs)]}]}
    return encode_response(1, version, corr, body), blobs


def _check_scan(response: dict, scanned, states=("done", "scanning")) -> None:
    """Each partition of the decoded ``response`` from the scan equals its decode."""
    from kcore.records import decode_columnar
    assert scanned is not None and scanned.complete
    for p in response["responses"][0]["partitions"]:
        sr = scanned.records_for(p["records"])
        assert sr is not None and sr.state in states
        want, got = decode_columnar(p["records"]), decode_columnar(p["records"], scanned=sr)
        assert got.num_records == want.num_records == 4000
        assert bytes(got.offsets) == bytes(want.offsets) and bytes(got.value_offsets) == bytes(want.value_offsets)


def test_an_announced_fetch_response_is_scanned_as_it_arrives(running):
    r = running()
    stream, _blobs = _fetch_frame(corr=77)
    r.loop.expect_fetch(77, 12, True)
    for i in range(0, len(stream), 30_000):        # arrivals cutting batches and fields
        r.peer.sendall(stream[i:i + 30_000])
    (frame,) = r.take_until(1)
    assert type(frame) is Frame and bytes(frame) == stream[4:]
    from kclient.protocol import decode_response
    _check_scan(decode_response(1, 12, frame), r.loop.take_scanned(77))
    assert r.loop.take_scanned(77) is None           # handed out once


def test_a_response_announced_for_its_structure_only_leaves_its_batches_to_the_decode(running):
    r = running()
    stream, _blobs = _fetch_frame(corr=78)
    r.loop.expect_fetch(78, 12, True, False)
    for i in range(0, len(stream), 30_000):
        r.peer.sendall(stream[i:i + 30_000])
    (frame,) = r.take_until(1)
    from kclient.protocol import decode_response
    _check_scan(decode_response(1, 12, frame), r.loop.take_scanned(78), states=("scanning",))


def test_an_unannounced_response_and_a_forgotten_announcement_are_not_scanned(running):
    r = running()
    for corr in range(100, 117):                     # one more than the loop keeps: 100 goes
        r.loop.expect_fetch(corr, 12, True)
    for corr in (5, 100, 116):
        stream, _ = _fetch_frame(corr=corr, batches=5)
        r.peer.sendall(stream)
    frames = r.take_until(3)
    assert r.loop.take_scanned(5) is None and r.loop.take_scanned(100) is None
    _scan = r.loop.take_scanned(116)
    from kclient.protocol import decode_response
    assert _scan is not None and len(_scan) == 2
    assert decode_response(1, 12, frames[2])["responses"][0]["partitions"][0]["records"] is not None


def test_a_loop_closed_with_a_scan_in_progress_frees_it(running):
    r = running()
    stream, _ = _fetch_frame(corr=9)
    r.loop.expect_fetch(9, 12, True)
    r.peer.sendall(stream[:len(stream) // 2])
    _wait(lambda: r.loop.received_bytes >= len(stream) // 2, "half the response")
    # fixture teardown stops the loop mid-frame and closes it: the scan is freed with it


@pytest.mark.parametrize("batches", [True, False])
def test_the_network_client_hands_fetch_scans_to_the_response(client_pair, batches):
    client, peer, conn = client_pair
    from kclient.network.network_client import SCANNED_PARTITIONS, ClientRequest
    from kcore.records import decode_columnar
    client.scan_fetches(True, batches)
    got: list = []
    client.send(ClientRequest(1, 1, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                     "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [],
                                     "forgotten_topics_data": [], "rack_id": ""},
                              lambda resp, err: got.append((resp, err)), api_version=12))
    _api, version, corr, _cid, _body = peer.read_request()
    stream, _ = _fetch_frame(corr=corr, version=version)
    peer.send_raw(stream)
    _wait(lambda: client.poll(100) is not None and got, "the response")
    resp, err = got[0]
    assert err is None
    # A plain answer is read from its scan: each partition comes with its records' scan.
    assert "responses" not in resp
    parts = resp[SCANNED_PARTITIONS][4]
    assert [(p[0], p[1]) for p in parts] == [("t", 0), ("t", 1)]
    for *_fields, records, sr in parts:
        assert sr is not None and sr.state in ("done", "scanning")
        want, got_ = decode_columnar(records), decode_columnar(records, scanned=sr)
        assert got_.num_records == want.num_records == 4000
        assert bytes(got_.offsets) == bytes(want.offsets) and bytes(got_.value_offsets) == bytes(want.value_offsets)
