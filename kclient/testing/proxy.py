"""A TCP proxy on loopback that injects network faults between a client and a broker.

``FaultProxy(target_host, target_port).start()`` listens on a free loopback port and relays
every connection to the target in a background thread (one selector, no thread per
connection). Faults, switchable at any time and from any thread:

* ``latency_ms``: each chunk is held that long before it is forwarded (both directions);
* ``bandwidth``: bytes per second forwarded from the broker to the client (slow reads);
* ``blackhole()``: connections stay open but nothing is forwarded, and new ones are accepted
  and starved, as behind a dead link (``heal()`` resumes forwarding);
* ``reset()``: every open connection is closed at once (both sides see a reset);
* ``retarget(host, port)``: new connections go to another broker, open ones are reset.

Loopback only: the proxy refuses a target outside 127.0.0.0/8 or ::1, and stops with its
owner (``stop()``, or the context manager).
"""
from __future__ import annotations

import collections
import ipaddress
import logging
import selectors
import socket
import threading
import time

__all__ = ["FaultProxy"]

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024


class _Pipe:
    """One relayed connection: client socket, upstream socket, and what waits to be sent."""

    __slots__ = ("client", "upstream", "to_upstream", "to_client")

    def __init__(self, client: socket.socket, upstream: socket.socket):
        self.client = client
        self.upstream = upstream
        self.to_upstream: collections.deque[tuple[float, bytes]] = collections.deque()
        self.to_client: collections.deque[tuple[float, bytes]] = collections.deque()


class FaultProxy:
    def __init__(self, target_host: str, target_port: int, *, host: str = "127.0.0.1"):
        if not ipaddress.ip_address(socket.gethostbyname(target_host)).is_loopback:
            raise ValueError(f"FaultProxy relays to loopback addresses only, not {target_host!r}")
        self.target = (target_host, target_port)
        self.host = host
        self.port = 0
        self.latency_ms = 0
        self.bandwidth: int | None = None          # bytes/s towards the client, None: unlimited
        self._blackholed = False
        self._reset_requested = False
        self._pipes: list[_Pipe] = []
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self.connections_accepted = 0
        self.resets = 0

    # ------------------------------------------------------------------ control
    def start(self) -> "FaultProxy":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._run, name=f"fault-proxy-{self.port}", daemon=True)
        self._thread.start()
        return self

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def blackhole(self) -> None:
        self._blackholed = True
        self._wake()

    def heal(self) -> None:
        self._blackholed = False
        self.latency_ms = 0
        self.bandwidth = None
        self._wake()

    def reset(self) -> None:
        self._reset_requested = True
        self._wake()

    def retarget(self, target_host: str, target_port: int) -> None:
        """Relay new connections to another broker and reset the open ones: the address the
        clients know now leads elsewhere (a cluster replaced behind a fixed bootstrap address)."""
        if not ipaddress.ip_address(socket.gethostbyname(target_host)).is_loopback:
            raise ValueError(f"FaultProxy relays to loopback addresses only, not {target_host!r}")
        self.target = (target_host, target_port)
        self.reset()

    def stop(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(10)
        self._close_all()
        if self._listener is not None:
            self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> "FaultProxy":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # ------------------------------------------------------------------ relay loop
    def _run(self) -> None:
        while not self._stop.is_set():
            timeout = 0.01 if any(p.to_client or p.to_upstream for p in self._pipes) else 0.5
            for key, _mask in self._selector.select(timeout):
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except BlockingIOError:
                        pass
                else:
                    pipe, side = key.data
                    self._read(pipe, side)
            if self._reset_requested:
                self._reset_requested = False
                self.resets += 1
                self._close_all(reset=True)
            if not self._blackholed:
                for pipe in list(self._pipes):
                    self._flush(pipe)

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError as exc:
            log.debug("proxy %d: cannot reach %s: %s", self.port, self.target, exc)
            client.close()
            return
        for s in (client, upstream):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe = _Pipe(client, upstream)
        self._pipes.append(pipe)
        self._selector.register(client, selectors.EVENT_READ, (pipe, "client"))
        self._selector.register(upstream, selectors.EVENT_READ, (pipe, "upstream"))
        self.connections_accepted += 1

    def _read(self, pipe: _Pipe, side: str) -> None:
        sock = pipe.client if side == "client" else pipe.upstream
        try:
            data = sock.recv(_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(pipe)
            return
        due = time.monotonic() + self.latency_ms / 1000.0
        (pipe.to_upstream if side == "client" else pipe.to_client).append((due, data))

    def _flush(self, pipe: _Pipe) -> None:
        now = time.monotonic()
        for queue, sock, limited in ((pipe.to_upstream, pipe.upstream, False), (pipe.to_client, pipe.client, True)):
            while queue and queue[0][0] <= now:
                due, data = queue[0]
                if limited and self.bandwidth:
                    data = data[:max(int(self.bandwidth * 0.01), 1)]   # about 10 ms worth per pass
                try:
                    sent = sock.send(data)
                except BlockingIOError:
                    break
                except OSError:
                    self._close(pipe)
                    return
                rest = queue[0][1][sent:]
                if rest:
                    queue[0] = (due, rest)
                    if limited and self.bandwidth:
                        break
                else:
                    queue.popleft()

    def _close(self, pipe: _Pipe, reset: bool = False) -> None:
        if pipe not in self._pipes:
            return
        self._pipes.remove(pipe)
        for s in (pipe.client, pipe.upstream):
            try:
                self._selector.unregister(s)
            except (KeyError, ValueError):
                pass
            if reset:   # RST instead of FIN: linger on, timeout 0
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                except OSError:
                    pass
            s.close()

    def _close_all(self, reset: bool = False) -> None:
        for pipe in list(self._pipes):
            self._close(pipe, reset)
