"""The Apache Kafka harness: jar resolution, one node, a replicated three, and clear errors."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kclient import KafkaConsumer, KafkaProducer, TopicPartition
from kclient.testing import KafkaCluster, MavenError, _wire, reaper
from kclient.testing.kafka import kafka_jars, kafka_version
from kclient.testing.maven import resolve_jars

from conftest import EXTERNAL_BOOTSTRAP

pytestmark = pytest.mark.skipif(bool(EXTERNAL_BOOTSTRAP),
                                reason="KCLIENT_TEST_BOOTSTRAP: these tests check the harness's own brokers")


def test_single_node_speaks_kafka_4(kafka):
    with _wire.RawConnection.to(kafka.bootstrap) as conn:
        error, ranges = _wire.api_versions(conn)
        meta = _wire.metadata(conn, [])
    assert error == 0
    # What the stand-ins lack and later work relies on: KIP-848 heartbeats, leader epochs,
    # fetch sessions (Fetch v7+), DescribeCluster.
    assert 68 in ranges and 23 in ranges and ranges[1][1] >= 12 and 60 in ranges
    assert list(meta["brokers"]) == [1]
    assert kafka.kind == "kafka" and kafka.running
    # Recorded for the reaper like the other brokers: a crashed test run leaves no JVM behind.
    assert (reaper.state_dir() / "brokers" / f"{kafka.pid}.json").exists()


def test_jars_are_resolved_once_into_the_cache(kafka):
    jars = kafka_jars()
    names = {j.name for j in jars}
    assert f"kafka_2.13-{kafka_version()}.jar" in names and f"kafka-clients-{kafka_version()}.jar" in names
    # The second call only lists the cache: it works with Maven gone from PATH.
    env = dict(os.environ, PATH="/nonexistent")
    out = subprocess.run([sys.executable, "-c", "from kclient.testing.kafka import kafka_jars; "
                          "print(len(kafka_jars()))"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(jars)


def test_missing_maven_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KCLIENT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MavenError, match=r"Maven is not installed.*apt-get install maven"):
        resolve_jars(["org.apache.kafka:kafka-clients:4.4.0"], "no-maven")


def test_missing_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(MavenError, match=r"no Java runtime found.*openjdk-17-jre-headless"):
        KafkaCluster().start()


def test_bad_coordinates_and_arguments_are_refused():
    with pytest.raises(ValueError, match="GROUP:ARTIFACT:VERSION"):
        resolve_jars(["org.apache.kafka:kafka-clients"], "bad")
    with pytest.raises(ValueError, match="at least 1 broker"):
        KafkaCluster(0)
    with pytest.raises(ValueError, match="profile"):
        KafkaCluster(profile="fastest")


def test_three_nodes_survive_the_loss_of_a_leader(kafka3, create_topic, topic_name):
    """Replication 3, min.insync.replicas 2: acks=all writes and reads go on with a node down."""
    assert len(kafka3.bootstrap.split(",")) == 3
    create_topic(kafka3, topic_name, 3)
    topic = kafka3.metadata([topic_name])["topics"][topic_name]
    assert all(len(p["replica_nodes"]) == 3 for p in topic["partitions"].values())
    tp = TopicPartition(topic_name, 0)
    with KafkaProducer(bootstrap_servers=kafka3.bootstrap, acks="all") as p:
        for i in range(100):
            p.send(topic_name, b"before-%d" % i, partition=0)
    victim = kafka3.leader_of(topic_name, 0)
    kafka3.kill_broker(victim)
    try:
        _wire.wait_until(lambda: kafka3.leader_of(topic_name, 0) not in (victim, -1), 60,
                         f"a new leader for {tp} after node {victim} died")
        # One request in flight keeps the order while the producer finds the new leader
        # (with 5, a batch refused by a node that no longer leads may land after later ones).
        with KafkaProducer(bootstrap_servers=kafka3.bootstrap, acks="all",
                           max_in_flight_requests_per_connection=1) as p:
            for i in range(100):
                p.send(topic_name, b"after-%d" % i, partition=0)
        with KafkaConsumer(bootstrap_servers=kafka3.bootstrap, auto_offset_reset="earliest") as c:
            c.assign([tp])
            values: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(values) < 200 and time.monotonic() < deadline:
                values += [r.value for r in c.poll(timeout_ms=500).get(tp, [])]
        assert values == [b"before-%d" % i for i in range(100)] + [b"after-%d" % i for i in range(100)]
    finally:
        kafka3.start_broker(victim)
    assert kafka3.running


def test_a_cluster_id_starting_with_a_dash_formats(kafka, monkeypatch):
    """Random ids are URL-safe base64: one in 64 starts with "-", which a flag parser takes for
    an option unless it is passed as --cluster-id=ID.

    Only the storage format takes the id as an argument; a node reads it back from the
    meta.properties that format writes, so the check stops there (starting a node for it cost
    half a minute)."""
    cluster = KafkaCluster()
    cluster.cluster_id = "-" + cluster.cluster_id[1:]
    monkeypatch.setattr(cluster, "_spawn", lambda node: None)
    monkeypatch.setattr(cluster, "_wait_ready", lambda *args, **kwargs: None)
    cluster.start()
    try:
        (node,) = cluster.nodes
        meta = (node.dir / "data" / "meta.properties").read_text()
        assert f"cluster.id={cluster.cluster_id}\n" in meta, meta
    finally:
        cluster.stop()
