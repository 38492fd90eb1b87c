"""kclient's public API as a type checker sees it.

CI type-checks this file (``mypy``; it is in ``[tool.mypy] files`` in pyproject.toml). Each
``assert_type`` fails the check when a public type changes or degrades to ``Any``, as it does
when a name reaches the checker only through a module ``__getattr__``. The functions are never
called: they need a broker.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

from pyspark.sql import DataFrame, SparkSession
from typing_extensions import assert_type

import kclient
import kclient.spark
from kclient.consumer.columnar import ColumnarRecords
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import FutureRecordMetadata, KafkaProducer, RecordMetadata
from kclient.spark.planning import OffsetRange
from kclient.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition


def consume() -> None:
    with kclient.KafkaConsumer("quickstart", bootstrap_servers="localhost:9092", group_id="quickstart",
                               auto_offset_reset="earliest", consumer_timeout_ms=10_000) as consumer:
        assert_type(consumer, KafkaConsumer)
        for record in consumer:
            assert_type(record, ConsumerRecord)
        assert_type(consumer.poll(timeout_ms=1000), dict[TopicPartition, list[ConsumerRecord]])
        batches = consumer.poll_columnar(timeout_ms=1000, max_records=100_000)
        assert_type(batches, dict[TopicPartition, ColumnarRecords])
        for columns in batches.values():
            assert_type(columns.last_offset, int)
            assert_type(columns.offsets, memoryview)
            for row in columns:
                assert_type(row, ConsumerRecord)
        tp = kclient.TopicPartition("quickstart", 0)
        assert_type(tp, TopicPartition)
        assert_type(consumer.committed(tp), int | None)
        assert_type(consumer.committed(tp, metadata=True), OffsetAndMetadata | None)
        assert_type(consumer.end_offsets([tp]), dict[TopicPartition, int])
        assert_type(consumer.offsets_for_times({tp: 0}), dict[TopicPartition, OffsetAndTimestamp | None])
        assert_type(consumer.assignment(), set[TopicPartition])
        assert_type(consumer.position(tp), int)


def produce() -> None:
    with kclient.KafkaProducer(bootstrap_servers="localhost:9092") as producer:
        assert_type(producer, KafkaProducer)
        future = producer.send("quickstart", value=b"hello", key=b"k")
        assert_type(future, FutureRecordMetadata)
        assert_type(future.get(timeout=10), RecordMetadata)


def spark_read(spark: SparkSession) -> None:
    options = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "quickstart"}
    assert_type(kclient.spark.read_kafka(spark, options), DataFrame)
    assert_type(kclient.spark.plan_offset_ranges(options), list[OffsetRange])
    assert_type(kclient.spark.arrow_reader(options), Callable[[Iterator], Iterator])
