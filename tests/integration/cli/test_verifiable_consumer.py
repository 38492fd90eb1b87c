"""kclient verifiable-consumer speaks Kafka's VerifiableConsumer JSON-lines protocol: run as a
subprocess against Apache Kafka, its events are parsed and checked against the records."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from kclient.producer import KafkaProducer

ORDER = ("startup_complete", "partitions_assigned", "records_consumed")


def produce(bootstrap: str, topic: str, n: int, partitions: int = 2) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(n):
            p.send(topic, b"v%d" % i, key=b"k%d" % i, partition=i % partitions)
        p.flush(30)


def run(bootstrap: str, topic: str, group: str, *extra: str) -> list[dict]:
    cmd = [sys.executable, "-m", "kclient", "verifiable-consumer", "--bootstrap-server", bootstrap,
           "--topic", topic, "--group-id", group, "--session-timeout", "6000", *extra]
    done = subprocess.run(cmd, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


def test_events_for_a_bounded_run_with_commits(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 2)
    produce(kafka.bootstrap, topic_name, 100)
    events = run(kafka.bootstrap, topic_name, group_id, "--max-messages", "100")
    names = [e["name"] for e in events]
    # As Kafka's tool (whose exit hook reports it), a run that ended by itself reports
    # shutdown_requested last.
    assert names[0] == "startup_complete" and names[-2:] == ["shutdown_complete", "shutdown_requested"]
    assert all(isinstance(e["timestamp"], int) for e in events)
    assigned = [e for e in events if e["name"] == "partitions_assigned"]
    # The group may settle over more than one rebalance (a first, empty assignment included).
    assert assigned and sorted((p["topic"], p["partition"]) for p in assigned[-1]["partitions"]) == \
        [(topic_name, 0), (topic_name, 1)]
    consumed = [e for e in events if e["name"] == "records_consumed"]
    assert sum(e["count"] for e in consumed) == 100
    for e in consumed:
        assert e["count"] == sum(p["count"] for p in e["partitions"])
        for p in e["partitions"]:
            assert p["maxOffset"] - p["minOffset"] + 1 == p["count"]
    commits = [e for e in events if e["name"] == "offsets_committed"]
    # Kafka's tool leaves "error" out of a successful commit's event.
    assert len(commits) == len(consumed) and all(c["success"] and "error" not in c for c in commits)
    last = {}
    for c in commits:
        for o in c["offsets"]:
            last[o["partition"]] = o["offset"]
    assert last == {0: 50, 1: 50}
    assert names.index("partitions_assigned") < names.index("records_consumed")
    # A second run of the group starts where the first committed: nothing left to read.
    produce(kafka.bootstrap, topic_name, 4)
    again = run(kafka.bootstrap, topic_name, group_id, "--max-messages", "4", "--verbose")
    data = [e for e in again if e["name"] == "record_data"]
    assert sorted((d["partition"], d["offset"]) for d in data) == [(0, 50), (0, 51), (1, 50), (1, 51)]
    assert {d["key"] for d in data} == {"k0", "k1", "k2", "k3"}


def test_autocommit_emits_no_commit_events_and_sigterm_shuts_down_cleanly(kafka, create_topic, topic_name,
                                                                         group_id):
    create_topic(kafka, topic_name, 1)
    produce(kafka.bootstrap, topic_name, 10, partitions=1)
    cmd = [sys.executable, "-m", "kclient", "verifiable-consumer", "--bootstrap-server", kafka.bootstrap,
           "--topic", topic_name, "--group-id", group_id, "--enable-autocommit", "--reset-policy", "earliest"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    events = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, proc.stderr.read().decode()[-2000:]
            events.append(json.loads(line))
            if sum(e.get("count", 0) for e in events if e["name"] == "records_consumed") >= 10:
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    events += [json.loads(line) for line in out.decode().splitlines()]
    names = [e["name"] for e in events]
    assert proc.returncode == 0, err.decode()[-2000:]
    assert names[-1] == "shutdown_complete" and "offsets_committed" not in names
    assert "partitions_revoked" in names          # close() revokes before leaving
