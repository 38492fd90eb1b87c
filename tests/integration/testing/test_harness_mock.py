"""The mock-cluster harness: child process, raw protocol round trips, fault injection."""
from __future__ import annotations

import os
import signal
import socket
import struct
import sys
import time

import pytest

from kclient.testing import (TRANSPORT, BrokerNotFoundError, ExternalCluster, FaultInjectionUnavailable,
                             HarnessError, MockCluster, MockClusterError, reaper)
from kclient.testing import _wire
from kclient.testing.mock_cluster import find_librdkafka

API_VERSIONS, METADATA, FIND_COORDINATOR = 18, 3, 10
CLUSTER_AUTHORIZATION_FAILED, NOT_COORDINATOR, UNSUPPORTED_VERSION = 31, 16, 35

# ApiVersions v3 (flexible), correlation id 0x1234, client id "kt", software "kclient" "0.1".
API_VERSIONS_V3 = bytes.fromhex("0000001a" "0012" "0003" "00001234" "0002" "6b74" "00"
                                "08" "6b636c69656e74" "04" "302e31" "00")
# ApiVersions v2 (non-flexible, header v1, empty body), correlation id 0x0102, client id "kt".
API_VERSIONS_V2 = bytes.fromhex("0000000c" "0012" "0002" "00000102" "0002" "6b74")


def test_api_versions_v2_bytes_match_known_vector():
    payload = struct.pack(">hhih", 18, 2, 0x0102, 2) + b"kt"
    assert struct.pack(">i", len(payload)) + payload == API_VERSIONS_V2


def addresses(cluster) -> list[tuple[str, int]]:
    return [_wire.parse_bootstrap(b) for b in cluster.bootstrap.split(",")]


def roundtrip(addr: tuple[str, int], frame: bytes) -> bytes:
    with socket.create_connection(addr, timeout=10) as sock:
        sock.sendall(frame)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("broker closed the connection before answering")
            buf += chunk
    return buf[4:]


def parse_api_versions_v0_layout(frame: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """v0-v2 layout (also what a broker sends when refusing a newer version)."""
    corr, error, count = struct.unpack_from(">ihi", frame, 0)
    keys = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", frame, 10 + 6 * i)
        keys[key] = (lo, hi)
    return corr, error, keys


def api_versions_v2(addr) -> tuple[int, int, dict]:
    return parse_api_versions_v0_layout(roundtrip(addr, API_VERSIONS_V2))


def test_api_versions_round_trip_each_broker(mock_cluster):
    addrs = addresses(mock_cluster)
    assert len(addrs) == 3 or isinstance(mock_cluster, ExternalCluster)
    for addr in addrs:
        corr, error, keys = api_versions_v2(addr)
        assert corr == 0x0102
        assert error == 0
        assert 1 in keys and 3 in keys  # Fetch, Metadata


def parse_mock_unsupported_api_versions(frame: bytes) -> tuple[int, int, dict[int, tuple[int, int]], int]:
    """The mock's reply to a flexible (v3+) ApiVersions request it does not support.

    Neither the v0 layout (int32 count) nor the flexible one: a one-byte count holding the
    number of entries itself (not N+1), entries without tagged fields, throttle_time_ms,
    and no trailing tagged fields. Only ApiVersions' own range is listed.
    """
    corr, error, count = struct.unpack_from(">ihB", frame, 0)
    keys = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", frame, 7 + 6 * i)
        keys[key] = (lo, hi)
    (throttle,) = struct.unpack_from(">i", frame, 7 + 6 * count)
    assert len(frame) == 11 + 6 * count
    return corr, error, keys, throttle


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_flexible_answered_unsupported(mock_faults, version):
    # The mock implements ApiVersions v0-v2; a client must take the error code and retry lower.
    frame = bytearray(API_VERSIONS_V3)
    frame[7] = version  # api_version low byte; v4 has the same request layout as v3
    reply = roundtrip(addresses(mock_faults)[0], bytes(frame))
    assert reply == bytes.fromhex("00001234" "0023" "01" "0012" "0000" "0002" "00000000")
    assert parse_mock_unsupported_api_versions(reply) == (0x1234, UNSUPPORTED_VERSION, {API_VERSIONS: (0, 2)}, 0)


def test_create_topic_shows_in_metadata(mock_cluster, create_topic, topic_name):
    create_topic(mock_cluster.bootstrap, topic_name, 6)
    meta = mock_cluster.metadata([topic_name])
    topic = meta["topics"][topic_name]
    assert topic["error_code"] == 0
    assert sorted(topic["partitions"]) == list(range(6))
    from confluent_kafka.admin import AdminClient

    listed = AdminClient({"bootstrap.servers": mock_cluster.bootstrap}).list_topics(topic_name, timeout=10)
    assert len(listed.topics[topic_name].partitions) == 6
    assert len(listed.brokers) == len(meta["brokers"])


def test_delete_topic(mock_cluster, topic_name):
    mock_cluster.create_topic(topic_name, 2)
    mock_cluster.wait_for_topic(topic_name, 2)
    mock_cluster.delete_topic(topic_name)
    assert mock_cluster.metadata([topic_name])["topics"][topic_name]["error_code"] == 3


def test_broker_set_down_refuses_connections(mock_faults):
    addr = addresses(mock_faults)[1]
    mock_faults.broker_set_down(2)
    try:
        with pytest.raises(OSError):
            api_versions_v2(addr)
        assert api_versions_v2(addresses(mock_faults)[0])[1] == 0  # the others still answer
    finally:
        mock_faults.broker_set_up(2)
    assert _wire.wait_until(lambda: api_versions_v2(addr)[1] == 0, 10, "broker 2 back up")


def test_push_request_errors_fails_next_requests(mock_faults):
    a, b = addresses(mock_faults)[:2]
    mock_faults.push_request_errors(API_VERSIONS, [CLUSTER_AUTHORIZATION_FAILED, NOT_COORDINATOR])
    try:
        assert api_versions_v2(a)[1] == CLUSTER_AUTHORIZATION_FAILED  # cluster-wide: any broker
        assert api_versions_v2(b)[1] == NOT_COORDINATOR
        assert api_versions_v2(a)[1] == 0  # the stack is used up
    finally:
        mock_faults.clear_request_errors(API_VERSIONS)


def test_push_transport_error_drops_connection(mock_faults):
    mock_faults.push_request_errors(API_VERSIONS, [TRANSPORT])
    try:
        with pytest.raises(ConnectionError):
            api_versions_v2(addresses(mock_faults)[0])
    finally:
        mock_faults.clear_request_errors(API_VERSIONS)
    assert api_versions_v2(addresses(mock_faults)[0])[1] == 0


def test_broker_error_stack_is_per_broker(mock_faults):
    a, b = addresses(mock_faults)[:2]
    mock_faults.broker_push_request_error_rtts(1, API_VERSIONS, [(CLUSTER_AUTHORIZATION_FAILED, 0), (0, 0)])
    assert mock_faults.broker_error_stack_count(1, API_VERSIONS) == 2
    assert api_versions_v2(b)[1] == 0  # broker 2 is unaffected
    assert api_versions_v2(a)[1] == CLUSTER_AUTHORIZATION_FAILED
    assert mock_faults.broker_error_stack_count(1, API_VERSIONS) == 1
    assert api_versions_v2(a)[1] == 0
    assert mock_faults.broker_error_stack_count(1, API_VERSIONS) == 0


def find_coordinator_v1(addr, group: str) -> tuple[int, int]:
    """(error_code, node_id) from FindCoordinator v1 (key, key_type 0 = group)."""
    payload = struct.pack(">hhih", FIND_COORDINATOR, 1, 9, 2) + b"kt"
    payload += struct.pack(">h", len(group)) + group.encode() + b"\x00"
    frame = roundtrip(addr, struct.pack(">i", len(payload)) + payload)
    r = _wire.Reader(frame)
    assert r.i32() == 9
    r.i32()  # throttle_time_ms
    error = r.i16()
    r.string()  # error_message
    return error, r.i32()


def test_coordinator_set_moves_group_coordinator(mock_faults, group_id):
    addr = addresses(mock_faults)[0]
    for broker_id in (3, 1):
        mock_faults.coordinator_set("group", group_id, broker_id)
        assert find_coordinator_v1(addr, group_id) == (0, broker_id)


def test_partition_set_leader_shows_in_metadata(mock_faults, create_topic, topic_name):
    create_topic(mock_faults, topic_name, 2)
    for broker_id in (2, 3):
        mock_faults.partition_set_leader(topic_name, 1, broker_id)
        assert mock_faults.metadata([topic_name])["topics"][topic_name]["partitions"][1]["leader_id"] == broker_id


def test_request_tracking(mock_faults):
    a, b = addresses(mock_faults)[:2]
    mock_faults.start_request_tracking()
    try:
        before_us = time.monotonic_ns() // 1000
        api_versions_v2(b)
        with _wire.RawConnection(*a) as conn:
            _wire.metadata(conn, [])
        after_us = time.monotonic_ns() // 1000
        seen = mock_faults.get_requests()
        assert [(r.broker_id, r.api_key) for r in seen] == [(2, API_VERSIONS), (1, METADATA)]
        assert all(before_us <= r.timestamp_us <= after_us for r in seen)  # CLOCK_MONOTONIC µs
        mock_faults.clear_requests()
        assert mock_faults.get_requests() == []
        api_versions_v2(a)
        assert [(r.broker_id, r.api_key) for r in mock_faults.get_requests()] == [(1, API_VERSIONS)]
    finally:
        mock_faults.stop_request_tracking()
    # librdkafka 2.16 discards the recorded requests when tracking stops.
    api_versions_v2(a)
    assert mock_faults.get_requests() == []


def test_delete_records_moves_log_start_offset(mock_faults, create_topic, topic_name):
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topic(mock_faults, topic_name, 1)
    producer = Producer({"bootstrap.servers": mock_faults.bootstrap, "linger.ms": 0})
    for i in range(5):
        producer.produce(topic_name, value=b"v%d" % i, partition=0)
    assert producer.flush(10) == 0
    mock_faults.delete_records(topic_name, 0, 3)
    consumer = Consumer({"bootstrap.servers": mock_faults.bootstrap, "group.id": topic_name})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (3, 5)
    finally:
        consumer.close()
    with pytest.raises(MockClusterError) as info:
        mock_faults.delete_records(topic_name, 0, 99)  # beyond the end
    assert info.value.code == 1  # OFFSET_OUT_OF_RANGE


def test_unknown_op_and_bad_arguments_raise(mock_faults):
    with pytest.raises(MockClusterError, match="does not export"):
        mock_faults.call("no_such_function")
    with pytest.raises(MockClusterError):
        mock_faults.partition_set_leader("no-such-topic-x", 0, 99)  # no broker 99
    assert mock_faults.call("ping") == "pong"  # the child survived


def test_child_crash_is_reported_not_hung():
    with MockCluster(1, call_timeout=10) as cluster:
        pid = cluster.pid
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(HarnessError):
            cluster.call("ping")
    assert not reaper.pid_alive(pid)
    assert not (reaper.state_dir() / "brokers" / f"{pid}.json").exists()


def test_child_hang_times_out_and_is_killed():
    cluster = MockCluster(1).start()
    pid = cluster.pid
    os.kill(pid, signal.SIGSTOP)  # a hang inside librdkafka looks like this from outside
    try:
        with pytest.raises(MockClusterError, match="timed out"):
            cluster.call("ping", timeout=0.5)
    finally:
        cluster.stop(timeout=1.0)  # ignores the shutdown request, so it gets SIGKILL
    assert not reaper.pid_alive(pid)
    assert not (reaper.state_dir() / "brokers" / f"{pid}.json").exists()


def test_external_cluster_refuses_fault_injection():
    external = ExternalCluster("127.0.0.1:9")
    with pytest.raises(FaultInjectionUnavailable, match="mock cluster"):
        external.broker_set_down(1)
    with pytest.raises(AttributeError):
        external.no_such_thing


def test_missing_library_names_the_extra(monkeypatch):
    monkeypatch.delenv("KCLIENT_LIBRDKAFKA", raising=False)
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # as if confluent-kafka were not installed
    with pytest.raises(BrokerNotFoundError, match=r"kclient-cy\[broker\]"):
        find_librdkafka()
