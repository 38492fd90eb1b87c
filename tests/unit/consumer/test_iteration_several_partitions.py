"""``for record in consumer`` when one poll returns several partitions: the cursor holds all of
them at once, and what the application sees is what it sees one partition at a time
(positions per record handed out, seeks, pauses and polls between two records respected).

No broker: answers are put into the consumer's FetchBuffer as a Fetch would, a few records per
partition each, so that every poll returns records of every partition.
"""
from __future__ import annotations

from itertools import islice

from kcore import records as R

from kclient.clock import FakeClock
from kclient.consumer.fetch_buffer import CompletedFetch
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.structs import TopicPartition

TOPIC = "t"
PARTITIONS = 3
ANSWER = 4              # records per buffered answer
PER_PARTITION = 24


def fetched(consumer: KafkaConsumer, tp: TopicPartition, start: int, end: int | None = None) -> None:
    """Buffer tp's records from ``start`` (answers of ANSWER records, up to ``end``)."""
    buffer = consumer._fetcher.buffer
    aid = consumer.subscription_state.assignment_id
    for off in range(start, PER_PARTITION if end is None else end, ANSWER):
        rows = [(None, 1_700_000_000_000, None, b"%d-%d" % (tp.partition, off + i), [])
                for i in range(min(ANSWER, PER_PARTITION - off))]
        raw = R.encode_batch(rows, base_offset=off)
        pipe = buffer.pipe(tp)
        buffer.add(CompletedFetch(tp, off, pipe.epoch, aid, memoryview(raw), None, buffer.new_frame(len(raw))), pipe)


def buffered_consumer() -> tuple[KafkaConsumer, list[TopicPartition], list[int]]:
    """A consumer whose buffer holds PER_PARTITION records of each partition (partition p,
    offset i: value b'p-i'), in answers that alternate between the partitions; and the list
    of the partition counts of each poll the iteration makes."""
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9", api_version=(3, 0), enable_auto_commit=False,
                             max_poll_records=20, clock=FakeClock())
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    fetcher = consumer._fetcher
    buffer = fetcher.buffer
    buffer.check_assignment()
    for off in range(0, PER_PARTITION, ANSWER):
        for tp in tps:
            fetched(consumer, tp, off, off + ANSWER)
    subs = consumer.subscription_state
    chains = {tp: buffer.pipe(tp).epoch for tp in tps}

    def send_fetches() -> int:
        """No network: a partition whose buffered records were dropped (a seek, a pause)
        gets the rest of its records from its position, once fetchable."""
        for tp in tps:
            epoch = buffer.pipe(tp).epoch
            position = subs.valid_position(tp)
            if chains[tp] != epoch and position is not None and subs.is_fetchable(tp):
                chains[tp] = epoch
                fetched(consumer, tp, position.offset)
        return 0

    fetcher.send_fetches = send_fetches
    polls: list[int] = []
    poll = consumer._poll

    def spy(timeout_ms, max_records, update_offsets, columnar, now_ms=None):
        records, ends = poll(timeout_ms, max_records, update_offsets, columnar, now_ms)
        polls.append(len(records))
        return records, ends

    consumer._poll = spy
    return consumer, tps, polls


def _key(r) -> tuple[int, int]:
    return r.partition, r.offset


def test_every_record_once_in_order_with_positions_following_each_one():
    consumer, tps, polls = buffered_consumer()
    try:
        last = {tp: -1 for tp in tps}
        got = []
        for r in islice(consumer, PARTITIONS * PER_PARTITION):
            got.append(_key(r))
            last[TopicPartition(r.topic, r.partition)] = r.offset
            assert r.value == b"%d-%d" % (r.partition, r.offset)
            # Between two records, every partition's position is one past its last record
            # handed out (the one being handed out, and those before or after it).
            assert {tp: consumer.position(tp) for tp in tps} == {tp: o + 1 for tp, o in last.items()}
        for tp in tps:
            assert [o for p, o in got if p == tp.partition] == list(range(PER_PARTITION))
        assert max(polls) == PARTITIONS
    finally:
        consumer.close(autocommit=False)


def test_positions_without_reads_between_records_end_at_each_partition_s_last_record():
    consumer, tps, polls = buffered_consumer()
    try:
        got = [_key(r) for r in islice(consumer, PARTITIONS * PER_PARTITION)]
        assert len(set(got)) == PARTITIONS * PER_PARTITION
        assert polls[0] == PARTITIONS
        assert [consumer.position(tp) for tp in tps] == [PER_PARTITION] * PARTITIONS
    finally:
        consumer.close(autocommit=False)


def test_a_seek_of_a_partition_not_yet_handed_out_is_respected():
    consumer, tps, _ = buffered_consumer()
    try:
        first = next(consumer)
        assert _key(first) == (0, 0)
        consumer.seek(tps[2], 20)   # its records of this poll were not handed out yet
        rest = [_key(r) for r in islice(consumer, PER_PARTITION * 2 - 1 + 4)]
        assert [o for p, o in rest if p == 2] == list(range(20, PER_PARTITION))
        assert [o for p, o in rest if p == 0] == list(range(1, PER_PARTITION))
        assert [o for p, o in rest if p == 1] == list(range(PER_PARTITION))
    finally:
        consumer.close(autocommit=False)


def test_a_seek_back_of_a_partition_already_handed_out_is_respected():
    consumer, tps, _ = buffered_consumer()
    try:
        got = []
        for r in consumer:
            got.append(_key(r))
            if r.partition == 1:    # partition 0's records of this poll were all handed out
                break
        assert consumer.position(tps[0]) > 0
        consumer.seek(tps[0], 0)
        assert consumer.position(tps[0]) == 0
        nxt = next(consumer)
        assert _key(nxt) == (1, 1)  # the partition in progress goes on where it was
        rest = [_key(r) for r in islice(consumer, PARTITIONS * PER_PARTITION - len(got) - 1)]
        assert consumer.position(tps[0]) <= PER_PARTITION
        again = [o for p, o in rest if p == 0]
        assert again[:ANSWER] == list(range(ANSWER))    # from the sought offset, not past it
    finally:
        consumer.close(autocommit=False)


def test_pausing_a_later_partition_holds_its_records_until_resumed():
    consumer, tps, _ = buffered_consumer()
    try:
        assert _key(next(consumer)) == (0, 0)
        consumer.pause(tps[1])
        got = [_key(r) for r in islice(consumer, 2 * PER_PARTITION - 1)]
        assert not [k for k in got if k[0] == 1]
        assert consumer.position(tps[1]) == 0
        consumer.resume(tps[1])
        later = [_key(r) for r in islice(consumer, PER_PARTITION)]
        assert later == [(1, o) for o in range(PER_PARTITION)]
    finally:
        consumer.close(autocommit=False)


def test_poll_after_a_loop_left_mid_poll_returns_what_the_loop_did_not():
    consumer, tps, _ = buffered_consumer()
    try:
        handed = [_key(r) for r in islice(consumer, 2 * ANSWER + 2)]    # into partition 1's records
        assert handed[-1] == (1, 1)
        got = list(handed)
        while len(got) < PARTITIONS * PER_PARTITION:
            batch = consumer.poll(0)
            assert batch, "poll returned nothing"
            got.extend(_key(r) for recs in batch.values() for r in recs)
        assert sorted(got) == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
        assert [consumer.position(tp) for tp in tps] == [PER_PARTITION] * PARTITIONS
    finally:
        consumer.close(autocommit=False)
