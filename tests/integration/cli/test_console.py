"""``kclient consume``: the console consumer, run as a real command against Apache Kafka."""
from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

from kclient.cli.console import format_record
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.structs import ConsumerRecord, TopicPartition


def kclient_consume(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kclient", "consume", *args], capture_output=True,
                          timeout=timeout)


@pytest.fixture
def records_topic(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 2)
    with KafkaProducer(bootstrap_servers=broker.bootstrap) as p:
        for i in range(6):
            p.send(topic_name, b"value-%d" % i, key=b"key-%d" % i, partition=i % 2,
                   headers=[("h", b"\xff\x00")] if i == 0 else None)
        p.send(topic_name, b"\xff\xfe binary", partition=0)
        p.flush(10)
    return broker.bootstrap, topic_name


def record(value, key=None, headers=()):
    return ConsumerRecord("t", 0, -1, 5, 1234, 0, key, value, list(headers), None, -1, -1, -1)


def test_format_record():
    assert format_record(record(b"v"), "text") == b"v"
    assert format_record(record(b"v", b"k"), "text", print_key=True, key_separator=":") == b"k:v"
    assert format_record(record(None), "text") == b""
    assert format_record(record(b"\x00\xff"), "raw") == b"\x00\xff"
    out = json.loads(format_record(record(b"\xff", b"k", [("h", None)]), "json"))
    assert out == {"topic": "t", "partition": 0, "offset": 5, "timestamp": 1234, "key": "k",
                   "value": base64.b64encode(b"\xff").decode(), "value_encoding": "base64",
                   "headers": [{"key": "h", "value": None}]}


def test_from_beginning_text_with_count(records_topic):
    bootstrap, topic = records_topic
    done = kclient_consume("-b", bootstrap, "-t", topic, "--from-beginning", "-c", "7", "--print-key")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert sorted(lines) == sorted([f"key-{i}\tvalue-{i}" for i in range(6)] + ["\t\ufffd\ufffd binary"])


def test_json_format_until_idle(records_topic):
    bootstrap, topic = records_topic
    done = kclient_consume("-b", bootstrap, "-t", topic, "--from-beginning", "-f", "json",
                           "--idle-timeout-ms", "1000")
    assert done.returncode == 0, done.stderr
    objs = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert len(objs) == 7
    by_value = {o["value"]: o for o in objs}
    first = by_value["value-0"]
    assert (first["key"], first["partition"], first["offset"]) == ("key-0", 0, 0)
    assert first["headers"] == [{"key": "h", "value": base64.b64encode(b"\xff\x00").decode(),
                                 "value_encoding": "base64"}]
    binary = [o for o in objs if o.get("value_encoding") == "base64"]
    assert len(binary) == 1 and base64.b64decode(binary[0]["value"]) == b"\xff\xfe binary"


def test_raw_partition_and_offset(records_topic):
    bootstrap, topic = records_topic
    done = kclient_consume("-b", bootstrap, "-t", topic, "-p", "1", "-o", "1", "-f", "raw", "-D", "|",
                           "--idle-timeout-ms", "1000")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"value-3|value-5|"


def test_group_commits_progress(records_topic, group_id):
    bootstrap, topic = records_topic
    done = kclient_consume("-b", bootstrap, "-t", topic, "-g", group_id, "--from-beginning", "-c", "7",
                           "-X", "session.timeout.ms=4000", "-X", "heartbeat.interval.ms=500")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 7
    with KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id) as c:
        assert c.committed(TopicPartition(topic, 0)) == 4 and c.committed(TopicPartition(topic, 1)) == 3


def test_errors_are_reported():
    done = kclient_consume("-b", "127.0.0.1:1", "-t", "nothing", "-X", "api.version.auto.timeout.ms=500")
    assert done.returncode == 1
    assert b"127.0.0.1:1" in done.stderr
    bad = kclient_consume("-b", "127.0.0.1:1", "-t", "x", "-X", "no.such.setting=1")
    assert bad.returncode == 1 and b"no.such.setting" in bad.stderr
    clash = kclient_consume("-t", "x", "-g", "g", "-p", "0")
    assert clash.returncode == 2
