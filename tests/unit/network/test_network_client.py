"""NetworkClient, BrokerConnection and config: single-layer unit tests.

The broker is a scripted peer: the other end of a ``socket.socketpair()`` that reads the
client's real request frames (decode_request) and writes real encoded responses
(encode_response). Time is a FakeClock wherever timing logic is tested.
"""
from __future__ import annotations

import select
import socket
import struct
import time

import pytest

from kclient import errors as Errors
from kclient.clock import FakeClock
from kclient.config import ConsumerConfig, parse_bootstrap_servers
from kclient.network.connection import ConnectionState, ExponentialBackoff
from kclient.network.network_config import NetworkClientConfig
from kclient.network.metadata import Metadata, Node
from kclient.network.network_client import ClientRequest, NetworkClient
from kclient.protocol import decode_request, encode_response
from kcore.frames import FrameSplitter

HEARTBEAT, METADATA, API_VERSIONS, FIND_COORDINATOR = 12, 3, 18, 10
BROKER_RANGES = {18: (0, 4), 3: (0, 12), 10: (0, 4), 12: (0, 4), 2: (1, 7), 1: (4, 16), 8: (2, 9)}
T0 = 1_000_000


# ---------------------------------------------------------------------- scripted peer
class PeerConn:
    """The broker end of one connection."""

    def __init__(self, sock: socket.socket, node: Node):
        self.sock = sock
        self.node = node
        self._splitter = FrameSplitter(1 << 24)
        self._frames: list = []

    def read_request(self, timeout: float = 5.0):
        """(api_key, version, correlation_id, client_id, body) of the next request."""
        deadline = time.monotonic() + timeout
        while not self._frames:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no request from the client")
            r, _, _ = select.select([self.sock], [], [], remaining)
            if r:
                data = self.sock.recv(65536)
                if not data:
                    raise EOFError("client closed the connection")
                self._frames.extend(self._splitter.feed(data))
        return decode_request(self._frames.pop(0))

    def no_request_pending(self) -> bool:
        r, _, _ = select.select([self.sock], [], [], 0)
        return not r and not self._frames

    def respond(self, api_key: int, version: int, corr: int, body: dict) -> None:
        self.sock.sendall(encode_response(api_key, version, corr, body))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def answer_api_versions(self, ranges=None, *, expect_version=None) -> int:
        api, version, corr, _cid, body = self.read_request()
        assert api == API_VERSIONS
        if expect_version is not None:
            assert version == expect_version
        ranges = BROKER_RANGES if ranges is None else ranges
        self.respond(API_VERSIONS, version, corr, {
            "error_code": 0, "throttle_time_ms": 0,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in ranges.items()]})
        return version

    def wait_closed(self, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.sock], [], [], max(deadline - time.monotonic(), 0))
            if r:
                try:
                    data = self.sock.recv(65536)
                except ConnectionResetError:
                    return True
                if not data:
                    return True
                self._frames.extend(self._splitter.feed(data))
        return False

    def close(self) -> None:
        self.sock.close()


class ScriptedCluster:
    """A socket factory handing the client one end of a fresh socketpair per connection."""

    def __init__(self):
        self.conns: dict[int, list[PeerConn]] = {}
        self.refuse: set[int] = set()

    def socket_factory(self, node: Node) -> socket.socket:
        if node.node_id in self.refuse:
            raise ConnectionRefusedError(f"scripted refusal for node {node.node_id}")
        client_end, peer_end = socket.socketpair()
        self.conns.setdefault(node.node_id, []).append(PeerConn(peer_end, node))
        return client_end

    def peer(self, node_id: int) -> PeerConn:
        return self.conns[node_id][-1]

    def close(self):
        for lst in self.conns.values():
            for c in lst:
                c.close()


def metadata_response(nodes=(1, 2, 3), topics=()):
    return {"throttle_time_ms": 0, "cluster_id": "scripted", "controller_id": nodes[0],
            "brokers": [{"node_id": n, "host": f"broker{n}", "port": 9092, "rack": None} for n in nodes],
            "topics": list(topics), "error_code": 0}


def known_metadata(clock, **kwargs) -> Metadata:
    """Metadata already refreshed at the fake clock's now: no refresh due for a while."""
    md = Metadata(**kwargs)
    md.bootstrap([("broker1", 9092)])
    md.update(metadata_response(), clock.now_ms())
    return md


def make_client(clock, cluster, metadata=None, **cfg):
    cfg.setdefault("bootstrap.servers", "broker1:9092")
    return NetworkClient(NetworkClientConfig.of(cfg), metadata=metadata if metadata is not None else known_metadata(clock),
                         clock=clock, socket_factory=cluster.socket_factory)


def poll_until(client, cond, timeout_s: float = 5.0, step_ms: int = 50):
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        client.poll(step_ms)


def connect(client, cluster, node_id, ranges=None):
    """Drive a node to READY through the ApiVersions handshake."""
    assert not client.ready(node_id)
    poll_until(client, lambda: node_id in cluster.conns and client.connection_state(node_id)
               is ConnectionState.API_VERSIONS)
    cluster.peer(node_id).answer_api_versions(ranges)
    poll_until(client, lambda: client.is_ready(node_id))


class Recorder:
    def __init__(self):
        self.calls = []

    def cb(self, tag):
        def _cb(response, error):
            self.calls.append((tag, response, error))
        return _cb


@pytest.fixture
def clock():
    return FakeClock(T0)


@pytest.fixture
def cluster():
    c = ScriptedCluster()
    yield c
    c.close()


@pytest.fixture
def client(clock, cluster):
    c = make_client(clock, cluster)
    yield c
    c.close()


def hb(node_id, cb, tag=None, **kw):
    return ClientRequest(node_id, HEARTBEAT, {"group_id": "g", "generation_id": 1, "member_id": "m"},
                         cb, **kw)


# ---------------------------------------------------------------------- handshake
def test_handshake_negotiates_versions_per_connection(client, cluster):
    connect(client, cluster, 1)
    assert client.connection_state(1) is ConnectionState.READY
    assert client.api_version(1, HEARTBEAT) == 4
    assert client.api_version(1, METADATA) == 12           # broker max below ours
    assert client.api_version(1, 68) is None                # broker lacks it
    assert client.broker_api_ranges(1)[API_VERSIONS] == (0, 4)
    assert client.api_version(2, HEARTBEAT) is None         # not connected


def test_handshake_sends_highest_api_versions_and_software_name(client, cluster):
    from kclient.protocol import CLIENT_VERSIONS
    client.ready(1)
    poll_until(client, lambda: client.connection_state(1) is ConnectionState.API_VERSIONS)
    api, version, _corr, client_id, body = cluster.peer(1).read_request()
    assert (api, version) == (API_VERSIONS, CLIENT_VERSIONS[API_VERSIONS][1])
    assert client_id == "kclient" and body["client_software_name"] == "kclient"


def test_handshake_retries_lower_version_after_v0_unsupported_answer(client, cluster):
    client.ready(1)
    poll_until(client, lambda: client.connection_state(1) is ConnectionState.API_VERSIONS)
    peer = cluster.peer(1)
    api, version, corr, _, _ = peer.read_request()
    assert version == 4
    # answer in v0 form: error 35 plus the broker's own ApiVersions range (0-2)
    peer.respond(API_VERSIONS, 0, corr, {"error_code": 35, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 2}]})
    client.poll(100)
    assert peer.answer_api_versions({18: (0, 2), 12: (0, 4)}) == 2
    poll_until(client, lambda: client.is_ready(1))
    assert client.api_version(1, API_VERSIONS) == 2 and client.api_version(1, HEARTBEAT) == 4


def test_handshake_other_error_closes_connection(client, cluster):
    client.ready(1)
    poll_until(client, lambda: client.connection_state(1) is ConnectionState.API_VERSIONS)
    peer = cluster.peer(1)
    _api, version, corr, _, _ = peer.read_request()
    peer.respond(API_VERSIONS, version, corr, {"error_code": 42, "api_keys": []})
    poll_until(client, lambda: client.connection_failed(1))
    assert "ApiVersions" in client.last_error(1)
    assert peer.wait_closed()


def test_handshake_timeout_uses_setup_timeout_and_grows(clock, cluster):
    client = make_client(clock, cluster, **{"socket.connection.setup.timeout.ms": 10_000,
                                            "socket.connection.setup.timeout.max.ms": 30_000})
    client.ready(1)
    poll_until(client, lambda: client.connection_state(1) is ConnectionState.API_VERSIONS)
    conn = client._conns[1]
    first = conn.setup_deadline_ms - conn.last_attempt_ms
    assert 8_000 <= first <= 12_000                  # 10 s +/- 20 % jitter
    clock.advance(first - 1)
    client.poll(0)
    assert client.connection_state(1) is ConnectionState.API_VERSIONS  # not early
    clock.advance(1)
    client.poll(0)
    assert client.connection_failed(1) and "timed out" in client.last_error(1)
    clock.advance(10_000)                            # past any reconnect backoff
    client.ready(1)
    poll_until(client, lambda: client.connection_state(1) is ConnectionState.API_VERSIONS)
    second = conn.setup_deadline_ms - conn.last_attempt_ms
    assert 16_000 <= second <= 24_000                # doubled after a setup timeout
    client.close()


# ---------------------------------------------------------------------- requests
def test_requests_sent_in_order_and_matched_by_correlation_id(client, cluster):
    connect(client, cluster, 1)
    rec = Recorder()
    for i in range(3):
        client.send(ClientRequest(1, HEARTBEAT, {"group_id": f"g{i}", "generation_id": i, "member_id": "m"},
                                  rec.cb(i)))
    assert client.in_flight_request_count(1) == 3
    peer = cluster.peer(1)
    got = [peer.read_request() for _ in range(3)]
    assert [g[4]["group_id"] for g in got] == ["g0", "g1", "g2"]
    corrs = [g[2] for g in got]
    assert corrs == sorted(corrs) and len(set(corrs)) == 3
    for i, (_api, version, corr, _, _) in enumerate(got):
        peer.respond(HEARTBEAT, version, corr, {"error_code": [0, 27, 0][i], "throttle_time_ms": 0})
    poll_until(client, lambda: len(rec.calls) == 3)
    assert [c[0] for c in rec.calls] == [0, 1, 2]
    assert [c[1]["error_code"] for c in rec.calls] == [0, 27, 0]
    assert all(c[2] is None for c in rec.calls)
    assert client.in_flight_request_count() == 0


def test_max_in_flight_caps_sends(clock, cluster):
    client = make_client(clock, cluster, **{"max.in.flight.requests.per.connection": 2})
    connect(client, cluster, 1)
    rec = Recorder()
    client.send(hb(1, rec.cb(0)))
    client.send(hb(1, rec.cb(1)))
    assert not client.is_ready(1) and client.send_capacity(1) == 0
    with pytest.raises(Errors.IllegalStateError):
        client.send(hb(1, rec.cb(2)))
    peer = cluster.peer(1)
    _a, v, corr, _, _ = peer.read_request()
    peer.respond(HEARTBEAT, v, corr, {"error_code": 0})
    poll_until(client, lambda: len(rec.calls) == 1)
    assert client.is_ready(1) and client.send_capacity(1) == 1
    client.close()


def test_correlation_mismatch_closes_connection_and_fails_requests(client, cluster):
    connect(client, cluster, 1)
    rec = Recorder()
    client.send(hb(1, rec.cb("a")))
    client.send(hb(1, rec.cb("b")))
    peer = cluster.peer(1)
    _a, v, corr, _, _ = peer.read_request()
    peer.read_request()
    peer.respond(HEARTBEAT, v, corr + 1, {"error_code": 0})   # answers the second first
    poll_until(client, lambda: len(rec.calls) == 2)
    assert [c[0] for c in rec.calls] == ["a", "b"]
    for _tag, resp, err in rec.calls:
        assert resp is None and isinstance(err, Errors.KafkaConnectionError) and err.retriable
    assert client.connection_failed(1)
    assert "correlation" in client.last_error(1).lower()
    assert peer.wait_closed()


def test_unsolicited_response_is_a_protocol_error(client, cluster):
    connect(client, cluster, 1)
    cluster.peer(1).respond(HEARTBEAT, 4, 77, {"error_code": 0})
    poll_until(client, lambda: client.connection_failed(1))
    assert "correlation" in client.last_error(1).lower()


@pytest.mark.parametrize("prefix", [-5, 2**31 - 1], ids=["negative", "oversized"])
def test_hostile_frame_length_closes_connection(clock, cluster, prefix):
    client = make_client(clock, cluster)
    client._max_response_bytes = 1 << 20
    connect(client, cluster, 1)
    rec = Recorder()
    client.send(hb(1, rec.cb(0)))
    peer = cluster.peer(1)
    peer.read_request()
    peer.send_raw(struct.pack(">i", prefix) + b"\x00" * 16)
    poll_until(client, lambda: rec.calls)
    assert isinstance(rec.calls[0][2], Errors.KafkaConnectionError)
    assert client.connection_failed(1)
    assert str(abs(prefix)) in client.last_error(1)      # the error names the bad length
    client.close()


def test_undecodable_response_fails_only_that_request(client, cluster):
    connect(client, cluster, 1)
    rec = Recorder()
    client.send(hb(1, rec.cb(0)))
    client.send(hb(1, rec.cb(1)))
    peer = cluster.peer(1)
    _a, v, c0, _, _ = peer.read_request()
    _a, v, c1, _, _ = peer.read_request()
    body = struct.pack(">i", c0) + b"\x00"         # header v1 needs tagged fields; body missing
    peer.send_raw(struct.pack(">i", len(body)) + body)
    peer.respond(HEARTBEAT, v, c1, {"error_code": 0})
    poll_until(client, lambda: len(rec.calls) == 2)
    assert isinstance(rec.calls[0][2], Errors.ProtocolError)
    assert rec.calls[1][2] is None and rec.calls[1][1]["error_code"] == 0
    assert client.is_ready(1)


def test_request_timeout_closes_connection_and_fails_its_requests(client, cluster, clock):
    connect(client, cluster, 1)
    rec = Recorder()
    client.send(hb(1, rec.cb("old"), timeout_ms=1000))
    clock.advance(500)
    client.send(hb(1, rec.cb("young"), timeout_ms=1000))
    peer = cluster.peer(1)
    peer.read_request()
    peer.read_request()
    clock.advance(500)
    client.poll(0)
    assert rec.calls == [] and client.is_ready(1)           # not early: a timeout is "more than"
    clock.advance(1)
    client.poll(0)
    assert [c[0] for c in rec.calls] == ["old", "young"]
    assert isinstance(rec.calls[0][2], Errors.KafkaTimeoutError) and rec.calls[0][2].retriable
    assert isinstance(rec.calls[1][2], Errors.KafkaConnectionError)
    assert client.connection_state(1) is ConnectionState.DISCONNECTED
    assert peer.wait_closed()


def test_default_request_timeout_comes_from_config(clock, cluster):
    client = make_client(clock, cluster, **{"request.timeout.ms": 2000})
    connect(client, cluster, 1)
    rec = Recorder()
    req = hb(1, rec.cb(0))
    client.send(req)
    assert req.timeout_ms == 2000
    clock.advance(2000)
    client.poll(0)
    assert rec.calls == []
    clock.advance(1)
    client.poll(0)
    assert isinstance(rec.calls[0][2], Errors.KafkaTimeoutError)
    client.close()


def test_peer_disconnect_fails_in_flight_and_sets_backoff(client, cluster, clock):
    connect(client, cluster, 1)
    rec = Recorder()
    client.send(hb(1, rec.cb(0)))
    cluster.peer(1).close()
    poll_until(client, lambda: rec.calls)
    err = rec.calls[0][2]
    assert isinstance(err, Errors.KafkaConnectionError) and err.retriable
    assert client.connection_failed(1)
    delay = client.connection_delay(1)
    assert 40 <= delay <= 60                  # reconnect.backoff.ms 50 +/- 20 %
    assert not client.ready(1)                # in backoff: no new connection yet
    assert len(cluster.conns[1]) == 1
    clock.advance(delay)
    client.ready(1)
    assert len(cluster.conns[1]) == 2         # a new connection was started
    assert client.metadata.update_requested()  # a lost broker may have moved


def test_reconnect_backoff_grows_exponentially_to_max(clock, cluster):
    client = make_client(clock, cluster, **{"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 1000})
    cluster.refuse.add(1)
    delays = []
    for _ in range(7):
        client.ready(1)
        assert client.connection_failed(1)
        delays.append(client.connection_delay(1))
        clock.advance(delays[-1])
    for i, d in enumerate(delays):
        nominal = min(50 * 2 ** i, 1000)
        assert nominal * 0.8 - 1 <= d <= min(nominal * 1.2, 1000)
    assert delays[-1] <= 1000 and delays[-2] >= 800
    # success resets the backoff
    cluster.refuse.clear()
    connect(client, cluster, 1)
    cluster.peer(1).close()
    poll_until(client, lambda: client.connection_failed(1))
    assert client.connection_delay(1) <= 60
    client.close()


def test_exponential_backoff_bounds():
    b = ExponentialBackoff(50, 1000, jitter=0.2)
    for attempt in range(12):
        for _ in range(20):
            v = b.backoff(attempt)
            nominal = min(50 * 2 ** attempt, 1000)
            assert int(nominal * 0.8) - 1 <= v <= 1000
    assert ExponentialBackoff(0, 0).backoff(5) == 0
    values = {ExponentialBackoff(100, 10_000).backoff(0) for _ in range(50)}
    assert len(values) > 1  # jittered


def test_unknown_version_request_fails_alone(client, cluster):
    connect(client, cluster, 1, ranges={18: (0, 4), 12: (0, 4)})
    rec = Recorder()
    client.send(ClientRequest(1, FIND_COORDINATOR, {"key": "g"}, rec.cb("fc")))
    client.send(ClientRequest(1, HEARTBEAT, {"group_id": "g"}, rec.cb("pinned"), api_version=9))
    client.poll(0)
    assert isinstance(rec.calls[0][2], Errors.UnsupportedVersionError)
    assert isinstance(rec.calls[1][2], Errors.UnsupportedVersionError)
    assert client.is_ready(1) and client.in_flight_request_count(1) == 0


def test_body_callable_receives_negotiated_version(client, cluster):
    connect(client, cluster, 1, ranges={18: (0, 4), 10: (0, 3)})
    seen = []

    def body(version):
        seen.append(version)
        return {"key": "grp", "key_type": 0}

    client.send(ClientRequest(1, FIND_COORDINATOR, body, Recorder().cb(0)))
    _api, version, _c, _cid, got = cluster.peer(1).read_request()
    assert seen == [3] and version == 3 and got["key"] == "grp"


def test_explicit_disconnect_fails_requests_without_backoff(client, cluster):
    connect(client, cluster, 1)
    rec = Recorder()
    client.send(hb(1, rec.cb(0)))
    client.disconnect(1)
    assert isinstance(rec.calls[0][2], Errors.KafkaConnectionError)
    assert not client.connection_failed(1) and client.connection_delay(1) == 0


def test_nodes_with_connections_follow_connects_and_closes(client, cluster, clock):
    assert client.nodes_with_connections() == frozenset()
    connect(client, cluster, 1)
    assert client.nodes_with_connections() == {1}
    assert not client.ready(2)                       # starts connecting
    assert client.nodes_with_connections() == {1, 2}
    client.disconnect(1)
    assert client.nodes_with_connections() == {2}
    cluster.peer(2).close()
    poll_until(client, lambda: client.connection_failed(2))
    assert client.nodes_with_connections() == frozenset()
    client.poll(0)
    assert client.polled_ms == clock.now_ms()


def test_idle_connection_closed_after_connections_max_idle(clock, cluster):
    client = make_client(clock, cluster, **{"connections.max.idle.ms": 60_000})
    connect(client, cluster, 1)
    clock.advance(60_000)
    client.poll(0)
    assert client.is_ready(1)
    clock.advance(1)
    client.poll(0)
    assert client.connection_state(1) is ConnectionState.DISCONNECTED and not client.connection_failed(1)
    client.close()


# ---------------------------------------------------------------------- nodes & metadata
def test_least_loaded_node_prefers_idle_ready_then_connecting_then_connectable(client, cluster, clock):
    assert client.least_loaded_node() in (1, 2, 3)       # nothing connected: any connectable
    connect(client, cluster, 1)
    connect(client, cluster, 2)
    rec = Recorder()
    client.send(hb(1, rec.cb(0)))
    client.send(hb(1, rec.cb(1)))
    client.send(hb(2, rec.cb(2)))
    assert client.least_loaded_node() == 2                # fewest in flight among ready
    client.send(hb(2, rec.cb(3)))
    client.send(hb(2, rec.cb(4)))
    assert client.least_loaded_node() == 1
    cluster.refuse.add(3)
    client.ready(3)                                       # 3 fails: backing off
    assert client.least_loaded_node() == 1
    client.disconnect(1)
    client.disconnect(2)
    cluster.peer(1).close()
    cluster.peer(2).close()
    cluster.refuse.update({1, 2})
    client.ready(1)
    client.ready(2)
    assert client.least_loaded_node() is None             # everyone backing off
    clock.advance(2000)
    assert client.least_loaded_node() in (1, 2, 3)


def test_metadata_refresh_sent_to_least_loaded_node_when_due(clock, cluster):
    md = known_metadata(clock, metadata_max_age_ms=10_000)
    client = make_client(clock, cluster, metadata=md)
    connect(client, cluster, 2)
    assert client.is_ready(2)                # nothing due: the metadata is fresh
    md.add_topics("t")
    assert not client.is_ready(2)            # a new topic's refresh is due at once and goes first
    client.poll(0)                           # sends the Metadata request
    api, version, corr, _, body = cluster.peer(2).read_request()
    assert api == METADATA and [t["name"] for t in body["topics"]] == ["t"]
    assert client.is_ready(2)
    cluster.peer(2).respond(METADATA, version, corr, metadata_response(topics=[
        {"error_code": 0, "name": "t", "is_internal": False, "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 3, "leader_epoch": 1,
             "replica_nodes": [3], "isr_nodes": [3], "offline_replicas": []}]}]))
    poll_until(client, lambda: md.update_version == 2)
    assert md.cluster.leader_for(("t", 0)).node_id == 3
    # the next refresh is due by age
    clock.advance(9_999)
    client.poll(0)
    assert cluster.peer(2).no_request_pending()
    clock.advance(1)
    client.poll(0)
    assert cluster.peer(2).read_request()[0] == METADATA
    client.close()


def test_metadata_failure_backs_off(clock, cluster):
    md = known_metadata(clock)
    client = make_client(clock, cluster, metadata=md)
    connect(client, cluster, 1)
    md.request_update()
    clock.advance(100)
    client.poll(0)
    peer = cluster.peer(1)
    assert peer.read_request()[0] == METADATA
    peer.close()                               # refresh fails with the connection
    poll_until(client, lambda: client.connection_failed(1))
    assert md.update_version == 1 and md.update_requested()
    assert md.time_to_next_update(clock.now_ms()) == 100
    client.close()


def test_bootstrap_from_config_uses_placeholder_nodes(clock, cluster):
    client = NetworkClient(NetworkClientConfig.of({"bootstrap.servers": "b1:9092,b2:9093"}), clock=clock,
                           socket_factory=cluster.socket_factory)
    assert sorted(n.address for n in client.metadata.cluster.nodes()) == ["b1:9092", "b2:9093"]
    client.poll(0)                               # metadata due at once: connect to one
    assert set(cluster.conns) <= {-1, -2} and len(cluster.conns) == 1
    nid = next(iter(cluster.conns))
    cluster.peer(nid).answer_api_versions()
    poll_until(client, lambda: not cluster.peer(nid).no_request_pending())
    _api, version, corr, _, body = cluster.peer(nid).read_request()
    assert _api == METADATA and body["topics"] == []
    cluster.peer(nid).respond(METADATA, version, corr, metadata_response())
    poll_until(client, lambda: client.metadata.update_version == 1)
    assert sorted(n.node_id for n in client.metadata.cluster.nodes()) == [1, 2, 3]
    client.close()


def test_explicit_node_outside_metadata_can_be_used(client, cluster):
    coordinator = Node(2**31 - 1 - 2, "broker2", 9092)
    client.ready(coordinator)
    poll_until(client, lambda: client.connection_state(coordinator) is ConnectionState.API_VERSIONS)
    cluster.peer(coordinator.node_id).answer_api_versions()
    poll_until(client, lambda: client.is_ready(coordinator.node_id))


def test_closed_client_rejects_poll(client):
    client.close()
    with pytest.raises(Errors.IllegalStateError):
        client.poll(0)
    client.close()  # idempotent


# ---------------------------------------------------------------------- real TCP sockets
def test_default_socket_options_and_bootstrap_over_tcp(clock):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    client = NetworkClient(NetworkClientConfig.of({"bootstrap.servers": f"127.0.0.1:{port}", "send.buffer.bytes": 65536,
                            "receive.buffer.bytes": -1}), clock=clock)
    try:
        client.poll(0)
        conn = client._conns[-1]
        assert conn.state in (ConnectionState.CONNECTING, ConnectionState.API_VERSIONS)
        sock = conn.sock
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= 65536
        assert not sock.getblocking()
        server, _ = listener.accept()
        server.close()
    finally:
        client.close()
        listener.close()


def test_unreachable_bootstrap_reports_address():
    from kclient.network.consumer_network_client import ConsumerNetworkClient
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                  # nothing listens there now
    cnc = ConsumerNetworkClient(config=NetworkClientConfig.of({"bootstrap.servers": f"127.0.0.1:{port}"}))
    try:
        with pytest.raises(Errors.NoBrokersAvailable, match=f"127.0.0.1:{port}"):
            cnc.ensure_bootstrapped(300)
        assert "refused" in " ".join(cnc.client.connection_errors().values()).lower()
    finally:
        cnc.close()


# ---------------------------------------------------------------------- config
def test_config_defaults_are_kafkas():
    c = ConsumerConfig()
    assert c["request.timeout.ms"] == 30000
    assert c["reconnect.backoff.ms"] == 50 and c["reconnect.backoff.max.ms"] == 1000
    assert c["socket.connection.setup.timeout.ms"] == 10000
    assert c["socket.connection.setup.timeout.max.ms"] == 30000
    assert c["metadata.max.age.ms"] == 300000 and c["retry.backoff.ms"] == 100
    # The receive buffer is left to the OS (-1), as kafka-python and librdkafka leave it; Java's
    # consumer sets 65536 (see test_config's test of that default and its documented reason).
    assert c["send.buffer.bytes"] == 131072 and c["receive.buffer.bytes"] == -1
    assert c["max.in.flight.requests.per.connection"] == 5
    assert c["session.timeout.ms"] == 45000 and c["heartbeat.interval.ms"] == 3000
    assert c["max.poll.interval.ms"] == 300000 and c["max.poll.records"] == 500
    assert c["max.partition.fetch.bytes"] == 1048576 and c["fetch.max.bytes"] == 52428800
    assert c["auto.offset.reset"] == "latest" and c["enable.auto.commit"] is True


def test_config_accepts_dotted_dict_and_keywords():
    c = ConsumerConfig({"request.timeout.ms": "5000", "enable.auto.commit": "false"},
                       bootstrap_servers=["h1:1", "h2"], max_poll_records=10)
    assert c["request.timeout.ms"] == 5000 and c.request_timeout_ms == 5000
    assert c["enable_auto_commit"] is False
    assert c.bootstrap_addresses == [("h1", 1), ("h2", 9092)]
    assert c.is_set("max.poll.records") and not c.is_set("fetch.min.bytes")


@pytest.mark.parametrize("kwargs,needle", [
    ({"request_timout_ms": 1}, "request_timout_ms"),
    ({"fetch.min.bytes": "lots"}, "fetch.min.bytes"),
    ({"enable_auto_commit": "yes"}, "enable.auto.commit"),
    ({"max_poll_records": 0}, "max.poll.records"),
    ({"auto_offset_reset": "middle"}, "auto.offset.reset"),
    ({"request_timeout_ms": True}, "request.timeout.ms"),
    ({"receive_buffer_bytes": -2}, "receive.buffer.bytes"),
    ({"bootstrap_servers": "h:notaport"}, "bootstrap.servers"),
    ({"bootstrap_servers": ""}, "bootstrap.servers"),
    ({"request_timeout_ms": 2**40}, "request.timeout.ms"),
])
def test_config_errors_name_the_setting(kwargs, needle):
    with pytest.raises(Errors.ConfigurationError, match=needle.replace(".", r"\.")):
        ConsumerConfig(**kwargs)


def test_config_conflicting_spellings_rejected():
    with pytest.raises(Errors.ConfigurationError, match="given twice"):
        ConsumerConfig({"client.id": "a"}, client_id="b")
    assert ConsumerConfig({"client.id": "a"}, client_id="a")["client.id"] == "a"


def test_config_unknown_setting_suggests():
    with pytest.raises(Errors.ConfigurationError, match="did you mean"):
        ConsumerConfig({"sesion.timeout.ms": 1})


def test_parse_bootstrap_servers_forms():
    assert parse_bootstrap_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers(["[::1]:9093", "PLAINTEXT://c:3", "::1"]) == [
        ("::1", 9093), ("c", 3), ("::1", 9092)]
    with pytest.raises(Errors.ConfigurationError):
        parse_bootstrap_servers("a:0")
    with pytest.raises(Errors.ConfigurationError):
        parse_bootstrap_servers([":9092"])


def test_config_max_below_base_is_raised_to_base():
    c = ConsumerConfig(reconnect_backoff_ms=500, reconnect_backoff_max_ms=100)
    assert c["reconnect.backoff.max.ms"] == 500


def test_connect_tries_each_resolved_address(monkeypatch):
    """A host resolving to several addresses: a refused address makes the next attempt use
    the next one (DNS is the only faked layer here; the sockets are real)."""
    import kclient.network.connection as connection
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    monkeypatch.setattr(connection, "resolve", lambda host, p: [
        (socket.AF_INET, ("127.0.0.2", p)), (socket.AF_INET, ("127.0.0.1", p))])
    client = NetworkClient(NetworkClientConfig.of({"bootstrap.servers": f"multi.test:{port}", "reconnect.backoff.ms": 5,
                            "reconnect.backoff.max.ms": 10}))
    try:
        deadline = time.monotonic() + 5
        while client.connection_state(-1) is not ConnectionState.API_VERSIONS:
            assert time.monotonic() < deadline, client.connection_errors()
            client.poll(20)
        assert client._conns[-1].sock.getpeername() == ("127.0.0.1", port)
        assert "refused" in client._conns[-1].last_error.lower()   # 127.0.0.2 was tried first
    finally:
        client.close()
        listener.close()


def test_security_settings_that_cannot_work_are_refused_when_the_client_is_built():
    with pytest.raises(Errors.ConfigurationError, match="sasl.mechanism GSSAPI"):
        NetworkClient(NetworkClientConfig.of({"bootstrap.servers": "h:1", "security.protocol": "sasl_plaintext"}))
    with pytest.raises(Errors.ConfigurationError, match="needs a username and a password"):
        NetworkClient(NetworkClientConfig.of({"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}))
    with pytest.raises(Errors.ConfigurationError, match="ssl.cafile.*no such file"):
        NetworkClient(NetworkClientConfig.of({"bootstrap.servers": "h:1", "security.protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"}))



def test_network_client_takes_only_its_typed_config():
    from kclient.network.consumer_network_client import ConsumerNetworkClient
    settings = {"bootstrap.servers": "h:1"}
    for given in (settings, ConsumerConfig(settings), None):
        with pytest.raises(TypeError, match="NetworkClientConfig"):
            NetworkClient(given)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        NetworkClient(NetworkClientConfig.of(settings), bootstrap_servers="h:1")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="NetworkClientConfig"):
        ConsumerNetworkClient(config=settings)  # type: ignore[arg-type]

# ---------------------------------------------------------------------- KIP-219 throttling
def test_throttled_broker_gets_no_request_until_the_throttle_ends(client, cluster, clock):
    connect(client, cluster, 1)
    rec = Recorder()
    client.send(hb(1, rec.cb("first")))
    peer = cluster.peer(1)
    _a, v, corr, _, _ = peer.read_request()
    peer.respond(HEARTBEAT, v, corr, {"error_code": 0, "throttle_time_ms": 500})   # answered at once
    poll_until(client, lambda: len(rec.calls) == 1)
    assert client.throttle_delay(1) == 500
    assert not client.is_ready(1) and client.send_capacity(1) == 0
    with pytest.raises(Errors.IllegalStateError):
        client.send(hb(1, rec.cb("too early")))
    clock.advance(499)
    assert not client.is_ready(1) and client.throttle_delay(1) == 1
    clock.advance(1)
    assert client.is_ready(1) and client.throttle_delay(1) == 0
    client.send(hb(1, rec.cb("second")))
    assert peer.read_request()[4]["group_id"] == "g"
    assert client.throttle_delay(2) == 0                    # a throttle is per broker


def test_an_answer_the_broker_already_held_back_needs_no_further_wait(client, cluster, clock):
    # Before KIP-219 the broker delays the answer by the throttle time itself: counted from the
    # send, that time has passed when the answer arrives.
    connect(client, cluster, 1)
    rec = Recorder()
    client.send(hb(1, rec.cb("first")))
    peer = cluster.peer(1)
    _a, v, corr, _, _ = peer.read_request()
    clock.advance(300)
    peer.respond(HEARTBEAT, v, corr, {"error_code": 0, "throttle_time_ms": 300})
    poll_until(client, lambda: len(rec.calls) == 1)
    assert client.throttle_delay(1) == 0 and client.is_ready(1)


def test_an_ended_throttle_is_forgotten_by_the_next_poll(client, cluster, clock):
    connect(client, cluster, 1)
    rec = Recorder()
    client.send(hb(1, rec.cb("first")))
    peer = cluster.peer(1)
    _a, v, corr, _, _ = peer.read_request()
    peer.respond(HEARTBEAT, v, corr, {"error_code": 0, "throttle_time_ms": 40})
    poll_until(client, lambda: len(rec.calls) == 1)
    clock.advance(40)
    client.poll(0)
    assert client._throttled_until == {}                     # an ended throttle costs nothing later


def test_a_due_session_waiting_for_its_requests_in_flight_does_not_spin_the_poll(client, cluster, clock):
    # KIP-368: a due session re-authenticates once its requests in flight are answered; their
    # answers wake the poll, so the past due time must not turn every poll into a busy loop.
    connect(client, cluster, 1)
    conn = client._conns[1]
    client.send(hb(1, Recorder().cb(0)))
    now = clock.now_ms()
    conn.reauth_due_ms = now - 1
    assert client._next_deadline_ms(now) > now
    assert not client.is_ready(1)                                  # due: takes no new request
    conn.reauth_due_ms = now + 500
    assert client._next_deadline_ms(now) == now + 500              # not due yet: wake for it
