"""Fetching from the closest replica (KIP-392) on a 3-node Apache Kafka, one rack per node and
the rack-aware replica selector: a consumer in a follower's rack reads from that follower, and
goes back to the leader when the follower stops."""
from __future__ import annotations

import time

from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as p:
        for i in range(start, start + count):
            p.send(topic, b"%d" % i, partition=0)
        p.flush(30)


def read(c: KafkaConsumer, count: int, timeout_s: float = 60.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        for recs in c.poll(200).values():
            out.extend(recs)
    return out


def test_a_consumer_reads_from_the_follower_in_its_rack_then_from_the_leader(kafka3, create_topic, topic_name):
    create_topic(kafka3, topic_name, 1, replication_factor=3)
    tp = TopicPartition(topic_name, 0)
    part = kafka3.metadata([topic_name])["topics"][topic_name]["partitions"][0]
    leader = part["leader_id"]
    follower = next(n for n in part["replica_nodes"] if n != leader)
    produce(kafka3.bootstrap, topic_name, 0, 100)
    with KafkaConsumer(bootstrap_servers=kafka3.bootstrap, client_rack=f"rack-{follower}",
                       auto_offset_reset="earliest", reconnect_backoff_ms=50, reconnect_backoff_max_ms=500) as c:
        c.assign([tp])
        first = read(c, 100)
        assert [r.value for r in first] == [b"%d" % i for i in range(100)]
        assert c._fetcher.preferred_read_replica(tp) == follower
        # The follower, not the leader, answered fetches: its fetch session moved on.
        sessions = c._fetcher.fetch_sessions
        assert (follower, 0) in sessions and sessions[(follower, 0)].epoch >= 1
        produce(kafka3.bootstrap, topic_name, 100, 50)
        more = read(c, 50)
        assert [r.value for r in more] == [b"%d" % i for i in range(100, 150)]

        kafka3.stop_broker(follower)
        try:
            produce(kafka3.bootstrap, topic_name, 150, 50)
            rest = read(c, 50)
            assert [r.value for r in rest] == [b"%d" % i for i in range(150, 200)]
            assert c._fetcher.preferred_read_replica(tp) is None
        finally:
            kafka3.start_broker(follower)


def test_buffered_bytes_stay_bounded_with_several_fetches_in_flight(kafka, create_topic, topic_name):
    """Pipelining keeps the memory bound: buffered response frames stay under about twice
    fetch.max.bytes however many fetches a broker has in flight, while the application reads
    slowly (so the fetcher runs ahead as far as it may); the receive thread's arrays for their
    records (about 45 bytes per record, 1 KB records here) come on top."""
    create_topic(kafka, topic_name, 8)
    with KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=20, batch_size=16 * 1024) as p:
        for i in range(20_000):
            p.send(topic_name, b"x" * 1000, partition=i % 8)
        p.flush(60)
    fetch_max = 256 * 1024
    seen, held = [], []
    with KafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
                       fetch_max_bytes=fetch_max, max_partition_fetch_bytes=256 * 1024,
                       **{"fetch.max.in.flight.per.broker": 4}) as c:
        c.assign([TopicPartition(topic_name, p) for p in range(8)])
        got = 0
        deadline = time.monotonic() + 120
        while got < 20_000 and time.monotonic() < deadline:
            got += sum(len(r) for r in c.poll(100, max_records=100).values())
            seen.append(c._fetcher.buffer.buffered_response_bytes)
            held.append(c._fetcher.buffered_bytes)
            time.sleep(0.002)   # the application's own work on each batch: it reads slower than the network
    assert got == 20_000
    assert max(seen) > fetch_max // 2          # it did run ahead
    assert max(seen) <= 2 * fetch_max + 16 * 1024, f"buffered {max(seen):,} bytes"
    assert max(held) <= (2 * fetch_max + 16 * 1024) * 1.1, f"held {max(held):,} bytes"


def test_each_fetch_stream_to_a_broker_has_a_connection_of_its_own(kafka, create_topic, topic_name):
    """A broker answers one request per connection at a time, so a second fetch on the same
    connection would only queue: with 3 streams the consumer holds 2 connections to the broker
    more than with 1, and reads every record once."""
    import psutil
    create_topic(kafka, topic_name, 6)
    with KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=5) as p:
        for i in range(600):
            p.send(topic_name, b"%d" % i, partition=i % 6)
        p.flush(30)
    port = int(kafka.bootstrap.split(",")[0].rsplit(":", 1)[1])

    def connections() -> int:
        return sum(1 for conn in psutil.Process().net_connections(kind="tcp")
                   if conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED)

    def read_with(streams: int) -> int:
        """Connections to the broker while a consumer with this many streams has read all."""
        with KafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
                           **{"fetch.max.in.flight.per.broker": streams}) as c:
            c.assign([TopicPartition(topic_name, p) for p in range(6)])
            got = read(c, 600)
            assert sorted(int(r.value) for r in got) == list(range(600))
            return connections()

    assert read_with(3) - read_with(1) == 2
