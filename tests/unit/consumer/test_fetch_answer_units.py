"""An answer buffered as one unit (FetchBuffer.add_parts, a CompletedAnswer) hands out the
records, positions, buffer accounting and metrics that the same answer buffered as one
CompletedFetch per partition does, whatever happens between polls: pauses and resumes, seeks,
polls of any size, columns, deserializers that fail.

No broker: answers are put into the consumer's FetchBuffer as FetchRequests does."""
from __future__ import annotations

import random

import pytest

from kcore import records as R

from kclient.clock import FakeClock
from kclient.consumer.fetch_buffer import CompletedAnswer, CompletedFetch
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.structs import TopicPartition
from offline_consumer import fetch_buffer_of, offline_consumer

TOPIC = "t"
PARTITIONS = 4


def _run(seed: int, one_unit: bool, **configs) -> list:
    """Answers of random partitions and sizes, buffered as units or not, drained by polls of
    random sizes with changes between them: what each poll returned, and the positions,
    buffer state and metrics after it."""
    rng = random.Random(seed)
    consumer, tps = offline_consumer(TOPIC, PARTITIONS, **configs)
    buffer = fetch_buffer_of(consumer)
    subs = consumer.subscription_state
    ends = {tp: 0 for tp in tps}
    seen: list = []
    units = 0
    try:
        for _ in range(80):
            for _ in range(rng.randrange(0, 3)):
                parts = []
                frame = None
                for tp in rng.sample(tps, rng.randrange(1, PARTITIONS + 1)):
                    pipe = buffer.pipe(tp)
                    if pipe.buffered >= 3:
                        continue
                    n = rng.choice((1, 1, 2, 3, 7))
                    off = ends[tp]
                    rows = [(None, 1_700_000_000_000, b"k", b"%d-%d" % (tp.partition, off + i), [])
                            for i in range(n)]
                    raw = R.encode_batch(rows, base_offset=off, partition_leader_epoch=rng.choice((-1, 3)))
                    if frame is None:
                        frame = buffer.new_frame(len(raw) + 100)
                    pipe.buffered += 1
                    parts.append((tp, off, pipe.epoch, memoryview(raw), len(raw), None, None, pipe))
                    ends[tp] = off + n
                if parts:
                    assert frame is not None
                    buffer.add_parts(parts, subs.assignment_id, frame, one_unit)
                    units += one_unit
            r = rng.random()
            if r < 0.12:
                tp = rng.choice(tps)
                if tp in consumer.paused():
                    consumer.resume(tp)
                else:
                    consumer.pause(tp)
            elif r < 0.18:
                tp = rng.choice(tps)
                to = max(consumer.position(tp) - rng.randrange(0, 3), 0)
                consumer.seek(tp, to)
                ends[tp] = to
            try:
                if rng.random() < 0.1:
                    cols = consumer.poll_columnar(0, max_records=rng.randrange(1, 12))
                    got = {tp: [(o, None, None) for o in c.offsets] for tp, c in cols.items()}
                else:
                    recs = consumer.poll(0, max_records=rng.randrange(1, 12))
                    got = {tp: [(r.offset, r.key, r.value, r.leader_epoch) for r in rs] for tp, rs in recs.items()}
            except ValueError as exc:      # a deserializer's: the next polls go on
                seen.append(str(exc))
                continue
            seen.append((got, [consumer.position(tp) for tp in tps], buffer.buffered_bytes,
                         [buffer.pipe(tp).buffered for tp in tps]))
        metrics = consumer.metrics()
        seen.append({k: v for k, v in metrics.items() if k.startswith("consumer-fetch-manager-metrics")})
    finally:
        consumer.close(autocommit=False)
    assert not one_unit or units
    return seen


@pytest.mark.parametrize("seed", range(8))
def test_an_answer_as_one_unit_drains_as_its_partitions_one_by_one(seed):
    assert _run(seed, True) == _run(seed, False)


def test_with_deserializers_too():
    configs = {"key_deserializer": lambda b: b.decode(), "value_deserializer": lambda b: b.upper()}
    assert _run(11, True, **configs) == _run(11, False, **configs)


def test_a_deserializer_error_leaves_the_answer_as_the_per_partition_path_does():
    def fails_on_1_2(b: bytes) -> bytes:
        if b == b"1-2":
            raise ValueError("undecodable")
        return b

    seen = _run(4, True, value_deserializer=fails_on_1_2)
    assert "undecodable" in seen
    assert seen == _run(4, False, value_deserializer=fails_on_1_2)


def _buffered_answer(consumer: KafkaConsumer, tps: list[TopicPartition], n: int):
    buffer = fetch_buffer_of(consumer)
    parts = []
    frame = buffer.new_frame(1000)
    for tp in tps:
        pipe = buffer.pipe(tp)
        raw = R.encode_batch([(None, 1, b"k", b"v", [])] * n, base_offset=0)
        pipe.buffered += 1
        parts.append((tp, 0, pipe.epoch, memoryview(raw), len(raw), None, None, pipe))
    buffer.add_parts(parts, consumer.subscription_state.assignment_id, frame, True)
    return buffer


def test_a_drain_that_runs_out_keeps_the_rest_of_the_answer_as_one_unit():
    consumer, tps = offline_consumer(TOPIC, 3)
    try:
        buffer = _buffered_answer(consumer, tps, 2)
        got = consumer.poll(0, max_records=4)
        assert {tp: len(rs) for tp, rs in got.items()} == {tps[0]: 2, tps[1]: 2}
        assert len(buffer.completed) == 1 and isinstance(buffer.completed[0], CompletedAnswer)
        assert buffer.answers == 1 and buffer.buffered_bytes == 1000
        got = consumer.poll(0, max_records=4)
        assert {tp: len(rs) for tp, rs in got.items()} == {tps[2]: 2}
        assert not buffer.completed and buffer.answers == 0 and buffer.buffered_bytes == 0
        assert [buffer.pipe(tp).buffered for tp in tps] == [0, 0, 0]
    finally:
        consumer.close(autocommit=False)


def test_a_seek_splits_the_answer_into_its_partitions_and_drops_the_sought_one():
    consumer, tps = offline_consumer(TOPIC, 3)
    try:
        buffer = _buffered_answer(consumer, tps, 2)
        consumer.seek(tps[1], 1)
        assert [type(cf) for cf in buffer.completed] == [CompletedFetch, CompletedFetch]
        assert [cf.tp for cf in buffer.completed] == [tps[0], tps[2]]
        assert buffer.answers == 0 and buffer.buffered_bytes == 1000
        got = consumer.poll(0)
        assert {tp: len(rs) for tp, rs in got.items()} == {tps[0]: 2, tps[2]: 2}
        assert buffer.buffered_bytes == 0
    finally:
        consumer.close(autocommit=False)


# ---------------------------------------------------------------------- from Fetch answers
def _fetching(leaders=None, partitions=(0, 1, 2)):
    from test_fetcher import ScriptedClient, make_metadata

    from kclient.config import ConsumerConfig
    from kclient.consumer.fetch_config import FetchConfig
    from kclient.consumer.fetcher import Fetcher
    from kclient.subscription.state import SubscriptionState

    client = ScriptedClient(make_metadata(3, leaders))
    subs = SubscriptionState("earliest")
    cfg = ConsumerConfig({"bootstrap.servers": "h1:9092"})
    fetcher = Fetcher(client, subs, FetchConfig.of(cfg), clock=FakeClock())
    tps = [TopicPartition("topic-a", p) for p in partitions]
    subs.assign_from_user(tps)
    for tp in tps:
        subs.seek(tp, 0)
    return client, subs, fetcher


def test_an_answer_without_errors_is_buffered_as_one_unit():
    from test_fetcher import batch, fetch_response, partition_data

    client, _, fetcher = _fetching()
    assert fetcher.send_fetches() == 1
    (req,) = client.take()
    req.future.complete(fetch_response([partition_data(p, batch(0, 2)) for p in (0, 1, 2)]))
    assert [type(item) for item in fetcher.buffer.completed] == [CompletedAnswer]
    recs, _ = fetcher.fetched_records()
    assert {tp.partition: [r.offset for r in rs] for tp, rs in recs.items()} == {0: [0, 1], 1: [0, 1], 2: [0, 1]}
    assert fetcher.buffered_bytes == 0 and not fetcher.has_completed_fetches()


def test_an_error_in_an_answer_keeps_the_partitions_in_the_answers_order():
    from test_fetcher import batch, fetch_response, partition_data

    from kclient import errors as Errors

    client, _, fetcher = _fetching()
    fetcher.send_fetches()
    (req,) = client.take()
    req.future.complete(fetch_response([
        partition_data(0, batch(0, 2)),
        partition_data(1, None, error=Errors.TopicAuthorizationFailedError.errno),
        partition_data(2, batch(0, 2))]))
    assert [(type(cf), cf.tp.partition) for cf in fetcher.buffer.completed] == [
        (CompletedFetch, 0), (CompletedFetch, 1), (CompletedFetch, 2)]
    recs, _ = fetcher.fetched_records()
    assert [tp.partition for tp in recs] == [0]           # the records before the error first
    with pytest.raises(Errors.TopicAuthorizationFailedError):
        fetcher.fetched_records()
    recs, _ = fetcher.fetched_records()
    assert [tp.partition for tp in recs] == [2]


def test_while_every_leader_is_busy_send_fetches_sends_after_an_answer_or_an_assignment_change():
    from test_fetcher import batch, fetch_response, partition_data

    client, subs, fetcher = _fetching(leaders=[1, 1, 2], partitions=(0, 1))
    assert fetcher.send_fetches() == 1
    (req,) = client.take()
    assert fetcher.send_fetches() == 0 and fetcher.send_fetches() == 0     # node 1 busy
    tps = [TopicPartition("topic-a", p) for p in (0, 1, 2)]
    subs.assign_from_user(tps)
    subs.seek(tps[2], 0)
    assert fetcher.send_fetches() == 1          # partition 2's leader, node 2, is free
    assert [r.node for r in client.take()] == [2]
    assert fetcher.send_fetches() == 0
    req.future.complete(fetch_response([partition_data(0, batch(0, 1))]))    # an answer of the old assignment
    assert fetcher.send_fetches() == 1
    assert [r.node for r in client.take()] == [1]
