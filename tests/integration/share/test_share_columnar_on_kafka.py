"""KafkaShareConsumer.poll_columnar against Apache Kafka 4.4: the acquired rows with their
delivery counts, acknowledgement of a batch or a range of offsets, implicit acceptance."""
from __future__ import annotations

import time

import pytest

from kclient import errors as Errors
from kclient.producer import KafkaProducer
from kclient.share.consumer import AcknowledgeType, KafkaShareConsumer, ShareColumnarRecords
from kclient.structs import TopicPartition

from test_share_consumer import produce, ready  # noqa: E402


def collect_columnar(consumer: KafkaShareConsumer, want: int, timeout_s: float = 30, *,
                     ack: AcknowledgeType | None = None) -> list[ShareColumnarRecords]:
    got: list[ShareColumnarRecords] = []
    deadline = time.monotonic() + timeout_s
    while sum(len(b) for b in got) < want and time.monotonic() < deadline:
        for batch in consumer.poll_columnar(200).values():
            got.append(batch)
            if ack is not None:
                consumer.acknowledge_batch(batch, ack)
    return got


def test_implicit_columnar_poll_is_accepted_by_the_next_poll(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                            max_poll_records=1000) as c:
        ready(c)
        values = [f"c{i}".encode() for i in range(200)]
        produce(kafka.bootstrap, topic_name, values, batches=4)
        got = collect_columnar(c, 200)
        assert [v for b in got for v in b.values()] == values
        assert {n for b in got for n in b.delivery_counts} == {1}
        assert all(b.topic_partition == TopicPartition(topic_name, 0) for b in got)
        first = got[0]
        assert list(first.offsets)[0] == 0 and first.offset_ranges[0][0] == 0
        assert [r.value for r in first][:2] == [b"c0", b"c1"]       # the slow path, for inspection
        assert not c.poll_columnar(1500)          # the next poll accepted them: nothing comes back
        assert c.commit_sync(10000) in ({}, {TopicPartition(topic_name, 0): None})


def test_explicit_batch_and_range_acknowledgements(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                            share_acknowledgement_mode="explicit", max_poll_records=1000) as c:
        ready(c)
        results: list = []
        c.set_acknowledgement_commit_callback(lambda offsets, exc: results.append((offsets, exc)))
        with KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=500) as p:   # one batch: one poll
            for i in range(10):
                p.send(topic_name, value=f"e{i}".encode(), partition=0)
            p.flush()
        [batch] = collect_columnar(c, 10)
        assert batch.offset_ranges == [(0, 9)]
        with pytest.raises(Errors.IllegalStateError, match="not acknowledged"):
            c.poll_columnar(0)
        c.acknowledge_range(topic_name, 0, 0, 3, AcknowledgeType.ACCEPT)
        with pytest.raises(Errors.IllegalStateError, match="already acknowledged"):
            c.acknowledge_range(topic_name, 0, 2, 5, AcknowledgeType.ACCEPT)
        with pytest.raises(Errors.IllegalStateError, match="not returned"):
            c.acknowledge_range(topic_name, 0, 8, 12, AcknowledgeType.ACCEPT)
        c.acknowledge(topic_name, 0, 4, AcknowledgeType.REJECT)        # one offset of a columnar poll
        c.acknowledge_range(topic_name, 0, 5, 6, AcknowledgeType.RENEW)
        c.acknowledge_range(topic_name, 0, 7, 9, AcknowledgeType.RELEASE)
        with pytest.raises(Errors.IllegalStateError, match="already acknowledged"):
            c.acknowledge_batch(batch)
        assert c.commit_sync(10000) == {tp: None}
        assert results and all(exc is None for _, exc in results)
        assert set().union(*(offsets[tp] for offsets, _ in results)) == set(range(10))
        # the renewed rows come back first with their delivery count; the released ones one higher
        got = collect_columnar(c, 5, ack=AcknowledgeType.ACCEPT)
        rows = [(o, n) for b in got for o, n in zip(b.offsets, b.delivery_counts)]
        assert rows[:2] == [(5, 1), (6, 1)]
        assert sorted(rows) == [(5, 1), (6, 1), (7, 2), (8, 2), (9, 2)]
        assert c.commit_sync(10000) == {tp: None}
        assert not c.poll_columnar(1500)           # the rejected record never comes back
    with pytest.raises(Errors.IllegalStateError, match="closed"):
        c.acknowledge_batch(batch)


def test_rows_around_transaction_markers(kafka, create_topic, topic_name, group_id):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from kclient.testing.group_configs import alter_group_configs

    create_topic(kafka, topic_name, 1)
    alter_group_configs(kafka.bootstrap, group_id, {"share.auto.offset.reset": "earliest"})
    p = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "tx-" + topic_name,
                                  "log_level": 3})
    p.init_transactions(10)
    for n in range(2):                  # records at 0-1 and 3-4, commit markers at 2 and 5
        p.begin_transaction()
        for r in range(2):
            p.produce(topic_name, b"t%d-%d" % (n, r), partition=0)
        p.commit_transaction(10)
    tp = TopicPartition(topic_name, 0)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                            share_acknowledgement_mode="explicit", max_poll_records=1000) as c:
        got = []
        deadline = time.monotonic() + 60
        while sum(len(b) for b in got) < 4 and time.monotonic() < deadline:
            for batch in c.poll_columnar(200).values():
                got.append(batch)
                assert not batch.values() or all(v.startswith(b"t") for v in batch.values())
                ranges = batch.offset_ranges
                if len(ranges) > 1:          # a batch with a hole: a range across it is refused
                    with pytest.raises(Errors.IllegalStateError, match="not returned"):
                        c.acknowledge_range(topic_name, 0, ranges[0][0], ranges[-1][1])
                c.acknowledge_batch(batch)
        assert [o for b in got for o in b.offsets] == [0, 1, 3, 4]
        assert [v for b in got for v in b.values()] == [b"t0-0", b"t0-1", b"t1-0", b"t1-1"]
        assert c.commit_sync(10000) in ({}, {tp: None})
        assert not c.poll_columnar(1500)
