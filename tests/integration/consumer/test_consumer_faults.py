"""KafkaConsumer against librdkafka's mock cluster: several brokers, leader moves, broker
outages, injected errors; out-of-range fetches and deleted records run on Apache Kafka too
(Tansu cannot show them: it answers fetches past the end by waiting).

read_committed filtering against a broker that lists aborted transactions is in
test_consumer.py (Apache Kafka); test_fetcher.py covers it with scripted answers."""
from __future__ import annotations

import time

import pytest

from kclient import errors as Errors
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition

FETCH = 1
LIST_OFFSETS = 2


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(start, start + per_partition):
            for part in range(partitions):
                p.send(topic, b"%d:%d" % (part, i), partition=part)
        p.flush(20)


def consume(consumer: KafkaConsumer, count: int, timeout_s: float = 30.0, during=None) -> list:
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        for recs in consumer.poll(200).values():
            out.extend(recs)
        if during is not None:
            during(len(out))
    return out


def assert_exactly_once(records, partitions: int, per_partition: int) -> None:
    got = sorted((r.partition, r.offset) for r in records)
    assert got == [(p, o) for p in range(partitions) for o in range(per_partition)]
    for r in records:
        assert r.value == b"%d:%d" % (r.partition, r.offset)


def test_leaders_on_several_brokers(mock_cluster, create_topic, topic_name):
    create_topic(mock_cluster, topic_name, 6)
    produce(mock_cluster.bootstrap, topic_name, 6, 200)
    tps = [TopicPartition(topic_name, p) for p in range(6)]
    with KafkaConsumer(bootstrap_servers=mock_cluster.bootstrap, auto_offset_reset="earliest") as c:
        assert c.end_offsets(tps) == {tp: 200 for tp in tps}
        assert c.beginning_offsets(tps) == {tp: 0 for tp in tps}
        c.assign(tps)
        assert_exactly_once(consume(c, 1200), 6, 200)
        c.seek_to_end()
        assert {c.position(tp) for tp in tps} == {200}


@pytest.mark.parametrize("cluster", ["kafka", "mock"], indirect=True)
def test_out_of_range_reset_earliest_and_none(cluster, create_topic, topic_name):
    # Not on Tansu: it waits instead of answering OFFSET_OUT_OF_RANGE.
    create_topic(cluster, topic_name, 1)
    produce(cluster.bootstrap, topic_name, 1, 20)
    tp = TopicPartition(topic_name, 0)
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 1000)
        recs = consume(c, 20)
        assert [r.offset for r in recs] == list(range(20))
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="latest") as c:
        c.assign([tp])
        c.seek(tp, 1000)
        deadline = time.monotonic() + 20
        while c.position(tp) == 1000 and time.monotonic() < deadline:
            c.poll(100)
        assert c.position(tp) == 20
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="none") as c:
        c.assign([tp])
        c.seek(tp, 1000)
        deadline = time.monotonic() + 20
        with pytest.raises(Errors.OffsetOutOfRangeError) as info:
            while time.monotonic() < deadline:
                c.poll(200)
        assert info.value.partitions == {tp: 1000}
        assert c.position(tp) == 1000
        c.seek(tp, 5)  # the application decides
        assert [r.offset for r in consume(c, 15)] == list(range(5, 20))


def test_records_below_the_log_start_reset(records_deletable, create_topic, topic_name):
    cluster = records_deletable
    create_topic(cluster, topic_name, 1)
    produce(cluster.bootstrap, topic_name, 1, 30)
    cluster.delete_records(topic_name, 0, 10)
    tp = TopicPartition(topic_name, 0)
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert c.beginning_offsets([tp]) == {tp: 10}
        c.seek(tp, 2)
        assert [r.offset for r in consume(c, 20)] == list(range(10, 30))


def test_leader_move_mid_consumption(mock_faults, create_topic, topic_name):
    create_topic(mock_faults, topic_name, 3)
    produce(mock_faults.bootstrap, topic_name, 3, 300)
    brokers = mock_faults.broker_ids
    moved = []

    def move(n):
        if n >= 300 and not moved:
            for p in range(3):
                mock_faults.partition_set_leader(topic_name, p, brokers[(p + 1) % len(brokers)])
            moved.append(n)

    with KafkaConsumer(bootstrap_servers=mock_faults.bootstrap, auto_offset_reset="earliest",
                       max_poll_records=100, metadata_max_age_ms=60000) as c:
        c.assign([TopicPartition(topic_name, p) for p in range(3)])
        recs = consume(c, 900, during=move)
    assert moved
    assert_exactly_once(recs, 3, 300)


def test_broker_down_then_up(mock_faults, create_topic, topic_name):
    create_topic(mock_faults, topic_name, 1)
    produce(mock_faults.bootstrap, topic_name, 1, 50)
    tp = TopicPartition(topic_name, 0)
    with KafkaConsumer(bootstrap_servers=mock_faults.bootstrap, auto_offset_reset="earliest",
                       reconnect_backoff_ms=20, reconnect_backoff_max_ms=100) as c:
        c.assign([tp])
        first = consume(c, 50)
        leader = c._metadata.cluster.leader_for(tp).node_id
        mock_faults.broker_set_down(leader)
        try:
            assert c.poll(300) == {}
        finally:
            mock_faults.broker_set_up(leader)
        produce(mock_faults.bootstrap, topic_name, 1, 50, start=50)
        rest = consume(c, 50)
    assert_exactly_once(first + rest, 1, 100)


@pytest.mark.parametrize("code", [6, 3, 74, 56])  # NOT_LEADER, UNKNOWN_TOPIC, FENCED_EPOCH, KAFKA_STORAGE
def test_injected_fetch_errors_are_retried(mock_faults, create_topic, topic_name, code):
    create_topic(mock_faults, topic_name, 2)
    produce(mock_faults.bootstrap, topic_name, 2, 100)
    mock_faults.partition_push_request_errors(topic_name, 0, FETCH, [code, code, code])
    with KafkaConsumer(bootstrap_servers=mock_faults.bootstrap, auto_offset_reset="earliest",
                       retry_backoff_ms=20) as c:
        c.assign([TopicPartition(topic_name, p) for p in range(2)])
        assert_exactly_once(consume(c, 200), 2, 100)


def test_injected_list_offsets_errors_during_reset(mock_faults, create_topic, topic_name):
    create_topic(mock_faults, topic_name, 1)
    produce(mock_faults.bootstrap, topic_name, 1, 10)
    mock_faults.push_request_errors(LIST_OFFSETS, [6, 5])  # NOT_LEADER, LEADER_NOT_AVAILABLE
    tp = TopicPartition(topic_name, 0)
    with KafkaConsumer(bootstrap_servers=mock_faults.bootstrap, auto_offset_reset="earliest",
                       retry_backoff_ms=20) as c:
        c.assign([tp])
        assert [r.offset for r in consume(c, 10)] == list(range(10))
    mock_faults.clear_request_errors(LIST_OFFSETS)


def test_record_larger_than_partition_fetch_size_makes_progress(mock_cluster, create_topic, topic_name):
    create_topic(mock_cluster, topic_name, 1)
    with KafkaProducer(bootstrap_servers=mock_cluster.bootstrap) as p:
        p.send(topic_name, b"small-0").get(5)
        p.send(topic_name, b"B" * 20_000).get(5)
        p.send(topic_name, b"small-2").get(5)
    with KafkaConsumer(bootstrap_servers=mock_cluster.bootstrap, auto_offset_reset="earliest",
                       max_partition_fetch_bytes=1024, fetch_max_bytes=2048) as c:
        c.assign([TopicPartition(topic_name, 0)])
        recs = consume(c, 3)
    assert [len(r.value) for r in recs] == [7, 20_000, 7]


def test_compressed_batches_from_librdkafka_per_record_and_columnar(mock_cluster, create_topic, topic_name):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    create_topic(mock_cluster, topic_name, 4)
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        p = confluent_kafka.Producer({"bootstrap.servers": mock_cluster.bootstrap, "compression.codec": codec,
                                      "linger.ms": 20, "log_level": 3})
        for i in range(250):
            p.produce(topic_name, b"%s-%d" % (codec.encode(), i), partition=i % 4)
        assert p.flush(10) == 0
    tps = [TopicPartition(topic_name, p) for p in range(4)]
    with KafkaConsumer(bootstrap_servers=mock_cluster.bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        values = sorted(r.value for r in consume(c, 1000))
    expected = sorted(b"%s-%d" % (codec.encode(), i) for codec in ("gzip", "snappy", "lz4", "zstd")
                      for i in range(250))
    assert values == expected
    with KafkaConsumer(bootstrap_servers=mock_cluster.bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 1000 and time.monotonic() < deadline:
            for batch in c.poll_columnar(200, max_records=10_000).values():
                got.extend(batch.values())
        assert sorted(got) == expected
        assert [c.position(tp) for tp in tps] == [252, 252, 248, 248]  # i % 4 over 4 x 250 records


def test_abandon_drops_the_consumer_without_closing_its_connections(mock_cluster, create_topic, topic_name):
    """abandon() (for a forked child, see kclient.spark): the consumer then behaves as closed,
    but sends nothing and closes no socket, since in a forked child they are the parent's too."""
    create_topic(mock_cluster, topic_name, 1)
    produce(mock_cluster.bootstrap, topic_name, 1, 5)
    c = KafkaConsumer(bootstrap_servers=mock_cluster.bootstrap, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic_name, 0)])
    assert len(consume(c, 5)) == 5
    net = c._client.client                       # held here: abandon() drops the consumer's references
    socks = [conn.sock for conn in net._conns.values() if conn.sock is not None]
    assert socks
    c.abandon()
    with pytest.raises(Errors.IllegalStateError):
        c.poll(0)
    c.close()                                    # nothing left to close
    c.wakeup()
    assert not c.bootstrap_connected()
    assert not net.closed and all(s.fileno() != -1 for s in socks)
    net.close()                                  # this process does own them: release them


@pytest.mark.parametrize("cluster", ["kafka", "mock"], indirect=True)
def test_poll_columnar_asks_for_the_next_answer_before_decoding_this_one(cluster, create_topic, topic_name):
    """Pipelining for a caller that drains everything each poll: when an answer arrives, the
    Fetch for what follows it leaves before the answer is decoded, so the broker works on the
    next answer while this thread decodes."""
    create_topic(cluster, topic_name, 1)
    with KafkaProducer(bootstrap_servers=cluster.bootstrap) as p:
        for batch in range(40):                      # one batch per flush
            for i in range(10):
                p.send(topic_name, b"%d:%d" % (batch, i), partition=0)
            p.flush(20)
    tp = TopicPartition(topic_name, 0)
    events: list[tuple[str, int]] = []
    with KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                       max_partition_fetch_bytes=512) as c:     # a few batches per answer
        requests, collector = c._fetcher.requests, c._fetcher.collector
        send, send_changes, decode = requests._send_fetch, requests._send_changes, collector._init_columnar

        def spy_send(node_id, slot, target, version, parts, *rest):
            events.extend(("fetch", offset) for part_tp, offset, *_ in parts if part_tp == tp)
            return send(node_id, slot, target, version, parts, *rest)

        def spy_send_changes(plan, now):
            # A request built from the last answer's changes: tp is fetched from where its
            # session entry now stands, listed or not.
            result = send_changes(plan, now)
            if tp in plan.sent:
                events.append(("fetch", plan.sent[tp][0]))
            return result

        def spy_decode(cf):
            events.append(("decode", cf.fetch_offset))
            return decode(cf)

        requests._send_fetch, requests._send_changes, collector._init_columnar = spy_send, spy_send_changes, spy_decode
        c.assign([tp])
        read, deadline = 0, time.monotonic() + 30
        while read < 400 and time.monotonic() < deadline:
            read += sum(len(cols) for cols in c.poll_columnar(timeout_ms=200, max_records=10**6).values())
        assert read == 400
    decoded = [offset for kind, offset in events if kind == "decode"]
    assert len(decoded) >= 4, f"the test needs several answers, got {decoded}"
    for this, following in zip(decoded, decoded[1:]):
        # The fetch that brought the following answer was sent before this answer's decode.
        assert events.index(("fetch", following)) < events.index(("decode", this)), (this, following, events)
