"""KafkaConsumer against the Tansu broker.

The big topic (1,000,000 records of 100 bytes over 8 partitions, written once per module by
confluent-kafka's producer) is read in assign mode, in group mode and columnar; each record's
value starts with its sequence number, so "exactly once" is checked record by record.
"""
from __future__ import annotations

import threading
import time

import pytest

from kclient import errors as Errors
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.subscription.listener import ConsumerRebalanceListener
from kclient.producer import KafkaProducer
from kclient.structs import OffsetAndMetadata, TopicPartition

N_RECORDS = 1_000_000
N_PARTITIONS = 8
VALUE_PAD = b"." * 92   # 8-digit sequence number + 92 bytes = 100-byte values
GROUP_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}  # Tansu joins in ~session/2


@pytest.fixture(scope="module")
def big_topic(broker):
    """(bootstrap, topic): record i has value b'%08d' % i + pad, in partition i % 8."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = f"big-{time.monotonic_ns()}"
    broker.create_topic(topic, N_PARTITIONS, 1)
    broker.wait_for_topic(topic, N_PARTITIONS)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
        "batch.num.messages": 100_000, "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 1_000_000, "acks": 1, "log_level": 3,
    })
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    produce = producer.produce
    for i in range(N_RECORDS):
        while True:
            try:
                produce(topic, b"%08d" % i + VALUE_PAD, partition=i % N_PARTITIONS, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    assert not errors, errors[:3]
    yield broker.bootstrap, topic
    try:
        broker.delete_topic(topic)
    except Exception:
        pass


def check_exactly_once(seen: bytearray) -> None:
    missing = seen.count(0)
    dupes = sum(1 for c in seen if c > 1) if missing == 0 and sum(seen) != len(seen) else 0
    assert missing == 0 and sum(seen) == len(seen), f"{missing} records missing, {dupes} duplicated"


def consume_all(consumer: KafkaConsumer, timeout_s: float = 120.0, check_pipelining: bool = False) -> bytearray:
    seen = bytearray(N_RECORDS)
    n = 0
    deadline = time.monotonic() + timeout_s
    while n < N_RECORDS and time.monotonic() < deadline:
        batch = consumer.poll(1000)
        if batch and check_pipelining:
            # The next fetch left before these records were returned (mechanisms §7): it is still in
            # flight, as its answer can only be read by the next poll.
            assert consumer.metrics()["consumer-fetch-manager-metrics"]["fetches-in-flight"] == 1
            check_pipelining = False
        for tp, records in batch.items():
            last = -1
            for r in records:
                seq = int(r.value[:8])
                assert seq % N_PARTITIONS == tp.partition and r.offset > last
                last = r.offset
                seen[seq] += 1
            n += len(records)
    return seen


def test_million_records_assign_mode_exactly_once(big_topic):
    bootstrap, topic = big_topic
    parts = [TopicPartition(topic, p) for p in range(N_PARTITIONS)]
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign(parts)
        check_exactly_once(consume_all(c, check_pipelining=True))
        assert {c.position(tp) for tp in parts} == {N_RECORDS // N_PARTITIONS}
        assert c.poll(0) == {}  # nothing more, and nothing returned twice
        assert {c.highwater(tp) for tp in parts} == {N_RECORDS // N_PARTITIONS}


def test_million_records_group_mode_exactly_once(big_topic, group_id):
    bootstrap, topic = big_topic
    with KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group_id, auto_offset_reset="earliest",
                       enable_auto_commit=False, **GROUP_TIMEOUTS) as c:
        check_exactly_once(consume_all(c))
        assert c.assignment() == {TopicPartition(topic, p) for p in range(N_PARTITIONS)}
        c.commit()
        assert c.committed(TopicPartition(topic, 3)) == N_RECORDS // N_PARTITIONS


def test_million_records_columnar_exactly_once(big_topic):
    pytest.importorskip("numpy")
    import numpy as np
    bootstrap, topic = big_topic
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(N_PARTITIONS)])
        next_offset = dict.fromkeys(range(N_PARTITIONS), 0)
        n = 0
        deadline = time.monotonic() + 120
        while n < N_RECORDS and time.monotonic() < deadline:
            for tp, batch in c.poll_columnar(1000, max_records=200_000).items():
                offsets = np.asarray(batch.offsets)
                expected = np.arange(next_offset[tp.partition], next_offset[tp.partition] + len(batch))
                assert np.array_equal(offsets, expected)
                next_offset[tp.partition] += len(batch)
                n += len(batch)
                # value i of partition p is record p + 8 * offset
                first = batch.values()[0]
                assert int(first[:8]) == tp.partition + N_PARTITIONS * int(offsets[0])
        assert next_offset == dict.fromkeys(range(N_PARTITIONS), N_RECORDS // N_PARTITIONS)
        assert c.poll_columnar(0) == {}


# ---------------------------------------------------------------------- small topics
def fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    """Many records per batch. Apache Kafka's end offsets are exact whatever the batching (Tansu
    answers ListOffsets(latest) per batch, which forced one record per batch here before)."""
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20) as p:
        futures = [(i, p.send(topic, b"%d-%d" % (part, i), key=b"k%d" % i, partition=part))
                   for i in range(per_partition) for part in range(partitions)]
        p.flush(10)
    assert all(f.get().offset == i for i, f in futures)


def poll_until(consumer, count: int, timeout_s: float = 20.0, **kw) -> list:
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        for recs in consumer.poll(200, **kw).values():
            out.extend(recs)
    return out


@pytest.fixture
def small_topic(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 2)
    fill(broker.bootstrap, topic_name, 2, 50)
    return broker.bootstrap, topic_name


def test_seek_position_and_max_records(small_topic):
    bootstrap, topic = small_topic
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=7) as c:
        c.assign([tp])
        assert c.position(tp) == 0
        first = poll_until(c, 7)
        assert [r.offset for r in first] == list(range(7))
        assert c.position(tp) == 7
        c.seek(tp, 30)
        assert c.position(tp) == 30
        recs = poll_until(c, 3, max_records=3)
        assert [r.offset for r in recs] == [30, 31, 32] and recs[0].value == b"0-30"
        c.seek_to_beginning()
        assert c.position(tp) == 0
        c.seek_to_end(tp)
        assert c.position(tp) == 50
        assert c.poll(200) == {}
        c.seek(tp, OffsetAndMetadata(48, "", -1))
        assert [r.offset for r in poll_until(c, 2)] == [48, 49]
        with pytest.raises(Errors.IllegalStateError):
            c.seek(TopicPartition(topic, 1), 0)
        with pytest.raises(Errors.IllegalArgumentError):
            c.seek(tp, -1)


def test_beginning_end_offsets_and_highwater(small_topic):
    bootstrap, topic = small_topic
    tps = [TopicPartition(topic, p) for p in range(2)]
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}
        c.assign(tps)
        assert c.highwater(tps[0]) is None
        assert len(poll_until(c, 100)) == 100
        assert c.highwater(tps[0]) == 50
    # Three records in one batch: the end offset counts records, not batches.
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50) as p:
        for f in [p.send(topic, b"x", partition=1) for _ in range(3)]:
            f.get(5)
    with KafkaConsumer(bootstrap_servers=bootstrap) as c:
        assert c.end_offsets([tps[1]])[tps[1]] == 53


def test_pause_and_resume(small_topic):
    bootstrap, topic = small_topic
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp0, tp1])
        c.pause(tp0)
        assert c.paused() == {tp0}
        recs = poll_until(c, 50)
        assert {r.partition for r in recs} == {1} and len(recs) == 50
        assert c.poll(300) == {}
        assert c.position(tp0) == 0
        c.resume(tp0)
        assert c.paused() == set()
        recs = poll_until(c, 50)
        assert {r.partition for r in recs} == {0} and [r.offset for r in recs] == list(range(50))


def test_latest_reset_skips_existing_records(small_topic):
    bootstrap, topic = small_topic
    tp = TopicPartition(topic, 1)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="latest") as c:
        c.assign([tp])
        assert c.position(tp) == 50
        with KafkaProducer(bootstrap_servers=bootstrap) as p:
            p.send(topic, b"new", partition=1).get(5)
        recs = poll_until(c, 1)
        assert [(r.offset, r.value) for r in recs] == [(50, b"new")]


def test_commit_and_committed_in_assign_mode(small_topic, group_id):
    bootstrap, topic = small_topic
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, auto_offset_reset="earliest",
                       enable_auto_commit=False) as c:
        c.assign([tp0, tp1])
        assert c.committed(tp0) is None
        poll_until(c, 100)
        c.commit({tp0: OffsetAndMetadata(20, "", -1)})
        assert c.committed(tp0) == 20
        assert c.committed(tp0, metadata=True).offset == 20
        c.commit()  # positions: 50 and 50
        assert (c.committed(tp0), c.committed(tp1)) == (50, 50)
        done = threading.Event()
        c.commit_async({tp1: OffsetAndMetadata(7, "", -1)}, callback=lambda offsets, exc: done.set())
        deadline = time.monotonic() + 10
        while not done.is_set() and time.monotonic() < deadline:
            c.poll(100)
        assert done.is_set() and c.committed(tp1) == 7
    with KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, auto_offset_reset="latest") as c:
        c.assign([tp1])
        assert c.position(tp1) == 7  # restarts from the committed offset, not auto.offset.reset


def test_group_subscription_listener_and_auto_commit(small_topic, group_id):
    bootstrap, topic = small_topic
    events = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            events.append(("revoked", set(revoked)))

        def on_partitions_assigned(self, assigned):
            events.append(("assigned", set(assigned)))

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, auto_offset_reset="earliest",
                      auto_commit_interval_ms=100, **GROUP_TIMEOUTS)
    try:
        c.subscribe([topic], listener=Listener())
        assert c.subscription() == {topic}
        assert len(poll_until(c, 100, timeout_s=30)) == 100
        assert ("assigned", {TopicPartition(topic, 0), TopicPartition(topic, 1)}) in events
    finally:
        c.close()  # auto-commits the positions
    with KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id) as c2:
        assert c2.committed(TopicPartition(topic, 0)) == 50


def test_transaction_markers_are_skipped(broker, create_topic, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    create_topic(broker, topic_name, 1)
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-" + topic_name,
                                  "log_level": 3})
    p.init_transactions(10)
    for n in range(2):
        p.begin_transaction()
        p.produce(topic_name, b"txn-%d" % n, partition=0)
        p.commit_transaction(10)
    tp = TopicPartition(topic_name, 0)
    with KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        recs = poll_until(c, 2)
        assert [(r.offset, r.value) for r in recs] == [(0, b"txn-0"), (2, b"txn-1")]  # markers at 1 and 3
        deadline = time.monotonic() + 10
        while c.position(tp) < 4 and time.monotonic() < deadline:
            c.poll(100)
        assert c.position(tp) == 4



def test_read_committed_skips_aborted_transactions(broker, create_topic, topic_name):
    """Apache Kafka lists aborted transactions in Fetch answers (the stand-ins do not, so this
    was tested with scripted answers only): read_committed must drop exactly their records."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    create_topic(broker, topic_name, 1)
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-" + topic_name,
                                  "log_level": 3})
    p.init_transactions(10)
    expected_committed, everything = [], []
    for n in range(6):
        p.begin_transaction()
        values = [b"t%d-r%d" % (n, r) for r in range(3)]
        for v in values:
            p.produce(topic_name, v, partition=0)
        everything += values
        p.flush(10)  # librdkafka's abort purges records not yet sent: make sure they are written
        if n % 2:
            p.abort_transaction(10)
        else:
            p.commit_transaction(10)
            expected_committed += values
    with KafkaProducer(bootstrap_servers=broker.bootstrap) as plain:  # a record outside any transaction
        plain.send(topic_name, b"plain", partition=0).get(10)
    expected_committed.append(b"plain")
    everything.append(b"plain")
    tp = TopicPartition(topic_name, 0)
    for isolation, expected in (("read_committed", expected_committed), ("read_uncommitted", everything)):
        with KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                           isolation_level=isolation) as c:
            c.assign([tp])
            got = [r.value for r in poll_until(c, len(expected))]
            assert got == expected, isolation
            assert c.poll(300) == {}, isolation

def test_iteration_and_consumer_timeout(small_topic):
    bootstrap, topic = small_topic
    with KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                       consumer_timeout_ms=500) as c:
        values = [m.value for m in c]
        assert sorted(values) == sorted(b"%d-%d" % (p, i) for p in range(2) for i in range(50))
        assert list(c) == []  # stops again after the timeout


def test_iteration_moves_positions_record_by_record(small_topic):
    bootstrap, topic = small_topic
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000) as c:
        c.assign([tp])
        assert next(c).offset == 0 and c.position(tp) == 1
        assert next(c).offset == 1 and c.position(tp) == 2
        c.seek(tp, 40)  # the rest of the records already fetched are dropped
        assert next(c).offset == 40 and c.position(tp) == 41
        c.pause(tp)
        c.resume(tp)
        assert next(c).offset == 41
        # Leaving the iteration for poll(): what it had not handed out is fetched again.
        recs = poll_until(c, 8)
        assert [r.offset for r in recs] == list(range(42, 50))
        assert c.position(tp) == 50


def test_pattern_subscription_without_group(broker, create_topic, topic_name):
    create_topic(broker, topic_name + "-a", 1)
    create_topic(broker, topic_name + "-b", 1)
    fill(broker.bootstrap, topic_name + "-a", 1, 3)
    fill(broker.bootstrap, topic_name + "-b", 1, 3)
    with KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        c.subscribe(pattern=topic_name.replace(".", r"\.") + "-.*")
        recs = poll_until(c, 6)
        assert {r.topic for r in recs} == {topic_name + "-a", topic_name + "-b"}


# ---------------------------------------------------------------------- threads
def test_wakeup_interrupts_a_blocking_poll(small_topic):
    bootstrap, topic = small_topic
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="latest") as c:
        c.assign([TopicPartition(topic, 0)])
        c.poll(100)

        def waker():
            deadline = time.monotonic() + 10
            while c._owner is None and time.monotonic() < deadline:  # wait until poll() is entered
                threading.Event().wait(0.005)
            c.wakeup()

        t = threading.Thread(target=waker)
        t.start()
        start = time.monotonic()
        with pytest.raises(Errors.WakeupError):
            c.poll(30_000)
        t.join()
        assert time.monotonic() - start < 25  # interrupted, not timed out
        assert c.poll(0) == {}  # the wakeup was consumed


def test_second_thread_gets_a_clear_error(small_topic):
    bootstrap, topic = small_topic
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="latest") as c:
        c.assign([TopicPartition(topic, 0)])
        errors = []
        inside = threading.Event()

        def intruder():
            deadline = time.monotonic() + 10
            while c._owner is None and time.monotonic() < deadline:
                threading.Event().wait(0.005)
            inside.set()
            try:
                c.poll(0)
            except Exception as exc:
                errors.append(exc)
            finally:
                c.wakeup()

        t = threading.Thread(target=intruder)
        t.start()
        with pytest.raises(Errors.WakeupError):
            c.poll(30_000)
        t.join()
        assert inside.is_set()
        assert len(errors) == 1 and isinstance(errors[0], Errors.ConcurrentAccessError)
        assert "multi-threaded" in str(errors[0])


# ---------------------------------------------------------------------- construction and misuse
def test_wrong_bootstrap_fails_clearly_within_its_timeout():
    start = time.monotonic()
    with pytest.raises(Errors.NoBrokersAvailable, match="127.0.0.1:1"):
        KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version_auto_timeout_ms=1000)
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("kwargs, name", [
    ({"fetch_max_wait_ms": "soon"}, "fetch.max.wait.ms"), ({"max_poll_records": 0}, "max.poll.records"),
    ({"no_such_setting": 1}, "no_such_setting"), ({"auto_offset_reset": "middle"}, "auto.offset.reset"),
    ({"security_protocol": "SASL_SSL"}, "sasl.mechanism"), ({"enable_auto_commit": "maybe"}, "enable.auto.commit"),
    ({"isolation_level": "dirty"}, "isolation.level"), ({"value_deserializer": 5}, "value.deserializer"),
])
def test_bad_settings_fail_at_construction_naming_them(kwargs, name):
    with pytest.raises(Errors.ConfigurationError, match=name.replace(".", r"\.")):
        KafkaConsumer(bootstrap_servers="127.0.0.1:1", **kwargs)


def test_dotted_settings_and_misuse(small_topic):
    bootstrap, topic = small_topic
    c = KafkaConsumer({"bootstrap.servers": bootstrap, "max.poll.records": 3, "auto.offset.reset": "earliest"},
                      api_version=(2, 0, 0), client_id="dotted")
    assert c.config["max.poll.records"] == 3 and c.config.client_id == "dotted"
    with pytest.raises(Errors.IllegalStateError, match="not subscribed"):
        c.poll(0)
    c.assign([TopicPartition(topic, 0)])
    with pytest.raises(Errors.IllegalArgumentError):
        c.poll(-1)
    with pytest.raises(Errors.IllegalStateError, match="group_id"):
        c.commit()
    assert len(poll_until(c, 3)) == 3
    assert c.metrics()["consumer-fetch-manager-metrics"]["records-consumed-total"] >= 3
    assert c.partitions_for_topic(topic) == {0, 1}
    assert topic in c.topics()
    c.close()
    with pytest.raises(Errors.IllegalStateError, match="closed"):
        c.poll(0)
    c.close()  # idempotent


def test_wakeup_during_iteration_keeps_records(small_topic):
    bootstrap, topic = small_topic
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=1500) as c:
        c.assign([tp])
        assert next(c).offset == 0
        c.wakeup()
        got = []
        with pytest.raises(Errors.WakeupError):
            for m in c:  # the wakeup surfaces at the next poll inside the iteration
                got.append(m.offset)
        rest = [m.offset for m in c]
        assert got + rest == list(range(1, 50))


class EvenOffsetsOnly:
    """An interceptor (interceptor.classes) that filters records and records commits."""

    commits: list = []

    def configure(self, configs):
        self.group = configs["group.id"]

    def on_consume(self, records):
        return {tp: [r for r in recs if r.offset % 2 == 0] for tp, recs in records.items()}

    def on_commit(self, offsets):
        EvenOffsetsOnly.commits.append(dict(offsets))

    def close(self):
        pass


def test_interceptors_filter_records_and_see_commits(small_topic, group_id):
    bootstrap, topic = small_topic
    tp = TopicPartition(topic, 0)
    EvenOffsetsOnly.commits = []
    with KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, auto_offset_reset="earliest",
                       enable_auto_commit=False, interceptor_classes=[EvenOffsetsOnly]) as c:
        c.assign([tp])
        offsets = []
        deadline = time.monotonic() + 20
        while c.position(tp) < 50 and time.monotonic() < deadline:
            for recs in c.poll(200).values():
                offsets.extend(r.offset for r in recs)
        assert offsets == list(range(0, 50, 2))
        c.commit()
        assert EvenOffsetsOnly.commits and EvenOffsetsOnly.commits[-1][tp].offset == 50


def test_close_after_a_pending_wakeup_still_commits(small_topic, group_id):
    """A wakeup() nobody polled for (a signal handler's, say) must not cost close() its final
    auto-commit: close() ignores wakeups, as the Java consumer's does."""
    bootstrap, topic = small_topic
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, auto_offset_reset="earliest",
                      enable_auto_commit=True, auto_commit_interval_ms=600_000)
    c.assign([tp0, tp1])
    poll_until(c, 100)
    positions = (c.position(tp0), c.position(tp1))
    c.wakeup()
    c.close()
    with KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False) as check:
        assert (check.committed(tp0), check.committed(tp1)) == positions
