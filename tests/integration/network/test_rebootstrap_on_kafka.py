"""Rebootstrap on Apache Kafka: a consumer whose every known broker was replaced behind its
bootstrap address finds the new cluster and reads from it (metadata.recovery.strategy's default)."""
from __future__ import annotations

import time
import uuid

from kclient import KafkaConsumer, KafkaProducer, TopicPartition
from kclient.testing._wire import parse_bootstrap
from kclient.testing.kafka import KafkaCluster
from kclient.testing.proxy import FaultProxy


def test_consumer_finds_the_cluster_that_replaced_every_broker_behind_its_bootstrap_address(kafka):
    topic = f"rebootstrap-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1)
    with KafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for i in range(3):
            producer.send(topic, f"r{i}".encode(), partition=0)
        producer.flush(30)

    old = KafkaCluster().start()
    try:
        old.create_topic("only-on-the-old-cluster", 1)
        with FaultProxy(*parse_bootstrap(old.bootstrap)) as proxy:
            consumer = KafkaConsumer(bootstrap_servers=proxy.address, reconnect_backoff_max_ms=200,
                                     request_timeout_ms=5000, auto_offset_reset="earliest")
            try:
                assert "only-on-the-old-cluster" in consumer.topics()
                old.stop()                                   # every broker the consumer knows is gone,
                proxy.retarget(*parse_bootstrap(kafka.bootstrap))   # the bootstrap address leads to another
                consumer.assign([TopicPartition(topic, 0)])
                got: list[bytes] = []
                deadline = time.monotonic() + 60
                while len(got) < 3 and time.monotonic() < deadline:
                    for records in consumer.poll(timeout_ms=500).values():
                        got.extend(r.value for r in records)
                assert got == [b"r0", b"r1", b"r2"]
                assert "only-on-the-old-cluster" not in consumer.topics()
            finally:
                consumer.close()
    finally:
        old.stop()
