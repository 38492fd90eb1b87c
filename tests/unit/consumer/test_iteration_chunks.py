"""``for record in consumer`` takes records from the buffer in chunks that grow past
max.poll.records only while the application hands them out quickly.

No broker: answers are put into the consumer's FetchBuffer as a Fetch would, the clock is a
FakeClock moved by the test's "application" per record, and a stand-in coordinator records
when the consumer's poll work ran (where heartbeat checks, auto-commit and rebalances happen).
"""
from __future__ import annotations

from itertools import islice

from kcore import records as R

from kclient.clock import FakeClock
from kclient.consumer import kafka_consumer as kc
from kclient.consumer.fetch_buffer import CompletedFetch
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.structs import TopicPartition

from fake_coordinator import RecordingCoordinator

TOPIC = "t"
PARTITIONS = 2
ANSWER = 500            # records per buffered answer
PER_PARTITION = 2000


def _answers(partition_records: int, value_size: int) -> list[tuple[int, bytes]]:
    out = []
    for off in range(0, partition_records, ANSWER):
        rows = [(None, 1_700_000_000_000, None, (b"%d " % (off + i)).ljust(value_size, b"."), [])
                for i in range(ANSWER)]
        out.append((off, R.encode_batch(rows, base_offset=off)))
    return out


def buffered_consumer(clock: FakeClock, max_poll_records: int = 10, value_size: int = 0):
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9", api_version=(3, 0), enable_auto_commit=False,
                             max_poll_records=max_poll_records, clock=clock)
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    fetcher = consumer._fetcher
    fetcher.send_fetches = lambda: 0       # everything is buffered already: no network
    buffer = fetcher.buffer
    buffer.check_assignment()
    subs = consumer.subscription_state
    answers = _answers(PER_PARTITION, value_size)
    for off, raw in answers:
        for tp in tps:
            pipe = buffer.pipe(tp)
            frame = buffer.new_frame(len(raw))
            buffer.add(CompletedFetch(tp, off, pipe.epoch, subs.assignment_id, memoryview(raw), None, frame), pipe)
    coordinator = RecordingCoordinator(clock)
    consumer._coordinator = coordinator
    chunks: list[int] = []
    poll = consumer._poll

    def spy(timeout_ms, max_records, update_offsets, columnar, now_ms=None):
        chunks.append(max_records)
        return poll(timeout_ms, max_records, update_offsets, columnar, now_ms)

    consumer._poll = spy
    return consumer, tps, coordinator, chunks


def consume(consumer, clock: FakeClock, per_record_ms: float, tps) -> list:
    """Iterate over every buffered record (no further: the fake clock would never end a
    wait for more), moving the clock per record; check order and positions."""
    got = []
    owed = 0.0
    for record in islice(consumer, PARTITIONS * PER_PARTITION):
        got.append(record)
        owed += per_record_ms
        if owed >= 1:
            clock.advance(int(owed))
            owed -= int(owed)
        if len(got) % 97 == 0:   # the position follows the records handed out, one by one
            tp = TopicPartition(record.topic, record.partition)
            assert consumer.position(tp) == record.offset + 1
    for tp in tps:
        offsets = [r.offset for r in got if r.partition == tp.partition]
        assert offsets == list(range(PER_PARTITION))
        assert [int(r.value.split()[0]) for r in got if r.partition == tp.partition] == offsets
        assert consumer.position(tp) == PER_PARTITION
    return got


def test_a_fast_loop_takes_growing_chunks_up_to_the_cap():
    clock = FakeClock()
    consumer, tps, _, chunks = buffered_consumer(clock, max_poll_records=10)
    try:
        got = consume(consumer, clock, 0, tps)
    finally:
        consumer.close(autocommit=False)
    assert len(got) == PARTITIONS * PER_PARTITION
    assert chunks == [10, 20, 40, 80, 160, 320, 640, 1280, 2560]   # 4,000 records in 9 polls, not 400


def test_chunks_stop_growing_at_their_record_and_byte_bounds(monkeypatch):
    monkeypatch.setattr(kc, "_ITER_MAX_CHUNK_RECORDS", 100)
    clock = FakeClock()
    consumer, tps, _, chunks = buffered_consumer(clock, max_poll_records=10)
    try:
        consume(consumer, clock, 0, tps)
        assert chunks[:5] == [10, 20, 40, 80, 100] and set(chunks[4:]) == {100}
    finally:
        consumer.close(autocommit=False)
    # Values of about 1/64 of the byte bound: chunks of 64 records at most, never fewer than
    # max.poll.records.
    monkeypatch.setattr(kc, "_ITER_MAX_CHUNK_RECORDS", 8192)
    clock = FakeClock()
    consumer, tps, _, chunks = buffered_consumer(clock, max_poll_records=10,
                                                 value_size=kc._ITER_MAX_CHUNK_BYTES // 64)
    try:
        consume(consumer, clock, 0, tps)
        per_record = consumer._fetcher.collector.bytes_per_record   # the value and its framing
        cap = kc._ITER_MAX_CHUNK_BYTES // per_record
        assert kc._ITER_MAX_CHUNK_BYTES // 64 < per_record < kc._ITER_MAX_CHUNK_BYTES // 60
        assert chunks[:4] == [10, 20, 40, cap] and set(chunks[3:]) == {cap}
    finally:
        consumer.close(autocommit=False)
    clock = FakeClock()
    consumer, tps, _, chunks = buffered_consumer(clock, max_poll_records=100,
                                                 value_size=kc._ITER_MAX_CHUNK_BYTES // 64)
    try:
        consume(consumer, clock, 0, tps)
        assert set(chunks) == {100}
    finally:
        consumer.close(autocommit=False)


def test_a_slow_loop_polls_as_often_as_with_max_poll_records():
    clock = FakeClock()
    consumer, tps, coordinator, chunks = buffered_consumer(clock, max_poll_records=10)
    try:
        consume(consumer, clock, 5, tps)     # 50 ms per 10 records: slower than _ITER_FAST_MS
    finally:
        consumer.close(autocommit=False)
    assert set(chunks) == {10}
    gaps = [b - a for a, b in zip(coordinator.polled_at, coordinator.polled_at[1:])]
    assert max(gaps) <= 10 * 5


def test_the_coordinator_work_runs_on_time_whatever_the_pace():
    """The time between two of the consumer's polls (heartbeat check, auto-commit, rebalance)
    stays within twice _ITER_FAST_MS or the time of max.poll.records records, whichever is
    longer, as the application's pace per record changes."""
    for per_record_ms in (0.01, 0.1, 0.5, 1, 3, 20):
        clock = FakeClock()
        consumer, tps, coordinator, chunks = buffered_consumer(clock, max_poll_records=10)
        try:
            consume(consumer, clock, per_record_ms, tps)
        finally:
            consumer.close(autocommit=False)
        gaps = [b - a for a, b in zip(coordinator.polled_at, coordinator.polled_at[1:])]
        bound = max(2 * kc._ITER_FAST_MS, 10 * per_record_ms) + 1
        assert max(gaps) <= bound, (per_record_ms, max(gaps), chunks)


def test_a_pause_between_chunks_brings_the_chunk_back_to_max_poll_records():
    clock = FakeClock()
    consumer, tps, _, chunks = buffered_consumer(clock, max_poll_records=10)
    try:
        it = iter(consumer)
        for _ in range(10 + 20 + 40):       # three quick chunks
            next(it)
        clock.advance(kc._ITER_FAST_MS + 1)  # the application stalls after the third
        next(it)
        assert chunks == [10, 20, 40, 10]
    finally:
        consumer.close(autocommit=False)
