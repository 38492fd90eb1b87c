"""The loopback fault proxy (kclient.testing.proxy) against a small echo server: relaying,
added latency, blackholes that heal, resets and slow reads."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from kclient.testing.proxy import FaultProxy


@pytest.fixture
def echo():
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        conns = []
        while not stop.is_set():
            try:
                c, _ = server.accept()
            except socket.timeout:
                continue
            conns.append(c)
            threading.Thread(target=lambda c=c: _echo(c), daemon=True).start()
        for c in conns:
            c.close()

    def _echo(c):
        try:
            while data := c.recv(65536):
                c.sendall(data)
        except OSError:
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield server.getsockname()[1]
    stop.set()
    t.join(5)
    server.close()


def exchange(sock: socket.socket, payload: bytes, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_relays_both_ways(echo):
    with FaultProxy("127.0.0.1", echo) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as s:
        assert exchange(s, b"hello" * 1000) == b"hello" * 1000
        assert proxy.connections_accepted == 1


def test_latency_delays_each_chunk(echo):
    with FaultProxy("127.0.0.1", echo) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as s:
        proxy.latency_ms = 200
        start = time.monotonic()
        assert exchange(s, b"x") == b"x"
        assert time.monotonic() - start >= 0.4            # 200 ms each way


def test_a_blackhole_starves_the_connection_until_healed(echo):
    with FaultProxy("127.0.0.1", echo) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as s:
        proxy.blackhole()
        s.settimeout(0.5)
        s.sendall(b"ping")
        with pytest.raises(socket.timeout):
            s.recv(10)
        proxy.heal()
        s.settimeout(10)
        assert s.recv(10) == b"ping"


def test_reset_closes_open_connections(echo):
    with FaultProxy("127.0.0.1", echo) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as s:
        assert exchange(s, b"a") == b"a"
        proxy.reset()
        s.settimeout(10)
        try:
            assert s.recv(10) == b""
        except ConnectionResetError:
            pass
        assert proxy.resets == 1
        with socket.create_connection(("127.0.0.1", proxy.port)) as again:   # new connections still work
            assert exchange(again, b"b") == b"b"


def test_bandwidth_limits_reads(echo):
    with FaultProxy("127.0.0.1", echo) as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as s:
        proxy.bandwidth = 100_000                           # bytes/s towards the client
        start = time.monotonic()
        assert exchange(s, b"z" * 50_000, timeout=30) == b"z" * 50_000
        assert time.monotonic() - start >= 0.3              # 50 KB at 100 KB/s: about 0.5 s


def test_only_loopback_targets():
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy("10.1.2.3", 9092)
