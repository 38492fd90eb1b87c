"""One connection to one broker: a non-blocking socket, framing, state and reconnect timing.

``BrokerConnection`` lives as long as the client knows the node; its socket comes and goes.
It owns the byte level (partial writes, frame reception) and the connection state machine;
the ``NetworkClient`` owns requests, correlation ids and the selector.
"""
from __future__ import annotations

import collections
import enum
import errno
import logging
import os
import random
import socket
import ssl
import threading
import weakref
from typing import TYPE_CHECKING, Any

from kcore.receive_loop import ReceiveLoop

from kclient.errors import KafkaConnectionError
from kclient.network.metadata import Node
from kclient.network.tls import TlsSocket, wrap

if TYPE_CHECKING:
    from kcore.frames import FrameReceiver

__all__ = ["ConnectionState", "BrokerConnection", "ExponentialBackoff", "default_socket_factory"]

log = logging.getLogger(__name__)

# Reused receive buffer per connection. Frames of at least half this size (large Fetch
# responses) are received straight into their own bytes object, so the size only bounds the
# copy of small frames and of the first part of a large one.
RECEIVE_BUFFER = 64 * 1024
# Frames sent as one list with sendmsg(): one system call for several pipelined requests.
MAX_GATHER = 64


class ConnectionState(enum.Enum):
    DISCONNECTED = "DISCONNECTED"
    CONNECTING = "CONNECTING"          # TCP connect in progress
    TLS_HANDSHAKE = "TLS_HANDSHAKE"    # connected, TLS handshake in progress (SSL, SASL_SSL)
    API_VERSIONS = "API_VERSIONS"      # ApiVersions handshake in flight
    AUTHENTICATING = "AUTHENTICATING"  # SaslHandshake / SaslAuthenticate in flight (SASL_*)
    READY = "READY"                    # versions negotiated, requests may flow

    @property
    def is_connected(self) -> bool:
        return self in (ConnectionState.API_VERSIONS, ConnectionState.AUTHENTICATING, ConnectionState.READY)


class ExponentialBackoff:
    """base * 2**attempts, capped at ``max_ms``, with +/- ``jitter`` random spread so that
    many clients losing the same broker do not all come back in the same millisecond."""

    def __init__(self, base_ms: int, max_ms: int, jitter: float = 0.2, rng: random.Random | None = None):
        self.base_ms = max(int(base_ms), 0)
        self.max_ms = max(int(max_ms), self.base_ms)
        self.jitter = jitter
        self._rng = rng or random.Random()

    def backoff(self, attempts: int) -> int:
        if self.base_ms == 0:
            return 0
        term = self.base_ms * (2 ** min(max(attempts, 0), 40))
        if self.jitter > 0:
            term *= self._rng.uniform(1 - self.jitter, 1 + self.jitter)
        return int(min(term, self.max_ms))


def resolve(host: str, port: int) -> list[tuple]:
    """getaddrinfo for a stream socket; [(family, sockaddr), ...] in the resolver's order."""
    infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    seen, out = set(), []
    for family, _type, _proto, _canon, sockaddr in infos:
        key = (family, sockaddr[:2])
        if key not in seen:
            seen.add(key)
            out.append((family, sockaddr))
    return out


def default_socket_factory(family: int, sockaddr: tuple, send_buffer_bytes: int,
                           receive_buffer_bytes: int) -> socket.socket:
    """A non-blocking TCP socket with a connect to ``sockaddr`` started (not finished)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Buffer sizes must be set before connect() for TCP window scaling to use them.
        if send_buffer_bytes != -1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
        if receive_buffer_bytes != -1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
        err = sock.connect_ex(sockaddr)
        if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            raise OSError(err, os.strerror(err))
    except BaseException:
        sock.close()
        raise
    return sock


# While a large frame (a Fetch response) is partly received over a plain socket, a read waits
# up to this long, without the GIL, for the rest to arrive instead of going back to the
# selector loop after every receive window (64 KiB with Kafka's default receive.buffer.bytes:
# about 130 rounds of the loop per 8 MiB response). TLS sockets keep the loop: their buffered
# records are invisible to poll().
LARGE_FRAME_WAIT_MS = 5
# How long closing a connection waits for its receive thread (it leaves poll() on a stop
# pipe at once; this only bounds a thread the OS does not schedule).
RECEIVE_THREAD_JOIN_S = 10.0


def _receive(loop: ReceiveLoop, sock: socket.socket) -> None:
    """A receive thread's body: sock stays referenced (open) until the loop has returned."""
    loop.run()


class BrokerConnection:
    """Socket I/O and connection state for one node."""

    def __init__(self, node: Node, *, receiver_factory, send_buffer_bytes: int = 131072,
                 receive_buffer_bytes: int = 65536, socket_factory=None,
                 reconnect_backoff: ExponentialBackoff, setup_timeout: ExponentialBackoff):
        self.node = node
        self.node_id = node.node_id
        self.state = ConnectionState.DISCONNECTED
        self.sock: socket.socket | None = None
        self._receiver_factory = receiver_factory   # -> kcore.frames.FrameReceiver
        self._receiver: FrameReceiver | None = None
        # Once READY on a plain socket: frames are received on a thread of their own
        # (kcore.receive_loop), and the selector waits on the loop's wake fd for reading.
        self._loop: ReceiveLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._loop_finalizer: weakref.finalize | None = None
        self._send_buffer_bytes = send_buffer_bytes
        self._receive_buffer_bytes = receive_buffer_bytes
        self._socket_factory = socket_factory
        self._send_queue: collections.deque[memoryview] = collections.deque()
        self._gather = False
        self._reconnect_backoff = reconnect_backoff
        self._setup_timeout = setup_timeout
        # connection timing (all ms on the client's clock)
        self.failed_attempts = 0          # consecutive failures; reset when READY
        self.setup_failures = 0           # consecutive setup timeouts; grows the setup timeout
        self.last_attempt_ms = 0
        self.backoff_ms = 0               # how long to wait after last_attempt_ms
        self.setup_deadline_ms = 0        # connect + handshake must finish by then
        self.last_activity_ms = 0
        self.failed = False               # the last disconnect was a failure (not a close)
        self.last_error: str | None = None
        self.ever_ready = False
        self.tls_hangups = 0              # TLS handshakes hung up on in a row (Authenticator)
        # versions
        self.api_versions: dict[int, int] = {}                  # negotiated, per api key
        self.broker_api_ranges: dict[int, tuple[int, int]] = {}
        self.api_versions_request_version = -1
        # address rotation for hosts that resolve to several addresses
        self._addresses: list[tuple] = []
        self._address_index = 0
        self._tls_raw: Any = None         # the SSLSocket during the TLS handshake
        self.sasl: Any = None             # the SASL mechanism during authentication
        # KIP-368: the broker bounds an authenticated session (SaslAuthenticate v1+
        # session_lifetime_ms); the client re-authenticates on the same connection before it ends.
        self.reauth_due_ms: int | None = None     # when to re-authenticate (None: never)
        self.session_expiry_ms: int | None = None
        self.reauthenticating = False             # SaslHandshake/SaslAuthenticate of a re-authentication in flight
        self.last_reauth_start_ms: int | None = None  # when this connection last began re-authenticating
        self.sasl_token_sent_ms: int | None = None    # when the last SaslAuthenticate went out

    # ------------------------------------------------------------------ state
    @property
    def address(self) -> str:
        return self.node.address

    @property
    def is_ready(self) -> bool:
        """Requests may be sent: READY and not re-authenticating (KIP-368: nothing but the
        SASL exchange may go out until it completes; requests already in flight are answered)."""
        return self.state is ConnectionState.READY and not self.reauthenticating

    @property
    def is_connecting(self) -> bool:
        # Two identity checks, not a set lookup: an Enum member hashes in Python, and every
        # network poll asks this of each connection twice.
        state = self.state
        return state is not ConnectionState.READY and state is not ConnectionState.DISCONNECTED

    def can_connect(self, now_ms: int) -> bool:
        return (self.state is ConnectionState.DISCONNECTED
                and now_ms - self.last_attempt_ms >= self.backoff_ms)

    def retry_now(self) -> None:
        """Forget the resolved addresses and the reconnect backoff: the next attempt resolves the
        host name again and may start at once (a rebootstrap: the name may point elsewhere now)."""
        self._addresses = []
        self._address_index = 0
        self.backoff_ms = 0

    def connection_delay(self, now_ms: int) -> int:
        """ms until a connection attempt may start (0: now); large while connected."""
        if self.state is ConnectionState.DISCONNECTED:
            return max(self.last_attempt_ms + self.backoff_ms - now_ms, 0)
        return 2**62

    def update_node(self, node: Node) -> None:
        if (node.host, node.port) != (self.node.host, self.node.port):
            self._addresses = []
            self._address_index = 0
        self.node = node

    # ------------------------------------------------------------------ connect
    def start_connect(self, now_ms: int) -> socket.socket:
        """Start a non-blocking connect. Raises OSError (resolution or immediate refusal)."""
        assert self.state is ConnectionState.DISCONNECTED
        self.last_attempt_ms = now_ms
        self.state = ConnectionState.CONNECTING
        self.setup_deadline_ms = now_ms + self._setup_timeout.backoff(self.setup_failures)
        self._receiver = self._receiver_factory()
        self._send_queue.clear()
        self.api_versions = {}
        self.broker_api_ranges = {}
        try:
            if self._socket_factory is not None:
                sock = self._socket_factory(self.node)
            else:
                sock = self._connect_next_address()
            sock.setblocking(False)
        except OSError:
            self.state = ConnectionState.DISCONNECTED
            if self._addresses:
                self._address_index += 1  # refused at once: the next attempt tries the next address
            raise
        self.sock = sock
        # sendmsg() on a plain socket only (a TLS socket would not encrypt it)
        self._gather = type(sock) is socket.socket and hasattr(sock, "sendmsg")
        self.last_activity_ms = now_ms
        return sock

    def _connect_next_address(self) -> socket.socket:
        if not self._addresses or self._address_index >= len(self._addresses):
            try:
                self._addresses = resolve(self.node.host, self.node.port)
            except socket.gaierror as exc:
                self._addresses = []
                raise OSError(f"cannot resolve {self.node.host!r}: {exc}") from exc
            self._address_index = 0
        family, sockaddr = self._addresses[self._address_index]
        return default_socket_factory(family, sockaddr, self._send_buffer_bytes, self._receive_buffer_bytes)

    def finish_connect(self) -> None:
        """Called when the socket becomes writable while CONNECTING; raises OSError on failure."""
        assert self.sock is not None  # called for a CONNECTING connection, which has its socket
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))
        self._address_index = 0  # this address works; start from it next time

    def start_tls(self, ctx) -> None:
        """Wrap the connected socket in TLS; the handshake is driven by ``tls_handshake``."""
        assert self.sock is not None
        self._tls_raw = wrap(self.sock, ctx, self.node.host)
        self.sock = self._tls_raw
        self._gather = False
        self.state = ConnectionState.TLS_HANDSHAKE

    def tls_handshake(self) -> str | None:
        """One step of the TLS handshake: None when done, else "read"/"write" (what to wait
        for). Raises ssl.SSLError / OSError when it fails."""
        try:
            self._tls_raw.do_handshake()
        except ssl.SSLWantReadError:
            return "read"
        except ssl.SSLWantWriteError:
            return "write"
        self.sock = TlsSocket(self._tls_raw)   # type: ignore[assignment]  # socket-like: recv_into, send, fileno
        return None

    def mark_ready(self, now_ms: int) -> None:
        self.state = ConnectionState.READY
        self.failed_attempts = 0
        self.setup_failures = 0
        self.backoff_ms = self._reconnect_backoff.backoff(0)
        self.failed = False
        self.last_error = None
        self.ever_ready = True
        self.last_activity_ms = now_ms

    def start_receive_loop(self) -> int | None:
        """Receive this connection's frames on a thread of its own from now on (plain TCP
        sockets only: a TLS socket decrypts in Python). Returns the fd that becomes readable
        when frames wait (for the selector), or None if the connection keeps reading here."""
        receiver = self._receiver
        if (type(self.sock) is not socket.socket or receiver is None or receiver.buffered_bytes
                or self._loop is not None):
            return None
        assert self.sock is not None
        loop = ReceiveLoop(self.sock.fileno(), receiver.max_frame_bytes, receiver.buffer_size)
        # The thread holds the socket: its fd cannot be closed (and reused by another socket)
        # under the loop, even if this connection is dropped without close(); then the
        # finalizer stops the loop, and the socket goes with the thread.
        thread = threading.Thread(target=_receive, args=(loop, self.sock),
                                  name=f"kclient-receive-node-{self.node_id}", daemon=True)
        thread.start()
        self._loop, self._loop_thread = loop, thread
        self._loop_finalizer = weakref.finalize(self, loop.stop)
        return loop.wake_fd

    def expect_fetch(self, correlation_id: int, version: int, check_crcs: bool, batches: bool) -> None:
        """The response to this Fetch (about to be sent) is scanned by the receive thread as
        it arrives, if this connection has one (kcore.receive_loop.ReceiveLoop.expect_fetch)."""
        if self._loop is not None:
            self._loop.expect_fetch(correlation_id, version, check_crcs, batches)

    def take_scanned(self, correlation_id: int):
        """The receive thread's scan of the response with this correlation id (taken with its
        frame), or None."""
        return self._loop.take_scanned(correlation_id) if self._loop is not None else None

    @property
    def receive_fd(self) -> int:
        """The receive loop's wake fd, or -1 while this connection reads its socket itself."""
        return self._loop.wake_fd if self._loop is not None else -1

    def _stop_receive_loop(self) -> None:
        loop, thread = self._loop, self._loop_thread
        self._loop = self._loop_thread = None
        if loop is None or thread is None:
            return
        if self._loop_finalizer is not None:
            self._loop_finalizer.detach()
            self._loop_finalizer = None
        loop.stop()
        thread.join(RECEIVE_THREAD_JOIN_S)
        if thread.is_alive():  # pragma: no cover - the loop leaves poll() on the stop pipe
            log.warning("receive thread of node %d did not stop within %.0f s; leaving it",
                        self.node_id, RECEIVE_THREAD_JOIN_S)
            return
        loop.close()

    def closed(self, now_ms: int, failed: bool, error: str | None, setup_timed_out: bool = False) -> None:
        """Release the socket and set the reconnect backoff."""
        was_connecting = self.state is ConnectionState.CONNECTING
        self._stop_receive_loop()     # before the socket closes: the thread reads its fd
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:  # pragma: no cover - close on a dead socket
                pass
        self.sock = None
        self._tls_raw = None
        self.sasl = None
        self.reauth_due_ms = self.session_expiry_ms = None
        self.reauthenticating = False
        self.last_reauth_start_ms = None
        self.sasl_token_sent_ms = None
        self._receiver = None
        self._send_queue.clear()
        self.api_versions = {}
        self.state = ConnectionState.DISCONNECTED
        self.last_attempt_ms = now_ms
        self.failed = failed
        if failed:
            self.last_error = error
            self.backoff_ms = self._reconnect_backoff.backoff(self.failed_attempts)
            self.failed_attempts += 1
            if was_connecting and self._addresses:
                self._address_index += 1  # try the host's next address next time
        else:
            self.backoff_ms = 0
        if setup_timed_out:
            self.setup_failures += 1

    # ------------------------------------------------------------------ I/O
    def enqueue(self, frame: bytes | bytearray | memoryview) -> None:
        view = memoryview(frame)
        if view.nbytes:
            self._send_queue.append(view.cast("B") if view.ndim != 1 or view.format != "B" else view)

    @property
    def wants_write(self) -> bool:
        return bool(self._send_queue)

    def flush(self, now_ms: int) -> bool:
        """Write as much as the socket takes; True when everything queued is written.

        Frames are never copied or joined: a partly written frame stays queued as a
        memoryview slice of the encoded request, and several queued frames go out with one
        sendmsg() (gather write)."""
        q = self._send_queue
        sock = self.sock
        assert sock is not None  # only a connected connection is asked to write
        while q:
            try:
                if len(q) == 1 or not self._gather:
                    n = sock.send(q[0])
                else:
                    n = sock.sendmsg([q[i] for i in range(min(len(q), MAX_GATHER))])
            except (BlockingIOError, InterruptedError):
                return False
            if not n:
                return False
            self.last_activity_ms = now_ms
            while n:
                buf = q[0]
                if n < len(buf):
                    q[0] = buf[n:]
                    return False   # the socket took less than offered: it is full
                n -= len(buf)
                q.popleft()
        return True

    @property
    def receiving(self) -> bool:
        """Part of a frame has arrived and the rest has not yet (and is read here: a receive
        loop's partial frames are its own business)."""
        return self._loop is None and self._receiver is not None and self._receiver.buffered_bytes > 0

    def read(self, now_ms: int) -> list:
        """Every complete frame available now (without size prefix). Raises
        KafkaConnectionError on EOF, OSError on socket errors, ProtocolError subclasses on
        hostile length prefixes."""
        if self._loop is not None:
            return self._take(now_ms)
        receiver = self._receiver
        assert receiver is not None and self.sock is not None  # both are set while connected
        before = receiver.received_bytes
        try:
            frames = receiver.receive(self.sock, True,
                                      LARGE_FRAME_WAIT_MS if type(self.sock) is socket.socket else 0)
        except KafkaConnectionError as exc:
            raise KafkaConnectionError(
                f"connection to node {self.node_id} ({self.address}) closed by the broker "
                f"({exc})") from None
        if receiver.received_bytes != before:
            self.last_activity_ms = now_ms
        return frames

    def _take(self, now_ms: int) -> list:
        loop = self._loop
        assert loop is not None
        try:
            frames = loop.take()
        except KafkaConnectionError as exc:
            raise KafkaConnectionError(
                f"connection to node {self.node_id} ({self.address}) closed by the broker "
                f"({exc})") from None
        if frames:
            self.last_activity_ms = now_ms
        return frames

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.address} {self.state.value}>"
