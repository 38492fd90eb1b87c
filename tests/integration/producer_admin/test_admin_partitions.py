"""KafkaAdminClient.create_partitions and delete_records against Apache Kafka, checked through
fresh clients (metadata, ListOffsets, producing and consuming)."""
from __future__ import annotations

import re
import time

import pytest

from kclient import errors as Errors
from kclient.admin import KafkaAdminClient, NewPartitions, OffsetSpec
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition


def _produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        futures = [p.send(topic, b"p%d-%d" % (part, i), partition=part)
                   for part, n in counts.items() for i in range(n)]
        p.flush(10)
        for f in futures:
            f.get(10)


def _read(bootstrap: str, tps: list[TopicPartition], expected: int, timeout_s: float = 20.0) -> list:
    """(partition, offset, value) of every record from the earliest offset, waiting for `expected`."""
    out: list = []
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            for recs in c.poll(500).values():
                out.extend((r.partition, r.offset, r.value) for r in recs)
    return sorted(out)


# ---------------------------------------------------------------------- create_partitions
def test_create_partitions_grows_the_topic_and_the_new_partitions_take_records(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 2)
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        assert admin.create_partitions({topic_name: NewPartitions(4)}) == {topic_name: None}
        parts = admin.describe_topics([topic_name])[topic_name]
        assert sorted(p.partition for p in parts) == [0, 1, 2, 3] and all(p.leader >= 0 for p in parts)
        # a plain count is accepted too (kafka-python 3's form)
        assert admin.create_partitions({topic_name: 5}) == {topic_name: None}
    # visible at once to clients made afterwards
    with KafkaConsumer(bootstrap_servers=broker.bootstrap) as c:
        assert c.partitions_for_topic(topic_name) == {0, 1, 2, 3, 4}
    _produce(broker.bootstrap, topic_name, {3: 3, 4: 2})
    got = _read(broker.bootstrap, [TopicPartition(topic_name, p) for p in (3, 4)], 5)
    assert got == [(3, 0, b"p3-0"), (3, 1, b"p3-1"), (3, 2, b"p3-2"), (4, 0, b"p4-0"), (4, 1, b"p4-1")]


def test_create_partitions_refuses_a_count_not_above_the_current_one_naming_the_topic(broker, create_topic,
                                                                                        topic_name):
    create_topic(broker, topic_name, 3)
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        for count in (2, 3):
            with pytest.raises(Errors.InvalidPartitionsError, match=re.escape(repr(topic_name))):
                admin.create_partitions({topic_name: NewPartitions(count)})
        result = admin.create_partitions({topic_name: NewPartitions(1)}, raise_errors=False)
        assert isinstance(result[topic_name], Errors.InvalidPartitionsError)
        missing = topic_name + "-missing"
        with pytest.raises(Errors.UnknownTopicOrPartitionError, match=re.escape(repr(missing))):
            admin.create_partitions({missing: NewPartitions(2)})
        with pytest.raises(Errors.IllegalArgumentError, match=re.escape(repr(topic_name))):
            admin.create_partitions({topic_name: "4"})
        assert len(admin.describe_topics([topic_name])[topic_name]) == 3


def test_create_partitions_validate_only_changes_nothing(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 2)
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        assert admin.create_partitions({topic_name: NewPartitions(6)}, validate_only=True) == {topic_name: None}
        with pytest.raises(Errors.InvalidPartitionsError, match=re.escape(repr(topic_name))):
            admin.create_partitions({topic_name: NewPartitions(1)}, validate_only=True)
        assert len(admin.describe_topics([topic_name])[topic_name]) == 2
    with KafkaConsumer(bootstrap_servers=broker.bootstrap) as c:
        assert c.partitions_for_topic(topic_name) == {0, 1}


# ---------------------------------------------------------------------- delete_records
def test_delete_records_moves_the_low_watermark(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 2)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    _produce(broker.bootstrap, topic_name, {0: 10, 1: 6})
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        # -1: everything up to the high watermark
        assert admin.delete_records({tp0: 4, tp1: -1}) == {tp0: 4, tp1: 6}
        earliest = admin.list_offsets({tp0: OffsetSpec.EARLIEST, tp1: OffsetSpec.EARLIEST})
        assert (earliest[tp0].offset, earliest[tp1].offset) == (4, 6)
        # sent to the node the caller names (the one broker leads every partition)
        (node,) = [p.leader for p in admin.describe_topics([topic_name])[topic_name] if p.partition == 0]
        assert admin.delete_records({tp0: 7}, partition_leader_id=node) == {tp0: 7}
        assert admin.list_offsets({tp0: OffsetSpec.EARLIEST})[tp0].offset == 7
    # a consumer reading from the earliest offset starts at the new low watermark
    got = _read(broker.bootstrap, [tp0, tp1], 3)
    assert got == [(0, 7, b"p0-7"), (0, 8, b"p0-8"), (0, 9, b"p0-9")]
    with KafkaConsumer(bootstrap_servers=broker.bootstrap) as c:
        assert c.beginning_offsets([tp0, tp1]) == {tp0: 7, tp1: 6}


def test_delete_records_past_the_high_watermark_raises_naming_the_partition(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 2)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    _produce(broker.bootstrap, topic_name, {0: 5, 1: 5})
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        with pytest.raises(Errors.OffsetOutOfRangeError, match=rf"{re.escape(topic_name)}-1 before offset 6\b"):
            admin.delete_records({tp0: 2, tp1: 6})
        # the partition that could go did (the request names each partition on its own)
        earliest = admin.list_offsets({tp0: OffsetSpec.EARLIEST, tp1: OffsetSpec.EARLIEST})
        assert (earliest[tp0].offset, earliest[tp1].offset) == (2, 0)
        absent = TopicPartition(topic_name, 7)
        with pytest.raises(Errors.UnknownTopicOrPartitionError, match=rf"{re.escape(topic_name)}-7\b"):
            admin.delete_records({absent: 1}, timeout_ms=10_000)
        with pytest.raises(Errors.IllegalArgumentError, match=rf"{re.escape(topic_name)}-0"):
            admin.delete_records({tp0: -2})
