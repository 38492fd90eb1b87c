"""NetworkClient: connections, in-flight requests and metadata refresh over one selector (mechanisms §11).

Not thread-safe except ``wakeup()``; ``ConsumerNetworkClient`` serialises access. All waiting
happens in ``selector.select()`` (the GIL is released there), with a timeout computed from
the nearest deadline the client knows about, so an idle client sleeps instead of spinning.

Per node: DISCONNECTED -> CONNECTING -> [TLS_HANDSHAKE] -> API_VERSIONS -> [AUTHENTICATING]
-> READY. The set-up after TCP connect (TLS, ApiVersions, SASL, KIP-368 re-authentication) is
the ``Authenticator``'s (kclient.network.authenticator); this client does its I/O and keeps
its requests in flight. The negotiated version per API key is kept per connection
(``api_version(node, key)``).
"""
from __future__ import annotations

import logging
import select
import selectors
import socket
import struct
import time
from typing import Any, Callable

from kcore.fetchscan import scan_fetch_response
from kcore.frames import FrameReceiver
from kcore.queues import InFlightRequests

from kclient import __version__
from kclient import errors as Errors
from kclient import protocol
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.network.authenticator import API_VERSIONS_KEY, SETUP_REQUESTS, Authenticator
from kclient.network.connection import RECEIVE_BUFFER, BrokerConnection, ConnectionState, ExponentialBackoff
from kclient.network.metadata import Metadata, Node
from kclient.network.network_config import NetworkClientConfig
from kclient.protocol import ApiKey

__all__ = ["NetworkClient", "ClientRequest", "API_VERSIONS_KEY", "METADATA_KEY", "SCANNED_FETCH",
           "SCANNED_PARTITIONS", "fetch_response_from_scan"]

log = logging.getLogger(__name__)

METADATA_KEY = int(ApiKey.METADATA)
FETCH_KEY = int(ApiKey.FETCH)
#: The key of a Fetch response dict under which its receive thread's scan comes (not a
#: protocol field): see NetworkClient.scan_fetches.
SCANNED_FETCH = "_scanned"
#: The key under which a Fetch response dict read from its scan alone (no protocol decode)
#: carries, instead of "responses", what kcore.fetchscan.ScannedFetch.answer gave: the
#: position arrays' bytes and a list of ``(topic, partition, error_code, high_watermark,
#: last_stable_offset, log_start_offset, preferred_read_replica, records, scanned_records)``.
SCANNED_PARTITIONS = "_partitions"
_SCAN_MIN_VERSION, _SCAN_MAX_VERSION = 4, 18     # the Fetch versions kcore.fetchscan reads
MAX_SELECT_MS = 3_600_000          # one select() call never sleeps longer than this
NO_DEADLINE = 2**62
# close() waits at most this long (or request.timeout.ms if shorter) for the terminating KIP-714 push.
_TERMINATING_PUSH_MS = 5000
DEFAULT_MAX_RESPONSE_BYTES = 100_000_000   # hostile length prefixes fail before allocating
_CORRELATION = struct.Struct(">i")
_REBOOTSTRAP_REQUIRED = Errors.RebootstrapRequiredError.errno


class ClientRequest:
    """A request on its way to a broker and back.

    ``callback(response_body | None, error | None)`` runs once, from ``NetworkClient.poll``
    after the client's own state is updated (or at once if the send itself fails).
    ``body`` is a dict, or a callable ``body(version) -> dict`` for callers whose body
    depends on the version negotiated with the broker. ``max_version`` caps the negotiated
    version for a request that cannot be expressed in newer ones (e.g. OffsetFetch v10+ names
    topics only by id, which the client may not know).
    """

    __slots__ = ("node_id", "api_key", "body", "callback", "api_version", "timeout_ms",
                 "created_ms", "send_ms", "correlation_id", "internal", "max_version")

    def __init__(self, node_id: int, api_key: int, body: Any, callback: Callable | None = None,
                 api_version: int | None = None, timeout_ms: int | None = None,
                 created_ms: int = 0, internal: str | None = None, max_version: int | None = None):
        self.max_version = max_version
        self.node_id = node_id
        self.api_key = int(api_key)
        self.body = body
        self.callback = callback
        self.api_version = api_version    # requested version (None: negotiated), then the one sent
        self.timeout_ms = timeout_ms
        self.created_ms = created_ms
        self.send_ms = -1
        self.correlation_id = -1
        self.internal = internal          # "api_versions" / "metadata" for the client's own

    def __repr__(self) -> str:
        return (f"<ClientRequest api={self.api_key} v={self.api_version} node={self.node_id} "
                f"corr={self.correlation_id}>")


def fetch_response_from_scan(answer: tuple) -> dict:
    """The response dict of a Fetch answer read from its scan (ScannedFetch.answer): its
    top-level fields, and the rest under SCANNED_PARTITIONS."""
    return {"throttle_time_ms": answer[0], "error_code": answer[1], "session_id": answer[2],
            SCANNED_PARTITIONS: answer}


def _scan_structure(frame, version: int | None):
    """The structure of a Fetch response frame (kcore.fetchscan, no batch scanned), or None
    for a version it does not read."""
    if version is None or not _SCAN_MIN_VERSION <= version <= _SCAN_MAX_VERSION:
        return None
    return scan_fetch_response(frame, version, False, 0, 0)


class NetworkClient:
    def __init__(self, config: NetworkClientConfig, *,
                 metadata: Metadata | None = None,
                 clock: Clock | None = None, socket_factory: Callable[[Node], socket.socket] | None = None,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 client_software_name: str = "kclient", client_software_version: str = __version__):
        if not isinstance(config, NetworkClientConfig):
            raise TypeError(f"NetworkClient takes a NetworkClientConfig (NetworkClientConfig.of(settings)), "
                            f"got {type(config).__name__}")
        net = self.settings = config
        self._clock = clock or SYSTEM_CLOCK
        self.client_id: str = net.client_id
        self.request_timeout_ms: int = net.request_timeout_ms
        self.connections_max_idle_ms: int = net.connections_max_idle_ms
        self.reconnect_backoff_ms: int = net.reconnect_backoff_ms
        self._reconnect_backoff = ExponentialBackoff(net.reconnect_backoff_ms, net.reconnect_backoff_max_ms)
        self._setup_timeout = ExponentialBackoff(net.socket_connection_setup_timeout_ms,
                                                 net.socket_connection_setup_timeout_max_ms)
        self._send_buffer_bytes = net.send_buffer_bytes
        self._receive_buffer_bytes = net.receive_buffer_bytes
        self._socket_factory = socket_factory
        # receive.thread: plain-TCP connections receive on a thread of their own once READY
        # (kcore.receive_loop): the kernel's receive work and the wait for each receive window
        # overlap with the application's work between polls.
        self._receive_thread = net.receive_thread
        # Fetch responses on such connections are scanned as they arrive (kcore.fetchscan)
        # once the consumer asks for it (scan_fetches): None, or whether CRCs are checked;
        # and whether their batches are scanned there too, or only their structure.
        self._fetch_scan_crcs: bool | None = None
        self._fetch_scan_batches = False
        # Sockets of such connections registered with the selector (for writing, while bytes
        # wait to go out): kept here, since asking the selector about a socket it does not
        # have builds a KeyError from the socket's repr, on every request sent.
        self._write_registered: set = set()
        self._max_response_bytes = max_response_bytes
        self._auth = Authenticator(self, ssl_context=net.ssl_context, sasl_mechanism=net.sasl_mechanism,
                                   request_timeout_ms=net.request_timeout_ms,
                                   failure_backoff_ms=self._reconnect_backoff.max_ms,
                                   client_software=(client_software_name, client_software_version))
        # KIP-368 sessions exist only on SASL connections: the polls of other clients skip them.
        self._sasl = self._auth.uses_sasl
        if metadata is None:
            metadata = Metadata(net.retry_backoff_ms, net.metadata_max_age_ms,
                                net.retry_backoff_max_ms, net.allow_auto_create_topics)
            metadata.bootstrap(list(net.bootstrap_addresses))
        self.metadata = metadata
        self._known_nodes: dict[int, Node] = {n.node_id: n for n in metadata.cluster.nodes()}
        self._bootstrap_nodes = dict(self._known_nodes) if metadata.cluster.is_bootstrap else {}

        self._in_flight = InFlightRequests(net.max_in_flight_requests_per_connection)
        # KIP-219: node id -> the time until which the broker asked us not to send to it.
        self._throttled_until: dict[int, int] = {}
        self._conns: dict[int, BrokerConnection] = {}
        # nodes_with_connections(), kept until a connection starts or closes (the only changes
        # between DISCONNECTED and the other states): asked on every consumer poll.
        self._live_nodes: frozenset[int] | None = None
        # The clock's reading at the end of the last poll(), for a caller that would read it again.
        self.polled_ms = 0
        # The system clock is read as the metrics' nanosecond stamps are (one read for both).
        self._system_clock = type(self._clock) is Clock
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._correlation_id = 0
        self._metadata_fetch_node: int | None = None
        # KIP-899 / KIP-1102 rebootstrap: when a refresh became due and whether a broker asked.
        self._rebootstrap_enabled = net.rebootstrap
        self._rebootstrap_trigger_ms = net.rebootstrap_trigger_ms
        self._metadata_attempt_start_ms: int | None = None
        self._rebootstrap_required = False
        self.rebootstraps = 0
        self._completed: list[tuple] = []   # (request, response, error) to call back
        self._closed = False
        self._stats: Any = None
        # KIP-714 client metrics push (kclient.telemetry.sender.TelemetrySender), set by the owner.
        self.telemetry: Any = None
        # OIDC: tokens are fetched and refreshed on the provider's thread from now until close().
        self._token_provider = net.token_provider
        if self._token_provider is not None:
            self._token_provider.start()

    @property
    def stats(self) -> Any:
        """Where traffic, connections and authentications are counted
        (kclient.consumer.metrics.ConsumerMetrics), set by the owner; None: nowhere."""
        return self._stats

    @stats.setter
    def stats(self, stats: Any) -> None:
        self._stats = stats
        self._auth.stats = stats

    # ------------------------------------------------------------------ nodes
    @property
    def clock(self) -> Clock:
        return self._clock

    def node_id_of(self, node: Node | int) -> int:
        """The id of ``node``; a Node given is remembered as the address of its id (e.g. a
        coordinator that metadata does not list)."""
        if type(node) is int:
            return node
        if isinstance(node, Node):
            self._known_nodes[node.node_id] = node
            conn = self._conns.get(node.node_id)
            if conn is not None:
                conn.update_node(node)
            return node.node_id
        return int(node)

    def node(self, node_id: int) -> Node | None:
        """The address of a node: current metadata first, then nodes given explicitly
        (e.g. a coordinator) and bootstrap placeholders."""
        n = self.metadata.cluster.node_by_id(node_id)
        return n if n is not None else self._known_nodes.get(node_id)

    def _conn(self, node_id: int) -> BrokerConnection | None:
        conn = self._conns.get(node_id)
        if conn is None:
            node = self.node(node_id)
            if node is None:
                return None
            conn = BrokerConnection(
                node, receiver_factory=self._new_receiver, send_buffer_bytes=self._send_buffer_bytes,
                receive_buffer_bytes=self._receive_buffer_bytes, socket_factory=self._socket_factory,
                reconnect_backoff=self._reconnect_backoff, setup_timeout=self._setup_timeout)
            self._conns[node_id] = conn
        return conn

    def _new_receiver(self):
        return FrameReceiver(self._max_response_bytes, RECEIVE_BUFFER)

    # ------------------------------------------------------------------ connection state
    def connection_state(self, node: Node | int) -> ConnectionState:
        conn = self._conns.get(self.node_id_of(node))
        return ConnectionState.DISCONNECTED if conn is None else conn.state

    def is_connected(self, node: Node | int) -> bool:
        return self.connection_state(node).is_connected

    def connection_failed(self, node: Node | int) -> bool:
        """True if the node's last connection ended in failure and no new one is under way."""
        conn = self._conns.get(node if type(node) is int else self.node_id_of(node))
        return conn is not None and conn.state is ConnectionState.DISCONNECTED and conn.failed

    def last_error(self, node: Node | int) -> str | None:
        conn = self._conns.get(self.node_id_of(node))
        return None if conn is None else conn.last_error

    def connection_delay(self, node: Node | int, now_ms: int | None = None) -> int:
        """ms until a connection attempt to the node may start (0: now, large: connected)."""
        now_ms = self._now(now_ms)
        conn = self._conns.get(self.node_id_of(node))
        return 0 if conn is None else conn.connection_delay(now_ms)

    def is_ready(self, node: Node | int, now_ms: int | None = None) -> bool:
        """Ready to take a request now: READY, room in flight, and no metadata refresh due
        (a due refresh goes first so that requests are not sent on stale routing)."""
        node_id = node if type(node) is int else self.node_id_of(node)
        if now_ms is None:
            now_ms = self._clock.now_ms()
        # _metadata_update_due(), _can_send_request() and _reauthentication_due() in one:
        # asked for every request sent.
        if self._metadata_fetch_node is None and self.metadata.next_update_ms() <= now_ms:
            return False
        conn = self._conns.get(node_id)
        if conn is None or conn.state is not ConnectionState.READY or conn.reauthenticating:
            return False
        if not self._in_flight.can_send_more(node_id) or (self._throttled_until and self._throttled(node_id)):
            return False
        due = conn.reauth_due_ms
        return due is None or due > now_ms

    def _reauthentication_due(self, node_id: int, now_ms: int) -> bool:
        """KIP-368: the node's session is due; it takes no new request until re-authenticated."""
        conn = self._conns.get(node_id)
        return conn is not None and self._auth.reauthentication_due(conn, now_ms)

    @property
    def reauthentications(self) -> int:
        """KIP-368 re-authentications completed on open connections (statistics, tests)."""
        return self._auth.reauthentications

    def throttle_delay(self, node: Node | int, now_ms: int | None = None) -> int:
        """ms until a broker that throttled this client (KIP-219) takes requests again (0: now)."""
        until = self._throttled_until.get(self.node_id_of(node))
        return 0 if until is None else max(until - self._now(now_ms), 0)

    def _throttled(self, node_id: int) -> bool:
        until = self._throttled_until.get(node_id)
        if until is None:
            return False
        if until <= self._clock.now_ms():
            del self._throttled_until[node_id]
            return False
        return True

    def send_capacity(self, node: Node | int) -> int:
        """How many more requests the node's connection takes now (0 unless READY)."""
        node_id = node if type(node) is int else self.node_id_of(node)
        conn = self._conns.get(node_id)
        if (conn is None or conn.state is not ConnectionState.READY or conn.reauthenticating
                or (self._throttled_until and self._throttled(node_id))):
            return 0
        if conn.reauth_due_ms is not None and self._reauthentication_due(node_id, self._clock.now_ms()):
            return 0
        return max(self._in_flight.max_per_connection - self._in_flight.count(node_id), 0)

    def _can_send_request(self, node_id: int) -> bool:
        conn = self._conns.get(node_id)
        return (conn is not None and conn.is_ready and self._in_flight.can_send_more(node_id)
                and not (self._throttled_until and self._throttled(node_id)))

    def ready(self, node: Node | int, now_ms: int | None = None) -> bool:
        """Like ``is_ready``, and start connecting if the node is disconnected and out of backoff."""
        node_id = node if type(node) is int else self.node_id_of(node)
        if now_ms is None:
            now_ms = self._clock.now_ms()
        if self.is_ready(node_id, now_ms):
            return True
        conn = self._conn(node_id)
        if conn is not None and conn.can_connect(now_ms):
            self._initiate_connect(conn, now_ms)
        return False

    def api_version(self, node: Node | int, api_key: int) -> int | None:
        """The version negotiated with this node's current connection (None: unknown/unsupported)."""
        conn = self._conns.get(node if type(node) is int else self.node_id_of(node))
        return None if conn is None else conn.api_versions.get(int(api_key))

    def api_versions(self, node: Node | int) -> dict[int, int]:
        conn = self._conns.get(self.node_id_of(node))
        return {} if conn is None else dict(conn.api_versions)

    def broker_api_ranges(self, node: Node | int) -> dict[int, tuple[int, int]]:
        conn = self._conns.get(self.node_id_of(node))
        return {} if conn is None else dict(conn.broker_api_ranges)

    def in_flight_request_count(self, node: Node | int | None = None) -> int:
        return self._in_flight.count() if node is None else self._in_flight.count(self.node_id_of(node))

    def has_in_flight_requests(self, node: Node | int | None = None) -> bool:
        return self.in_flight_request_count(node) > 0

    def in_flight_api_keys(self, node: Node | int) -> list[int]:
        """The API keys of the node's requests in flight, oldest first."""
        return [req.api_key for req in self._in_flight.requests(self.node_id_of(node))]

    def ever_connected(self) -> bool:
        return any(c.ever_ready for c in self._conns.values())

    def frames_waiting(self) -> bool:
        """Whether a receive thread holds frames (or its end) that no poll took yet: a
        zero-timeout poll would handle them. One select() of the receive threads' wake fds."""
        fds = [fd for fd in (c.receive_fd for c in self._conns.values()) if fd != -1]
        return bool(fds) and bool(select.select(fds, (), (), 0)[0])

    def connection_errors(self) -> dict[str, str]:
        """address -> last connection error, for error messages."""
        return {c.address: c.last_error for c in self._conns.values() if c.last_error}

    def _now(self, now_ms: int | None) -> int:
        return self._clock.now_ms() if now_ms is None else now_ms

    # ------------------------------------------------------------------ connect / close
    def _initiate_connect(self, conn: BrokerConnection, now_ms: int) -> None:
        log.debug("connecting to node %d at %s", conn.node_id, conn.address)
        self._live_nodes = None
        try:
            sock = conn.start_connect(now_ms)
        except OSError as exc:
            log.debug("connection to node %d (%s) failed at once: %s", conn.node_id, conn.address, exc)
            conn.closed(now_ms, failed=True, error=str(exc))
            self._on_disconnect(conn, now_ms, Errors.KafkaConnectionError(
                f"connection to node {conn.node_id} ({conn.address}) failed: {exc}"))
            return
        self._selector.register(sock, selectors.EVENT_WRITE | selectors.EVENT_READ, conn)
        if self.stats is not None:
            self.stats.record("connection-creation", 1, now_ms)

    def _close(self, conn: BrokerConnection, now_ms: int, error: BaseException | None, *,
               failed: bool = True, setup_timed_out: bool = False, reason: str | None = None) -> None:
        """Close the socket and fail every request in flight on it."""
        if conn.state is ConnectionState.DISCONNECTED:
            return
        self._live_nodes = None
        self._write_registered.discard(conn.sock)
        for fileobj in (conn.sock, conn.receive_fd):
            if fileobj is not None and fileobj != -1:
                try:
                    self._selector.unregister(fileobj)
                except (KeyError, ValueError):
                    pass
        if reason is None:
            reason = str(error) if error is not None else "closed"
        if failed:
            log.info("disconnected from node %d (%s): %s", conn.node_id, conn.address, reason)
        conn.closed(now_ms, failed=failed, error=reason, setup_timed_out=setup_timed_out)
        if self.stats is not None:
            self.stats.record("connection-close", 1, now_ms)
        if error is None:
            error = Errors.KafkaConnectionError(f"connection to node {conn.node_id} ({conn.address}) was closed")
        self._on_disconnect(conn, now_ms, error)

    # ------------------------------------------------------------------ AuthenticationHost
    def close_connection(self, conn: BrokerConnection, now_ms: int, error: BaseException,
                         reason: str | None = None, failed: bool = True) -> None:
        self._close(conn, now_ms, error, reason=reason, failed=failed)

    def connection_ready(self, conn: BrokerConnection, now_ms: int) -> None:
        conn.mark_ready(now_ms)
        if self.stats is not None:
            self.stats.record("authenticated", 1, now_ms)
        self._start_receive_loop(conn)

    def requests_in_flight(self, conn: BrokerConnection) -> int:
        return self._in_flight.count(conn.node_id)

    def send_setup_request(self, conn: BrokerConnection, api_key: int, version: int, body: dict, purpose: str,
                           now_ms: int) -> None:
        """A request of the connection's own set-up (ApiVersions, SASL), bounded by the
        connection setup deadline rather than request.timeout.ms."""
        req = ClientRequest(conn.node_id, api_key, body, api_version=version, internal=purpose, created_ms=now_ms)
        corr = self._next_correlation_id()
        try:
            frame = protocol.encode_request(api_key, version, corr, self.client_id, body)
        except Exception as exc:  # pragma: no cover - our own request must encode
            self._close(conn, now_ms, exc)
            return
        req.correlation_id = corr
        req.send_ms = now_ms
        req.timeout_ms = max(conn.setup_deadline_ms - now_ms, 1)
        self._in_flight.add(conn.node_id, corr, req, now_ms, req.timeout_ms)
        conn.enqueue(frame)
        if self._stats is not None:
            self._stats.request_sent(conn.node_id, len(frame), now_ms)
        self._write(conn, now_ms)

    def _on_disconnect(self, conn: BrokerConnection, now_ms: int, error: BaseException) -> None:
        for req in self._in_flight.clear_node(conn.node_id):
            if req.send_ms >= 0 and now_ms - req.send_ms > req.timeout_ms:
                exc: BaseException = Errors.KafkaTimeoutError(
                    f"request {req.api_key} v{req.api_version} to node {conn.node_id} ({conn.address}) "
                    f"timed out after {req.timeout_ms} ms")
            elif isinstance(error, Errors.KafkaConnectionError):
                exc = Errors.KafkaConnectionError(str(error))
            else:
                exc = Errors.KafkaConnectionError(
                    f"connection to node {conn.node_id} ({conn.address}) closed: {error}")
                exc.__cause__ = error
            self._finish(req, None, exc, now_ms)
        # The node's address may have changed: metadata should be refreshed soon.
        if conn.failed and conn.node_id >= 0:
            self.metadata.request_update()

    def disconnect(self, node: Node | int, now_ms: int | None = None) -> None:
        """Close the node's connection; its in-flight requests fail with KafkaConnectionError."""
        conn = self._conns.get(self.node_id_of(node))
        if conn is not None:
            self._close(conn, self._now(now_ms), Errors.KafkaConnectionError(
                f"connection to node {conn.node_id} ({conn.address}) was closed by the client"), failed=False)
        self._fire_completed()

    def close(self, node: Node | int | None = None) -> None:
        """Close one node's connection, or (no argument) the whole client."""
        if node is not None:
            self.disconnect(node)
            return
        if self._closed:
            return
        telemetry, self.telemetry = self.telemetry, None
        if telemetry is not None:
            self.telemetry = telemetry      # polled while its terminating push is answered
            try:
                telemetry.close(self, min(self.request_timeout_ms, _TERMINATING_PUSH_MS))
            except Exception as exc:  # the client closes whatever became of the push
                log.debug("terminating client metrics push failed: %r", exc)
            self.telemetry = None
        now = self._clock.now_ms()
        for conn in list(self._conns.values()):
            self._close(conn, now, Errors.KafkaConnectionError("the client was closed"), failed=False)
        self._fire_completed()
        self._closed = True
        if self._token_provider is not None:
            self._token_provider.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def wakeup(self) -> None:
        """Make a blocked (or the next) select() return at once. Safe from any thread."""
        try:
            self._wake_w.send(b"\x01")
        except (BlockingIOError, InterruptedError):
            pass  # a wakeup is already pending
        except OSError:
            pass  # closed

    # ------------------------------------------------------------------ sending
    def scan_fetches(self, check_crcs: bool, batches: bool) -> None:
        """Have receive threads parse Fetch responses while they arrive and, with
        ``batches``, check and scan their record batches there too; the response dict of such
        a Fetch carries the scan under ``SCANNED_FETCH`` (kcore.fetchscan.ScannedFetch), for
        kcore.records.decode_columnar, which scans what is left. Applies to Fetches sent
        from now on."""
        self._fetch_scan_crcs = bool(check_crcs)
        self._fetch_scan_batches = bool(batches)

    def _next_correlation_id(self) -> int:
        cid = self._correlation_id
        self._correlation_id = 0 if cid >= 0x7FFFFFFF else cid + 1
        return cid

    def send(self, request: ClientRequest, now_ms: int | None = None) -> None:
        """Hand a request to its node's connection. The node must be ready (``ready()``).

        Errors that concern only this request (unsupported version, unencodable body) fail
        it through its callback; a closed socket closes the connection as usual.
        """
        now_ms = self._now(now_ms)
        node_id = request.node_id
        if not self._can_send_request(node_id):
            raise Errors.IllegalStateError(f"node {node_id} is not ready to send (state "
                                           f"{self.connection_state(node_id).value})")
        self._do_send(self._conns[node_id], request, now_ms)
        if self._completed:
            self._fire_completed()

    def send_to_ready(self, request: ClientRequest, now_ms: int) -> None:
        """``send()`` for a caller that has just found the node ready (``is_ready``, ``ready``
        or ``send_capacity``) and done nothing with this client since: without checking again."""
        self._do_send(self._conns[request.node_id], request, now_ms)
        if self._completed:
            self._fire_completed()

    def _choose_version(self, conn: BrokerConnection, request: ClientRequest) -> int:
        key = request.api_key
        if request.api_version is None:
            v = conn.api_versions.get(key)
            if v is None:
                rng = conn.broker_api_ranges.get(key)
                ours = protocol.CLIENT_VERSIONS.get(key)
                raise Errors.UnsupportedVersionError(
                    f"node {conn.node_id} ({conn.address}) supports API {key} in versions "
                    f"{rng if rng else 'none'}, this client implements {ours}")
            if request.max_version is not None and v > request.max_version:
                rng = conn.broker_api_ranges.get(key)
                if rng is not None and rng[0] > request.max_version:
                    raise Errors.UnsupportedVersionError(
                        f"node {conn.node_id} ({conn.address}) supports API {key} only from "
                        f"v{rng[0]}; this request needs v{request.max_version} or older")
                v = request.max_version
            return v
        v = request.api_version
        rng = conn.broker_api_ranges.get(key)
        ours = protocol.CLIENT_VERSIONS.get(key)
        if (key != API_VERSIONS_KEY and (rng is None or not rng[0] <= v <= rng[1])) or ours is None \
                or not ours[0] <= v <= ours[1]:
            raise Errors.UnsupportedVersionError(
                f"API {key} v{v} is not supported by node {conn.node_id} (broker {rng}, client {ours})")
        return v

    def _do_send(self, conn: BrokerConnection, request: ClientRequest, now_ms: int) -> None:
        try:
            version = self._choose_version(conn, request)
            body = request.body(version) if callable(request.body) else request.body
            corr = self._next_correlation_id()
            frame = protocol.encode_request(request.api_key, version, corr, self.client_id, body)
        except Exception as exc:  # this request is bad, the connection is fine
            log.debug("cannot send %r: %s", request, exc)
            self._finish(request, None, exc, now_ms)
            return
        request.api_version = version
        request.correlation_id = corr
        request.send_ms = now_ms
        if request.timeout_ms is None:
            request.timeout_ms = self.request_timeout_ms
        self._in_flight.add(conn.node_id, corr, request, now_ms, request.timeout_ms)
        if request.api_key == FETCH_KEY and self._fetch_scan_crcs is not None:
            conn.expect_fetch(corr, version, self._fetch_scan_crcs, self._fetch_scan_batches)
        conn.enqueue(frame)
        try:
            stats = self._stats
            if stats is not None:
                stats.request_sent(conn.node_id, len(frame), now_ms)
            if log.isEnabledFor(logging.DEBUG):     # conn.address is formatted on each read
                log.debug("sending %r to %s", request, conn.address)
        finally:
            # Also when an exception (a KeyboardInterrupt during the log line's I/O) stops
            # the lines above: the request is in flight, and its bytes would otherwise wait
            # for the next request written on this connection.
            self._write(conn, now_ms)

    def _write(self, conn: BrokerConnection, now_ms: int) -> None:
        try:
            done = conn.flush(now_ms)
        except OSError as exc:
            self._close(conn, now_ms, Errors.KafkaConnectionError(
                f"connection to node {conn.node_id} ({conn.address}) failed while sending: {exc}"))
            return
        self._want_write(conn, not done)

    def _want_write(self, conn: BrokerConnection, want: bool) -> None:
        """Whether the selector should report conn's socket writable (queued bytes wait)."""
        sock = conn.sock
        assert sock is not None  # only an open connection writes
        if conn.receive_fd != -1:
            # The receive loop reads: the socket is registered only while bytes wait to go out.
            registered = sock in self._write_registered
            if want and not registered:
                self._selector.register(sock, selectors.EVENT_WRITE, conn)
                self._write_registered.add(sock)
            elif not want and registered:
                self._selector.unregister(sock)
                self._write_registered.discard(sock)
            return
        events = selectors.EVENT_READ | selectors.EVENT_WRITE if want else selectors.EVENT_READ
        key = self._selector.get_key(sock)
        if key.events != events:
            self._selector.modify(sock, events, conn)

    def _start_receive_loop(self, conn: BrokerConnection) -> None:
        """Once conn is READY: let a receive thread read it (receive.thread)."""
        if not self._receive_thread:
            return
        fd = conn.start_receive_loop()
        if fd is None:
            return
        sock = conn.sock
        assert sock is not None  # start_receive_loop() found it open
        self._selector.unregister(sock)
        self._selector.register(fd, selectors.EVENT_READ, conn)
        if conn.wants_write:
            self._selector.register(sock, selectors.EVENT_WRITE, conn)
            self._write_registered.add(sock)

    def _finish(self, request: ClientRequest, response: dict | None, error: BaseException | None,
                now_ms: int) -> None:
        if request.internal == "api_versions":
            return  # handled by the caller (closing or retrying the handshake)
        if request.internal == "metadata":
            if error is not None:
                self._metadata_fetch_node = None
                self.metadata.failed_update(now_ms, error)
            return
        self._completed.append((request, response, error))

    def _fire_completed(self) -> list:
        done, self._completed = self._completed, []
        for request, response, error in done:
            cb = request.callback
            if cb is None:
                continue
            try:
                cb(response, error)
            except Exception:
                log.exception("completion callback of %r raised", request)
        return done

    # ------------------------------------------------------------------ metadata
    def _metadata_update_due(self, now_ms: int) -> bool:
        return self._metadata_fetch_node is None and self.metadata.time_to_next_update(now_ms) == 0

    def _maybe_update_metadata(self, now_ms: int) -> int:
        """Send a Metadata request if one is due; ms until this needs attention again."""
        if self._metadata_fetch_node is not None:
            return NO_DEADLINE  # the in-flight request has its own timeout
        wait = self.metadata.time_to_next_update(now_ms)
        if wait > 0 and not self._rebootstrap_required:
            return wait
        if self._metadata_attempt_start_ms is None:
            self._metadata_attempt_start_ms = now_ms
        node_id = self.least_loaded_node(now_ms)
        reason = self._rebootstrap_reason(node_id, now_ms)
        if reason is not None:
            self._rebootstrap(now_ms, reason)
            wait = self.metadata.time_to_next_update(now_ms)
            node_id = self.least_loaded_node(now_ms)
        if wait > 0:
            return wait
        if node_id is None:
            log.debug("metadata refresh due but no node is available")
            return self._earliest_connect_ms(now_ms)
        conn = self._conns.get(node_id)
        if conn is not None and conn.is_ready:
            if self._in_flight.can_send_more(node_id):
                self._send_metadata_request(conn, now_ms)
            return NO_DEADLINE if self._metadata_fetch_node is not None else self.reconnect_backoff_ms
        if conn is not None and conn.is_connecting:
            return NO_DEADLINE  # the connection's setup deadline bounds the wait
        conn = self._conn(node_id)
        if conn is not None and conn.can_connect(now_ms):
            self._initiate_connect(conn, now_ms)
            return NO_DEADLINE if conn.is_connecting else self._earliest_connect_ms(now_ms)
        return self._earliest_connect_ms(now_ms)

    def _rebootstrap_reason(self, node_id: int | None, now_ms: int) -> str | None:
        """Why the client should start again from bootstrap.servers now (KIP-899, KIP-1102), or
        None: a broker answered REBOOTSTRAP_REQUIRED, every known broker is backing off after
        failed connections, or no metadata answer came for metadata.recovery.rebootstrap.trigger.ms
        while one was wanted. Never while the client already talks to the bootstrap servers."""
        required, self._rebootstrap_required = self._rebootstrap_required, False
        if not self._rebootstrap_enabled or self.metadata.cluster.is_bootstrap:
            return None
        if required:
            return "a broker answered REBOOTSTRAP_REQUIRED"
        if node_id is None:
            return "no known broker can be reached"
        start = self._metadata_attempt_start_ms
        if start is not None and now_ms - start >= self._rebootstrap_trigger_ms:
            return (f"no metadata answer for {now_ms - start} ms "
                    f"(metadata.recovery.rebootstrap.trigger.ms={self._rebootstrap_trigger_ms})")
        return None

    def _rebootstrap(self, now_ms: int, reason: str) -> None:
        cluster = self.metadata.rebootstrap()
        self._bootstrap_nodes = {n.node_id: n for n in cluster.nodes()}
        for n in cluster.nodes():
            self._known_nodes[n.node_id] = n
            conn = self._conns.get(n.node_id)
            if conn is not None:
                conn.update_node(n)
                conn.retry_now()
        self._metadata_attempt_start_ms = now_ms
        self.rebootstraps += 1
        log.info("rebootstrapping from %s: %s", ",".join(n.address for n in cluster.nodes()), reason)

    def _earliest_connect_ms(self, now_ms: int) -> int:
        delays = [self.connection_delay(n.node_id, now_ms) for n in self._candidate_nodes()]
        return max(min(delays, default=self.reconnect_backoff_ms), 1)

    def _send_metadata_request(self, conn: BrokerConnection, now_ms: int) -> None:
        body = self.metadata.build_request_body()
        if conn.api_versions.get(METADATA_KEY) == 0 and body["topics"] == []:
            body["topics"] = None  # pragma: no cover - v0 cannot ask for "no topics"
        req = ClientRequest(conn.node_id, METADATA_KEY, body, internal="metadata", created_ms=now_ms)
        self._metadata_fetch_node = conn.node_id
        self._do_send(conn, req, now_ms)
        if req.correlation_id < 0:  # failed to encode/send: do not wait for it
            self._metadata_fetch_node = None

    def _handle_metadata_response(self, conn: BrokerConnection, response: dict, now_ms: int) -> None:
        self._metadata_fetch_node = None
        version = self.metadata.update_version
        try:
            cluster = self.metadata.update(response, now_ms)
        except Errors.KafkaError as exc:
            log.warning("metadata response from node %d has error: %s", conn.node_id, exc)
            return
        if self.metadata.update_version != version:
            self._metadata_attempt_start_ms = None     # an answer: the rebootstrap trigger restarts
        for n in cluster.nodes():
            c = self._conns.get(n.node_id)
            if c is not None:
                c.update_node(n)

    # ------------------------------------------------------------------ least loaded
    def _candidate_nodes(self) -> list[Node]:
        nodes = self.metadata.cluster.nodes()
        if not nodes:
            nodes = list(self._bootstrap_nodes.values())
        return nodes

    def least_loaded_node(self, now_ms: int | None = None) -> int | None:
        """The node with the fewest in-flight requests among ready nodes; else a node being
        connected; else one that may be connected now. None if all are backing off."""
        now_ms = self._now(now_ms)
        nodes = self._candidate_nodes()
        if not nodes:
            return None
        start = self._correlation_id % len(nodes)  # rotates the starting point between calls
        best, best_load = None, None
        connecting = connectable = None
        for i in range(len(nodes)):
            nid = nodes[(start + i) % len(nodes)].node_id
            conn = self._conns.get(nid)
            if conn is not None and conn.is_ready:
                load = self._in_flight.count(nid)
                if load == 0:
                    return nid
                if best_load is None or load < best_load:
                    best, best_load = nid, load
            elif conn is not None and conn.is_connecting:
                connecting = nid if connecting is None else connecting
            elif conn is None or conn.can_connect(now_ms):
                if connectable is None:
                    connectable = nid
        if best is not None:
            return best
        return connecting if connecting is not None else connectable

    # ------------------------------------------------------------------ poll
    def poll(self, timeout_ms: int, now_ms: int | None = None) -> list:
        """Do I/O for up to ``timeout_ms``: send due metadata requests, wait in select(),
        complete connections, read responses, expire requests and connections, then run
        the callbacks of completed requests. Returns [(request, response, error), ...]."""
        if self._closed:
            raise Errors.IllegalStateError("the network client is closed")
        if now_ms is None:
            now_ms = self._clock.now_ms()
        sasl = self._sasl
        if sasl:
            # Before anything of this poll is sent on a session that is due (a metadata request).
            self._auth.maybe_reauthenticate(self._conns.values(), now_ms)
        if self._metadata_fetch_node is not None:
            metadata_wait = NO_DEADLINE     # _maybe_update_metadata()'s first answers, inline
        else:
            metadata_wait = self.metadata.next_update_ms() - now_ms
            if metadata_wait <= 0 or self._rebootstrap_required:
                metadata_wait = self._maybe_update_metadata(now_ms)
        timeout = min(max(int(timeout_ms), 0), metadata_wait,
                      self._next_deadline_ms(now_ms) - now_ms, MAX_SELECT_MS)
        telemetry = self.telemetry
        if telemetry is not None:
            timeout = min(timeout, telemetry.poll(self, now_ms) - now_ms)
        if self._throttled_until:
            # Forget ended throttles, and wake when the next one ends: requests held back for
            # that broker can go then.
            for node_id in [n for n, until in self._throttled_until.items() if until <= now_ms]:
                del self._throttled_until[node_id]
            if self._throttled_until:
                timeout = min(timeout, min(self._throttled_until.values()) - now_ms)
        if self._completed:
            timeout = 0
        deadline = now_ms + max(timeout, 0)
        stats = self._stats
        if stats is None:
            events = self._selector.select(max(timeout, 0) / 1000.0)
            now_ms = self._clock.now_ms()
            woken = self._handle_events(events, now_ms)
        else:
            waited = time.monotonic_ns()
            events = self._selector.select(max(timeout, 0) / 1000.0)
            io_started = time.monotonic_ns()
            now_ms = io_started // 1_000_000 if self._system_clock else self._clock.now_ms()
            woken = self._handle_events(events, now_ms)
            stats.network_polled(io_started - waited, time.monotonic_ns() - io_started, now_ms)
        # A response partly received: keep reading it here, within this poll's time, instead
        # of returning to the caller's loop for every socket buffer of it (a large Fetch
        # response takes many reads; each trip through the consumer's poll loop costs far
        # more than a select() and a recv_into()). Stop as soon as a response completed, a
        # wakeup came, or the time is up (a zero-timeout poll makes one pass only).
        while not woken and not self._completed and self._receiving():
            remaining = deadline - now_ms
            if remaining <= 0:
                break
            events = self._selector.select(remaining / 1000.0)
            now_ms = self._clock.now_ms()
            if not events:
                break
            woken = self._handle_events(events, now_ms)
        self._handle_timeouts(now_ms)
        if sasl:
            self._auth.maybe_reauthenticate(self._conns.values(), now_ms)
        self.polled_ms = now_ms
        return self._fire_completed()

    def _handle_events(self, events: list, now_ms: int) -> bool:
        """Socket I/O for the selector's events; True if a wakeup was among them."""
        woken = False
        for key, mask in events:
            conn = key.data
            if conn is None:
                self._drain_wakeup()
                woken = True
                continue
            if conn.sock is None or (key.fileobj is not conn.sock and key.fileobj != conn.receive_fd):
                continue  # closed earlier in this loop
            self._handle_io(conn, mask, now_ms)
        return woken

    def _receiving(self) -> bool:
        """Whether a connection holds part of a frame (more of it is on its way)."""
        for conn in self._conns.values():
            if conn.receiving:
                return True
        return False

    def _drain_wakeup(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _next_deadline_ms(self, now_ms: int) -> int:
        deadline = NO_DEADLINE
        nxt = self._in_flight.next_timeout_ms()
        if nxt is not None:
            deadline = nxt
        ready, disconnected = ConnectionState.READY, ConnectionState.DISCONNECTED
        for conn in self._conns.values():
            state = conn.state      # conn.is_connecting, without a property call per connection
            if state is not ready and state is not disconnected and conn.setup_deadline_ms < deadline:
                deadline = conn.setup_deadline_ms
            # A due session waiting for its requests in flight is woken by their answers.
            if (conn.reauth_due_ms is not None and conn.reauth_due_ms < deadline
                    and (conn.reauth_due_ms > now_ms or not self._in_flight.count(conn.node_id))):
                deadline = conn.reauth_due_ms
        return deadline

    def _handle_io(self, conn: BrokerConnection, mask: int, now_ms: int) -> None:
        if conn.state is ConnectionState.CONNECTING:
            try:
                conn.finish_connect()
            except OSError as exc:
                self._close(conn, now_ms, Errors.KafkaConnectionError(
                    f"connection to node {conn.node_id} ({conn.address}) failed: {exc}"), reason=str(exc))
                return
            assert conn.sock is not None  # finish_connect() succeeded on it
            log.debug("connected to node %d (%s)", conn.node_id, conn.address)
            conn.last_activity_ms = now_ms
            if self._auth.uses_tls:
                self._selector.unregister(conn.sock)   # the TLS socket replaces it
                self._auth.start_tls(conn)
                self._selector.register(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
                self._tls_step(conn, now_ms)
                return
            self._selector.modify(conn.sock, selectors.EVENT_READ, conn)
            self._auth.start_api_versions(conn, now_ms)
            if conn.state is ConnectionState.DISCONNECTED:
                return
        elif conn.state is ConnectionState.TLS_HANDSHAKE:
            self._tls_step(conn, now_ms)
            return
        if mask & selectors.EVENT_WRITE and conn.wants_write:
            self._write(conn, now_ms)
            if conn.state is ConnectionState.DISCONNECTED:
                return
        elif mask & selectors.EVENT_WRITE:
            self._want_write(conn, False)
        if mask & selectors.EVENT_READ:
            try:
                frames = conn.read(now_ms)
            except Errors.KafkaConnectionError as exc:
                self._close(conn, now_ms, exc)
                return
            except Errors.ProtocolError as exc:
                self._close(conn, now_ms, exc)
                return
            except OSError as exc:
                if self._auth.read_failed(conn, exc, now_ms):
                    return
                self._close(conn, now_ms, Errors.KafkaConnectionError(
                    f"connection to node {conn.node_id} ({conn.address}) failed: {exc}"))
                return
            for frame in frames:
                self._handle_response(conn, frame, now_ms)
                if conn.state is ConnectionState.DISCONNECTED:
                    return

    # ------------------------------------------------------------------ TLS
    def _tls_step(self, conn: BrokerConnection, now_ms: int) -> None:
        wait = self._auth.tls_step(conn, now_ms)
        if conn.state is ConnectionState.DISCONNECTED:
            return  # the handshake failed
        sock: Any = conn.sock
        if wait is not None:
            events = selectors.EVENT_READ if wait == "read" else selectors.EVENT_WRITE
            self._selector.modify(sock, events, conn)
            return
        self._selector.unregister(self._tls_fileobj(conn))
        self._selector.register(sock, selectors.EVENT_READ, conn)
        self._auth.start_api_versions(conn, now_ms)

    def _tls_fileobj(self, conn: BrokerConnection):
        """What the selector has registered for conn's socket (the SSLSocket until the
        handshake finished)."""
        sock: Any = conn.sock
        return self._selector.get_map()[sock.fileno()].fileobj

    def authentication_error(self, node: Node | int) -> Errors.AuthenticationFailedError | None:
        return self._auth.error(self.node_id_of(node))

    def maybe_raise_authentication_error(self) -> None:
        """Raise (once) the authentication error of a connection that failed since the last call."""
        self._auth.maybe_raise_error()

    def _handle_response(self, conn: BrokerConnection, frame, now_ms: int) -> None:
        if len(frame) < 4:
            self._close(conn, now_ms, Errors.InvalidLengthError(
                f"response frame of {len(frame)} bytes from node {conn.node_id} has no correlation id"))
            return
        corr = _CORRELATION.unpack_from(frame, 0)[0]
        try:
            req = self._in_flight.complete_next(conn.node_id, corr)
        except Errors.CorrelationIdMismatchError as exc:
            log.warning("node %d (%s): %s; closing the connection", conn.node_id, conn.address, exc)
            self._close(conn, now_ms, exc)
            return
        except Errors.KafkaError as exc:  # e.g. nothing in flight: an unsolicited frame
            log.warning("node %d (%s): unexpected response (correlation id %d): %s", conn.node_id,
                        conn.address, corr, exc)
            self._close(conn, now_ms, Errors.CorrelationIdMismatchError(
                f"response with correlation id {corr} matches no request in flight"))
            return
        stats = self._stats
        if stats is not None:
            # The size prefix counts too, as on the sending side.
            stats.response_received(conn.node_id, len(frame) + 4, max(now_ms - req.send_ms, 0), now_ms)
        scanned = answer = None
        if req.api_key == FETCH_KEY:
            # The usual Fetch answer is read from its scan alone: building the protocol
            # decoder's dicts, only to walk them again, was most of an answer's cost at small
            # fetches. Anything the scan does not keep (tagged fields, aborted transactions)
            # goes through the decoder.
            scanned = conn.take_scanned(corr)
            if scanned is not None:
                answer = scanned.answer(frame)
            elif self._fetch_scan_crcs is not None:
                # A frame the receive thread did not scan (a small one, or no receive
                # thread): its structure is parsed here, its records decoded as before.
                structure = _scan_structure(frame, req.api_version)
                if structure is not None:
                    answer = structure.answer(frame, False)
        if answer is not None:
            response = fetch_response_from_scan(answer)
        else:
            try:
                response = protocol.decode_response(req.api_key, req.api_version, frame)
            except Exception as exc:
                if req.internal in SETUP_REQUESTS:
                    self._close(conn, now_ms, exc)
                    return
                log.warning("cannot decode response to %r from node %d: %s", req, conn.node_id, exc)
                self._finish(req, None, exc, now_ms)
                return
            if scanned is not None and isinstance(response, dict):
                response[SCANNED_FETCH] = scanned
        if isinstance(response, dict) and response.get("error_code") == _REBOOTSTRAP_REQUIRED:
            self._rebootstrap_required = True       # KIP-1102: acted on at the next poll
        throttle = response.get("throttle_time_ms") if isinstance(response, dict) else None
        if throttle and throttle > 0:
            self._throttle(conn.node_id, req, throttle, now_ms)
        internal = req.internal
        if internal is None:
            self._completed.append((req, response, None))   # _finish() of a caller's request
        elif internal in SETUP_REQUESTS:
            assert req.api_version is not None  # set when it was sent
            self._auth.on_response(conn, internal, req.api_version, response, now_ms)
        elif internal == "metadata":
            self._handle_metadata_response(conn, response, now_ms)
        else:
            self._finish(req, response, None, now_ms)

    def _throttle(self, node_id: int, req: ClientRequest, throttle_ms: int, now_ms: int) -> None:
        """KIP-219: send nothing more to a broker that throttled us until the quota allows.

        Brokers before KIP-219's version of each API delay the answer by the throttle time
        themselves; newer ones answer at once and expect the client to wait. Counting the wait
        from when the request left serves both: an answer that was already held back that long
        leaves nothing to wait, so no per-API version table is needed.
        """
        until = (req.send_ms if req.send_ms >= 0 else now_ms) + throttle_ms
        if until > now_ms and until > self._throttled_until.get(node_id, 0):
            self._throttled_until[node_id] = until
            log.debug("node %d throttled %r by %d ms: no requests to it for %d ms", node_id, req,
                      throttle_ms, until - now_ms)

    def _handle_timeouts(self, now_ms: int) -> None:
        idle_ms = self.connections_max_idle_ms
        ready, disconnected = ConnectionState.READY, ConnectionState.DISCONNECTED
        for conn in list(self._conns.values()):
            # Plain attribute tests, no state properties: every poll runs this loop.
            state = conn.state
            if state is not ready and state is not disconnected and now_ms >= conn.setup_deadline_ms:
                what = {ConnectionState.CONNECTING: "connect", ConnectionState.TLS_HANDSHAKE: "TLS handshake",
                        ConnectionState.AUTHENTICATING: "SASL authentication"}.get(conn.state, "ApiVersions handshake")
                self._close(conn, now_ms, Errors.KafkaConnectionError(
                    f"{what} to node {conn.node_id} ({conn.address}) timed out after "
                    f"{now_ms - conn.last_attempt_ms} ms"), setup_timed_out=True)
            elif (idle_ms >= 0 and now_ms - conn.last_activity_ms > idle_ms and conn.is_ready
                  and self._in_flight.count(conn.node_id) == 0):
                log.debug("closing idle connection to node %d", conn.node_id)
                self._close(conn, now_ms, None, failed=False)
        for node_id in self._in_flight.nodes_with_timed_out_requests(now_ms):
            timed_out = self._conns.get(node_id)
            if timed_out is None:
                continue
            conn = timed_out
            # The expired requests fail with a timeout (see _on_disconnect), the others on the
            # same connection with a connection error: the connection is closed for all.
            log.info("a request to node %d (%s) timed out; closing the connection", node_id, conn.address)
            self._close(conn, now_ms, Errors.KafkaConnectionError(
                f"connection to node {node_id} ({conn.address}) closed after a request timed out"))

    # ------------------------------------------------------------------ misc
    def __enter__(self) -> "NetworkClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def nodes_with_connections(self) -> frozenset[int]:
        """The nodes whose connection is not DISCONNECTED (being set up, or ready)."""
        live = self._live_nodes
        if live is None:
            live = self._live_nodes = frozenset(
                n for n, c in self._conns.items() if c.state is not ConnectionState.DISCONNECTED)
        return live
