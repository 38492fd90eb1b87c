"""A connection's set-up after TCP connect: TLS, ApiVersions, SASL, and KIP-368 re-authentication.

``Authenticator`` drives the handshake steps of every connection of one ``NetworkClient``;
the client keeps the sockets, the selector, correlation ids and requests in flight, and the
two talk through a small interface: the client calls ``start_tls`` / ``tls_step`` /
``start_api_versions`` / ``on_response`` / ``maybe_reauthenticate`` and the authenticator answers through the
``AuthenticationHost`` methods the client implements (send a set-up request, close a
connection, the connection is ready). The connection's session state (negotiated versions,
the SASL mechanism in progress, when to re-authenticate) is kept on the ``BrokerConnection``.

Per connection: CONNECTING -> [TLS_HANDSHAKE] -> API_VERSIONS -> [AUTHENTICATING] -> READY.
ApiVersions goes out at the highest version the client implements; a broker that does not
know it answers error 35 with its own range (in v0 form) and the client retries once within
it. SASL is SaslHandshake v1 then SaslAuthenticate until the mechanism completes. A session
the broker bounds (SaslAuthenticate ``session_lifetime_ms``) is re-authenticated on the same
connection before it ends: once due, the connection takes no new request, and the exchange starts
when none is in flight on it, so it never interleaves with other requests. Kafka refuses a
re-authentication that starts less than a second after the previous one on the connection; a
session too short to be renewed within that rule is ended by reconnecting instead (logged, not
an authentication failure).

An authentication failure is fatal until the settings change: the error is raised from the
client's poll() (once) and the node is not retried sooner than the longest reconnect backoff,
so a wrong password causes no storm of failing handshakes.
"""
from __future__ import annotations

import logging
import random
import ssl
from typing import Any, Callable, Iterable, Protocol

from kclient import errors as Errors
from kclient import protocol
from kclient.network.connection import BrokerConnection, ConnectionState
from kclient.network.tls import describe_tls_error
from kclient.protocol import ApiKey

__all__ = ["Authenticator", "AuthenticationHost", "API_VERSIONS_KEY", "SETUP_REQUESTS"]

log = logging.getLogger(__name__)

API_VERSIONS_KEY = int(ApiKey.API_VERSIONS)
_SASL_HANDSHAKE_KEY = int(ApiKey.SASL_HANDSHAKE)
_SASL_AUTHENTICATE_KEY = int(ApiKey.SASL_AUTHENTICATE)

#: The purposes of the requests a connection's set-up sends (``ClientRequest.internal``): their
#: answers go to ``Authenticator.on_response``, and one that cannot be decoded closes the connection.
SETUP_REQUESTS = frozenset({"api_versions", "sasl_handshake", "sasl_authenticate"})


class AuthenticationHost(Protocol):
    """What the authenticator needs from the network client that owns the connections."""

    def send_setup_request(self, conn: BrokerConnection, api_key: int, version: int, body: dict,
                           purpose: str, now_ms: int) -> None:
        """Send a request of the connection's set-up (bounded by its setup deadline)."""

    def close_connection(self, conn: BrokerConnection, now_ms: int, error: BaseException,
                         reason: str | None = None, failed: bool = True) -> None:
        """Close the connection; its requests in flight fail with ``error``. ``failed=False``:
        an orderly close, reconnected without backoff."""

    def connection_ready(self, conn: BrokerConnection, now_ms: int) -> None:
        """The set-up completed: the connection takes requests from now on."""

    def requests_in_flight(self, conn: BrokerConnection) -> int:
        """How many requests are in flight on the connection now."""


# Handshakes hung up on in a row, on a connection that never completed one, before the failure
# is reported as the listener's (it may not speak TLS) rather than retried as the network's.
_HANGUPS_BEFORE_BLAME = 3

# Kafka's broker starts at most one re-authentication a second per connection
# (KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS): a SaslHandshake sooner is answered as
# one on an authenticated connection, ILLEGAL_SASL_STATE. The broker times it when it takes
# the request up, the client when it sends it: the margin covers the difference.
_MIN_REAUTH_INTERVAL_MS = 1000
_REAUTH_INTERVAL_MARGIN_MS = 100
_NO_EXPIRY = 1 << 62


def _is_transport_failure(exc: BaseException) -> bool:
    """A handshake that ended because the connection did (reset, hang-up), not because a side
    refused the other (certificate, protocol version, cipher)."""
    if isinstance(exc, (ssl.SSLEOFError, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        return True
    return "UNEXPECTED_EOF" in str(getattr(exc, "reason", "") or "").upper()


def _is_tls_alert(exc: BaseException) -> bool:
    return isinstance(exc, ssl.SSLError) and not isinstance(exc, (ssl.SSLWantReadError, ssl.SSLWantWriteError))


class Authenticator:
    """The set-up steps of one network client's connections (module docstring)."""

    def __init__(self, host: AuthenticationHost, *, ssl_context: ssl.SSLContext | None,
                 sasl_mechanism: Callable[[], Any] | None, request_timeout_ms: int,
                 failure_backoff_ms: int, client_software: tuple[str, str],
                 rng: random.Random | None = None):
        self._host = host
        self._ssl_context = ssl_context          # SSL, SASL_SSL
        self._sasl_mechanism = sasl_mechanism    # SASL_*: a fresh mechanism per connection
        self._request_timeout_ms = request_timeout_ms
        self._failure_backoff_ms = failure_backoff_ms
        self._software = client_software
        self._rng = rng or random.Random()
        # node id -> the authentication error of its last connection (raised from poll()).
        self._errors: dict[int, Errors.AuthenticationFailedError] = {}
        #: KIP-368 re-authentications completed on open connections (statistics, tests).
        self.reauthentications = 0
        # Where re-authentications are timed (kclient.consumer.metrics.ConsumerMetrics), set
        # through the network client's ``stats``; node id -> when its re-authentication began.
        self.stats: Any = None
        self._reauth_started: dict[int, int] = {}
        # Nodes whose sessions were renewed by reconnecting (logged at INFO the first time only).
        self._renewed_by_reconnecting: set[int] = set()

    @property
    def uses_tls(self) -> bool:
        return self._ssl_context is not None

    @property
    def uses_sasl(self) -> bool:
        return self._sasl_mechanism is not None

    # ------------------------------------------------------------------ set-up steps
    def start_tls(self, conn: BrokerConnection) -> None:
        """TCP is up on a TLS connection: wrap its socket (the caller then watches the new
        ``conn.sock`` and drives ``tls_step``)."""
        assert self._ssl_context is not None  # called when uses_tls
        conn.start_tls(self._ssl_context)

    def tls_step(self, conn: BrokerConnection, now_ms: int) -> str | None:
        """One step of the TLS handshake: "read" / "write" (what to wait for), or None when it
        is over: established (ApiVersions is not sent yet: call ``start_api_versions`` once
        the new ``conn.sock`` is watched) or failed (the connection is closed)."""
        try:
            wait = conn.tls_handshake()
        except (ssl.SSLError, OSError) as exc:
            if _is_transport_failure(exc):
                conn.tls_hangups += 1
            if _is_transport_failure(exc) and (conn.ever_ready or conn.tls_hangups < _HANGUPS_BEFORE_BLAME):
                # A reset or a hang-up in the middle of a handshake is the network's doing (a
                # broker restarting, a proxy) when TLS worked on this connection before, or
                # when it has not happened several times in a row; then the connection is
                # retried as after any disconnect, and poll() raises nothing. A listener that
                # does not speak TLS hangs up on every attempt: the third one is reported.
                log.info("node %d (%s): connection lost during the TLS handshake (%s); reconnecting",
                         conn.node_id, conn.address, exc)
                self._host.close_connection(conn, now_ms, Errors.KafkaConnectionError(
                    f"node {conn.node_id} ({conn.address}): connection lost during the TLS handshake: {exc}"))
                return None
            self._failed(conn, now_ms, Errors.SslAuthenticationError(
                f"node {conn.node_id} ({conn.address}): {describe_tls_error(exc)}"))
            return None
        if wait is None:
            conn.tls_hangups = 0
            sock: Any = conn.sock
            log.debug("TLS established with node %d (%s): %s", conn.node_id, conn.address, sock.version())
        return wait

    def read_failed(self, conn: BrokerConnection, exc: OSError, now_ms: int) -> bool:
        """A read failed: True if it was the end of the TLS handshake (TLS 1.3 reports a
        refused client certificate on the first read after it), handled as an
        authentication failure; False: an ordinary I/O error for the caller."""
        if self._ssl_context is None or conn.is_ready or not _is_tls_alert(exc):
            return False
        self._failed(conn, now_ms, Errors.SslAuthenticationError(
            f"node {conn.node_id} ({conn.address}): {describe_tls_error(exc)}"))
        return True

    def start_api_versions(self, conn: BrokerConnection, now_ms: int) -> None:
        conn.state = ConnectionState.API_VERSIONS
        self._send_api_versions(conn, now_ms, protocol.CLIENT_VERSIONS[API_VERSIONS_KEY][1])

    def on_response(self, conn: BrokerConnection, purpose: str, version: int, response: dict,
                    now_ms: int) -> None:
        """The answer to a set-up request (``purpose`` one of SETUP_REQUESTS, sent at ``version``)."""
        if purpose == "api_versions":
            self._on_api_versions(conn, version, response, now_ms)
        elif purpose == "sasl_handshake":
            self._on_sasl_handshake(conn, response, now_ms)
        else:
            self._on_sasl_authenticate(conn, response, now_ms)

    # ------------------------------------------------------------------ ApiVersions
    def _send_api_versions(self, conn: BrokerConnection, now_ms: int, version: int) -> None:
        conn.api_versions_request_version = version
        name, sw_version = self._software
        self._host.send_setup_request(conn, API_VERSIONS_KEY, version,
                                      {"client_software_name": name, "client_software_version": sw_version},
                                      "api_versions", now_ms)

    def _on_api_versions(self, conn: BrokerConnection, version: int, response: dict, now_ms: int) -> None:
        code = response.get("error_code", 0)
        ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in response.get("api_keys") or []}
        if code == Errors.UnsupportedVersionError.errno:
            ours = protocol.CLIENT_VERSIONS[API_VERSIONS_KEY]
            theirs = ranges.get(API_VERSIONS_KEY)
            retry = None if theirs is None else min(theirs[1], ours[1])
            if theirs is not None and retry is not None and ours[0] <= retry < version and retry >= theirs[0]:
                log.debug("node %d does not support ApiVersions v%d; retrying with v%d", conn.node_id,
                          version, retry)
                self._send_api_versions(conn, now_ms, retry)
                return
            self._host.close_connection(conn, now_ms, Errors.UnsupportedVersionError(
                f"node {conn.node_id} ({conn.address}) supports ApiVersions {theirs}, client {ours}"))
            return
        if code:
            exc_cls = Errors.error_class(code)
            self._host.close_connection(conn, now_ms, exc_cls(f"ApiVersions to node {conn.node_id} failed"))
            return
        conn.broker_api_ranges = ranges
        conn.api_versions = protocol.negotiate(ranges)
        if self._sasl_mechanism is not None:
            self._start_sasl(conn, now_ms)
            return
        self._host.connection_ready(conn, now_ms)
        log.debug("node %d (%s) ready; negotiated versions %s", conn.node_id, conn.address, conn.api_versions)

    # ------------------------------------------------------------------ SASL
    def _start_sasl(self, conn: BrokerConnection, now_ms: int) -> None:
        assert self._sasl_mechanism is not None  # called on SASL_* connections only
        if not conn.reauthenticating:
            conn.state = ConnectionState.AUTHENTICATING
        try:
            conn.sasl = self._sasl_mechanism()
        except Errors.KafkaError as exc:
            self._failed(conn, now_ms, Errors.AuthenticationFailedError(str(exc)))
            return
        conn.sasl.server_host = conn.node.host     # AWS_MSK_IAM signs for the broker's host name
        if conn.api_versions.get(_SASL_HANDSHAKE_KEY, -1) < 1 or _SASL_AUTHENTICATE_KEY not in conn.api_versions:
            self._failed(conn, now_ms, Errors.AuthenticationFailedError(
                f"node {conn.node_id} ({conn.address}) offers no SaslHandshake v1 / SaslAuthenticate: "
                "is its listener SASL?"))
            return
        self._host.send_setup_request(conn, _SASL_HANDSHAKE_KEY, 1, {"mechanism": conn.sasl.name},
                                      "sasl_handshake", now_ms)

    def _on_sasl_handshake(self, conn: BrokerConnection, response: dict, now_ms: int) -> None:
        code = response.get("error_code", 0)
        if code:
            offered = response.get("mechanisms") or []
            self._failed(conn, now_ms, Errors.AuthenticationFailedError(
                f"node {conn.node_id} ({conn.address}) refused SASL mechanism {conn.sasl.name} "
                f"({Errors.error_class(code).__name__}); it offers {offered}"))
            return
        try:
            first = conn.sasl.first()
        except Errors.AuthenticationFailedError as exc:    # no token (OAUTHBEARER): the token source's reason
            self._failed(conn, now_ms, exc)
            return
        except Errors.KafkaError as exc:                   # e.g. AWS_MSK_IAM without a region
            self._failed(conn, now_ms, Errors.AuthenticationFailedError(str(exc)))
            return
        self._send_sasl_token(conn, first, now_ms)

    def _send_sasl_token(self, conn: BrokerConnection, token: bytes, now_ms: int) -> None:
        version = conn.api_versions[_SASL_AUTHENTICATE_KEY]
        conn.sasl_token_sent_ms = now_ms
        self._host.send_setup_request(conn, _SASL_AUTHENTICATE_KEY, version, {"auth_bytes": token},
                                      "sasl_authenticate", now_ms)

    def _on_sasl_authenticate(self, conn: BrokerConnection, response: dict, now_ms: int) -> None:
        mech = conn.sasl
        code = response.get("error_code", 0)
        if code:
            detail = response.get("error_message") or Errors.error_class(code).__name__
            if getattr(mech, "broker_status", ""):      # OAUTHBEARER's challenge: why the token was refused
                detail = f"{detail} (status {mech.broker_status})"
            self._failed(conn, now_ms, Errors.AuthenticationFailedError(
                f"node {conn.node_id} ({conn.address}): {mech.name} authentication of user "
                f"{getattr(mech, 'username', '?')!r} failed: {detail}"))
            return
        try:
            token = mech.step(bytes(response.get("auth_bytes") or b""))
        except Errors.AuthenticationFailedError as exc:
            self._failed(conn, now_ms, Errors.AuthenticationFailedError(
                f"node {conn.node_id} ({conn.address}): {exc}"))
            return
        if token is not None:
            self._send_sasl_token(conn, token, now_ms)
            return
        if not mech.complete:
            self._failed(conn, now_ms, Errors.AuthenticationFailedError(
                f"node {conn.node_id} ({conn.address}): {mech.name} ended before it completed"))
            return
        conn.sasl = None
        self._errors.pop(conn.node_id, None)
        lifetime = int(response.get("session_lifetime_ms") or 0)
        # The broker's session starts when it took the last token, which is after the client sent
        # it but may be well before this answer is read (a client that polls seldom): timing the
        # session from the send keeps the client's idea of its end no later than the broker's.
        session_start = conn.sasl_token_sent_ms if conn.sasl_token_sent_ms is not None else now_ms
        if lifetime > 0:
            # KIP-368: re-authenticate at a random point in the last 15..5% of the session,
            # so many connections authenticated together do not all come back at once; not
            # before the broker takes another re-authentication on this connection, unless
            # that is too late for this session (then it ends by reconnecting, when due).
            conn.session_expiry_ms = session_start + lifetime
            due = session_start + int(lifetime * self._rng.uniform(0.85, 0.95))
            earliest = self._earliest_reauthentication_ms(conn)
            conn.reauth_due_ms = earliest if due < earliest < conn.session_expiry_ms else due
        else:
            conn.session_expiry_ms = conn.reauth_due_ms = None
        session = f"{lifetime} ms" if lifetime > 0 else "unbounded"
        if conn.reauthenticating:
            conn.reauthenticating = False
            self.reauthentications += 1
            started = self._reauth_started.pop(conn.node_id, None)
            if self.stats is not None and started is not None:
                self.stats.record("reauthentication", now_ms - started, now_ms)
            log.debug("node %d (%s) re-authenticated with %s; session %s", conn.node_id, conn.address, mech.name,
                      session)
            return
        self._host.connection_ready(conn, now_ms)
        log.debug("node %d (%s) authenticated with %s; ready (session %s)", conn.node_id, conn.address, mech.name,
                  session)

    # ------------------------------------------------------------------ KIP-368
    @staticmethod
    def reauthentication_due(conn: BrokerConnection, now_ms: int) -> bool:
        """The connection's session is due for re-authentication. It takes no new request
        until a network poll has re-authenticated it: a request written now could reach the
        broker after the session ended, and the broker closes the connection then. (Only the
        poll starts the exchange: the readiness checks are called from threads that do not
        own the connection's I/O.)"""
        return conn.reauth_due_ms is not None and conn.reauth_due_ms <= now_ms

    @staticmethod
    def _earliest_reauthentication_ms(conn: BrokerConnection) -> int:
        """When the broker takes the connection's next re-authentication (its first: at once)."""
        if conn.last_reauth_start_ms is None:
            return 0
        return conn.last_reauth_start_ms + _MIN_REAUTH_INTERVAL_MS + _REAUTH_INTERVAL_MARGIN_MS

    def maybe_reauthenticate(self, conns: Iterable[BrokerConnection], now_ms: int) -> None:
        """Renew the sessions that are due. A due connection takes no new request, and its SASL
        exchange starts once nothing is in flight on it: the broker then reads the SaslHandshake
        as the next request, with no answer of another request interleaved in the exchange. A
        session the broker would not let renew before its end (another re-authentication this
        soon is refused: one a second per connection) is ended by reconnecting."""
        if self._sasl_mechanism is None:
            return
        for conn in conns:
            if (conn.reauth_due_ms is None or now_ms < conn.reauth_due_ms or conn.reauthenticating
                    or conn.state is not ConnectionState.READY or self._host.requests_in_flight(conn)):
                continue
            expiry = conn.session_expiry_ms if conn.session_expiry_ms is not None else _NO_EXPIRY
            earliest = self._earliest_reauthentication_ms(conn)
            # A session that already ended is still renewed on its connection: Kafka starts a
            # re-authentication on a SaslHandshake before it checks the session's end (any
            # other request on an ended session closes the connection, and a due connection
            # sends none). Closing it instead would drop, say, the group coordinator's
            # connection, and with it the member's heartbeats until it is found again.
            if earliest >= expiry:
                self._reconnect(conn, now_ms, expiry, earliest)
                continue
            if now_ms < earliest:
                conn.reauth_due_ms = earliest          # new requests may go until then
                continue
            log.debug("node %d (%s): session ends in %d ms; re-authenticating", conn.node_id, conn.address,
                      expiry - now_ms)
            conn.reauthenticating = True
            self._reauth_started[conn.node_id] = now_ms
            conn.last_reauth_start_ms = now_ms
            conn.reauth_due_ms = None
            conn.setup_deadline_ms = now_ms + self._request_timeout_ms
            self._start_sasl(conn, now_ms)

    def _reconnect(self, conn: BrokerConnection, now_ms: int, expiry: int, earliest: int) -> None:
        """End a session that cannot be renewed on its connection in time by an orderly close
        (nothing is in flight on it); the client reconnects and authenticates afresh."""
        why = (f"its session ends in {expiry - now_ms} ms, before the broker takes another "
               f"re-authentication (one a second per connection)") if now_ms < expiry else (
            f"its session ended {now_ms - expiry} ms ago, before the broker takes another "
            f"re-authentication (one a second per connection)")
        level = logging.DEBUG if conn.node_id in self._renewed_by_reconnecting else logging.INFO
        self._renewed_by_reconnecting.add(conn.node_id)
        log.log(level, "node %d (%s): %s; reconnecting to renew it", conn.node_id, conn.address, why)
        self._host.close_connection(conn, now_ms, Errors.KafkaConnectionError(
            f"node {conn.node_id} ({conn.address}): closed to renew its SASL session: {why}"),
            reason=f"renewing the SASL session: {why}", failed=False)

    # ------------------------------------------------------------------ failures
    def _failed(self, conn: BrokerConnection, now_ms: int, exc: Errors.AuthenticationFailedError) -> None:
        log.error("%s", exc)
        if self.stats is not None:
            self.stats.record("failed-reauthentication" if conn.reauthenticating else "failed-authentication",
                              1, now_ms)
        self._reauth_started.pop(conn.node_id, None)
        self._errors[conn.node_id] = exc
        self._host.close_connection(conn, now_ms, exc, reason=str(exc))
        conn.backoff_ms = max(conn.backoff_ms, self._failure_backoff_ms)

    def error(self, node_id: int) -> Errors.AuthenticationFailedError | None:
        return self._errors.get(node_id)

    def maybe_raise_error(self) -> None:
        """Raise (once) the authentication error of a connection that failed since the last call."""
        if self._errors:
            node_id = next(iter(self._errors))
            raise self._errors.pop(node_id)
