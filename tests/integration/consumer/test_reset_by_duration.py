"""``auto.offset.reset=by_duration:<duration>`` on Apache Kafka: records carry producer-set
timestamps (CreateTime) hours and minutes old, and a fresh group starts at the first record no
older than the duration, or at the end when none is that recent."""
from __future__ import annotations

import time

import pytest

from kclient import KafkaConsumer, KafkaProducer
from kclient.structs import TopicPartition

MINUTE = 60_000
HOUR = 60 * MINUTE
# (age of the records, how many): offsets 0-2 are ten hours old, 3-5 two hours, 6-8 half an hour.
AGES = ((10 * HOUR, 3), (2 * HOUR, 3), (30 * MINUTE, 3))


@pytest.fixture
def aged_topic(kafka, create_topic, topic_name) -> str:
    create_topic(kafka, topic_name, 1)
    now = int(time.time() * 1000)
    with KafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
        for age, count in AGES:
            for i in range(count):
                producer.send(topic_name, b"%d" % i, partition=0, timestamp_ms=now - age + i)
        producer.flush(30)
    return topic_name


END = sum(count for _age, count in AGES)


def start_offset(bootstrap: str, topic: str, group: str, reset: str) -> int:
    """Where a new member of ``group`` starts: the first record it reads, or the end."""
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset=reset,
                       enable_auto_commit=False, session_timeout_ms=6000) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "nothing read, and the position is not the end"
            records = consumer.poll(100).get(tp)
            if records:
                return records[0].offset
            if consumer.assignment() and consumer.position(tp) == END:
                return END


@pytest.mark.parametrize("reset, offset", [
    ("by_duration:P1D", 0),          # older than every record: the first one
    ("by_duration:P1DT2H", 0),
    ("by_duration:PT3H", 3),
    ("by_duration:PT1H", 6),
    ("by_duration:PT10M", END),      # no record that recent: the end
    ("by_duration:PT0S", END),
    ("earliest", 0),
    ("latest", END),
])
def test_a_fresh_group_starts_at_the_first_record_no_older_than_the_duration(kafka, aged_topic, group_id,
                                                                             reset, offset):
    assert start_offset(kafka.bootstrap, aged_topic, group_id, reset) == offset


def test_records_appended_after_a_reset_to_the_end_are_read(kafka, aged_topic, group_id):
    tp = TopicPartition(aged_topic, 0)
    with KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group_id, auto_offset_reset="by_duration:PT5M",
                       enable_auto_commit=False, session_timeout_ms=6000) as consumer:
        consumer.subscribe([aged_topic])
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(100)
        assert consumer.position(tp) == END
        with KafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
            producer.send(aged_topic, b"new", partition=0)
            producer.flush(30)
        got = []
        while not got:
            assert time.monotonic() < deadline, "the new record was not read"
            got = consumer.poll(200).get(tp, [])
        assert [(r.offset, r.value) for r in got] == [(END, b"new")]
