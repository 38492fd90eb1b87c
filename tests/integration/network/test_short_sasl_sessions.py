"""KIP-368 with SASL sessions of one second against Apache Kafka: the broker takes at most one
re-authentication a second per connection, so such sessions cannot all be renewed on their
connection; the client renews what it can and reconnects for the rest, and the application
sees neither an authentication error nor a lost record."""
from __future__ import annotations

import logging
import time

import pytest

from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition
from kclient.testing import KafkaCluster, MavenError
from kclient.testing.pki import SCRAM_USER

SESSION_MS = 1000


@pytest.fixture(scope="module")
def short_sessions():
    try:
        cluster = KafkaCluster(security=True, broker_config={"connections.max.reauth.ms": str(SESSION_MS)}).start()
    except MavenError as exc:
        pytest.skip(f"Apache Kafka is unavailable: {exc}")
    try:
        cluster.create_topic("short", 1)
        cluster.wait_for_topic("short", 1)
        yield cluster
    finally:
        cluster.stop()


def test_one_second_sessions_never_fail_the_application(short_sessions, caplog):
    settings = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_plain_username": SCRAM_USER[0], "sasl_plain_password": SCRAM_USER[1]}
    bootstrap = short_sessions.bootstrap_for("SASL_PLAINTEXT")
    caplog.set_level(logging.INFO, logger="kclient.network")
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, **settings) as producer, \
            KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="latest", **settings) as consumer:
        consumer.assign([TopicPartition("short", 0)])
        consumer.poll(100)
        sent: set[bytes] = set()
        seen: set[bytes] = set()
        end = time.monotonic() + 4 * SESSION_MS / 1000
        while time.monotonic() < end:
            value = f"r{len(sent)}".encode()
            producer.send("short", value, partition=0)
            sent.add(value)
            seen.update(r.value for rs in consumer.poll(100).values() for r in rs)
        producer.flush(20)
        deadline = time.monotonic() + 20
        while not sent <= seen and time.monotonic() < deadline:
            seen.update(r.value for rs in consumer.poll(100).values() for r in rs)
        assert sent <= seen and len(sent) >= 10
        assert consumer._client.client.reauthentications >= 1 and producer._client.reauthentications >= 1
        client_metrics = consumer.metrics()["consumer-metrics"]
        assert client_metrics["failed-reauthentication-total"] == client_metrics["failed-authentication-total"] == 0
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "IllegalSaslState" in m or "closed by the broker" in m], messages
    assert any("reconnecting to renew it" in m for m in messages)
