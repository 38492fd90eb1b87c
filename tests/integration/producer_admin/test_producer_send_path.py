"""The producer's compiled send() path (kcore.accumulator) and its general path against a real
broker: what lands, the futures' metadata and callbacks, and the records it refuses."""
from __future__ import annotations

import threading
import time

import pytest

from kclient import errors as Errors
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer, murmur2
from kclient.structs import TopicPartition


def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 20.0) -> list:
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        out: list = []
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline:
            for recs in c.poll(500).values():
                out.extend(recs)
        return out


def test_keyed_records_with_headers_land_where_and_as_their_futures_say(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 3)
    n = 3000
    called: list = []
    with KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, batch_size=16384) as p:
        futures = []
        for i in range(n):
            key = b"user-%d" % (i % 97)
            headers = [("source", b"web"), ("n", b"%d" % i)] if i % 2 else None
            f = p.send(topic_name, b"value-%d" % i, key, headers, None, 1_700_000_000_000 + i)
            f.add_callback(lambda m, i=i: called.append((i, m)))
            futures.append(f)
        p.flush(20)
    metas = [f.get(0) for f in futures]
    assert sorted(i for i, _ in called) == list(range(n))               # each callback once
    assert all(m == metas[i] for i, m in called)
    for partition in range(3):                                      # in send order per partition
        order = [i for i, m in called if m.partition == partition]
        assert order == sorted(order)
    per_partition: dict[int, list[int]] = {}
    for i, m in enumerate(metas):
        key = b"user-%d" % (i % 97)
        assert m.partition == (murmur2(key) & 0x7FFFFFFF) % 3 and m.topic == topic_name
        assert m.timestamp == 1_700_000_000_000 + i
        assert m.serialized_key_size == len(key) and m.serialized_value_size == len(b"value-%d" % i)
        assert m.serialized_header_size == (len("source") + 3 + 1 + len(b"%d" % i) if i % 2 else -1)
        per_partition.setdefault(m.partition, []).append(m.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in per_partition.values())
    recs = read_all(broker.bootstrap, topic_name, 3, n)
    got = {(r.partition, r.offset): r for r in recs}
    for i, m in enumerate(metas):
        r = got[(m.partition, m.offset)]
        assert (r.key, r.value, r.timestamp) == (b"user-%d" % (i % 97), b"value-%d" % i, 1_700_000_000_000 + i)
        assert r.headers == ([("source", b"web"), ("n", b"%d" % i)] if i % 2 else [])


def test_tombstones_bytes_likes_and_refused_values(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 1)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=2) as p:
        sent = [p.send(topic_name, None, b"k"), p.send(topic_name, None),
                p.send(topic_name, bytearray(b"ba")), p.send(topic_name, memoryview(b"mv"), bytearray(b"k2")),
                p.send(topic_name, b"h", headers=(("tuple", b"ok"),))]
        for bad, what in ((dict(value=7), "value"), (dict(value="text"), "value"),
                          (dict(value=b"v", key=3.5), "key")):
            with pytest.raises(TypeError, match=f"the {what} must be bytes"):
                p.send(topic_name, **bad)
        with pytest.raises(TypeError, match="header keys must be str"):
            p.send(topic_name, b"v", headers=[(b"bytes", b"v")])
        with pytest.raises(TypeError, match="header values"):
            p.send(topic_name, b"v", headers=[("h", "str")])
        with pytest.raises(TypeError, match="topic"):
            p.send(b"topic", b"v")
        p.flush(10)
        assert [f.get(0).offset for f in sent] == [0, 1, 2, 3, 4]     # refused records took none
    recs = read_all(broker.bootstrap, topic_name, 1, 5)
    assert [(r.key, r.value) for r in recs] == [(b"k", None), (None, None), (None, b"ba"), (b"k2", b"mv"),
                                                (None, b"h")]
    assert recs[4].headers == [("tuple", b"ok")]


def test_a_small_buffer_memory_blocks_send_until_records_are_answered(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 2)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=1, batch_size=4096,
                       buffer_memory=20_000) as p:
        futures = [p.send(topic_name, b"x" * 200) for _ in range(2000)]
        p.flush(20)
        assert all(f.succeeded() for f in futures)
    assert len(read_all(broker.bootstrap, topic_name, 2, 2000)) == 2000


def test_get_from_another_thread_while_the_sender_lingers(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 1)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=50) as p:
        p.send(topic_name, b"warm-up").get(10)
        future = p.send(topic_name, b"waited for")
        result: list = []
        t = threading.Thread(target=lambda: result.append(future.get(10)))
        t.start()
        t.join(15)
        assert result and result[0].offset == 1
        assert future.wait(0) and future.value == result[0]


def test_a_subclass_that_overrides_send_keeps_it():
    calls = []

    class Recording(KafkaProducer):
        def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
            calls.append(topic)
            raise Errors.IllegalStateError("recorded")

    p = Recording(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(Errors.IllegalStateError, match="recorded"):
        p.send("t", b"v")
    assert calls == ["t"]
    p.close(timeout=0)
    q = KafkaProducer(bootstrap_servers="127.0.0.1:1")
    q.close(timeout=0)
    with pytest.raises(Errors.IllegalStateError, match="closed"):
        q.send("t", b"v")
