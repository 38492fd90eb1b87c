"""Network stack against librdkafka's 3-broker mock cluster (real sockets, real protocol).

Tests that change broker state undo it in ``finally``: the cluster is shared by the session.
"""
from __future__ import annotations

import time

import pytest

from kclient import errors as Errors
from kclient.network.consumer_network_client import ConsumerNetworkClient
from kclient.network.network_config import NetworkClientConfig
from kclient.protocol import ApiKey
from kclient.testing.mock_cluster import TRANSPORT


def make_cnc(bootstrap: str, **cfg) -> ConsumerNetworkClient:
    cfg = {"bootstrap.servers": bootstrap, "request.timeout.ms": 10_000, **cfg}
    return ConsumerNetworkClient(config=NetworkClientConfig.of(cfg))


@pytest.fixture
def cnc(mock_cluster):
    c = make_cnc(mock_cluster.bootstrap)
    c.ensure_bootstrapped(10_000)
    yield c
    c.close()


def wait_for(cnc, cond, timeout_s=10.0, step_ms=100):
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        cnc.poll(step_ms)


def await_topic(cnc, topic, partitions, timeout_s=10.0):
    cnc.metadata.add_topics(topic)
    deadline = time.monotonic() + timeout_s
    while True:
        cl = cnc.metadata.cluster
        if cl.partition_count(topic) == partitions and len(cl.available_partitions_for_topic(topic)) == partitions:
            return cl
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} not in metadata: {cl}")
        cnc.await_metadata_update(1000)


def send_and_wait(cnc, node, api_key, body, timeout_ms=10_000):
    f = cnc.send(node, api_key, body)
    assert cnc.poll(f, timeout_ms), f"no answer from node {node} to api {api_key}"
    return f


def list_offsets_body(topic, partition=0):
    return {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                        "timestamp": -1}]}]}


def partition_error(response) -> int:
    return response["topics"][0]["partitions"][0]["error_code"]


def test_metadata_discovery(mock_cluster, cnc, create_topic, topic_name):
    create_topic(mock_cluster, topic_name, 6)
    cl = await_topic(cnc, topic_name, 6)
    assert sorted(n.node_id for n in cl.nodes()) == [1, 2, 3]
    assert cl.cluster_id and not cl.is_bootstrap
    parts = cl.partitions_for_topic(topic_name)
    assert [p.partition for p in parts] == list(range(6))
    assert {p.leader for p in parts} <= {1, 2, 3}
    assert all(cl.leader_for((topic_name, p.partition)) is not None for p in parts)
    # every broker in the metadata is reachable with negotiated versions
    for node in cl.nodes():
        cnc.try_connect(node.node_id)
        wait_for(cnc, lambda: cnc.client.is_ready(node.node_id))
        assert cnc.api_version(node.node_id, ApiKey.API_VERSIONS) <= 2     # mock: ApiVersions v0-2
        assert cnc.api_version(node.node_id, ApiKey.METADATA) is not None
    # a topic the cluster does not have is flagged, not fatal
    cnc.metadata.add_topics(topic_name + "-missing")
    cnc.metadata.allow_auto_topic_creation = False
    assert cnc.await_metadata_update(5000)
    assert cnc.metadata.cluster.topic_errors.get(topic_name + "-missing") == 3


def test_leader_move_refreshes_metadata_and_reroutes(mock_faults, cnc, create_topic, topic_name):
    create_topic(mock_faults, topic_name, 1)
    cl = await_topic(cnc, topic_name, 1)
    old = cl.leader_for((topic_name, 0)).node_id
    new = next(b for b in (1, 2, 3) if b != old)
    mock_faults.partition_set_leader(topic_name, 0, new)
    # our metadata still says `old`: the old leader refuses
    f = send_and_wait(cnc, old, ApiKey.LIST_OFFSETS, list_offsets_body(topic_name))
    code = partition_error(f.value)
    err_cls = Errors.for_code(code)
    assert err_cls is Errors.NotLeaderOrFollowerError and err_cls.invalid_metadata
    version = cnc.metadata.update_version
    assert cnc.metadata.request_update_for_error(code)   # what the fetcher does with it
    wait_for(cnc, lambda: cnc.metadata.update_version > version)
    leader = cnc.metadata.cluster.leader_for((topic_name, 0))
    assert leader.node_id == new
    f = send_and_wait(cnc, leader.node_id, ApiKey.LIST_OFFSETS, list_offsets_body(topic_name))
    assert partition_error(f.value) == 0
    assert f.node_id == new


def test_broker_down_fails_requests_and_client_reconnects(mock_faults, cnc):
    victim = 2
    wait_for(cnc, lambda: cnc.try_connect(victim))
    try:
        # a request in flight (held back by a long round trip) when the broker goes down
        mock_faults.broker_set_rtt(victim, 5000)
        in_flight = cnc.send(victim, ApiKey.METADATA, {"topics": []})
        wait_for(cnc, lambda: cnc.client.in_flight_request_count(victim) == 1)
        mock_faults.broker_set_down(victim)
        start = time.monotonic()
        assert cnc.poll(in_flight, 4000), "the in-flight request outlived the connection"
        assert time.monotonic() - start < 4
        assert isinstance(in_flight.exception, Errors.KafkaConnectionError) and in_flight.retriable()
        # while it is down, new requests fail with a retriable connection error too
        later = cnc.send(victim, ApiKey.METADATA, {"topics": []})
        assert cnc.poll(later, 5000)
        assert isinstance(later.exception, Errors.KafkaConnectionError) and later.retriable()
        assert cnc.connection_failed(victim)
    finally:
        mock_faults.broker_set_rtt(victim, 0)
        mock_faults.broker_set_up(victim)
    # once it is back, the client reconnects (after its backoff) and requests succeed
    deadline = time.monotonic() + 10
    ok = None
    attempts = 0
    while ok is None and time.monotonic() < deadline:
        f = cnc.send(victim, ApiKey.METADATA, {"topics": []})
        cnc.poll(f, 5000)
        attempts += 1
        if f.succeeded():
            ok = f.value
        else:
            assert f.retriable(), f.exception
            cnc.poll(100)
    assert ok is not None and sorted(b["node_id"] for b in ok["brokers"]) == [1, 2, 3]
    assert cnc.client.is_ready(victim)


def test_injected_errors_map_to_exception_classes(mock_faults, cnc, group_id):
    # Heartbeat carries only an error code, so the pushed codes arrive untouched. (The mock
    # answers FindCoordinator v3 errors with a null host, which the schema forbids; see the
    # network helper's report.)
    node = cnc.least_loaded_node()
    body = {"group_id": group_id, "generation_id": 1, "member_id": "m"}
    pushed = [16, 15, 27, 25]
    try:
        mock_faults.push_request_errors(ApiKey.HEARTBEAT, pushed)
        got = []
        for _ in pushed:
            f = send_and_wait(cnc, node, ApiKey.HEARTBEAT, body)
            got.append(Errors.for_code(f.value["error_code"]))
        assert got == [Errors.NotCoordinatorError, Errors.CoordinatorNotAvailableError,
                       Errors.RebalanceInProgressError, Errors.UnknownMemberIdError]
        assert [c.retriable for c in got] == [True, True, False, False]
    finally:
        mock_faults.clear_request_errors(ApiKey.HEARTBEAT)
    # with nothing injected, FindCoordinator finds a coordinator among the brokers
    f = send_and_wait(cnc, node, ApiKey.FIND_COORDINATOR, lambda v: (
        {"key": group_id, "key_type": 0} if v < 4 else {"key_type": 0, "coordinator_keys": [group_id]}))
    resp = f.value if f.api_version < 4 else f.value["coordinators"][0]
    assert resp["error_code"] == 0 and resp["node_id"] in (1, 2, 3)


def test_injected_transport_error_disconnects_then_recovers(mock_faults, cnc, group_id):
    node = cnc.least_loaded_node()
    wait_for(cnc, lambda: cnc.try_connect(node))
    try:
        mock_faults.push_request_errors(ApiKey.HEARTBEAT, [TRANSPORT])
        f = send_and_wait(cnc, node, ApiKey.HEARTBEAT,
                          {"group_id": group_id, "generation_id": 1, "member_id": "m"})
        assert f.failed() and isinstance(f.exception, Errors.KafkaConnectionError) and f.retriable()
    finally:
        mock_faults.clear_request_errors(ApiKey.HEARTBEAT)
    wait_for(cnc, lambda: cnc.try_connect(node))
    f = send_and_wait(cnc, node, ApiKey.METADATA, {"topics": []})
    assert f.succeeded()


def test_unknown_bootstrap_port_is_named(mock_cluster):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cnc = make_cnc(f"127.0.0.1:{port}")
    try:
        with pytest.raises(Errors.NoBrokersAvailable, match=str(port)):
            cnc.ensure_bootstrapped(500)
    finally:
        cnc.close()
