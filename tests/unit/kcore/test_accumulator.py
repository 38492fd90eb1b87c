"""kcore.accumulator, the producer's compiled send() path, without a broker: batches byte for
byte as kcore.builder encodes the same records, murmur2 against Kafka's vectors and a
plain-Python reference, record futures and their listeners, and what the fast path hands to
the producer's general path."""
from __future__ import annotations

import logging
import random
import threading
import weakref

import pytest

from kcore.accumulator import ProducerBatch, RecordAccumulator, RecordFuture, murmur2
from kcore.builder import RecordBatchBuilder
from kcore.records import decode_records

from kclient import errors as Errors
from kclient.producer import RecordMetadata
from kclient.structs import TopicPartition


def murmur2_reference(data: bytes) -> int:
    """Kafka's murmur2 (Utils.murmur2), written out in Python."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


# ---------------------------------------------------------------------- murmur2
def test_murmur2_matches_kafka_vectors_and_the_reference():
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    for data, expected in cases.items():
        assert murmur2(data) == expected == murmur2_reference(data)
    rng = random.Random(5)
    for n in list(range(40)) + [255, 256, 1000, 4097]:
        data = bytes(rng.getrandbits(8) for _ in range(n))
        assert murmur2(data) == murmur2_reference(data)
        assert murmur2(bytearray(data)) == murmur2(memoryview(data)) == murmur2(data)


def test_murmur2_refuses_str():
    with pytest.raises(TypeError):
        murmur2("key")  # type: ignore[arg-type]


# ---------------------------------------------------------------------- a fake producer
class FakeMetadata:
    def __init__(self):
        self.cluster = object()


class FakeProducer:
    """The accumulator's owner: records what reaches the general path and the I/O step."""

    def __init__(self):
        self.slow: list[tuple] = []
        self.io: list[int] = []

    def _send_slow(self, *args):
        self.slow.append(args)
        return "general path"

    def _after_send(self, now):
        self.io.append(now)


class FakeClock:
    def __init__(self):
        self.now = 1000

    def now_ms(self):
        return self.now

    def wall_ms(self):
        return 1_700_000_000_000 + self.now


_OWNERS: list[FakeProducer] = []     # the accumulator holds its owner weakly


def make_acc(*, partitions=4, batch_size=1 << 20, max_request_size=1 << 20, buffer_memory=1 << 30,
             linger_ms=5, fast=True, ignore_keys=False, clock=None, key_serializer=None,
             value_serializer=None):
    owner = FakeProducer()
    _OWNERS.append(owner)
    metadata = FakeMetadata()
    acc = RecordAccumulator(
        owner=weakref.ref(owner), lock=threading.RLock(), cluster=metadata.cluster, clock=clock or FakeClock(),
        metadata_type=RecordMetadata, too_large=Errors.MessageTooLargeError,
        rng=random.Random(1), batch_size=batch_size, max_request_size=max_request_size,
        buffer_memory=buffer_memory, linger_ms=linger_ms, codec=0, level=None, fast=fast,
        ignore_keys=ignore_keys, key_serializer=key_serializer, value_serializer=value_serializer)
    ids = list(range(partitions))
    acc.set_topic("t", metadata.cluster, ids, ids, {i: TopicPartition("t", i) for i in ids})
    return acc, owner, metadata


def builder_bytes(records) -> bytes:
    b = RecordBatchBuilder()
    for ts, key, value, headers in records:
        b.append(ts, key, value, headers)
    return b.build()


def all_batches(acc) -> dict:
    """Every batch of the accumulator per partition, queued ones first, closed."""
    out: dict[int, list] = {}
    for tp, q in acc.queued.items():
        out.setdefault(tp.partition, []).extend(q)
    for tp in list(acc.open):
        out.setdefault(tp.partition, []).append(acc.take_open(tp))
    return out


# ---------------------------------------------------------------------- batches
def test_batches_are_byte_identical_to_the_builders():
    acc, owner, _ = make_acc(batch_size=2000)
    rng = random.Random(3)
    sent: dict[int, list] = {}
    for i in range(500):
        key = None if i % 3 == 0 else b"k%d" % rng.randrange(50)
        value = None if i % 7 == 0 else bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 60)))
        headers = [("h", b"x"), ("ü", None)] if i % 5 == 0 else ([] if i % 5 == 1 else None)
        ts = 1_600_000_000_000 + rng.randrange(-1000, 1000)
        partition = i % 4 if i % 11 == 0 else None
        fut = acc.send("t", value, key, headers, partition, ts)
        assert isinstance(fut, RecordFuture)
        sent.setdefault(fut.batch.tp.partition, []).append((fut.batch, ts, key, value, headers or None))
    assert owner.slow == []
    batches = all_batches(acc)
    for partition, records in sent.items():
        assert len(batches[partition]) > 1                     # closed by size along the way
        for batch in batches[partition]:
            mine = [(ts, k, v, h) for b, ts, k, v, h in records if b is batch]
            assert batch.payload == builder_bytes(mine)
            assert len(batch) == len(mine)
            assert len(decode_records(batch.payload).records) == len(mine)


def test_keyed_records_go_to_murmur2_partitions_and_keyless_ones_stick():
    acc, _, _ = make_acc(partitions=7, batch_size=300)
    for i in range(200):
        key = b"user-%d" % i
        assert acc.send("t", b"v", key).batch.tp.partition == (murmur2(key) & 0x7FFFFFFF) % 7
    acc2, _, _ = make_acc(partitions=7, batch_size=300)
    seen = []
    for _ in range(60):
        fut = acc2.send("t", b"x" * 20)
        seen.append(fut.batch.tp.partition)
    # A keyless record joins the current sticky partition's batch until that batch closes.
    runs = [p for n, p in enumerate(seen) if n == 0 or seen[n - 1] != p]
    assert len(runs) > 3 and all(a != b for a, b in zip(runs, runs[1:]))
    ignoring, _, _ = make_acc(partitions=7, ignore_keys=True)
    assert len({ignoring.send("t", b"v", b"key-%d" % i).batch.tp.partition for i in range(50)}) == 1


def test_a_record_that_does_not_fit_opens_the_next_batch_and_one_too_large_alone_fails():
    acc, _, _ = make_acc(partitions=1, max_request_size=1000)
    first = [acc.send("t", b"z" * 400) for _ in range(2)]
    third = acc.send("t", b"z" * 400)
    assert first[0].batch is first[1].batch and third.batch is not first[0].batch
    assert first[0].batch.closed and first[0].batch.size_in_bytes <= 1000
    ts = FakeClock().wall_ms()
    assert first[0].batch.payload == builder_bytes([(ts, None, b"z" * 400, None)] * 2)
    big = acc.send("t", b"y" * 5000)
    assert big.is_done and big.failed() and isinstance(big.exception, Errors.MessageTooLargeError)
    assert "max.request.size" in str(big.exception)
    with pytest.raises(Errors.MessageTooLargeError):
        raise big.exception
    # It was to open the next batch: the third record's batch is closed and queued, unchanged.
    assert acc.open == {} and third.batch.closed and len(third.batch) == 1
    assert list(acc.queued[TopicPartition("t", 0)]) == [first[0].batch, third.batch]
    assert acc.buffered_bytes == first[0].batch.record_bytes + third.batch.record_bytes
    # A too large record as the first of a batch leaves no empty batch behind.
    acc2, _, _ = make_acc(partitions=1, max_request_size=1000)
    assert acc2.send("t", b"y" * 5000).failed() and acc2.open == {} and acc2.buffered_bytes == 0


def test_buffered_bytes_and_the_io_step():
    clock = FakeClock()
    acc, owner, _ = make_acc(partitions=1, clock=clock)
    acc.next_io_ms = clock.now + 1
    f = acc.send("t", b"abc")
    assert acc.buffered_bytes == f.batch.record_bytes > 0
    assert owner.io == []                       # not due yet
    clock.now += 1
    acc.send("t", b"abc")
    assert owner.io == [clock.now]
    acc0, owner0, _ = make_acc(partitions=1, linger_ms=0, clock=clock)
    acc0.next_io_ms = clock.now + 100
    acc0.send("t", b"abc")
    assert owner0.io == [clock.now]             # linger.ms=0: every send


# ---------------------------------------------------------------------- futures
def test_futures_read_their_metadata_from_the_batch_answer():
    acc, _, _ = make_acc(partitions=1)
    futs = [acc.send("t", b"v%d" % i, b"k" if i % 2 else None, [("h", b"xy")] if i == 2 else None,
                     None, 1_000 + i) for i in range(5)]
    assert not any(f.is_done for f in futs)
    with pytest.raises(Errors.IllegalStateError, match="not completed"):
        futs[0].value
    with pytest.raises(Errors.IllegalStateError, match="not complete"):
        futs[0].exception
    batch = acc.take_open(TopicPartition("t", 0))
    assert batch is futs[0].batch and batch.payload is not None
    batch.succeed(40, -1, 7)
    assert batch.payload is None                # answered: the futures keep only the sizes
    metas = [f.value for f in futs]
    assert [m.offset for m in metas] == [40, 41, 42, 43, 44]
    assert [m.timestamp for m in metas] == [1000, 1001, 1002, 1003, 1004]
    assert metas[2] == RecordMetadata("t", 0, TopicPartition("t", 0), 42, 1002, 7, None, -1, 2, 3)
    assert metas[1].serialized_key_size == 1 and metas[0].serialized_header_size == -1
    assert all(f.succeeded() and not f.failed() for f in futs)
    with pytest.raises(Errors.IllegalStateError, match="not failed"):
        futs[0].exception
    batch.fail(Errors.KafkaError("late"))       # a batch completes once
    assert futs[0].succeeded()


def test_log_append_time_and_acks_zero():
    acc, _, _ = make_acc(partitions=1)
    a = acc.send("t", b"a", timestamp_ms=5)
    acc.take_open(TopicPartition("t", 0)).succeed(-1, 99, -1)
    assert (a.value.offset, a.value.timestamp) == (-1, 99)
    b = acc.send("t", b"b", timestamp_ms=5)
    acc.take_open(TopicPartition("t", 0)).succeed(3, 0, None)   # 0: no append time (the mock's)
    assert (b.value.offset, b.value.timestamp) == (3, 5)


def test_listeners_run_once_in_record_order_and_errors_are_logged(caplog):
    acc, _, _ = make_acc(partitions=1)
    got = []
    futs = [acc.send("t", b"%d" % i) for i in range(6)]
    futs[4].add_callback(lambda tag, m: got.append((tag, m.offset)), "cb")
    futs[1].add_callback(lambda m: got.append(("first", m.offset))).add_errback(got.append)
    futs[1].add_both(lambda m: got.append(("both", m.offset)))
    futs[2].add_callback(lambda m: 1 / 0)

    class Listener:
        def on_success(self, m):
            got.append(("listener", m.offset))

        def on_failure(self, exc):
            got.append(("listener failed", exc))
    futs[3].add_listener(Listener())
    with caplog.at_level(logging.ERROR, logger="kcore.accumulator"):
        acc.take_open(TopicPartition("t", 0)).succeed(10, -1, -1)
    assert got == [("first", 11), ("both", 11), ("listener", 13), ("cb", 14)]
    assert "a listener of" in caplog.text and "ZeroDivisionError" in caplog.text
    futs[5].add_callback(lambda m: got.append(("late", m.offset)))     # done: runs at once
    assert got[-1] == ("late", 15)


def test_errbacks_and_failures():
    acc, _, _ = make_acc(partitions=1)
    got = []
    futs = [acc.send("t", b"x") for _ in range(3)]
    futs[0].add_errback(got.append).add_callback(lambda m: got.append("no"))
    futs[2].add_both(got.append)
    exc = Errors.NotLeaderForPartitionError("moved")
    acc.take_open(TopicPartition("t", 0)).fail(exc)
    assert got == [exc, exc]
    assert all(f.failed() and f.exception is exc for f in futs) and futs[0].retriable()
    with pytest.raises(Errors.IllegalStateError, match="failed"):
        futs[1].value
    assert "exception=" in repr(futs[1])


def test_fail_all_fails_open_and_queued_batches():
    acc, _, _ = make_acc(partitions=2, batch_size=100)
    futs = [acc.send("t", b"x" * 30, partition=i % 2) for i in range(21)]
    assert acc.queued and acc.open
    acc.fail_all(Errors.KafkaTimeoutError("closed"))
    assert all(f.failed() for f in futs) and acc.open == {} and acc.buffered_bytes == 0


# ---------------------------------------------------------------------- the general path
@pytest.mark.parametrize("args", [
    ("t", "str value"), ("t", b"v", "str key"), ("t", bytearray(b"v")), ("t", memoryview(b"v")),
    ("t", b"v", None, ("tuple", b"headers")), ("t", b"v", None, [("h", "str")]),
    ("t", b"v", None, [(b"bytes key", b"v")]), ("t", b"v", None, [("h", b"v", b"3")]),
    ("t", b"v", None, None, True), ("t", b"v", None, None, 99), ("t", b"v", None, None, "0"),
    ("t", b"v", None, None, None, 1.5), ("unknown", b"v"), (5, b"v"), ("", b"v"), ("t", 7),
])
def test_what_the_fast_path_does_not_take_goes_to_the_general_path_untouched(args):
    acc, owner, _ = make_acc()
    assert acc.send(*args) == "general path"
    full = tuple(args) + (None,) * (6 - len(args))
    assert owner.slow == [full] and acc.open == {} and acc.records_sent == 0


def test_not_fast_and_stale_metadata_go_to_the_general_path():
    acc, owner, _ = make_acc(fast=False)
    assert acc.send("t", b"v") == "general path"
    acc2, owner2, _ = make_acc()
    acc2.set_cluster(object())                   # a new snapshot: the topic's state is stale
    assert acc2.send("t", b"v") == "general path" and acc2.topic_state("t") is None


def test_a_topic_without_partitions_goes_to_the_general_path():
    acc, owner, _ = make_acc()
    acc.set_topic("empty", acc.cluster, [], [], {})
    assert acc.send("empty", b"v", b"k") == "general path"


def test_hostile_records():
    acc, owner, _ = make_acc(partitions=1)
    f = acc.send("t", None, None, None, None, -5)       # tombstone without key, negative timestamp
    g = acc.send("t", b"", b"", [("k" * 1000, b"v" * 100_000)], None, -(2 ** 62))
    assert owner.slow == []
    payload = acc.take_open(TopicPartition("t", 0)).payload
    assert payload == builder_bytes([(-5, None, None, None),
                                     (-(2 ** 62), b"", b"", [("k" * 1000, b"v" * 100_000)])])
    recs = decode_records(payload).records
    assert (recs[0].key, recs[0].value, recs[0].timestamp) == (None, None, -5)
    assert recs[1].headers == [("k" * 1000, b"v" * 100_000)]
    f.batch.succeed(0, -1, -1)
    assert g.value.serialized_header_size == 101_000 and f.value.serialized_value_size == -1
    with pytest.raises(OverflowError):
        acc.send("t", b"v", timestamp_ms=2 ** 70)
    assert acc.open == {}                               # nothing half-appended


def test_a_closed_accumulator_refuses():
    acc, _, _ = make_acc()
    acc.closed = True
    with pytest.raises(Errors.IllegalStateError, match="closed"):
        acc.send("t", b"v")
    assert acc.open == {}


def test_a_failing_append_leaves_no_empty_batch():
    acc, _, _ = make_acc(partitions=1)
    with pytest.raises(TypeError):
        acc.append(TopicPartition("t", 0), 1, None, "str", None, -1, 0)
    assert acc.open == {}


def test_record_futures_survive_their_accumulator():
    acc, _, _ = make_acc(partitions=1)
    fut = acc.send("t", b"v")
    batch = acc.take_open(TopicPartition("t", 0))
    del acc
    batch.succeed(1, -1, -1)
    assert fut.value.offset == 1


def test_producer_batch_on_its_own():
    batch = ProducerBatch(TopicPartition("t", 3), 0, RecordMetadata)
    assert batch.append(10, b"k", b"v", [("a", b"b")], 2) > 0
    assert len(batch) == 1 and not batch.is_done
    batch.close()
    assert batch.closed and batch.payload == builder_bytes([(10, b"k", b"v", [("a", b"b")])])
    assert batch.size_in_bytes == len(batch.payload)
    with pytest.raises(Errors.IllegalStateError):
        batch.append(11, None, b"v")
    batch.succeed(5, -1, -1)
    assert batch.metadata(0).partition == 3 and batch.metadata(0).offset == 5
    with pytest.raises(Errors.IllegalStateError):
        batch.metadata(1)


def test_the_builders_in_place_header_path_writes_what_its_general_path_writes():
    rng = random.Random(9)
    for _ in range(200):
        headers = [(rng.choice(["k", "ключ", "", "h" * 300]),
                    rng.choice([None, b"", b"v", bytes(rng.getrandbits(8) for _ in range(200))]))
                   for _ in range(rng.randrange(0, 5))]
        in_place, general = RecordBatchBuilder(), RecordBatchBuilder()
        in_place.append(7, b"k", b"v", headers)
        general.append(7, b"k", b"v", tuple(headers))              # not a list: the general path
        assert in_place.build() == general.build()
    with pytest.raises(TypeError, match="header values"):
        RecordBatchBuilder().append(0, None, b"v", [("h", "str")])
    with pytest.raises(UnicodeEncodeError):
        RecordBatchBuilder().append(0, None, b"v", [("\ud800", b"v")])


def test_serializers_run_once_per_record_in_the_fast_path():
    calls = []

    def ser(topic, headers, obj):
        calls.append((topic, headers, obj))
        return None if obj is None else (bytearray(obj.encode()) if obj == "ba" else obj.encode())
    acc, owner, _ = make_acc(partitions=3, key_serializer=ser, value_serializer=ser)
    hdrs = [("h", b"v")]
    f = acc.send("t", "value", "key", hdrs)
    g = acc.send("t", None, "ba")
    assert owner.slow == []
    assert calls == [("t", hdrs, "key"), ("t", hdrs, "value"), ("t", [], "ba"), ("t", [], None)]
    assert f.batch.tp.partition == (murmur2(b"key") & 0x7FFFFFFF) % 3
    assert g.batch.tp.partition == (murmur2(b"ba") & 0x7FFFFFFF) % 3
    batches = all_batches(acc)
    payloads = b"".join(b.payload for bs in batches.values() for b in bs)
    assert b"value" in payloads


def test_serializer_results_and_failures():
    acc, owner, _ = make_acc(value_serializer=lambda t, h, v: v)
    with pytest.raises(TypeError, match="the value must be bytes .or set value_serializer., got int"):
        acc.send("t", 5)
    assert acc.send("t", memoryview(b"mv")).batch is not None and owner.slow == []

    def boom(topic, headers, obj):
        raise ValueError("cannot serialize")
    acc2, owner2, _ = make_acc(key_serializer=boom)
    with pytest.raises(ValueError, match="cannot serialize"):
        acc2.send("t", b"v", "k")
    assert acc2.open == {} and acc2.records_sent == 0


def test_serializers_are_not_called_when_the_general_path_takes_the_record():
    calls = []
    acc, owner, _ = make_acc(value_serializer=lambda t, h, v: calls.append(v) or b"x")
    acc.send("unknown topic", "v")
    acc.send("t", "v", partition=99)
    assert calls == [] and len(owner.slow) == 2
    acc.closed = True
    with pytest.raises(Errors.IllegalStateError, match="closed"):
        acc.send("t", "v")
    assert calls == []
