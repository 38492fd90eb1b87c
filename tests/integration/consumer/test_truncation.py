"""KIP-320 on real brokers: positions are validated with OffsetsForLeaderEpoch after a leader
change (librdkafka's mock cluster, whose request log shows the request), and a log truncated
by an unclean leader election on Apache Kafka is detected: LogTruncationError with
auto.offset.reset 'none', the position moved to the divergent offset with a policy, and a
committed offset past the new log end is caught when a group member restores it."""
from __future__ import annotations

import time

import pytest

from kclient import errors as Errors
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.structs import OffsetAndMetadata, TopicPartition
from kclient.testing._wire import wait_until

OFFSET_FOR_LEADER_EPOCH = 23


def produce(bootstrap: str, topic: str, values: list[bytes], **kw) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **kw) as p:
        for v in values:
            p.send(topic, v, partition=0)
        p.flush(30)


def read(consumer: KafkaConsumer, count: int, timeout_s: float = 60.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        for recs in consumer.poll(200).values():
            out.extend(recs)
    assert len(out) >= count, f"read {len(out)} of {count} records in {timeout_s:.0f} s"
    return out


def test_leader_change_on_the_mock_validates_positions_without_loss(mock_faults, create_topic, topic_name):
    create_topic(mock_faults, topic_name, 1, replication_factor=3)
    tp = TopicPartition(topic_name, 0)
    produce(mock_faults.bootstrap, topic_name, [b"a%d" % i for i in range(50)])
    brokers = mock_faults.broker_ids
    with KafkaConsumer(bootstrap_servers=mock_faults.bootstrap, auto_offset_reset="none",
                       metadata_max_age_ms=60000) as c:
        c.assign([tp])
        c.seek_to_beginning()
        first = read(c, 50)
        epoch_before = c._metadata.cluster.leader_epoch(tp)
        leader = c._metadata.cluster.leader_for(tp).node_id
        mock_faults.start_request_tracking()
        try:
            mock_faults.partition_set_leader(topic_name, 0, next(b for b in brokers if b != leader))
            produce(mock_faults.bootstrap, topic_name, [b"b%d" % i for i in range(50)])
            rest = read(c, 50)
            requests = mock_faults.get_requests()
        finally:
            mock_faults.stop_request_tracking()
        assert c._metadata.cluster.leader_epoch(tp) > epoch_before
    offsets = [r.offset for r in first + rest]
    assert offsets == list(range(100))                       # nothing lost, nothing repeated
    assert [r.value for r in rest] == [b"b%d" % i for i in range(50)]
    assert any(r.api_key == OFFSET_FOR_LEADER_EPOCH for r in requests), \
        "no OffsetsForLeaderEpoch after the leader epoch changed"


@pytest.fixture
def unclean_election(kafka3, create_topic, topic_name):
    """A partition on two of the three nodes (A leads, B follows) whose leader loses records:
    B is stopped, A takes ``extra`` more records alone, A is killed and B restarted, and the
    controller elects B though it is not in sync (unclean.leader.election.enable on the
    topic). Yields (tp, records both had, records only A had) once B leads; A rejoins after."""
    create_topic(kafka3, topic_name, 1, replication_factor=2,
                 configs={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
    tp = TopicPartition(topic_name, 0)
    part = kafka3.metadata([topic_name])["topics"][topic_name]["partitions"][0]
    a = part["leader_id"]
    b = next(n for n in part["replica_nodes"] if n != a)
    state = {"a": a, "b": b, "tp": tp, "stopped": set()}

    def lose_records_on_leader(consumers_before):
        """Run ``consumers_before()`` after A alone has the extra records, then elect B."""
        kafka3.stop_broker(b)
        state["stopped"].add(b)
        wait_until(lambda: kafka3.metadata([topic_name])["topics"][topic_name]["partitions"][0]["isr_nodes"] == [a],
                   30, "B to leave the ISR")
        produce(kafka3.bootstrap, topic_name, [b"only-on-a-%d" % i for i in range(10)], acks="all")
        consumers_before()
        kafka3.kill_broker(a)
        state["stopped"].add(a)
        kafka3.start_broker(b)
        state["stopped"].discard(b)
        wait_until(lambda: kafka3.metadata([topic_name])["topics"][topic_name]["partitions"][0]["leader_id"] == b,
                   60, "the unclean election of B")

    produce(kafka3.bootstrap, topic_name, [b"both-%d" % i for i in range(20)], acks="all")
    state["run"] = lose_records_on_leader
    try:
        yield state
    finally:
        for node in list(state["stopped"]):
            kafka3.start_broker(node)


def test_unclean_election_truncation_is_detected_on_kafka(kafka3, unclean_election, group_id):
    tp = unclean_election["tp"]
    strict = KafkaConsumer(bootstrap_servers=kafka3.bootstrap, auto_offset_reset="none",
                           reconnect_backoff_ms=50, reconnect_backoff_max_ms=500, metadata_max_age_ms=2000)
    lenient = KafkaConsumer(bootstrap_servers=kafka3.bootstrap, auto_offset_reset="earliest",
                            reconnect_backoff_ms=50, reconnect_backoff_max_ms=500, metadata_max_age_ms=2000)
    member = KafkaConsumer(bootstrap_servers=kafka3.bootstrap, group_id=group_id, auto_offset_reset="none",
                           enable_auto_commit=False)
    try:
        for c in (strict, lenient, member):
            c.assign([tp])
        strict.seek_to_beginning()
        lenient.seek_to_beginning()
        member.seek(tp, 0)

        def read_everything_on_a():
            for c in (strict, lenient, member):
                recs = read(c, 30)
                assert [r.offset for r in recs] == list(range(30))
            member.commit()                                   # offset 30, with the epoch of record 29
            assert member.committed(tp) == 30

        unclean_election["run"](read_everything_on_a)
        assert strict.position(tp) == 30 and lenient.position(tp) == 30

        # No reset policy: poll() raises, naming the partition, the position and the divergence.
        deadline = time.monotonic() + 60
        with pytest.raises(Errors.LogTruncationError) as info:
            while time.monotonic() < deadline:
                strict.poll(200)
        divergent = info.value.divergent_offsets[tp]
        assert divergent.offset == 20                          # B's log ends where A went on alone
        assert info.value.partitions == {tp: 30}
        assert str(tp.partition) in str(info.value) and "30" in str(info.value)
        strict.seek(tp, OffsetAndMetadata(divergent.offset, "", divergent.leader_epoch))

        # With a policy the position moves to the divergent offset by itself; what B gets next
        # is read from there.
        produce(kafka3.bootstrap, tp.topic, [b"on-b-%d" % i for i in range(5)], acks="all")
        for c in (strict, lenient):
            recs = read(c, 5)
            assert [(r.offset, r.value) for r in recs] == [(20 + i, b"on-b-%d" % i) for i in range(5)]

        # The committed offset 30 (epoch of A's records) is checked when a member restores it.
        member.close()
        with KafkaConsumer(bootstrap_servers=kafka3.bootstrap, group_id=group_id, auto_offset_reset="none",
                           enable_auto_commit=False) as again:
            again.assign([tp])
            deadline = time.monotonic() + 60
            with pytest.raises(Errors.LogTruncationError) as info:
                while time.monotonic() < deadline:
                    again.poll(200)
            assert info.value.divergent_offsets[tp].offset == 20
    finally:
        for c in (strict, lenient, member):
            c.close()


@pytest.mark.parametrize("reset", ["none", "earliest"])
def test_a_position_past_the_leaders_epoch_end_is_truncated_on_the_mock(mock_faults, create_topic, topic_name, reset):
    """A committed position (offset and epoch) past where the leader's log for that epoch
    ends, as after a truncation: the mock's own OffsetsForLeaderEpoch answer reveals it."""
    create_topic(mock_faults, topic_name, 1, replication_factor=3)
    tp = TopicPartition(topic_name, 0)
    produce(mock_faults.bootstrap, topic_name, [b"a%d" % i for i in range(40)])
    with KafkaConsumer(bootstrap_servers=mock_faults.bootstrap, auto_offset_reset=reset) as c:
        c.assign([tp])
        c.seek_to_beginning()
        recs = read(c, 40)
        epoch = recs[-1].leader_epoch
        c.seek(tp, OffsetAndMetadata(60, "", epoch))            # beyond the log of that epoch
        if reset == "none":
            deadline = time.monotonic() + 30
            with pytest.raises(Errors.LogTruncationError) as info:
                while time.monotonic() < deadline:
                    c.poll(200)
            assert info.value.divergent_offsets[tp].offset == 40
            assert info.value.partitions == {tp: 60}
        else:
            # The reset policy moves the position to where the epoch's log ends, by itself.
            deadline = time.monotonic() + 30
            while c._subscriptions.position(tp).offset != 40 and time.monotonic() < deadline:
                assert c.poll(100) == {}
            assert c.position(tp) == 40
            produce(mock_faults.bootstrap, topic_name, [b"b%d" % i for i in range(5)])
            more = read(c, 5)
            assert [(r.offset, r.value) for r in more] == [(40 + i, b"b%d" % i) for i in range(5)]
