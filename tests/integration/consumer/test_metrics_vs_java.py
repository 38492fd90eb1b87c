"""kclient's metric names against the Java consumer's, on the same broker in the same run: both
join a group, read the same records, commit, and list their metrics (group with its tag names,
and metric name). The common dashboard names must be in both; each side must show exactly the
names docs/metrics.md lists for it (tools/java_consumer_metrics.txt for Java, the metric table
for kclient)."""
from __future__ import annotations

import re
import subprocess
import time

import pytest

from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.consumer.metric_table import TABLE
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition
from kclient.testing.javac import compile_helper
from kclient.testing.kafka import kafka_version
from kclient.testing.maven import MavenError, find_java, resolve_jars
from repo_paths import REPO

# What operators' dashboards of a Java consumer read (group with tag names, metric).
DASHBOARD = [
    ("consumer-coordinator-metrics", n) for n in (
        "join-rate", "join-time-avg", "join-time-max", "sync-rate", "sync-time-avg", "heartbeat-rate",
        "heartbeat-response-time-max", "last-heartbeat-seconds-ago", "commit-rate", "commit-latency-avg",
        "commit-latency-max", "assigned-partitions", "rebalance-latency-avg", "rebalance-rate-per-hour",
        "failed-rebalance-total", "last-rebalance-seconds-ago")
] + [
    ("consumer-fetch-manager-metrics", n) for n in (
        "records-consumed-rate", "bytes-consumed-rate", "fetch-rate", "fetch-latency-avg", "fetch-latency-max",
        "records-lag-max", "records-per-request-avg", "fetch-size-avg", "fetch-size-max")
] + [
    ("consumer-fetch-manager-metrics,topic", "records-consumed-rate"),
    ("consumer-fetch-manager-metrics,topic", "bytes-consumed-rate"),
    ("consumer-fetch-manager-metrics,partition,topic", "records-lag"),
    ("consumer-fetch-manager-metrics,partition,topic", "records-lead"),
] + [
    ("consumer-metrics", n) for n in (
        "connection-count", "request-rate", "incoming-byte-rate", "outgoing-byte-rate", "io-wait-ratio",
        "io-ratio", "select-rate", "last-poll-seconds-ago", "time-between-poll-avg", "poll-idle-ratio-avg")
] + [
    ("consumer-node-metrics,node-id", n) for n in ("request-latency-avg", "request-latency-max", "request-rate",
                                                   "incoming-byte-rate", "outgoing-byte-rate")
]

RECORDS = 20


def _java_classpath() -> str:
    try:
        jars = resolve_jars([f"org.apache.kafka:kafka-clients:{kafka_version()}", "org.slf4j:slf4j-nop:1.7.36"],
                            f"bench-java-deps-{kafka_version()}")
        classes = compile_helper("JavaConsumerMetricNames", jars)
    except MavenError as exc:
        pytest.skip(f"the Java consumer is unavailable: {exc}")
    return ":".join([str(classes), *map(str, jars)])


def _committed_java_names() -> set[tuple[str, str]]:
    lines = (REPO / "tools" / "java_consumer_metrics.txt").read_text().splitlines()
    return {tuple(line.split()) for line in lines if line.strip() and not line.startswith("#")}  # type: ignore[misc]


def _group_key(group: str) -> str:
    """``consumer-node-metrics,node-id=node-1`` -> ``consumer-node-metrics,node-id``."""
    base, *tags = group.split(",")
    return ",".join([base, *sorted(t.split("=")[0] for t in tags)])


def _diff(label: str, a: set, b: set) -> str:
    return (f"{label}: only in the first: {sorted(a - b)}; only in the second: {sorted(b - a)}")


def test_kclient_and_the_java_consumer_expose_the_same_dashboard_metrics(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 2)
    with KafkaProducer(bootstrap_servers=kafka.bootstrap) as p:
        for i in range(RECORDS):
            p.send(topic_name, b"r%03d" % i, partition=i % 2)
        p.flush(30)
    java = subprocess.run([find_java(), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", _java_classpath(),
                           "JavaConsumerMetricNames", kafka.bootstrap, topic_name, group_id + "-java", str(RECORDS)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert java.returncode == 0 and "DONE" in java.stdout, (java.stdout[-2000:], java.stderr[-2000:])
    java_names = set()
    for line in java.stdout.splitlines():
        if line.startswith("M "):
            _, group, tags, name = line.split()
            java_names.add((group if tags == "-" else f"{group},{tags}", name))

    with KafkaConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                       auto_offset_reset="earliest", enable_auto_commit=False) as c:
        got = 0
        deadline = time.monotonic() + 60
        while got < RECORDS and time.monotonic() < deadline:
            got += sum(len(r) for r in c.poll(200).values())
        assert got == RECORDS
        c.commit()
        c.committed(TopicPartition(topic_name, 0))
        m = c.metrics()
    ours = {(_group_key(g), n) for g, values in m.items() for n in values}

    missing = [d for d in DASHBOARD if d not in java_names or d not in ours]
    assert not missing, (
        f"dashboard metrics missing: {[(d, 'java' if d in java_names else '', 'kclient' if d in ours else '') for d in missing]}; "
        f"only in Java: {sorted(java_names - ours)}; only in kclient: {sorted(ours - java_names)}")
    # Each side is what docs/metrics.md says it is.
    assert java_names == _committed_java_names(), _diff("Java now vs tools/java_consumer_metrics.txt",
                                                         java_names, _committed_java_names())
    table = {(d.group_key, d.name) for d in TABLE}
    assert ours == table, _diff("kclient's metrics() vs the metric table", ours, table)

    # The values are measured, not placeholders.
    coordinator = m["consumer-coordinator-metrics"]
    assert coordinator["join-total"] >= 1 and coordinator["sync-total"] >= 1
    assert coordinator["join-time-max"] >= coordinator["join-time-avg"] > 0
    assert coordinator["commit-total"] == 1 and 0 <= coordinator["last-rebalance-seconds-ago"] < 60
    client = m["consumer-metrics"]
    assert client["request-total"] >= client["response-total"] > 5
    assert client["outgoing-byte-total"] > 0 and client["incoming-byte-total"] > client["response-total"] * 4
    assert client["select-total"] > 0 and 0 <= client["io-wait-ratio"] <= 1.0 + 1e-9
    assert client["commit-sync-time-ns-total"] > 0 and client["committed-time-ns-total"] > 0
    assert client["connection-creation-total"] >= client["connection-count"] >= 1
    fetch = m["consumer-fetch-manager-metrics"]
    assert fetch["fetch-size-max"] > 0 and fetch["records-per-request-avg"] > 0
    topic = m[f"consumer-fetch-manager-metrics,topic={topic_name}"]
    assert topic["records-consumed-total"] == RECORDS and topic["bytes-consumed-total"] > 0
    nodes = [g for g in m if g.startswith("consumer-node-metrics,node-id=")]
    assert nodes and all(re.fullmatch(r"consumer-node-metrics,node-id=node--?\d+", g) for g in nodes)
    assert sum(m[g]["request-total"] for g in nodes) == client["request-total"]
