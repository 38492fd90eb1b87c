"""``kclient verifiable-consumer`` against Kafka's own ``org.apache.kafka.tools.VerifiableConsumer``:
both run the same scenario on one Apache Kafka broker (same topic and arguments, a group each),
and their JSON lines must agree on the event names, each event's keys and the JSON type of each
value. Values that depend on the run (timestamps, offsets, how records split over polls) are not
compared; the other verifiable-consumer tests check kclient's values."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kclient.producer import KafkaProducer
from kclient.testing.kafka import kafka_version
from kclient.testing.maven import MavenError, find_java, resolve_jars

RECORDS = 60
PARTITIONS = 2
# The arguments both tools get besides the bootstrap address and the group (and, with the
# classic protocol, a short session: the consumer protocol's is the broker's).
COMMON = ("--reset-policy", "earliest", "--verbose")
CLASSIC = ("--session-timeout", "6000")


@pytest.fixture(scope="module")
def java_tool() -> list[str]:
    """The command that runs Kafka's VerifiableConsumer (the kafka-tools jar and its
    dependencies, resolved once into the harness's Maven cache next to the broker's jars)."""
    if os.environ.get("KCLIENT_TEST_BOOTSTRAP"):
        pytest.skip("compares with Kafka's tool on the harness's own Apache Kafka broker")
    version = kafka_version()
    try:
        jars = resolve_jars([f"org.apache.kafka:kafka-tools:{version}"], f"kafka-tools-{version}")
        java = find_java()
    except MavenError as exc:
        pytest.skip(f"Kafka's VerifiableConsumer is unavailable: {exc}")
    return [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", os.pathsep.join(map(str, jars)),
            "org.apache.kafka.tools.VerifiableConsumer"]


def kclient_tool() -> list[str]:
    return [sys.executable, "-m", "kclient", "verifiable-consumer"]


def produce(bootstrap: str, topic: str) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(RECORDS):
            p.send(topic, b"v%d" % i, key=b"k%d" % i, partition=i % PARTITIONS)
        p.flush(30)


def json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def paths(value, prefix: str = "") -> set[tuple[str, str]]:
    """(path, JSON type) of every value inside an event: ``partitions[].topic`` and so on."""
    out = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else key
            out.add((path, json_type(item)))
            out |= paths(item, path)
    elif isinstance(value, list):
        for item in value:
            out.add((f"{prefix}[]", json_type(item)))
            out |= paths(item, f"{prefix}[]")
    return out


def shape(events: list[dict]) -> dict[str, dict]:
    """Per event name: the key sets its events had (nested objects included, so a key that is
    sometimes left out shows), and every (path, type) seen in any of them."""
    out: dict[str, dict] = {}
    for event in events:
        entry = out.setdefault(event["name"], {"keys": set(), "types": set()})
        entry["types"] |= paths(event)
        entry["keys"] |= key_sets(event)
    return out


def key_sets(value, prefix: str = "") -> set[tuple[str, frozenset]]:
    out = set()
    if isinstance(value, dict):
        out.add((prefix, frozenset(value)))
        for key, item in value.items():
            out |= key_sets(item, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list):
        for item in value:
            out |= key_sets(item, f"{prefix}[]")
    return out


def parse(stdout: bytes, who: str) -> list[dict]:
    events = []
    for line in stdout.decode().splitlines():
        if not line.startswith("{"):
            continue        # Java's tool prints a deprecation notice or two as plain text
        events.append(json.loads(line))
    assert events, f"{who} printed no events"
    return events


def run_bounded(cmd: list[str], bootstrap: str, topic: str, group: str, *extra: str) -> list[dict]:
    done = subprocess.run([*cmd, "--bootstrap-server", bootstrap, "--topic", topic, "--group-id", group,
                           "--max-messages", str(RECORDS), *COMMON, *extra],
                          capture_output=True, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return parse(done.stdout, cmd[0])


def run_until_sigterm(cmd: list[str], bootstrap: str, topic: str, group: str) -> list[dict]:
    """Run without a message limit until every record was consumed, then stop it with SIGTERM."""
    proc = subprocess.Popen([*cmd, "--bootstrap-server", bootstrap, "--topic", topic, "--group-id", group,
                             *COMMON, *CLASSIC], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    events: list[dict] = []
    try:
        deadline = time.monotonic() + 120
        consumed = 0
        # Until every record was consumed and the commit after the last batch was reported:
        # a SIGTERM between the two wakes the commit up in either tool, and its event is lost.
        committed_after_last = False
        while consumed < RECORDS or not committed_after_last:
            assert time.monotonic() < deadline, f"{cmd[0]} consumed {consumed} of {RECORDS} records"
            line = proc.stdout.readline()
            assert line, proc.stderr.read().decode()[-3000:]
            if line.startswith(b"{"):
                event = json.loads(line)
                events.append(event)
                if event["name"] == "records_consumed":
                    consumed += event["count"]
                    committed_after_last = False
                elif event["name"] == "offsets_committed":
                    committed_after_last = True
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # Java's tool exits with 143 (128 + SIGTERM) after its shutdown hook ran; kclient with 0.
    assert proc.returncode in (0, 128 + signal.SIGTERM), err.decode()[-3000:]
    return events + parse(out, cmd[0])


def differences(java: list[dict], ours: list[dict]) -> list[str]:
    """What kclient's events lack or add compared with Java's, one line per difference."""
    java_shape, our_shape = shape(java), shape(ours)
    out = [f"event {name!r}: only in {who}" for who, a, b in (("Java's", java_shape, our_shape),
                                                              ("kclient's", our_shape, java_shape))
           for name in sorted(set(a) - set(b))]
    for name in sorted(set(java_shape) & set(our_shape)):
        for what in ("keys", "types"):
            j, o = java_shape[name][what], our_shape[name][what]
            out += [f"{name}: {what} only in Java's: {sorted(x, key=str)}" for x in [j - o] if x]
            out += [f"{name}: {what} only in kclient's: {sorted(x, key=str)}" for x in [o - j] if x]
    return out


@pytest.mark.parametrize("extra", [CLASSIC, (*CLASSIC, "--enable-autocommit"), ("--group-protocol", "consumer")],
                         ids=["commits", "autocommit", "consumer-protocol"])
def test_bounded_run_speaks_kafkas_protocol(kafka, create_topic, topic_name, group_id, java_tool, extra):
    create_topic(kafka, topic_name, PARTITIONS)
    produce(kafka.bootstrap, topic_name)
    java = run_bounded(java_tool, kafka.bootstrap, topic_name, group_id + "-java", *extra)
    ours = run_bounded(kclient_tool(), kafka.bootstrap, topic_name, group_id + "-kclient", *extra)
    diff = differences(java, ours)
    assert not diff, "\n".join(diff)
    for events in (java, ours):
        names = [e["name"] for e in events]
        assert names[0] == "startup_complete" and "shutdown_complete" in names
        assert sum(e["count"] for e in events if e["name"] == "records_consumed") == RECORDS
        assert len([e for e in events if e["name"] == "record_data"]) == RECORDS


def test_run_stopped_by_sigterm_speaks_kafkas_protocol(kafka, create_topic, topic_name, group_id, java_tool):
    create_topic(kafka, topic_name, PARTITIONS)
    produce(kafka.bootstrap, topic_name)
    java = run_until_sigterm(java_tool, kafka.bootstrap, topic_name, group_id + "-java")
    ours = run_until_sigterm(kclient_tool(), kafka.bootstrap, topic_name, group_id + "-kclient")
    diff = differences(java, ours)
    assert not diff, "\n".join(diff)
    for events in (java, ours):
        assert events[-1]["name"] == "shutdown_complete"


def test_client_id_from_the_config_file_is_kept(kafka, create_topic, topic_name, group_id, tmp_path: Path):
    """Kafka's tool keeps a ``client.id`` given in ``--consumer.config``; so does kclient's
    (the broker's group description shows the member's client id)."""
    from kclient.admin import KafkaAdminClient

    create_topic(kafka, topic_name, 1)
    config = tmp_path / "consumer.properties"
    config.write_text("# a comment\nclient.id = parity-client\n")
    proc = subprocess.Popen([*kclient_tool(), "--bootstrap-server", kafka.bootstrap, "--topic", topic_name,
                             "--group-id", group_id, "--consumer.config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:     # the member is in the group once its partitions were assigned
            assert time.monotonic() < deadline, "no partitions_assigned event"
            line = proc.stdout.readline()
            assert line, proc.stderr.read().decode()[-3000:]
            if json.loads(line)["name"] == "partitions_assigned":
                break
        with KafkaAdminClient(bootstrap_servers=kafka.bootstrap) as admin:
            (group,) = admin.describe_consumer_groups([group_id])
        assert [m.client_id for m in group.members] == ["parity-client"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
