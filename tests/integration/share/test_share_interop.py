"""A kclient share member and Apache Kafka's own Java share consumer (the console share consumer
of kafka-tools 4.4, which accepts each record it prints) in one share group share the records:
each is delivered to one of them, and both get some."""
from __future__ import annotations

import subprocess
import threading
import time

import pytest

from kclient.producer import KafkaProducer
from kclient.share.consumer import KafkaShareConsumer
from kclient.testing.kafka import kafka_version
from kclient.testing.maven import MavenError, find_java, resolve_jars

CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"


def _tools_classpath() -> str:
    try:
        jars = resolve_jars([f"org.apache.kafka:kafka-tools:{kafka_version()}"], f"kafka-tools-{kafka_version()}")
    except MavenError as exc:
        pytest.skip(f"kafka-tools is unavailable: {exc}")
    return ":".join(str(j) for j in jars)


def test_kclient_and_the_java_console_share_consumer_share_one_group(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    java_lines: list[str] = []
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                            share_acquire_mode="record_limit", max_poll_records=5) as ours:
        # our member first: the share partition starts at the log end when the group first fetches it
        deadline = time.monotonic() + 60
        while ours.acquisition_lock_timeout_ms() is None and time.monotonic() < deadline:
            assert not ours.poll(200)
        assert ours.acquisition_lock_timeout_ms() is not None
        java = subprocess.Popen(
            [find_java(), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", _tools_classpath(), CONSOLE_SHARE_CONSUMER,
             "--bootstrap-server", kafka.bootstrap, "--topic", topic_name, "--group", group_id],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        reader = threading.Thread(target=lambda: java_lines.extend(line.strip() for line in java.stdout),
                                  daemon=True)
        reader.start()
        try:
            ours_got: list[str] = []
            sent: list[str] = []
            deadline = time.monotonic() + 120
            with KafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
                # one record per batch, until the Java member has printed some of them
                while time.monotonic() < deadline and (len(java_lines) < 5 or len(sent) < 100):
                    value = f"v{len(sent)}"
                    producer.send(topic_name, value=value.encode(), partition=0)
                    producer.flush()
                    sent.append(value)
                    for records in ours.poll(20).values():
                        ours_got.extend(r.value.decode() for r in records)
            while time.monotonic() < deadline and len(ours_got) + len(java_lines) < len(sent):
                for records in ours.poll(200).values():
                    ours_got.extend(r.value.decode() for r in records)
            ours.commit_sync(10000)
        finally:
            java.terminate()
            try:
                java.wait(30)
            except subprocess.TimeoutExpired:
                java.kill()
                java.wait(10)
        reader.join(10)
    assert ours_got and java_lines, (len(ours_got), len(java_lines))
    assert sorted(ours_got + java_lines) == sorted(sent)        # each record to exactly one member
