"""Authenticator (a connection's ApiVersions, SASL and KIP-368 re-authentication) against a
recording host: single-layer unit tests. The TLS steps and the whole exchange against Apache
Kafka are in test_security.py; the client's side of the interface in test_network_client.py."""
from __future__ import annotations

import random
import ssl

import pytest

from kclient import errors as Errors
from kclient import protocol
from kclient.network.authenticator import API_VERSIONS_KEY, Authenticator
from kclient.network.connection import BrokerConnection, ConnectionState, ExponentialBackoff
from kclient.network.metadata import Node
from kclient.network.sasl import PlainMechanism
from kclient.protocol import ApiKey

NOW = 1_000_000
FAILURE_BACKOFF_MS = 30_000


class Host:
    """Records what the authenticator asks of its network client."""

    def __init__(self):
        self.sent: list[tuple[int, int, dict, str]] = []
        self.closed: list[BaseException] = []
        self.ready = 0
        self.in_flight = 0
        self.orderly: list[str] = []

    def send_setup_request(self, conn, api_key, version, body, purpose, now_ms):
        self.sent.append((api_key, version, body, purpose))

    def close_connection(self, conn, now_ms, error, reason=None, failed=True):
        if failed:
            self.closed.append(error)
        else:
            self.orderly.append(reason or str(error))
        conn.closed(now_ms, failed=failed, error=reason or str(error))

    def connection_ready(self, conn, now_ms):
        self.ready += 1
        conn.mark_ready(now_ms)

    def requests_in_flight(self, conn):
        return self.in_flight


def make(sasl=None):
    host = Host()
    auth = Authenticator(host, ssl_context=None, sasl_mechanism=sasl, request_timeout_ms=30_000,
                         failure_backoff_ms=FAILURE_BACKOFF_MS, client_software=("kclient", "1.0"),
                         rng=random.Random(3))
    conn = BrokerConnection(Node(1, "broker1", 9092), receiver_factory=lambda: None,
                            reconnect_backoff=ExponentialBackoff(50, 1000),
                            setup_timeout=ExponentialBackoff(10_000, 30_000))
    conn.state = ConnectionState.CONNECTING     # TCP is up: the set-up starts
    return host, auth, conn


def all_versions(**overrides):
    ranges = dict(protocol.CLIENT_VERSIONS)
    ranges.update(overrides)
    return {"error_code": 0, "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                                          for k, (lo, hi) in ranges.items()]}


def test_plaintext_connection_is_ready_after_api_versions():
    host, auth, conn = make()
    auth.start_api_versions(conn, NOW)
    api_key, version, body, purpose = host.sent[-1]
    assert (api_key, version, purpose) == (API_VERSIONS_KEY, protocol.CLIENT_VERSIONS[API_VERSIONS_KEY][1],
                                           "api_versions")
    assert body == {"client_software_name": "kclient", "client_software_version": "1.0"}
    assert conn.state is ConnectionState.API_VERSIONS
    auth.on_response(conn, purpose, version, all_versions(), NOW)
    assert host.ready == 1 and conn.state is ConnectionState.READY
    assert conn.api_versions == protocol.negotiate(protocol.CLIENT_VERSIONS)


def test_api_versions_retries_once_within_the_brokers_range():
    host, auth, conn = make()
    auth.start_api_versions(conn, NOW)
    first = host.sent[-1][1]
    refusal = {"error_code": Errors.UnsupportedVersionError.errno,
               "api_keys": [{"api_key": API_VERSIONS_KEY, "min_version": 0, "max_version": 1}]}
    auth.on_response(conn, "api_versions", first, refusal, NOW)
    assert host.sent[-1][1] == 1 and not host.closed
    auth.on_response(conn, "api_versions", 1, refusal, NOW)
    assert isinstance(host.closed[-1], Errors.UnsupportedVersionError)
    assert host.ready == 0


def plain():
    return PlainMechanism("alice", "s3cret-password")


def authenticate(host, auth, conn, lifetime_ms=0):
    auth.start_api_versions(conn, NOW)
    auth.on_response(conn, "api_versions", host.sent[-1][1], all_versions(), NOW)
    assert host.sent[-1][3] == "sasl_handshake" and host.sent[-1][2] == {"mechanism": "PLAIN"}
    assert conn.state is ConnectionState.AUTHENTICATING
    auth.on_response(conn, "sasl_handshake", 1, {"error_code": 0, "mechanisms": ["PLAIN"]}, NOW)
    assert host.sent[-1][3] == "sasl_authenticate"
    assert host.sent[-1][2] == {"auth_bytes": b"\0alice\0s3cret-password"}
    auth.on_response(conn, "sasl_authenticate", host.sent[-1][1],
                     {"error_code": 0, "auth_bytes": b"", "session_lifetime_ms": lifetime_ms}, NOW)


def test_sasl_plain_authenticates_then_the_connection_is_ready():
    host, auth, conn = make(plain)
    authenticate(host, auth, conn)
    assert host.ready == 1 and conn.is_ready
    assert conn.reauth_due_ms is None and not auth.reauthentication_due(conn, NOW + 10**9)


def test_a_bounded_session_is_reauthenticated_on_the_same_connection():
    host, auth, conn = make(plain)
    authenticate(host, auth, conn, lifetime_ms=10_000)
    due = conn.reauth_due_ms
    assert due is not None and NOW + 8_500 <= due <= NOW + 9_500
    assert conn.session_expiry_ms == NOW + 10_000
    assert not auth.reauthentication_due(conn, due - 1) and auth.reauthentication_due(conn, due)
    sent = len(host.sent)
    auth.maybe_reauthenticate([conn], due - 1)
    assert len(host.sent) == sent                          # not yet
    auth.maybe_reauthenticate([conn], due)
    assert host.sent[-1][3] == "sasl_handshake" and conn.reauthenticating and not conn.is_ready
    assert conn.state is ConnectionState.READY             # requests in flight are still answered
    auth.on_response(conn, "sasl_handshake", 1, {"error_code": 0, "mechanisms": ["PLAIN"]}, due)
    auth.on_response(conn, "sasl_authenticate", host.sent[-1][1],
                     {"error_code": 0, "auth_bytes": b"", "session_lifetime_ms": 10_000}, due)
    assert auth.reauthentications == 1 and conn.is_ready and host.ready == 1
    assert conn.reauth_due_ms is not None and conn.reauth_due_ms > due


def test_a_due_session_waits_until_nothing_is_in_flight():
    # KIP-368: the SASL exchange starts only with no request in flight on the connection (the
    # due session takes no new request meanwhile), so no answer interleaves with it.
    host, auth, conn = make(plain)
    authenticate(host, auth, conn, lifetime_ms=10_000)
    due = conn.reauth_due_ms
    sent = len(host.sent)
    host.in_flight = 1
    auth.maybe_reauthenticate([conn], due)
    assert len(host.sent) == sent and not conn.reauthenticating
    assert auth.reauthentication_due(conn, due)            # still due: new requests wait
    host.in_flight = 0
    auth.maybe_reauthenticate([conn], due + 5)
    assert host.sent[-1][3] == "sasl_handshake" and conn.reauthenticating


def reauthenticate(host, auth, conn, at_ms, lifetime_ms):
    auth.maybe_reauthenticate([conn], at_ms)
    assert host.sent[-1][3] == "sasl_handshake" and conn.reauthenticating
    auth.on_response(conn, "sasl_handshake", 1, {"error_code": 0, "mechanisms": ["PLAIN"]}, at_ms + 2)
    auth.on_response(conn, "sasl_authenticate", host.sent[-1][1],
                     {"error_code": 0, "auth_bytes": b"", "session_lifetime_ms": lifetime_ms}, at_ms + 4)
    assert not conn.reauthenticating and conn.is_ready


def test_the_session_is_timed_from_when_the_last_token_was_sent():
    # The broker's session starts when it took the token: an answer read late (a client that
    # polls seldom) must not move the client's idea of the session's end past the broker's.
    host, auth, conn = make(plain)
    auth.start_api_versions(conn, NOW)
    auth.on_response(conn, "api_versions", host.sent[-1][1], all_versions(), NOW)
    auth.on_response(conn, "sasl_handshake", 1, {"error_code": 0, "mechanisms": ["PLAIN"]}, NOW)
    auth.on_response(conn, "sasl_authenticate", host.sent[-1][1],
                     {"error_code": 0, "auth_bytes": b"", "session_lifetime_ms": 1000}, NOW + 300)
    assert conn.session_expiry_ms == NOW + 1000 and conn.reauth_due_ms <= NOW + 950


def test_a_second_renewal_waits_for_the_brokers_one_second_rule_when_the_session_allows_it():
    # Kafka takes at most one re-authentication a second per connection; one started sooner is
    # answered ILLEGAL_SASL_STATE. A 1.5 s session: the next renewal is put off until allowed.
    host, auth, conn = make(plain)
    authenticate(host, auth, conn, lifetime_ms=1500)
    first = conn.reauth_due_ms
    reauthenticate(host, auth, conn, first, lifetime_ms=1500)
    assert conn.reauth_due_ms >= first + 1100
    assert conn.reauth_due_ms < conn.session_expiry_ms
    sent = len(host.sent)
    auth.maybe_reauthenticate([conn], first + 1099)
    assert len(host.sent) == sent
    reauthenticate(host, auth, conn, conn.reauth_due_ms, lifetime_ms=1500)
    assert auth.reauthentications == 2 and not host.closed and not host.orderly


def test_a_session_too_short_to_renew_in_time_is_renewed_by_reconnecting(caplog):
    # A 1 s session: the first renewal may start at once, the second would come less than a
    # second after it (refused by Kafka) or after the session's end: the connection is closed
    # in order (nothing in flight, no backoff, no authentication error) and reconnects.
    host, auth, conn = make(plain)
    authenticate(host, auth, conn, lifetime_ms=1000)
    first = conn.reauth_due_ms
    reauthenticate(host, auth, conn, first, lifetime_ms=1000)
    due = conn.reauth_due_ms
    assert due < conn.session_expiry_ms
    sent = len(host.sent)
    host.in_flight = 1
    auth.maybe_reauthenticate([conn], due)
    assert not host.orderly and conn.state is ConnectionState.READY   # its requests are answered first
    host.in_flight = 0
    with caplog.at_level("INFO", logger="kclient.network.authenticator"):
        auth.maybe_reauthenticate([conn], due + 1)
    assert len(host.sent) == sent and len(host.orderly) == 1 and not host.closed
    assert conn.state is ConnectionState.DISCONNECTED and conn.backoff_ms == 0 and not conn.failed
    assert "reconnecting to renew it" in caplog.text and "one a second" in caplog.text
    assert auth.error(conn.node_id) is None
    auth.maybe_raise_error()                                           # nothing to raise


def test_a_session_that_ended_while_requests_drained_is_renewed_on_its_connection():
    # Kafka starts a re-authentication on a SaslHandshake even after the session's end (only
    # other requests close an ended session); reconnecting instead would drop the connection
    # (the group coordinator's, say) for nothing.
    host, auth, conn = make(plain)
    authenticate(host, auth, conn, lifetime_ms=10_000)
    host.in_flight = 3
    auth.maybe_reauthenticate([conn], conn.reauth_due_ms)
    assert not conn.reauthenticating                                   # its requests are answered first
    host.in_flight = 0
    sent = len(host.sent)
    auth.maybe_reauthenticate([conn], conn.session_expiry_ms + 20)
    assert conn.reauthenticating and len(host.sent) == sent + 1 and host.sent[-1][3] == "sasl_handshake"
    assert not host.orderly and not host.closed and auth.error(conn.node_id) is None


def test_a_refused_password_fails_once_without_a_storm_and_never_shows_the_secret():
    host, auth, conn = make(plain)
    auth.start_api_versions(conn, NOW)
    auth.on_response(conn, "api_versions", host.sent[-1][1], all_versions(), NOW)
    auth.on_response(conn, "sasl_handshake", 1, {"error_code": 0, "mechanisms": ["PLAIN"]}, NOW)
    auth.on_response(conn, "sasl_authenticate", host.sent[-1][1],
                     {"error_code": 58, "error_message": "Authentication failed: Invalid username or password"},
                     NOW)
    error = auth.error(1)
    assert isinstance(error, Errors.AuthenticationFailedError) and host.closed == [error]
    assert "alice" in str(error) and "Invalid username or password" in str(error)
    assert "s3cret" not in str(error)
    assert conn.state is ConnectionState.DISCONNECTED and conn.backoff_ms >= FAILURE_BACKOFF_MS
    with pytest.raises(Errors.AuthenticationFailedError):
        auth.maybe_raise_error()
    auth.maybe_raise_error()                               # raised once


def test_a_refused_mechanism_names_what_the_broker_offers():
    host, auth, conn = make(plain)
    auth.start_api_versions(conn, NOW)
    auth.on_response(conn, "api_versions", host.sent[-1][1], all_versions(), NOW)
    auth.on_response(conn, "sasl_handshake", 1, {"error_code": 33, "mechanisms": ["SCRAM-SHA-512"]}, NOW)
    assert "refused SASL mechanism PLAIN" in str(host.closed[-1]) and "SCRAM-SHA-512" in str(host.closed[-1])


def test_a_listener_without_sasl_is_named():
    host, auth, conn = make(plain)
    auth.start_api_versions(conn, NOW)
    versions = all_versions()
    versions["api_keys"] = [k for k in versions["api_keys"] if k["api_key"] != int(ApiKey.SASL_HANDSHAKE)]
    auth.on_response(conn, "api_versions", host.sent[-1][1], versions, NOW)
    assert "is its listener SASL?" in str(host.closed[-1])
    assert isinstance(auth.error(1), Errors.AuthenticationFailedError)


@pytest.mark.parametrize("exc", [ConnectionResetError(104, "Connection reset by peer"),
                                 ssl.SSLEOFError(8, "EOF occurred in violation of protocol")])
def test_a_connection_lost_mid_handshake_after_tls_worked_is_a_disconnect_not_an_auth_error(exc):
    host, auth, conn = make()
    conn.ever_ready = True                      # this connection completed TLS before

    def handshake():
        raise exc
    conn.tls_handshake = handshake
    assert auth.tls_step(conn, NOW) is None
    assert isinstance(host.closed[-1], Errors.KafkaConnectionError)
    assert not isinstance(host.closed[-1], Errors.AuthenticationFailedError)
    assert auth.error(conn.node_id) is None     # poll() raises nothing
    auth.maybe_raise_error()


def test_handshakes_hung_up_on_three_times_in_a_row_say_the_listener_may_not_speak_tls():
    host, auth, conn = make()

    def handshake():
        raise ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    conn.tls_handshake = handshake
    for _ in range(2):                          # a reset or two: the network's, retried
        assert auth.tls_step(conn, NOW) is None
        assert isinstance(host.closed[-1], Errors.KafkaConnectionError) and auth.error(conn.node_id) is None
        conn.state = ConnectionState.CONNECTING
    assert auth.tls_step(conn, NOW) is None     # every attempt: the listener's
    assert isinstance(auth.error(conn.node_id), Errors.SslAuthenticationError)
    assert "may not speak TLS" in str(auth.error(conn.node_id))


def test_a_completed_handshake_forgives_earlier_hangups():
    host, auth, conn = make()
    outcomes = [ConnectionResetError(104, "reset"), ConnectionResetError(104, "reset"), None,
                ConnectionResetError(104, "reset"), ConnectionResetError(104, "reset")]

    def handshake():
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return None
    conn.tls_handshake = handshake
    sock = type("Sock", (), {"version": lambda self: "TLSv1.3", "close": lambda self: None})
    for _ in range(5):
        conn.state, conn.sock = ConnectionState.CONNECTING, sock()
        auth.tls_step(conn, NOW)
    assert auth.error(conn.node_id) is None and conn.tls_hangups == 2


def test_reauthentications_and_failures_are_counted_for_the_metrics():
    from kclient.consumer.metrics import ConsumerMetrics
    from kclient.consumer.metric_table import TABLE
    host, auth, conn = make(plain)
    auth.stats = stats = ConsumerMetrics()
    authenticate(host, auth, conn, lifetime_ms=10_000)
    due = conn.reauth_due_ms
    auth.maybe_reauthenticate([conn], due)
    auth.on_response(conn, "sasl_handshake", 1, {"error_code": 0, "mechanisms": ["PLAIN"]}, due + 3)
    auth.on_response(conn, "sasl_authenticate", host.sent[-1][1],
                     {"error_code": 0, "auth_bytes": b"", "session_lifetime_ms": 10_000}, due + 7)
    later = conn.reauth_due_ms
    auth.maybe_reauthenticate([conn], later)
    auth.on_response(conn, "sasl_handshake", 1, {"error_code": 0, "mechanisms": ["PLAIN"]}, later)
    auth.on_response(conn, "sasl_authenticate", host.sent[-1][1],
                     {"error_code": 58, "error_message": "Authentication failed"}, later + 1)
    read = {m.name: stats.read(m, "", later + 1) for m in TABLE if m.group == "consumer-metrics"}
    assert read["successful-reauthentication-total"] == 1 and read["reauthentication-latency-max"] == 7
    assert read["failed-reauthentication-total"] == 1 and read["failed-authentication-total"] == 0
    _, auth2, conn2 = make(plain)
    auth2.stats = stats
    auth2.start_api_versions(conn2, NOW)
    auth2.on_response(conn2, "api_versions", auth2._host.sent[-1][1], all_versions(), NOW)
    auth2.on_response(conn2, "sasl_handshake", 1, {"error_code": 0, "mechanisms": ["PLAIN"]}, NOW)
    auth2.on_response(conn2, "sasl_authenticate", auth2._host.sent[-1][1],
                      {"error_code": 58, "error_message": "Authentication failed"}, NOW)
    failed = next(m for m in TABLE if m.name == "failed-authentication-total")
    assert stats.read(failed, "", NOW) == 1
