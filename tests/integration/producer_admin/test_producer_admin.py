"""The small producer and admin client against real brokers (Apache Kafka; the mock cluster for
multi-broker routing), checked by reading back with kclient's consumer."""
from __future__ import annotations

import time

import pytest

from kclient import errors as Errors
from kclient.admin import KafkaAdminClient, NewTopic, OffsetSpec
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer, default_partitioner, murmur2
from kclient.structs import OffsetAndMetadata, TopicPartition


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 20.0) -> list:
    """Every record of the topic (assign mode, from the beginning), waiting for `expected`."""
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            for recs in c.poll(500).values():
                out.extend(recs)
        return out


# ---------------------------------------------------------------------- partitioner
def test_murmur2_matches_kafka_vectors():
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    for data, expected in cases.items():
        assert murmur2(data) == expected


def test_murmur2_matches_an_independent_implementation():
    kp = pytest.importorskip("kafka.partitioner.default")
    for n in range(0, 40):
        data = bytes((i * 37 + n) & 0xFF for i in range(n))
        ref = kp.murmur2(data)
        assert murmur2(data) & 0xFFFFFFFF == ref & 0xFFFFFFFF


def test_default_partitioner_is_javas_positive_modulo():
    parts = list(range(7))
    for key in (b"", b"a", b"21", b"foobar", bytes(range(50))):
        assert default_partitioner(key, parts, parts) == (murmur2(key) & 0x7FFFFFFF) % 7


# ---------------------------------------------------------------------- settings
@pytest.mark.parametrize("kwargs, name", [
    ({"acks": 2}, "acks"), ({"compression_type": "brotli"}, "compression.type"),
    ({"linger_ms": "soon"}, "linger.ms"), ({"lingerms": 5}, "lingerms"),
    ({"security_protocol": "SSL", "ssl_cafile": "/nonexistent.pem"}, "ssl.cafile"),
    ({"enable_idempotence": True}, "enable.idempotence"),
])
def test_bad_producer_settings_fail_naming_the_setting(kwargs, name):
    with pytest.raises(Errors.ConfigurationError, match=name):
        KafkaProducer(bootstrap_servers="127.0.0.1:1", **kwargs)


def test_dotted_settings_are_accepted():
    p = KafkaProducer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": 7, "acks": "all"})
    assert p.config["linger.ms"] == 7 and p.config["acks"] == -1
    p.close(timeout=0)


# ---------------------------------------------------------------------- producing
def test_send_get_flush_offsets_and_fields(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 2)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=2) as p:
        futures = [p.send(topic_name, b"v%d" % i, partition=1, headers=[("h", b"x")], timestamp_ms=1_600_000_000_000 + i)
                   for i in range(50)]
        p.flush(10)
        metas = [f.get(1) for f in futures]
    assert [m.offset for m in metas] == list(range(50))
    m = metas[3]
    assert (m.topic, m.partition, m.topic_partition, m.timestamp) == (topic_name, 1, TopicPartition(topic_name, 1),
                                                                      1_600_000_000_003)
    assert (m.serialized_key_size, m.serialized_value_size, m.serialized_header_size) == (-1, 2, 2)
    recs = read_all(broker.bootstrap, topic_name, 2, 50)
    assert [(r.offset, r.value, r.headers, r.timestamp) for r in recs] == \
        [(i, b"v%d" % i, [("h", b"x")], 1_600_000_000_000 + i) for i in range(50)]


def test_keys_go_to_murmur2_partitions_and_serializers_apply(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 5)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, key_serializer=str.encode,
                       value_serializer=lambda v: repr(v).encode()) as p:
        futures = {k: p.send(topic_name, {"n": k}, key=f"key-{k}") for k in range(40)}
        p.flush(10)
        for k, f in futures.items():
            assert f.get(1).partition == (murmur2(f"key-{k}".encode()) & 0x7FFFFFFF) % 5
    recs = read_all(broker.bootstrap, topic_name, 5, 40)
    assert sorted(r.value for r in recs) == sorted(repr({"n": k}).encode() for k in range(40))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression_round_trip(broker, create_topic, topic_name, codec):
    create_topic(broker, topic_name, 1)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=20,
                       batch_size=1 << 20) as p:
        for i in range(500):
            p.send(topic_name, b"value-%05d" % i + b"z" * 50)
        p.flush(10)
    recs = read_all(broker.bootstrap, topic_name, 1, 500)
    assert [r.value[:11] for r in recs] == [b"value-%05d" % i for i in range(500)]


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks_modes(broker, create_topic, topic_name, acks):
    create_topic(broker, topic_name, 1)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, acks=acks) as p:
        futures = [p.send(topic_name, b"m%d" % i) for i in range(30)]
        p.flush(10)
        offsets = [f.get(1).offset for f in futures]
    assert offsets == ([-1] * 30 if acks == 0 else list(range(30)))
    assert len(read_all(broker.bootstrap, topic_name, 1, 30)) == 30


def test_linger_batches_records_into_few_requests(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 1)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=1000, batch_size=1 << 20) as p:
        futures = [p.send(topic_name, b"x" * 10) for _ in range(1000)]
        assert not any(f.is_done for f in futures)  # lingering: nothing sent yet
        p.flush(10)
        assert p.metrics()["producer-metrics"]["request-total"] == 1


def test_send_errors(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 1)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=1000) as p:
        with pytest.raises(Errors.IllegalArgumentError, match="partition"):
            p.send(topic_name, b"x", partition=5)
        with pytest.raises(TypeError, match="serializer"):
            p.send(topic_name, "not bytes")
        f = p.send(topic_name, b"y" * 5000)
        with pytest.raises(Errors.MessageTooLargeError):
            f.get(5)
        ok = [p.send(topic_name, b"z" * 400) for _ in range(5)]  # 2 fit per request
        p.flush(10)
        assert sorted(f.get().offset for f in ok) == list(range(5))
    with pytest.raises(Errors.IllegalStateError):
        p.send(topic_name, b"after close")


def test_callbacks(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 1)
    got = []
    with KafkaProducer(bootstrap_servers=broker.bootstrap) as p:
        p.send(topic_name, b"a").add_callback(got.append).add_errback(got.append)
        p.flush(10)
    assert len(got) == 1 and got[0].offset == 0


def test_produce_to_leaders_on_several_brokers(mock_cluster, create_topic, topic_name):
    create_topic(mock_cluster, topic_name, 6)
    with KafkaProducer(bootstrap_servers=mock_cluster.bootstrap, linger_ms=5) as p:
        futures = [p.send(topic_name, b"%d" % i, partition=i % 6) for i in range(600)]
        p.flush(20)
        assert sorted((f.get().partition, f.get().offset) for f in futures) == \
            sorted((p_, o) for p_ in range(6) for o in range(100))
    recs = read_all(mock_cluster.bootstrap, topic_name, 6, 600)
    assert sorted(int(r.value) for r in recs) == list(range(600))


def test_unreachable_bootstrap_times_out_clearly():
    with KafkaProducer(bootstrap_servers="127.0.0.1:1", max_block_ms=500) as p:
        start = time.monotonic()
        with pytest.raises(Errors.KafkaTimeoutError, match="metadata"):
            p.send("t", b"x")
        assert time.monotonic() - start < 5


# ---------------------------------------------------------------------- admin
def test_create_list_and_delete_topics(broker, topic_name):
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        assert admin.create_topics([NewTopic(topic_name, 3, 1)]) == {topic_name: None}
        # The change is visible at once to a new client.
        with KafkaConsumer(bootstrap_servers=broker.bootstrap) as c:
            assert c.partitions_for_topic(topic_name) == {0, 1, 2}
        assert topic_name in admin.list_topics()
        with pytest.raises(Errors.TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic_name, 3, 1)])
        assert admin.create_topics([NewTopic(topic_name, 3, 1)], raise_errors=False)[topic_name] is not None
        assert admin.delete_topics([topic_name]) == {topic_name: None}
        assert topic_name not in admin.list_topics()
        with pytest.raises(Errors.UnknownTopicOrPartitionError):
            admin.delete_topics([topic_name])


def test_list_offsets(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=50) as p:  # one batch of five
        for f in [p.send(topic_name, b"x", timestamp_ms=1_000_000 + 1000 * i) for i in range(5)]:
            f.get(5)
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        assert admin.list_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 0
        assert admin.list_offsets({tp: OffsetSpec.LATEST})[tp].offset == 5
        both = admin.list_offsets({tp: OffsetSpec.EARLIEST, TopicPartition(topic_name, 0): OffsetSpec.LATEST})
        assert len(both) == 1
        # Lookups by timestamp (the stand-ins get them wrong: Tansu answers offset 0, the mock -1).
        found = admin.list_offsets({tp: 1_002_500})[tp]
        assert (found.offset, found.timestamp) == (3, 1_003_000)
        assert admin.list_offsets({tp: 1_000_000})[tp].offset == 0
        newest = admin.list_offsets({tp: OffsetSpec.MAX_TIMESTAMP})[tp]
        assert (newest.offset, newest.timestamp) == (4, 1_004_000)
        assert admin.list_offsets({tp: 2_000_000})[tp].offset == -1     # nothing that late
    with KafkaConsumer(bootstrap_servers=broker.bootstrap) as c:
        times = c.offsets_for_times({tp: 1_001_000, TopicPartition(topic_name, 0): 1_001_000})
        assert (times[tp].offset, times[tp].timestamp) == (1, 1_001_000)
        assert c.offsets_for_times({tp: 2_000_000}) == {tp: None}


def test_committed_offsets_with_metadata_on_kafka(broker, create_topic, topic_name, group_id):
    """Apache Kafka keeps commit metadata (Tansu drops it; the mock test below keeps it too)."""
    create_topic(broker, topic_name, 2)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    with KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group_id) as c:
        c.assign([tp0, tp1])
        c.commit({tp0: OffsetAndMetadata(7, "meta", -1), tp1: 3})
        assert c.committed(tp0, metadata=True).metadata == "meta"
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        offsets = admin.list_consumer_group_offsets(group_id)
    assert (offsets[tp0].offset, offsets[tp0].metadata) == (7, "meta")
    assert offsets[tp1].offset == 3


def test_groups_described_listed_and_offsets_read(broker, create_topic, topic_name, group_id):
    create_topic(broker, topic_name, 2)
    with KafkaProducer(bootstrap_servers=broker.bootstrap) as p:
        for i in range(10):
            p.send(topic_name, b"x", partition=i % 2)
    consumer = KafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=group_id,
                             auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
    try:
        n = 0
        deadline = time.monotonic() + 30
        while n < 10 and time.monotonic() < deadline:
            n += sum(len(v) for v in consumer.poll(500).values())
        assert n == 10
        consumer.commit({TopicPartition(topic_name, 0): OffsetAndMetadata(4, "meta", -1)})
        with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
            assert (group_id, "consumer") in admin.list_consumer_groups()
            (desc,) = admin.describe_consumer_groups([group_id])
            assert desc.group == group_id and desc.protocol_type == "consumer" and len(desc.members) == 1
            assert desc.state == "Stable"
            member = desc.members[0]
            assert member.member_id
            assert set(member.member_assignment.partitions) == \
                {TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)}
            assert set(member.member_metadata.topics) == {topic_name}
            offsets = admin.list_consumer_group_offsets(group_id)
            assert offsets[TopicPartition(topic_name, 0)].offset == 4
            only = admin.list_consumer_group_offsets(group_id, partitions=[TopicPartition(topic_name, 0)])
            assert set(only) == {TopicPartition(topic_name, 0)}
    finally:
        consumer.close()


def test_committed_offsets_with_metadata_read_by_admin(mock_cluster, create_topic, topic_name, group_id):
    # Tansu drops commit metadata; the mock cluster keeps it. Manual assignment: no join needed.
    create_topic(mock_cluster, topic_name, 2)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    with KafkaConsumer(bootstrap_servers=mock_cluster.bootstrap, group_id=group_id) as c:
        c.assign([tp0, tp1])
        c.commit({tp0: OffsetAndMetadata(7, "meta", -1), tp1: 3})
    with KafkaAdminClient(bootstrap_servers=mock_cluster.bootstrap) as admin:
        # The mock answers "all partitions" lookups with a null array: ask for them by name.
        offsets = admin.list_consumer_group_offsets(group_id, partitions=[tp0, tp1])
    assert (offsets[tp0].offset, offsets[tp0].metadata) == (7, "meta")
    assert offsets[tp1].offset == 3


@pytest.mark.parametrize("in_flight", [1, 5])
def test_one_request_in_flight_keeps_a_partitions_order_across_a_leader_move(
        mock_cluster, create_topic, topic_name, in_flight):
    """max.in.flight.requests.per.connection=1 promises order (as Java): with a batch for p0
    still unanswered at its old leader, the next batch for p0 waits, though the producer
    already knows the new leader. With 5 in flight the later batch may overtake (documented)."""
    NOT_LEADER = 6
    create_topic(mock_cluster, topic_name, 2)
    old, new, other = mock_cluster.broker_ids[:3]
    mock_cluster.partition_set_leader(topic_name, 0, old)
    mock_cluster.partition_set_leader(topic_name, 1, other)
    with KafkaProducer(bootstrap_servers=mock_cluster.bootstrap,
                       max_in_flight_requests_per_connection=in_flight) as p:
        p.send(topic_name, b"warm-up", partition=1).get(10)     # metadata and a connection
        # The old leader answers p0's next Produce late, and then says it is not the leader.
        mock_cluster.broker_push_request_error_rtts(old, 0, [(NOT_LEADER, 1500)])
        first = p.send(topic_name, b"first", partition=0)
        p.poll(0)
        mock_cluster.partition_set_leader(topic_name, 0, new)
        # p1's refusal makes the producer refresh its metadata: it now sees p0 on `new`.
        mock_cluster.partition_push_request_errors(topic_name, 1, 0, [NOT_LEADER])
        p.send(topic_name, b"refresh", partition=1).get(10)
        second = p.send(topic_name, b"second", partition=0)
        p.flush(20)
        assert first.get().partition == second.get().partition == 0
    got = [r.value for r in read_all(mock_cluster.bootstrap, topic_name, 2, 4) if r.partition == 0]
    if in_flight == 1:
        assert got == [b"first", b"second"]
    else:
        assert sorted(got) == [b"first", b"second"]


def test_a_producer_dropped_without_close_delivers_its_records_at_once(broker, create_topic, topic_name):
    """kafka-python's examples send and drop the producer (its background thread delivers).
    Here the dropped producer's __del__ closes it, which delivers: at once, not whenever the
    cyclic GC runs (its pending futures must not hold it in a cycle)."""
    import gc
    create_topic(broker, topic_name, 1)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap)
    future = p.send(topic_name, b"dropped")
    gc.disable()
    try:
        del p
        assert future.is_done and future.get().offset == 0
    finally:
        gc.enable()
    assert [r.value for r in read_all(broker.bootstrap, topic_name, 1, 1)] == [b"dropped"]
