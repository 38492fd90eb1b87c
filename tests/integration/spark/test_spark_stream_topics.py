"""The "kclient" stream reader driven as Spark drives it (initialOffset, then latestOffset /
partitions / read / commit per micro-batch, ``read`` on a pickled copy as on an executor)
against Apache Kafka while the topic changes under it: partitions added with
create_partitions, records deleted with delete_records past the checkpointed offsets."""
from __future__ import annotations

import logging
import pickle
import re

import pytest

from kclient import errors as Errors
from kclient.admin import KafkaAdminClient, NewPartitions
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition
from kclient.spark.reader import close_cached_consumers

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: E402


def _reader(bootstrap: str, topic: str, **extra):
    from kclient.spark.datasource import spark_arrow_schema
    from kclient.spark.stream import KafkaStreamReader
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
               "kafkaConsumer.pollTimeoutMs": "30000", **extra}
    return KafkaStreamReader(options, spark_arrow_schema(False))


def _produce(bootstrap: str, topic: str, counts: dict[int, range]) -> set[tuple[int, bytes]]:
    """Sends value b"p<partition>-<i>" for each i; returns {(partition, value)}."""
    sent = set()
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        futures = []
        for part, numbers in counts.items():
            for i in numbers:
                value = b"p%d-%d" % (part, i)
                futures.append(p.send(topic, value, partition=part))
                sent.add((part, value))
        p.flush(10)
        for f in futures:
            f.get(10)
    return sent


def _micro_batch(reader, start: dict) -> tuple[dict, list[tuple[int, int, bytes]]]:
    """One micro-batch as Spark runs it: the end offsets, the planned partitions, each read by
    a copy of the reader unpickled as on an executor, then the commit. (partition, offset, value)
    rows."""
    end = reader.latestOffset(start, ReadAllAvailable())
    executor_side = pickle.loads(pickle.dumps(reader))
    rows = []
    for part in reader.partitions(start, end):
        for batch in executor_side.read(pickle.loads(pickle.dumps(part))):
            cols = batch.to_pydict()
            rows += list(zip(cols["partition"], cols["offset"], cols["value"]))
    reader.commit(end)
    return end, rows


def _sizes(end: dict, topic: str) -> dict[int, int]:
    return {int(p): off for p, off in end[topic].items()}


def test_partitions_added_mid_stream_are_read_from_offset_zero(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 2)
    sent = _produce(broker.bootstrap, topic_name, {0: range(5), 1: range(4)})
    reader = _reader(broker.bootstrap, topic_name)
    try:
        start = reader.initialOffset()
        assert _sizes(start, topic_name) == {0: 0, 1: 0}
        end, rows = _micro_batch(reader, start)
        assert _sizes(end, topic_name) == {0: 5, 1: 4}
        seen = list(rows)

        with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
            admin.create_partitions({topic_name: NewPartitions(4)})
        sent |= _produce(broker.bootstrap, topic_name, {0: range(5, 7), 2: range(3), 3: range(6)})

        # the very next micro-batch sees the new partitions and reads them from offset 0
        planned = reader.latestOffset(end, ReadAllAvailable())
        assert _sizes(planned, topic_name) == {0: 7, 1: 4, 2: 3, 3: 6}
        ranges = sorted((r.partition, r.from_offset, r.until_offset)
                        for p in reader.partitions(end, planned) for r in p.ranges)
        assert ranges == [(0, 5, 7), (2, 0, 3), (3, 0, 6)]          # nothing new in partition 1: no range
        end2, rows = _micro_batch(reader, end)
        assert end2 == planned
        seen += rows
        assert sorted((p, o) for p, o, _ in rows if p >= 2) == [(2, n) for n in range(3)] + [(3, n) for n in range(6)]

        # every record produced appears exactly once across the micro-batches
        assert len(seen) == len(sent) == 5 + 4 + 2 + 3 + 6
        assert {(p, v) for p, _, v in seen} == sent
        assert len({(p, o) for p, o, _ in seen}) == len(seen)
        # nothing new: an empty micro-batch
        end3, rows = _micro_batch(reader, end2)
        assert end3 == end2 and rows == []
    finally:
        reader.stop()


def _checkpointed_then_deleted(broker, topic: str) -> dict:
    """Reads records 0-19 of partition 0 (the checkpoint is then at 20), produces 20-39 and deletes
    every record before 30 (and every record of partition 1, which was all read). The checkpoint."""
    _produce(broker.bootstrap, topic, {0: range(20), 1: range(5)})
    reader = _reader(broker.bootstrap, topic)
    try:
        checkpoint, rows = _micro_batch(reader, reader.initialOffset())
    finally:
        reader.stop()
    assert _sizes(checkpoint, topic) == {0: 20, 1: 5} and len(rows) == 25
    # The query restarts in fresh workers: this process's reader clients, whose prefetch may
    # already hold records 20-39 from before the deletion, are gone.
    close_cached_consumers()
    _produce(broker.bootstrap, topic, {0: range(20, 40)})
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        assert admin.delete_records({TopicPartition(topic, 0): 30, TopicPartition(topic, 1): 5}) == {
            TopicPartition(topic, 0): 30, TopicPartition(topic, 1): 5}
    return checkpoint


def test_records_deleted_past_the_checkpoint_fail_the_next_micro_batch(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 2)
    checkpoint = _checkpointed_then_deleted(broker, topic_name)
    # the query restarts from its checkpoint (Spark calls latestOffset with the stored offsets)
    reader = _reader(broker.bootstrap, topic_name)
    try:
        with pytest.raises(Errors.DataLossError, match=rf"{re.escape(topic_name)}-0: offsets 20 to 29 \(") as info:
            _micro_batch(reader, checkpoint)
        assert "now holds offsets 30 to 39" in str(info.value) and "failOnDataLoss" in str(info.value)
        assert info.value.topic_partition == TopicPartition(topic_name, 0) and info.value.missing == (20, 30)
        # The client that hit the gap goes back to this process's pool; an operator then moves
        # the query past the gap: the next range is read by that same client from its start.
        moved = {topic_name: {"0": 30, "1": 5}}
        _, rows = _micro_batch(reader, moved)
        assert [(p, o) for p, o, _ in rows] == [(0, o) for o in range(30, 40)]
    finally:
        reader.stop()


def test_records_deleted_past_the_checkpoint_are_skipped_with_a_warning_without_fail_on_data_loss(
        broker, create_topic, topic_name, caplog):
    create_topic(broker, topic_name, 2)
    checkpoint = _checkpointed_then_deleted(broker, topic_name)
    reader = _reader(broker.bootstrap, topic_name, failOnDataLoss="false")
    try:
        with caplog.at_level(logging.WARNING, logger="kclient.spark"):
            end, rows = _micro_batch(reader, checkpoint)
        assert _sizes(end, topic_name) == {0: 40, 1: 5}
        # it goes on from the new earliest offset and loses none of the records still there
        assert rows == [(0, n, b"p0-%d" % n) for n in range(30, 40)]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(f"{topic_name}-0: offsets 20 to 29" in m and "failOnDataLoss is false" in m for m in warnings), \
            warnings
        # and the stream carries on with what comes next
        _produce(broker.bootstrap, topic_name, {0: range(40, 43), 1: range(5, 7)})
        end2, rows = _micro_batch(reader, end)
        assert _sizes(end2, topic_name) == {0: 43, 1: 7}
        assert sorted(rows) == [(0, 40, b"p0-40"), (0, 41, b"p0-41"), (0, 42, b"p0-42"),
                                (1, 5, b"p1-5"), (1, 6, b"p1-6")]
    finally:
        reader.stop()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_query_restarted_before_its_first_commit_names_the_restart(broker, create_topic, topic_name, caplog,
                                                                     fail_on_data_loss):
    """startingOffsets "latest": the first micro-batch is planned (Spark logs its end), the query
    stops before it commits, records arrive, and the restarted query's initialOffset() is later
    than that end. Spark re-runs the first micro-batch from there: the reader says what happened
    instead of calling it a recreated topic, and without failOnDataLoss reads on from the end."""
    create_topic(broker, topic_name, 1)
    _produce(broker.bootstrap, topic_name, {0: range(3)})
    extra = {"startingOffsets": "latest", "failOnDataLoss": str(fail_on_data_loss).lower()}
    first = _reader(broker.bootstrap, topic_name, **extra)
    try:
        assert _sizes(first.initialOffset(), topic_name) == {0: 3}
        _produce(broker.bootstrap, topic_name, {0: range(3, 5)})
        planned_end = first.latestOffset(first.initialOffset(), ReadAllAvailable())
        assert _sizes(planned_end, topic_name) == {0: 5}
    finally:
        first.stop()                      # stopped before the micro-batch ran or committed
    _produce(broker.bootstrap, topic_name, {0: range(5, 9)})
    restarted = _reader(broker.bootstrap, topic_name, **extra)
    try:
        start = restarted.initialOffset()
        assert _sizes(start, topic_name) == {0: 9}
        if fail_on_data_loss:
            with pytest.raises(Errors.DataLossError, match=rf"{re.escape(topic_name)}-0: the query restarted before "
                                                           r"its first micro-batch committed") as info:
                restarted.partitions(start, planned_end)
            assert "offset 9, past that micro-batch's planned end 5" in str(info.value)
            return
        with caplog.at_level(logging.WARNING, logger="kclient.spark"):
            assert restarted.partitions(start, planned_end) == []
        assert any("restarted before its first micro-batch committed" in r.getMessage() for r in caplog.records)
        # the next micro-batch starts at the planned end and reads everything after it
        _, rows = _micro_batch(restarted, planned_end)
        assert [(p, o) for p, o, _ in rows] == [(0, o) for o in range(5, 9)]
    finally:
        restarted.stop()
