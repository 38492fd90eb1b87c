"""kafka-python 3.0's API changes, checked against the installed kafka-python (its own classes
and defaults, not copies): (de)serializers that take headers, assignors passed as instances,
``KafkaError`` deriving from ``Exception``, the 45 s session default, and kafka-python 3's
``kafka.net`` client class as the ``kafka_client`` setting. docs/compatibility-kafka-python.md
lists the outcome."""
from __future__ import annotations

import json
import time

import pytest

from kclient import KafkaConsumer, KafkaProducer
from kclient import errors as kclient_errors
from kclient.admin import KafkaAdminClient
from kclient.config import CONSUMER_CONFIGS, ConsumerConfig
from kclient.errors import ConfigurationError
from kclient.group.assignors import build_assignors
from kclient.structs import TopicPartition

kafka_python = pytest.importorskip("kafka", reason="kafka-python is not installed")
kafka_serializer = pytest.importorskip("kafka.serializer")


class HeaderAwareDeserializer(kafka_serializer.Deserializer):
    """kafka-python 3's shape: a Deserializer subclass whose deserialize takes the headers."""

    def __init__(self):
        self.seen: list[tuple[str, list]] = []
        self.closed = False

    def deserialize(self, topic, headers, data):
        self.seen.append((topic, list(headers)))
        return None if data is None else json.loads(data)

    def close(self):
        self.closed = True


class HeaderAwareSerializer(kafka_serializer.Serializer):
    def __init__(self):
        self.seen: list[list] = []
        self.closed = False

    def serialize(self, topic, headers, data):
        self.seen.append(list(headers))
        return json.dumps(data).encode()

    def close(self):
        self.closed = True


class TwoArgumentDeserializer:
    """kafka-python 2's shape, still accepted by kafka-python 3 (after a TypeError)."""

    def deserialize(self, topic, data):
        return None if data is None else data.decode().upper()


def test_serializers_and_deserializers_receive_the_headers_and_are_closed(kafka, create_topic, topic_name):
    create_topic(kafka, topic_name, 1)
    serializer = HeaderAwareSerializer()
    with KafkaProducer(bootstrap_servers=kafka.bootstrap, value_serializer=serializer,
                       key_serializer=kafka_serializer.DefaultSerializer()) as producer:
        producer.send(topic_name, {"n": 1}, key="a", headers=[("trace", b"t1")])
        producer.send(topic_name, {"n": 2}, key="b")
        producer.flush(30)
    assert serializer.seen == [[("trace", b"t1")], []] and serializer.closed

    values = HeaderAwareDeserializer()
    consumer = KafkaConsumer(topic_name, bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
                             value_deserializer=values, key_deserializer=TwoArgumentDeserializer(),
                             consumer_timeout_ms=10_000)
    try:
        records = []
        for record in consumer:
            records.append(record)
            if len(records) == 2:
                break
        assert [(r.key, r.value, r.headers) for r in records] == [
            ("A", {"n": 1}, [("trace", b"t1")]), ("B", {"n": 2}, [])]
        assert values.seen == [(topic_name, [("trace", b"t1")]), (topic_name, [])]
    finally:
        consumer.close()
    assert values.closed


def test_kafka_pythons_own_json_and_default_serializers_work_both_ways(kafka, create_topic, topic_name):
    create_topic(kafka, topic_name, 1)
    with KafkaProducer(bootstrap_servers=kafka.bootstrap, value_serializer=kafka_serializer.JsonSerializer(),
                       key_serializer=kafka_serializer.DefaultSerializer()) as producer:
        producer.send(topic_name, {"x": [1, 2]}, key="k")
        producer.flush(30)
    with KafkaConsumer(topic_name, bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
                       value_deserializer=kafka_serializer.JsonSerializer(),
                       key_deserializer=kafka_serializer.DefaultSerializer(), consumer_timeout_ms=10_000) as c:
        record = next(iter(c))
    assert (record.key, record.value) == ("k", {"x": [1, 2]})


def test_kafka_python_assignor_classes_and_instances_map_to_the_same_protocols():
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    for given in ([RangePartitionAssignor, RoundRobinPartitionAssignor],          # kafka-python's default
                  [RangePartitionAssignor(), RoundRobinPartitionAssignor()],      # instances (3.0)
                  (StickyPartitionAssignor(),), [CooperativeStickyAssignor]):
        assert [a.name for a in build_assignors(given)] == [a.name for a in given]
    assert [a.name for a in build_assignors(kafka_python.KafkaConsumer.DEFAULT_CONFIG["partition_assignment_strategy"])] \
        == ["range", "roundrobin"]


def test_a_group_joins_with_a_kafka_python_assignor_instance(kafka, create_topic, topic_name, group_id):
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    create_topic(kafka, topic_name, 2)
    with KafkaConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                       partition_assignment_strategy=[RoundRobinPartitionAssignor()],
                       session_timeout_ms=6000) as consumer:
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(100)
        assert consumer.assignment() == {TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)}
        with KafkaAdminClient(bootstrap_servers=kafka.bootstrap) as admin:
            (group,) = admin.describe_consumer_groups([group_id])
        assert group.protocol == "roundrobin"


def test_kafka_error_derives_from_exception_as_in_kafka_python_3():
    assert kafka_python.errors.KafkaError.__bases__ == (Exception,)
    for cls in (kclient_errors.KafkaError, kclient_errors.KafkaTimeoutError, kclient_errors.CommitFailedError,
                kclient_errors.NoBrokersAvailable, kclient_errors.KafkaConnectionError):
        assert issubclass(cls, Exception) and not issubclass(cls, RuntimeError), cls


def test_session_and_heartbeat_defaults_are_kafka_python_3s():
    defaults = kafka_python.KafkaConsumer.DEFAULT_CONFIG
    assert CONSUMER_CONFIGS["session.timeout.ms"].default == defaults["session_timeout_ms"] == 45000
    assert CONSUMER_CONFIGS["heartbeat.interval.ms"].default == defaults["heartbeat_interval_ms"] == 3000
    assert CONSUMER_CONFIGS["max.poll.interval.ms"].default == defaults["max_poll_interval_ms"]


def test_kafka_client_takes_kafka_pythons_own_client_class_only():
    from kafka.net.compat import KafkaNetClient

    base = {"bootstrap.servers": "h:9092"}
    assert ConsumerConfig(base, kafka_client=KafkaNetClient)["kafka.client"] is KafkaNetClient
    assert ConsumerConfig(base, kafka_client=kafka_python.KafkaConsumer.DEFAULT_CONFIG["kafka_client"])

    class MyClient(KafkaNetClient):
        __module__ = "myapp.net"

    with pytest.raises(ConfigurationError, match="kafka.client"):
        ConsumerConfig(base, kafka_client=MyClient)
