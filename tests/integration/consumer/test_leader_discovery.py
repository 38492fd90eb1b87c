"""Leader discovery (KIP-951) on a 3-node Apache Kafka: when the partition's leader moves to
another live broker, the old leader's NOT_LEADER_OR_FOLLOWER answer names the new one, and the
consumer fetches from it without waiting for a metadata round."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import time

import pytest

from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition
from kclient.testing.kafka import kafka_version
from kclient.testing.maven import MavenError, find_java, resolve_jars


@pytest.fixture(scope="module")
def kafka_tool():
    """``kafka_tool(main_class, *args)``: runs one of Kafka's command-line tools."""
    if os.environ.get("KCLIENT_TEST_BOOTSTRAP"):
        pytest.skip("moves a leader on the harness's own 3-node Apache Kafka")
    version = kafka_version()
    try:
        jars = resolve_jars([f"org.apache.kafka:kafka-tools:{version}"], f"kafka-tools-{version}")
        java = find_java()
    except MavenError as exc:
        pytest.skip(f"Kafka's tools are unavailable: {exc}")

    def run(main: str, *args: str) -> str:
        done = subprocess.run([java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", os.pathsep.join(map(str, jars)),
                               main, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{main} failed: {done.stdout}\n{done.stderr}"
        return done.stdout
    return run


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as p:
        for i in range(start, start + count):
            p.send(topic, b"%d" % i, partition=0)
        p.flush(30)


def read(c: KafkaConsumer, count: int, timeout_s: float = 60.0) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        for recs in c.poll(200).values():
            out.extend(r.value for r in recs)
    return out


def test_the_consumer_follows_the_leader_the_old_one_names(kafka3, kafka_tool, create_topic, topic_name, tmp_path, caplog):
    create_topic(kafka3, topic_name, 1, replication_factor=3)
    part = kafka3.metadata([topic_name])["topics"][topic_name]["partitions"][0]
    old_leader = part["leader_id"]
    new_leader = next(n for n in part["replica_nodes"] if n != old_leader)
    produce(kafka3.bootstrap, topic_name, 0, 20)
    tp = TopicPartition(topic_name, 0)
    with KafkaConsumer(bootstrap_servers=kafka3.bootstrap, auto_offset_reset="earliest",
                       metadata_max_age_ms=600_000) as consumer:
        consumer.assign([tp])
        assert read(consumer, 20) == [b"%d" % i for i in range(20)]
        assert consumer._metadata.cluster.leader_for((topic_name, 0)).node_id == old_leader
        # Move the leadership to another live broker: make it the preferred replica, then elect.
        plan = tmp_path / "plan.json"
        order = [new_leader] + [n for n in part["replica_nodes"] if n != new_leader]
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic_name, "partition": 0, "replicas": order}]}))
        kafka_tool("org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "--bootstrap-server",
                   kafka3.bootstrap, "--reassignment-json-file", str(plan), "--execute")
        kafka_tool("org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server", kafka3.bootstrap,
                   "--election-type", "PREFERRED", "--topic", topic_name, "--partition", "0")
        assert kafka3.leader_of(topic_name, 0) == new_leader
        produce(kafka3.bootstrap, topic_name, 20, 20)
        with caplog.at_level(logging.DEBUG, logger="kclient.network.metadata"):
            assert read(consumer, 20) == [b"%d" % i for i in range(20, 40)]
        hint = f"leader of {topic_name}-0 is now node {new_leader}"
        assert any(hint in r.getMessage() for r in caplog.records), \
            "the consumer did not take the new leader from the old leader's answer"
        assert consumer._metadata.cluster.leader_for((topic_name, 0)).node_id == new_leader
