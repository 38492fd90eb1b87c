"""``for record in consumer`` on Apache Kafka: kafka-python's semantics through the compiled
cursor (positions per record handed out, changes between two records re-checked, nothing lost
when a loop is left and taken up again)."""
from __future__ import annotations

import pytest

from kclient import errors as Errors
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition

PER_PARTITION = 50


@pytest.fixture
def two_partitions(broker, create_topic, topic_name):
    """(bootstrap, topic): partition p holds b'p-i' at offset i, 50 records each."""
    create_topic(broker, topic_name, 2)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20) as p:
        futures = [(i, p.send(topic_name, b"%d-%d" % (part, i), partition=part))
                   for i in range(PER_PARTITION) for part in range(2)]
        p.flush(10)
    assert all(f.get().offset == i for i, f in futures)
    return broker.bootstrap, topic_name


def test_iter_gives_the_cursor_and_next_uses_the_same_records(two_partitions):
    bootstrap, topic = two_partitions
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=1000) as c:
        c.assign([tp])
        it = iter(c)
        assert next(it).offset == 0
        assert next(c).offset == 1      # kafka-python's next(consumer) shares the iteration
        offsets = []
        for r in c:                     # a new loop takes up where the last one stopped
            offsets.append(r.offset)
            if r.offset == 9:
                break
        assert offsets == list(range(2, 10)) and c.position(tp) == 10
        assert [r.offset for r in c] == list(range(10, PER_PARTITION))


def test_a_commit_between_two_records_commits_exactly_what_was_handed_out(two_partitions):
    bootstrap, topic = two_partitions
    tps = [TopicPartition(topic, p) for p in range(2)]
    with KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-g", auto_offset_reset="earliest",
                       enable_auto_commit=False, consumer_timeout_ms=5000) as c:
        seen: dict[int, int] = {}
        for r in c:
            seen[r.partition] = r.offset
            if sum(off + 1 for off in seen.values()) == 30:
                break
        c.commit()
        # Every assigned partition commits its position: one past its last record handed out
        # (0 for a partition none of whose records was).
        committed = {tp.partition: c.committed(tp) for tp in tps}
        assert committed == {p: seen.get(p, -1) + 1 for p in range(2)}


def test_a_seek_of_a_partition_not_yet_handed_out_is_respected(two_partitions):
    bootstrap, topic = two_partitions
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=2000,
                       max_poll_records=10_000) as c:
        c.assign([tp0, tp1])
        c.seek(tp0, 0)
        c.seek(tp1, 0)
        # Wait until one poll holds both partitions' records, so the second partition's
        # records are already fetched when the first record is handed out.
        first = next(c)
        other = tp1 if first.partition == 0 else tp0
        c.seek(other, 45)
        rest = [(r.partition, r.offset) for r in c]
        got_other = [o for p, o in rest if p == other.partition]
        assert got_other == list(range(45, PER_PARTITION))
        mine = [first.offset] + [o for p, o in rest if p == first.partition]
        assert mine == list(range(PER_PARTITION))


def test_pausing_the_current_partition_stops_it_until_resumed(two_partitions):
    bootstrap, topic = two_partitions
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=800) as c:
        c.assign([tp])
        assert next(c).offset == 0
        c.pause(tp)
        assert list(c) == []            # paused: nothing, until the consumer timeout
        assert c.position(tp) == 1
        c.resume(tp)
        assert [r.offset for r in c] == list(range(1, PER_PARTITION))


def test_a_closed_consumer_ends_iteration_and_hands_out_nothing_more(two_partitions):
    bootstrap, topic = two_partitions
    tp = TopicPartition(topic, 0)
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=2000)
    c.assign([tp])
    it = iter(c)
    assert next(it).offset == 0
    c.close()
    assert list(it) == []
    with pytest.raises(Errors.IllegalStateError, match="closed"):
        c.poll(0)


def test_poll_after_a_partial_loop_returns_what_the_loop_did_not(two_partitions):
    bootstrap, topic = two_partitions
    tp = TopicPartition(topic, 1)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=2000) as c:
        c.assign([tp])
        for r in c:
            if r.offset == 4:
                break
        got = []
        while len(got) < PER_PARTITION - 5:
            batch = c.poll(1000)
            assert batch, "poll returned nothing"
            got.extend(r.offset for recs in batch.values() for r in recs)
        assert got == list(range(5, PER_PARTITION))


def test_zero_copy_records_hand_out_views_that_outlive_later_polls(two_partitions):
    bootstrap, topic = two_partitions
    tps = [TopicPartition(topic, p) for p in range(2)]
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=1000,
                       zero_copy_records=True, max_poll_records=7) as c:
        c.assign(tps)
        kept = []
        for r in c:
            assert type(r.value) is memoryview and r.value.readonly and r.key is None
            kept.append(r)                 # every record kept across many later polls
            if len(kept) == 2 * PER_PARTITION:
                break
        assert sorted((r.partition, r.offset) for r in kept) == [(p, i) for p in range(2) for i in range(PER_PARTITION)]
        assert c.position(tps[0]) == c.position(tps[1]) == PER_PARTITION
        for r in kept:
            assert r.value == b"%d-%d" % (r.partition, r.offset) and r.serialized_value_size == len(r.value)
        c.seek_to_beginning()
        polled = c.poll(timeout_ms=5000, max_records=3)
        assert all(type(r.value) is memoryview for rs in polled.values() for r in rs)
        first = kept[0]
        del kept
        assert bytes(first.value) == b"%d-%d" % (first.partition, first.offset)


def test_zero_copy_views_into_large_answers_stay_intact_while_held(broker, create_topic, topic_name):
    """Answers of 32 KiB and more are received into pooled blocks; a view keeps its block
    out of the pool, so later answers cannot be written over a value still held."""
    create_topic(broker, topic_name, 1)
    values = [bytes([i]) * 20_000 for i in range(40)]
    with KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20, max_request_size=2_000_000) as p:
        for v in values:
            p.send(topic_name, v, partition=0)
        p.flush(10)
    tp = TopicPartition(topic_name, 0)
    with KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=2000,
                       zero_copy_records=True, max_poll_records=3, max_partition_fetch_bytes=100_000) as c:
        c.assign([tp])
        kept = [r.value for r in c]
        assert len(kept) == len(values) and all(type(v) is memoryview for v in kept)
        for _ in range(3):                  # more answers, into whatever blocks are free
            c.seek_to_beginning(tp)
            assert sum(1 for _ in c) == len(values)
        assert [bytes(v) for v in kept] == values
