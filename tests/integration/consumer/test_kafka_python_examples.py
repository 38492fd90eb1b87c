"""kafka-python's documented examples, run against Apache Kafka with only the import changed.

The code blocks below are copied from kafka-python's README (version 3.0.12, as installed)
and its 2.x usage guide; each runs through ``exec`` after ``from kafka import ...`` became a
kclient import. Nothing else in the code changes. The environment is adapted the way a
user's would be: the addresses in the examples ('localhost:9092', 'localhost:1234',
'my.server.com', and the default bootstrap server) point at the test broker, and the
defaults of a few settings suit a test (``consumer_timeout_ms`` so that the examples'
endless ``for msg in consumer`` loops end once the topic is drained, ``auto_offset_reset``
earliest because the records are written before the examples start, and short group
timeouts so that groups settle quickly). ``print`` is
captured.

Left out: the msgpack lines (msgpack is not installed) and the producer transaction block
(the small producer has no transactions).
"""
from __future__ import annotations

import dataclasses
import re
import time

import pytest

import kclient
import kclient.producer as producer_module
from kclient.config import CONSUMER_CONFIGS, define
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.structs import ConsumerRecord, TopicPartition

# ---------------------------------------------------------------------- the examples (verbatim)
README_SUBSCRIBE = """
from kafka import KafkaConsumer
consumer = KafkaConsumer('my_favorite_topic')
for msg in consumer:
    print (msg)
"""

README_GROUP = """
# join a consumer group for dynamic partition assignment and offset commits
from kafka import KafkaConsumer
consumer = KafkaConsumer('my_favorite_topic', group_id='my_favorite_group')
for msg in consumer:
    print (msg)
"""

README_ASSIGN = """
# manually assign the partition list for the consumer
from kafka import KafkaConsumer, TopicPartition
consumer = KafkaConsumer(bootstrap_servers='localhost:1234')
consumer.assign([TopicPartition('foobar', 2)])
msg = next(consumer)
"""

README_JSON = """
# Deserialize json-encoded values
from kafka import KafkaConsumer, JsonSerializer
consumer = KafkaConsumer(value_deserializer=JsonSerializer())
consumer.subscribe(['json-foo'])
for msg in consumer:
    assert isinstance(msg.value, dict)
"""

README_HEADERS = """
# Access record headers. The returned value is a list of
# (str, bytes) tuples, representing the header key and value.
for msg in consumer:
    print (msg.headers)
"""

README_READ_COMMITTED = """
# Read only committed messages from transactional topic
from kafka import KafkaConsumer, IsolationLevel
consumer = KafkaConsumer(isolation_level=IsolationLevel.READ_COMMITTED)
consumer.subscribe(['txn_topic'])
for msg in consumer:
    print(msg)
"""

README_METRICS = """
# Get consumer metrics
metrics = consumer.metrics()
"""

USAGE_CONSUMER = """
from kafka import KafkaConsumer
import json

# To consume latest messages and auto-commit offsets
consumer = KafkaConsumer('my-topic',
                         group_id='my-group',
                         bootstrap_servers=['localhost:9092'])
for message in consumer:
    # message value and key are raw bytes -- decode if necessary!
    # e.g., for unicode: `message.value.decode('utf-8')`
    print ("%s:%d:%d: key=%s value=%s" % (message.topic, message.partition,
                                          message.offset, message.key,
                                          message.value))

# consume earliest available messages, don't commit offsets
KafkaConsumer(auto_offset_reset='earliest', enable_auto_commit=False)

# consume json messages
KafkaConsumer(value_deserializer=lambda m: json.loads(m.decode('ascii')))

# StopIteration if no message after 1sec
KafkaConsumer(consumer_timeout_ms=1000)

# Subscribe to a regex topic pattern
consumer = KafkaConsumer()
consumer.subscribe(pattern='^awesome.*')

# Use multiple consumers in parallel w/ 0.9 kafka brokers
# typically you would run each on a different server / process / CPU
consumer1 = KafkaConsumer('my-topic',
                          group_id='my-group',
                          bootstrap_servers='my.server.com')
consumer2 = KafkaConsumer('my-topic',
                          group_id='my-group',
                          bootstrap_servers='my.server.com')
"""

# kafka-python's API docs describe assign()/seek() and commit(); these two blocks use them
# the way those docs do (they are not verbatim README blocks).
ASSIGN_AND_SEEK = """
from kafka import KafkaConsumer, TopicPartition
consumer = KafkaConsumer(bootstrap_servers='localhost:9092')
partition = TopicPartition('my-seek-topic', 0)
consumer.assign([partition])
consumer.seek(partition, 5)
msg = next(consumer)
print(consumer.position(partition))
"""

MANUAL_COMMIT = """
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
consumer = KafkaConsumer('my-commit-topic', group_id='my-commit-group',
                         enable_auto_commit=False, auto_offset_reset='earliest')
batch = []
for msg in consumer:
    batch.append(msg)
    if len(batch) >= 10:
        print(len(batch))          # "process" the batch
        consumer.commit()          # then commit what was consumed
        batch = []
consumer.close()
"""

README_PRODUCER = [
    """
from kafka import KafkaProducer
producer = KafkaProducer(bootstrap_servers='localhost:1234')
for _ in range(100):
    # Fire-and-forget: send() is async and returns before delivery
    producer.send('foobar', b'some_message_bytes')
""",
    """
# To check the status of an async message delivery, use .get()
future = producer.send('foobar', b'another_message')
# future.get() will block until it can return the result or raise on error
result = future.get(timeout=60)
""",
    """
# Block until all pending messages are at least put on the network
# NOTE: This does not guarantee delivery or success! It is really
# only useful if you configure internal batching using linger_ms
producer.flush()
""",
    """
# Use a key for hashed-partitioning
producer.send('foobar', key=b'foo', value=b'bar')
""",
    """
# Serialize json messages
from kafka import KafkaProducer, JsonSerializer
producer = KafkaProducer(value_serializer=JsonSerializer())
producer.send('fizzbuzz', {'foo': 'bar'})
""",
    """
# Serialize string keys
from kafka import KafkaProducer, DefaultSerializer
producer = KafkaProducer(key_serializer=DefaultSerializer())
producer.send('flipflap', key='ping', value=b'1234')
""",
    """
# Compress messages
producer = KafkaProducer(compression_type='gzip')
for i in range(1000):
    producer.send('foobar', b'msg %d' % i)
""",
]

# ---------------------------------------------------------------------- running them
_HOME = {"KafkaConsumer": "kclient.consumer.kafka_consumer", "KafkaProducer": "kclient.producer",
         "TopicPartition": "kclient.structs", "JsonSerializer": "kclient.consumer.deserializers",
         "DefaultSerializer": "kclient.consumer.deserializers", "IsolationLevel": "kclient.consumer.kafka_consumer"}


def kclient_imports(code: str) -> str:
    """The one change: kafka's imports become kclient's. ``from kclient import X`` when the
    package exports X, else from the kclient module that defines it."""
    def replace(m: re.Match) -> str:
        names = [n.strip() for n in m.group(2).split(",")]
        if m.group(1) == ".errors":
            return f"from kclient.errors import {', '.join(names)}"
        if all(hasattr(kclient, n) for n in names):
            return f"from kclient import {', '.join(names)}"
        return "; ".join(f"from {_HOME[n]} import {n}" for n in names)
    return re.sub(r"^from kafka(\.errors)? import (.+)$", replace, code, flags=re.M)


def run(code: str, namespace: dict | None = None, bootstrap: str | None = None) -> dict:
    ns = namespace if namespace is not None else {"printed": []}
    ns["print"] = lambda *args: ns["printed"].append(args[0] if len(args) == 1 else args)
    if bootstrap is not None:
        for address in ("localhost:9092", "localhost:1234", "my.server.com"):
            code = code.replace(address, bootstrap)
    exec(compile(kclient_imports(code), "<kafka-python example>", "exec"), ns)
    return ns


@pytest.fixture
def kp_env(broker):
    """Point the default bootstrap server at the test broker and set test-friendly defaults."""
    saved = {name: CONSUMER_CONFIGS[name] for name in
             ("bootstrap.servers", "consumer.timeout.ms", "auto.offset.reset", "session.timeout.ms",
              "heartbeat.interval.ms")}
    saved_producer = list(producer_module.PRODUCER_CONFIGS)

    def set_defaults(**defaults):
        for name, value in defaults.items():
            define(dataclasses.replace(saved[name], default=value))

    set_defaults(**{"bootstrap.servers": [broker.bootstrap], "consumer.timeout.ms": 1500,
                    "auto.offset.reset": "earliest", "session.timeout.ms": 4000,
                    "heartbeat.interval.ms": 500})
    producer_module.PRODUCER_CONFIGS[:] = [
        dataclasses.replace(d, default=[broker.bootstrap]) if d.name == "bootstrap.servers" else d
        for d in saved_producer]
    try:
        yield set_defaults
    finally:
        for d in saved.values():
            define(d)
        producer_module.PRODUCER_CONFIGS[:] = saved_producer


def produce(bootstrap: str, topic: str, values, partition=None, **kw) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, **kw) as p:
        for v in values:
            p.send(topic, v, partition=partition)
        p.flush(10)


def close_all(ns: dict) -> None:
    for value in ns.values():
        if isinstance(value, KafkaConsumer):
            value.close()


def test_imports_are_rewritten_and_nothing_else():
    assert kclient_imports("from kafka import KafkaConsumer\nx = 'from kafka import'") .endswith(
        "\nx = 'from kafka import'")
    assert "kclient" in kclient_imports("from kafka.errors import KafkaError")


def test_readme_subscribe_and_iterate(kp_env, broker, create_topic):
    create_topic(broker, "my_favorite_topic", 2)
    produce(broker.bootstrap, "my_favorite_topic", [b"hello %d" % i for i in range(20)])
    ns = run(README_SUBSCRIBE)
    try:
        assert all(isinstance(m, ConsumerRecord) for m in ns["printed"])
        assert sorted(m.value for m in ns["printed"]) == sorted(b"hello %d" % i for i in range(20))
    finally:
        close_all(ns)


def test_readme_consumer_group(kp_env, broker, create_topic):
    kp_env(**{"consumer.timeout.ms": 5000})  # a first join can take a few seconds on a loaded machine
    create_topic(broker, "my_favorite_topic", 2)
    produce(broker.bootstrap, "my_favorite_topic", [b"g%d" % i for i in range(20)])
    ns = run(README_GROUP)
    try:
        assert sorted(m.value for m in ns["printed"]) == sorted(b"g%d" % i for i in range(20))
        assert ns["consumer"].assignment() == {TopicPartition("my_favorite_topic", 0),
                                               TopicPartition("my_favorite_topic", 1)}
    finally:
        close_all(ns)


def test_readme_manual_assign(kp_env, broker, create_topic):
    create_topic(broker, "foobar", 3)
    produce(broker.bootstrap, "foobar", [b"on partition 2"], partition=2)
    ns = run(README_ASSIGN, bootstrap=broker.bootstrap)
    try:
        assert (ns["msg"].topic, ns["msg"].partition, ns["msg"].value) == ("foobar", 2, b"on partition 2")
    finally:
        close_all(ns)


def test_readme_json_deserializer_headers_and_metrics(kp_env, broker, create_topic):
    create_topic(broker, "json-foo", 1)
    with KafkaProducer(bootstrap_servers=broker.bootstrap) as p:
        for i in range(5):
            p.send("json-foo", b'{"n": %d}' % i, headers=[("source", b"test")])
    ns = run(README_JSON)
    try:
        assert ns["msg"].value == {"n": 4}
        produce(broker.bootstrap, "json-foo", [b'{"n": 5}'])
        run(README_HEADERS, ns)
        run(README_METRICS, ns)
        assert ns["printed"] == [[]]  # the record produced without headers
        assert ns["metrics"]["consumer-fetch-manager-metrics"]["records-consumed-total"] == 6
    finally:
        close_all(ns)


def test_readme_read_committed(kp_env, broker, create_topic):
    create_topic(broker, "txn_topic", 1)
    produce(broker.bootstrap, "txn_topic", [b"committed"])
    ns = run(README_READ_COMMITTED)
    try:
        assert [m.value for m in ns["printed"]] == [b"committed"]
        assert ns["consumer"].config["isolation.level"] == "read_committed"
    finally:
        close_all(ns)


def test_usage_guide_consumers(kp_env, broker, create_topic):
    kp_env(**{"consumer.timeout.ms": 5000})
    create_topic(broker, "my-topic", 2)
    for name in ("awesome-one", "awesome-two", "not-awesome"):
        create_topic(broker, name, 1)
        produce(broker.bootstrap, name, [name.encode()])
    with KafkaProducer(bootstrap_servers=broker.bootstrap) as p:
        for i in range(10):
            p.send("my-topic", b"v%d" % i, key=b"k%d" % i)
    ns = run(USAGE_CONSUMER, bootstrap=broker.bootstrap)
    try:
        lines = ns["printed"]
        assert len(lines) == 10
        assert all(re.fullmatch(r"my-topic:[01]:\d+: key=b'k\d' value=b'v\d'", line) for line in lines)
        # The pattern subscription finds the two matching topics (a whole-name match).
        pattern_consumer = ns["consumer"]
        seen = set()
        deadline = time.monotonic() + 20
        while len(seen) < 2 and time.monotonic() < deadline:
            for recs in pattern_consumer.poll(200).values():
                seen.update(r.value for r in recs)
        assert seen == {b"awesome-one", b"awesome-two"}
    finally:
        close_all(ns)


def test_assign_and_seek(kp_env, broker, create_topic):
    create_topic(broker, "my-seek-topic", 1)
    produce(broker.bootstrap, "my-seek-topic", [b"m%d" % i for i in range(10)])
    ns = run(ASSIGN_AND_SEEK, bootstrap=broker.bootstrap)
    try:
        assert (ns["msg"].offset, ns["msg"].value) == (5, b"m5")
        assert ns["printed"] == [6]
    finally:
        close_all(ns)


def test_manual_commit(kp_env, broker, create_topic):
    kp_env(**{"consumer.timeout.ms": 5000})
    create_topic(broker, "my-commit-topic", 1)
    produce(broker.bootstrap, "my-commit-topic", [b"c%d" % i for i in range(25)])
    ns = run(MANUAL_COMMIT)
    assert ns["printed"] == [10, 10]
    with KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="my-commit-group") as c:
        # 20 records were committed; the last 5 were consumed but not committed.
        assert c.committed(TopicPartition("my-commit-topic", 0)) == 20


def test_readme_producer_examples(kp_env, broker, create_topic):
    for name in ("foobar", "fizzbuzz", "flipflap"):
        create_topic(broker, name, 1)
    ns = {"printed": []}
    for block in README_PRODUCER:
        run(block, ns, bootstrap=broker.bootstrap)
    assert ns["result"].topic == "foobar" and ns["result"].offset == 100
    ns["producer"].close()

    def read(topic, n):
        with KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(topic, 0)])
            out = []
            deadline = time.monotonic() + 20
            while len(out) < n and time.monotonic() < deadline:
                for recs in c.poll(200).values():
                    out.extend(recs)
            return out

    foobar = read("foobar", 1102)
    assert len(foobar) == 1102
    assert [r.value for r in foobar[:102]] == [b"some_message_bytes"] * 100 + [b"another_message", b"bar"]
    assert foobar[101].key == b"foo" and foobar[-1].value == b"msg 999"
    assert [r.value for r in read("fizzbuzz", 1)] == [b'{"foo": "bar"}']
    assert [(r.key, r.value) for r in read("flipflap", 1)] == [(b"ping", b"1234")]


def test_every_kafka_python_keyword_is_accepted(broker):
    kafka = pytest.importorskip("kafka")
    consumer_cfg = dict(kafka.KafkaConsumer.DEFAULT_CONFIG, bootstrap_servers=broker.bootstrap)
    with KafkaConsumer(**consumer_cfg) as c:
        assert c.config["fetch.max.wait.ms"] == consumer_cfg["fetch_max_wait_ms"]
        assert c.config["receive.buffer.bytes"] == -1  # kafka-python's None: the OS default
    producer_cfg = dict(kafka.KafkaProducer.DEFAULT_CONFIG, bootstrap_servers=broker.bootstrap)
    producer_cfg["enable_idempotence"] = False  # kafka-python 3 defaults to True; not supported here
    with KafkaProducer(**producer_cfg) as p:
        assert p.config["retries"] == 2**31 - 1  # kafka-python's float('inf')
    from kclient.admin import KafkaAdminClient
    with KafkaAdminClient(**dict(kafka.KafkaAdminClient.DEFAULT_CONFIG, bootstrap_servers=broker.bootstrap)):
        pass


def test_kafka_python_partitioner_objects_are_used(broker, create_topic, topic_name):
    kafka = pytest.importorskip("kafka")
    create_topic(broker, topic_name, 4)
    with KafkaProducer(bootstrap_servers=broker.bootstrap, partitioner=kafka.partitioner.DefaultPartitioner()) as p:
        from kclient.producer import murmur2
        for key in (b"a", b"b", b"c"):
            assert p.send(topic_name, b"v", key=key).get(10).partition == (murmur2(key) & 0x7FFFFFFF) % 4
