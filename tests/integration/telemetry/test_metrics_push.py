"""KIP-714 client metrics push on Apache Kafka with the harness's broker-side telemetry
recorder: what a subscription asks for arrives, at the interval, under the Java names, with a
terminating push on close; a client without a subscription, or on a broker without the APIs,
pushes nothing and logs nothing above DEBUG."""
from __future__ import annotations

import base64
import logging
import time

import pytest
from otlp_reader import decode_metrics_data

from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.telemetry.sender import DISABLED
from kclient.testing.kafka import KafkaCluster
from kclient.testing.maven import MavenError

RECORDS = 20
COORDINATOR = "org.apache.kafka.consumer.coordinator."
FETCH = "org.apache.kafka.consumer.fetch.manager."


@pytest.fixture(scope="module")
def telemetry_kafka():
    """A broker that takes client metrics (the recorder as its metrics reporter)."""
    try:
        cluster = KafkaCluster(client_telemetry=True).start()
    except MavenError as exc:
        pytest.skip(f"Apache Kafka is unavailable: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


def _kafka_uuid(u) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def _produce(cluster, topic: str) -> None:
    with KafkaProducer(bootstrap_servers=cluster.bootstrap) as p:
        for i in range(RECORDS):
            p.send(topic, b"r%03d" % i, partition=i % 2)
        p.flush(30)


def test_subscribed_metrics_are_pushed_at_the_interval_and_on_close(telemetry_kafka, topic_name, group_id, caplog):
    caplog.set_level(logging.DEBUG, "kclient.telemetry")
    client_id = f"push-{group_id}"
    telemetry_kafka.set_client_metrics(f"sub-{group_id}", [COORDINATOR, FETCH], 500, match=[f"client_id={client_id}"])
    telemetry_kafka.create_topic(topic_name, 2)
    telemetry_kafka.wait_for_topic(topic_name, 2)
    _produce(telemetry_kafka, topic_name)
    c = KafkaConsumer(topic_name, bootstrap_servers=telemetry_kafka.bootstrap, group_id=group_id, client_id=client_id,
                      auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        sender = c._client.client.telemetry
        got = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (got < RECORDS or sender.pushes < 2):
            got += sum(len(r) for r in c.poll(100).values())
        assert got == RECORDS and sender.pushes >= 2, (got, sender.state, sender.pushes)
        c.commit()
        instance = _kafka_uuid(sender.instance_id)
        total = c.metrics()["consumer-fetch-manager-metrics"]["records-consumed-total"]
    finally:
        c.close()
    pushes = [p for p in telemetry_kafka.telemetry_pushes() if p[0] == instance]
    assert len(pushes) >= 3 and [p[1] for p in pushes] == [False] * (len(pushes) - 1) + [True], \
        [(p[1], len(p[3])) for p in pushes]
    assert {p[2] for p in pushes} == {"OTLP"}
    decoded = [decode_metrics_data(p[3]) for p in pushes]
    names = set().union(*({m.name for m in metrics} for _, metrics in decoded))
    assert all(n.startswith((COORDINATOR, FETCH)) for n in names), sorted(names)
    for expected in ("coordinator.join.rate", "coordinator.join.time.avg", "coordinator.sync.time.avg",
                     "coordinator.heartbeat.rate", "coordinator.assigned.partitions", "fetch.manager.fetch.rate",
                     "fetch.manager.records.consumed.total", "fetch.manager.records.lag.max"):
        assert "org.apache.kafka.consumer." + expected in names, (expected, sorted(names))
    assert decoded[0][0] == {"group_id": group_id} or decoded[0][0]["group_id"] == group_id
    # Sums are deltas (the broker asks for delta temporality): together they make the total.
    consumed = [p for _, metrics in decoded for m in metrics if m.name == FETCH + "records.consumed.total"
                and m.kind == "sum" and m.monotonic for p in m.points if not p.attributes]
    assert {m.temporality for _, metrics in decoded for m in metrics if m.kind == "sum"} == {1}
    assert sum(p.value for p in consumed) == total == RECORDS
    assert all(a.time_ns == b.start_ns for a, b in zip(consumed, consumed[1:]))
    per_topic = {m.points[0].attributes.get("topic") for _, metrics in decoded for m in metrics
                 if m.name == FETCH + "records.consumed.rate" and m.points[0].attributes}
    assert per_topic == {topic_name}
    assert not [r for r in caplog.records if r.levelno > logging.DEBUG]


def test_without_a_subscription_nothing_is_pushed(telemetry_kafka, topic_name, caplog):
    caplog.set_level(logging.DEBUG, "kclient.telemetry")
    telemetry_kafka.create_topic(topic_name, 1)
    telemetry_kafka.wait_for_topic(topic_name, 1)
    with KafkaConsumer(topic_name, bootstrap_servers=telemetry_kafka.bootstrap, client_id="no-subscription",
                       auto_offset_reset="earliest") as c:
        sender = c._client.client.telemetry
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sender.instance_id.int == 0:
            c.poll(100)
        assert sender.instance_id.int != 0       # asked, and got an empty subscription
        instance = _kafka_uuid(sender.instance_id)
    assert sender.pushes == 0
    assert not [p for p in telemetry_kafka.telemetry_pushes() if p[0] == instance]
    assert not [r for r in caplog.records if r.levelno > logging.DEBUG]


def test_enable_metrics_push_false_sends_nothing(telemetry_kafka, topic_name):
    telemetry_kafka.set_client_metrics("everything", ["*"], 500)
    try:
        telemetry_kafka.create_topic(topic_name, 1)
        with KafkaConsumer(topic_name, bootstrap_servers=telemetry_kafka.bootstrap,
                           enable_metrics_push=False) as c:
            c.poll(500)
            assert c._client.client.telemetry is None
    finally:
        telemetry_kafka.set_client_metrics("everything", [], 500)


@pytest.mark.parametrize("target, offered", [("kafka", False), ("tansu", False), ("mock_cluster", True)])
def test_brokers_without_a_subscription_cost_nothing(target, offered, request, create_topic, topic_name, caplog):
    """The session brokers: Kafka without a telemetry reporter and Tansu lack the APIs (the
    sender stops at the version check, no request); librdkafka's mock has them but no
    subscription (one request, an empty metrics list, no push)."""
    caplog.set_level(logging.DEBUG)
    cluster = request.getfixturevalue(target)
    create_topic(cluster, topic_name, 1)
    with KafkaConsumer(topic_name, bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest") as c:
        sender = c._client.client.telemetry
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sender.state != DISABLED and not sender.subscription_answers:
            c.poll(100)
        if offered:
            assert sender.subscription_answers == 1 and sender.requested_metrics == []
        else:
            assert sender.state == DISABLED and sender.subscription_answers == 0
        c.poll(300)
        assert sender.pushes == 0 and sender.subscription_answers == (1 if offered else 0)
    assert not [r for r in caplog.records if r.name.startswith("kclient.telemetry") and r.levelno > logging.DEBUG]


def test_a_dropped_consumer_is_freed_at_once_despite_its_sender(telemetry_kafka):
    """A consumer dropped without close() is closed when it is freed; the sender in its network
    client refers back to it weakly, so no cycle holds it until the garbage collector runs, and
    the finalizer does no network round trip for a last push."""
    import gc
    import weakref
    telemetry_kafka.set_client_metrics("dropped", ["org.apache.kafka.consumer."], 200, match=["client_id=dropped"])
    try:
        c = KafkaConsumer(bootstrap_servers=telemetry_kafka.bootstrap, client_id="dropped")
        sender = c._client.client.telemetry
        deadline = time.monotonic() + 30
        while sender.pushes < 1 and time.monotonic() < deadline:
            c.topics()                  # network polls drive the sender
        assert sender.pushes >= 1
        instance = _kafka_uuid(sender.instance_id)
        ref = weakref.ref(c)
        gc.disable()
        try:
            del c
            assert ref() is None
        finally:
            gc.enable()
    finally:
        telemetry_kafka.set_client_metrics("dropped", [], 200)
    # Freed without close(): no terminating push from the finalizer.
    terminating = [p[1] for p in telemetry_kafka.telemetry_pushes() if p[0] == instance]
    assert len(terminating) >= sender.pushes and not any(terminating), terminating
