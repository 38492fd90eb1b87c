"""kclient.aio against Apache Kafka: aiokafka's documented usage patterns, written against
``kclient.aio`` (the only import that changes), with every record checked; a group of two
consumers in one loop; the event loop's lag while reading; cancellation and timeouts.

Record ``i`` of a test topic has value ``b"%d" % i`` and sits in partition ``i % P``, so
partition ``p`` holds ``p, p+P, p+2P, ...`` at offsets 0, 1, 2, ...
"""
from __future__ import annotations

import asyncio
import random
import time

import pytest

from kclient import errors as Errors
from kclient.aio import (AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, ConsumerStoppedError,
                         IllegalOperation, TopicPartition)
from kclient.producer import KafkaProducer

pytestmark = pytest.mark.timeout(180)

GROUP = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


def produce(bootstrap: str, topic: str, n: int, partitions: int, start: int = 0,
            timestamps: list[int] | None = None) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        for i in range(start, start + n):
            ts = None if timestamps is None else timestamps[i - start]
            producer.send(topic, b"%d" % i, partition=i % partitions, timestamp_ms=ts)
        producer.flush(30)


def produce_fast(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    """n records of ``b"%d" % i`` in large batches (for tests that need many)."""
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=512 * 1024) as producer:
        send = producer.send
        for i in range(n):
            send(topic, b"%d" % i, partition=i % partitions)
        producer.flush(60)


def expected(n: int, partitions: int, start: int = 0) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for i in range(start, start + n):
        out[i % partitions].append(i)
    return out


def check_record(record, partitions: int) -> int:
    """The record's sequence number, after checking it sits where it was written."""
    seq = int(record.value)
    assert record.partition == seq % partitions and record.offset == seq // partitions, record
    return seq


class Seen:
    """Every sequence number handed out, in order per partition."""

    def __init__(self, partitions: int):
        self.partitions = partitions
        self.by_partition: dict[int, list[int]] = {p: [] for p in range(partitions)}

    def add(self, record) -> None:
        self.by_partition[record.partition].append(check_record(record, self.partitions))

    def add_batch(self, batch: dict) -> int:
        n = 0
        for tp, records in batch.items():
            for r in records:
                assert r.topic == tp.topic and r.partition == tp.partition
                self.add(r)
            n += len(records)
        return n

    def count(self) -> int:
        return sum(len(v) for v in self.by_partition.values())


async def read_until(consumer: AIOKafkaConsumer, seen: Seen, n: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while seen.count() < n:
        assert time.monotonic() < deadline, f"{seen.count()} of {n} records in {timeout_s} s"
        seen.add_batch(await consumer.getmany(timeout_ms=500))


@pytest.fixture
def topic4(kafka, create_topic, topic_name):
    return create_topic(kafka, topic_name, partitions=4)


# ------------------------------------------------------------------------ documented patterns
def test_manual_commit_then_a_new_consumer_resumes(kafka, topic4, group_id):
    produce(kafka.bootstrap, topic4, 400, 4)

    async def main():
        consumer = AIOKafkaConsumer(topic4, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                                    enable_auto_commit=False, auto_offset_reset="earliest", **GROUP)
        await consumer.start()
        seen = Seen(4)
        try:
            while seen.count() < 200:
                batch = await consumer.getmany(timeout_ms=1000, max_records=50)
                assert sum(len(v) for v in batch.values()) <= 50
                seen.add_batch(batch)
                await consumer.commit()
            committed = {tp: await consumer.committed(tp) for tp in consumer.assignment()}
            positions = {tp: await consumer.position(tp) for tp in consumer.assignment()}
        finally:
            await consumer.stop()
        # What was committed is exactly what was handed out, nothing prefetched beyond it.
        assert committed == positions
        assert {tp.partition: off for tp, off in committed.items()} == \
            {p: len(v) for p, v in seen.by_partition.items()}

        second = AIOKafkaConsumer(topic4, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                                  enable_auto_commit=False, auto_offset_reset="earliest", **GROUP)
        async with second:
            await read_until(second, seen, 400)
        assert seen.by_partition == expected(400, 4)

    asyncio.run(main())


def test_stop_commits_what_was_handed_out_and_nothing_prefetched(kafka, topic4, group_id):
    produce(kafka.bootstrap, topic4, 400, 4)

    async def main():
        consumer = AIOKafkaConsumer(topic4, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                                    auto_offset_reset="earliest", **GROUP)   # enable_auto_commit=True
        seen = Seen(4)
        async with consumer:
            while seen.count() < 150:
                seen.add_batch(await consumer.getmany(timeout_ms=1000, max_records=7))
            for _ in range(3):
                seen.add(await consumer.getone())
        # stop() committed exactly the records handed out, though more were fetched.
        async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group_id) as check:
            committed = {p: await check.committed(TopicPartition(topic4, p)) for p in range(4)}
        assert committed == {p: len(v) for p, v in seen.by_partition.items()}

    asyncio.run(main())


def test_listener_commits_on_revoke_and_two_members_split_and_hand_over(kafka, topic4, group_id):
    produce(kafka.bootstrap, topic4, 2000, 4)

    async def main():
        seen = Seen(4)
        events: list[tuple[str, str, set[int]]] = []

        def make(name: str) -> tuple[AIOKafkaConsumer, ConsumerRebalanceListener]:
            consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group_id,
                                        enable_auto_commit=False, auto_offset_reset="earliest", **GROUP)

            class CommitOnRevoke(ConsumerRebalanceListener):
                async def on_partitions_revoked(self, revoked):
                    events.append((name, "revoked", {tp.partition for tp in revoked}))
                    if revoked:
                        await consumer.commit()

                async def on_partitions_assigned(self, assigned):
                    events.append((name, "assigned", {tp.partition for tp in assigned}))

            return consumer, CommitOnRevoke()

        a, listener_a = make("a")
        b, listener_b = make("b")
        await a.start()
        a.subscribe([topic4], listener=listener_a)
        # a alone: it gets every partition and reads part of the records.
        while seen.count() < 300:
            seen.add_batch(await a.getmany(timeout_ms=500, max_records=20))
        assert {tp.partition for tp in a.assignment()} == {0, 1, 2, 3}

        await b.start()
        b.subscribe([topic4], listener=listener_b)

        async def member(consumer: AIOKafkaConsumer, stop: asyncio.Event) -> None:
            while not stop.is_set():
                seen.add_batch(await consumer.getmany(timeout_ms=200, max_records=20))
                await asyncio.sleep(0.01)   # both members get their turn in reading

        split = asyncio.Event()
        tasks = [asyncio.create_task(member(a, split)), asyncio.create_task(member(b, split))]
        deadline = time.monotonic() + 60
        while not (a.assignment() and b.assignment() and seen.count() >= 1000):
            assert time.monotonic() < deadline, (a.assignment(), b.assignment(), seen.count(), events)
            await asyncio.sleep(0.05)
        split.set()
        await asyncio.gather(*tasks)
        assert a.assignment().isdisjoint(b.assignment())
        assert {tp.partition for tp in a.assignment() | b.assignment()} == {0, 1, 2, 3}
        assert ("a", "revoked", {0, 1, 2, 3}) in events or any(
            e[0] == "a" and e[1] == "revoked" and e[2] for e in events)

        # b hands over: it commits what it read and leaves; a takes everything back and goes on
        # from b's commits. No record is read twice: every revocation committed.
        await b.commit()
        await b.stop()
        # stop() left the group: a takes b's partitions without waiting out b's session.
        left = time.monotonic()
        await read_until(a, seen, 2000)
        assert time.monotonic() - left < GROUP["session_timeout_ms"] / 1000
        assert {tp.partition for tp in a.assignment()} == {0, 1, 2, 3}
        await a.stop()
        assert seen.by_partition == expected(2000, 4)

    asyncio.run(main())


def test_seek_and_getmany_by_partition(kafka, topic4):
    produce(kafka.bootstrap, topic4, 400, 4)

    async def main():
        tp0, tp1 = TopicPartition(topic4, 0), TopicPartition(topic4, 1)
        async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp0, tp1])
            consumer.seek(tp0, 90)
            await consumer.seek_to_beginning(tp1)
            got = await consumer.getmany(tp0, timeout_ms=5000)
            assert set(got) == {tp0}
            assert [r.offset for r in got[tp0]] == list(range(90, 100))
            assert await consumer.position(tp0) == 100
            # tp1's records (maybe fetched with tp0's) are all still there, from offset 0.
            rest: list = []
            while len(rest) < 100:
                got = await consumer.getmany(tp1, timeout_ms=5000)
                assert set(got) <= {tp1}
                rest += got.get(tp1, [])
            assert [r.offset for r in rest] == list(range(100))
            assert [int(r.value) for r in rest] == expected(400, 4)[1]
            assert consumer.highwater(tp1) == 100
            with pytest.raises(Errors.IllegalStateError):
                consumer.seek(TopicPartition(topic4, 3), 0)
            with pytest.raises(ValueError):
                consumer.seek(tp0, -1)
            with pytest.raises(IllegalOperation):
                await consumer.commit()

    asyncio.run(main())


def test_pause_holds_a_partition_back_and_resume_returns_its_records(kafka, topic4):
    produce(kafka.bootstrap, topic4, 400, 4)

    async def main():
        tps = [TopicPartition(topic4, p) for p in range(4)]
        async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign(tps)
            consumer.pause(tps[1])
            assert consumer.paused() == {tps[1]}
            seen = Seen(4)
            while seen.count() < 300:
                batch = await consumer.getmany(timeout_ms=2000)
                assert tps[1] not in batch
                seen.add_batch(batch)
            assert await consumer.getmany(timeout_ms=300) == {}
            assert await consumer.position(tps[1]) == 0
            consumer.resume(tps[1])
            assert consumer.paused() == set()
            await read_until(consumer, seen, 400)
            assert seen.by_partition == expected(400, 4)

    asyncio.run(main())


def test_seek_drops_buffered_records_and_applies_to_a_waiting_getmany(kafka, create_topic, topic_name):
    topic = create_topic(kafka, topic_name, partitions=1)
    produce(kafka.bootstrap, topic, 100, 1)

    async def main():
        tp = TopicPartition(topic, 0)
        async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            got = (await consumer.getmany(timeout_ms=5000, max_records=50))[tp]
            assert [r.offset for r in got] == list(range(50))
            # Records 50..99 wait in the buffer; the seek drops them.
            consumer.seek(tp, 10)
            assert (await consumer.getone()).offset == 10
            rest: list = []
            while len(rest) < 89:
                rest += (await consumer.getmany(timeout_ms=5000)).get(tp, [])
            assert [r.offset for r in rest] == list(range(11, 100))
            # A seek while a getmany waits at the end of the partition: it returns records
            # from the new position, each once.
            waiting = asyncio.create_task(consumer.getmany(timeout_ms=5000))
            await asyncio.sleep(0.2)
            consumer.seek(tp, 95)
            got = (await waiting).get(tp, [])
            while len(got) < 5:
                got += (await consumer.getmany(timeout_ms=5000)).get(tp, [])
            assert [r.offset for r in got] == [95, 96, 97, 98, 99]
            assert await consumer.getmany(timeout_ms=300) == {}
            assert await consumer.position(tp) == 100

    asyncio.run(main())


def test_batch_consumption_with_max_records(kafka, topic4):
    produce(kafka.bootstrap, topic4, 1000, 4)

    async def main():
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
                                    max_poll_records=64)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic4, p) for p in range(4)])
            seen = Seen(4)
            sizes = []
            while seen.count() < 1000:
                batch = await consumer.getmany(timeout_ms=2000, max_records=100 if len(sizes) % 2 else None)
                n = seen.add_batch(batch)
                sizes.append(n)
                assert n <= (100 if (len(sizes) - 1) % 2 else 64)
            assert seen.by_partition == expected(1000, 4)
            assert await consumer.getmany(timeout_ms=200) == {}
        finally:
            await consumer.stop()

    asyncio.run(main())


def test_async_for_reads_every_record_and_ends_on_stop(kafka, topic4, group_id):
    produce(kafka.bootstrap, topic4, 300, 4)

    async def main():
        consumer = AIOKafkaConsumer(topic4, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                                    auto_offset_reset="earliest", **GROUP)
        await consumer.start()
        seen = Seen(4)
        async for msg in consumer:
            seen.add(msg)
            if seen.count() == 300:
                break
        assert seen.by_partition == expected(300, 4)
        await consumer.commit()
        committed = {tp.partition: await consumer.committed(tp) for tp in consumer.assignment()}
        assert committed == {p: 75 for p in range(4)}

        # A task iterating when the consumer stops ends its loop.
        async def iterate():
            async for _ in consumer:
                raise AssertionError("no record was written")
            return "ended"

        task = asyncio.create_task(iterate())
        await asyncio.sleep(0.3)
        await consumer.stop()
        assert await asyncio.wait_for(task, 10) == "ended"
        with pytest.raises(ConsumerStoppedError):
            await consumer.getone()

    asyncio.run(main())


def test_offsets_for_times_and_offset_lookups(kafka, create_topic, topic_name):
    topic = create_topic(kafka, topic_name, partitions=1)
    base = int(time.time() * 1000) - 100_000
    produce(kafka.bootstrap, topic, 50, 1, timestamps=[base + 1000 * i for i in range(50)])

    async def main():
        tp = TopicPartition(topic, 0)
        async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap) as consumer:
            consumer.assign([tp])
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: 50}
            found = await consumer.offsets_for_times({tp: base + 20_500})
            assert found[tp].offset == 21 and found[tp].timestamp == base + 21_000
            assert (await consumer.offsets_for_times({tp: base + 10**7}))[tp] is None
            with pytest.raises(ValueError):
                await consumer.offsets_for_times({tp: -1})
            consumer.seek(tp, found[tp].offset)
            msg = await consumer.getone()
            assert (msg.offset, msg.value, msg.timestamp) == (21, b"21", base + 21_000)
            assert await consumer.topics() >= {topic}
            assert consumer.partitions_for_topic(topic) == {0}
            assert consumer.last_stable_offset(tp) == 50

    asyncio.run(main())


def test_group_protocol_consumer(kafka, topic4, group_id):
    produce(kafka.bootstrap, topic4, 200, 4)

    async def main():
        consumer = AIOKafkaConsumer(topic4, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                                    group_protocol="consumer", auto_offset_reset="earliest")
        async with consumer:
            seen = Seen(4)
            await read_until(consumer, seen, 200)
            assert seen.by_partition == expected(200, 4)
        # stop() committed what was read under this protocol too.
        async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group_id) as check:
            assert {p: await check.committed(TopicPartition(topic4, p)) for p in range(4)} == {p: 50 for p in range(4)}

    asyncio.run(main())


# ------------------------------------------------------------------------ the event loop
def test_event_loop_lag_stays_small_while_reading(kafka, create_topic, topic_name):
    topic = create_topic(kafka, topic_name, partitions=4)
    n = 500_000
    produce_fast(kafka.bootstrap, topic, n, 4)

    async def main():
        lags: list[float] = []
        stop = asyncio.Event()

        async def sleeper():
            while not stop.is_set():
                t0 = time.perf_counter()
                await asyncio.sleep(0.001)
                lags.append(time.perf_counter() - t0 - 0.001)

        task = asyncio.create_task(sleeper())
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
                                    max_partition_fetch_bytes=10 * 1024 * 1024)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(4)])
            count = 0
            while count < n:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    count += len(records)
        finally:
            await consumer.stop()
            stop.set()
            await task
        assert count == n
        assert len(lags) > 10
        # A correctness check of "the loop is never blocked", bounds loose enough for a
        # loaded machine (the figures measured are in docs/asyncio.md). The read takes 50-100
        # ms on a fast machine, so there are only 40-80 samples: their p99 is their maximum,
        # which one stall of the machine sets (another test's broker starting on the other
        # core). The 95th percentile leaves out the two worst; a loop the client holds in more
        # samples than that, or once for 200 ms, still fails.
        lags.sort()
        p95, worst = lags[int(len(lags) * 0.95)], lags[-1]
        assert p95 < 0.05 and worst < 0.2, (f"loop lag p95 {p95 * 1000:.1f} ms, max {worst * 1000:.1f} ms "
                                            f"over {len(lags)} samples")

    asyncio.run(main())


def test_a_stalled_event_loop_keeps_the_membership(kafka, topic4, group_id):
    """Heartbeats come from kclient's heartbeat thread, not from the loop: an application that
    holds the loop longer than session_timeout_ms keeps its partitions (aiokafka's heartbeat
    is a task on the loop)."""
    produce(kafka.bootstrap, topic4, 100, 4)

    async def main():
        events: list = []

        class Recorder(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                events.append(("revoked", set(revoked)))

            def on_partitions_assigned(self, assigned):
                events.append(("assigned", set(assigned)))

        consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group_id,
                                    auto_offset_reset="earliest", **GROUP)
        async with consumer:
            consumer.subscribe([topic4], listener=Recorder())
            seen = Seen(4)
            await read_until(consumer, seen, 1)
            before = list(events)
            assert before and before[-1][0] == "assigned"
            time.sleep(GROUP["session_timeout_ms"] / 1000 * 1.5)   # the application holds the loop
            await read_until(consumer, seen, 100)
            assert events == before, events
            assert seen.by_partition == expected(100, 4)

    asyncio.run(main())


def test_cancelled_getmany_and_getone_lose_no_record(kafka, topic4, group_id):
    n = 3000
    produce(kafka.bootstrap, topic4, n, 4)

    async def main():
        rng = random.Random(5)
        consumer = AIOKafkaConsumer(topic4, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    max_poll_records=100, **GROUP)
        seen = Seen(4)
        cancelled = 0
        async with consumer:
            deadline = time.monotonic() + 90
            while seen.count() < n:
                assert time.monotonic() < deadline, seen.count()
                if rng.random() < 0.5:
                    task = asyncio.create_task(consumer.getmany(timeout_ms=1000, max_records=rng.randint(1, 150)))
                else:
                    task = asyncio.create_task(consumer.getone())
                # Cancel some right away, some while the worker polls, some never.
                roll = rng.random()
                if roll < 0.6:
                    await asyncio.sleep(0 if roll < 0.3 else rng.random() * 0.003)
                    if not task.done():
                        task.cancel()
                try:
                    result = await task
                except asyncio.CancelledError:
                    cancelled += 1
                    continue
                if isinstance(result, dict):
                    seen.add_batch(result)
                else:
                    seen.add(result)
            await consumer.commit()
            assert {tp.partition: await consumer.committed(tp) for tp in consumer.assignment()} == \
                {p: n // 4 for p in range(4)}
        assert cancelled > 10
        assert seen.by_partition == expected(n, 4)

    asyncio.run(main())


def test_wait_for_getone_on_an_empty_topic_times_out_promptly(kafka, topic4):
    async def main():
        tp = TopicPartition(topic4, 2)
        async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            for _ in range(3):
                t0 = time.monotonic()
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(consumer.getone(), 0.5)
                assert time.monotonic() - t0 < 1.5
            assert await consumer.getmany(timeout_ms=100) == {}
            await asyncio.to_thread(produce, kafka.bootstrap, topic4, 4, 4)
            msg = await asyncio.wait_for(consumer.getone(), 30)
            assert (msg.partition, msg.offset, msg.value) == (2, 0, b"2")
            assert await consumer.position(tp) == 1

    asyncio.run(main())


def test_getmany_columnar(kafka, topic4):
    produce(kafka.bootstrap, topic4, 2000, 4)

    async def main():
        async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest") as consumer:
            tps = [TopicPartition(topic4, p) for p in range(4)]
            consumer.assign(tps)
            values: dict[int, list[int]] = {p: [] for p in range(4)}
            deadline = time.monotonic() + 60
            while sum(map(len, values.values())) < 2000:
                assert time.monotonic() < deadline
                for tp, cols in (await consumer.getmany_columnar(timeout_ms=1000)).items():
                    assert list(cols.offsets) == list(range(len(values[tp.partition]),
                                                            len(values[tp.partition]) + len(cols)))
                    values[tp.partition] += [int(v) for v in cols.values()]
            assert values == expected(2000, 4)
            assert {tp: await consumer.position(tp) for tp in tps} == {tp: 500 for tp in tps}

    asyncio.run(main())



def test_records_with_headers_deserializers_and_zero_copy(kafka, topic4):
    """getmany()/getone() make records on the loop from polled columns (headers and
    zero.copy.records included); with a deserializer they are made on the worker, as the
    synchronous poll() makes them. Every kind reads the same records."""
    with KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=5) as producer:
        for i in range(300):
            producer.send(topic4, b"%d" % i, key=b"k%d" % i if i % 3 else None, partition=i % 4,
                          headers=[("n", b"%d" % i)] if i % 2 else None)
        producer.flush(30)
    tps = [TopicPartition(topic4, p) for p in range(4)]

    async def read(one_by_one: bool, **settings) -> list:
        async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest",
                                    **settings) as consumer:
            consumer.assign(tps)
            got: list = []
            deadline = time.monotonic() + 60
            while len(got) < 300:
                assert time.monotonic() < deadline, f"{len(got)} of 300 records"
                if one_by_one:
                    got.append(await consumer.getone())
                else:
                    for records in (await consumer.getmany(timeout_ms=1000, max_records=37)).values():
                        got += records
            assert {tp: await consumer.position(tp) for tp in tps} == {tp: 75 for tp in tps}
            return sorted(got, key=lambda r: int(bytes(r.value)) if isinstance(r.value, memoryview)
                          else int(r.value))

    async def main():
        plain = await read(False)
        for i, r in enumerate(plain):
            assert (r.partition, r.offset, r.value) == (i % 4, i // 4, b"%d" % i)
            assert r.key == (b"k%d" % i if i % 3 else None)
            assert r.headers == ([("n", b"%d" % i)] if i % 2 else [])
            assert r.serialized_value_size == len(r.value)
        assert await read(True) == plain
        views = await read(False, zero_copy_records=True)
        assert all(type(r.value) is memoryview for r in views)
        assert [r._replace(key=None if r.key is None else bytes(r.key), value=bytes(r.value)) for r in views] == plain
        decoded = await read(False, value_deserializer=lambda v: int(v) if v is not None else None)
        assert [r._replace(value=b"%d" % r.value) for r in decoded] == plain

    asyncio.run(main())

# ------------------------------------------------------------------------ producer
def test_producer_send_send_and_wait_flush_and_batch(kafka, topic4):
    async def main():
        async with AIOKafkaProducer(bootstrap_servers=kafka.bootstrap) as producer:
            meta = await producer.send_and_wait(topic4, b"0", partition=0)
            assert (meta.topic, meta.partition, meta.offset) == (topic4, 0, 0)
            futures = [await producer.send(topic4, b"%d" % i, partition=i % 4) for i in range(1, 100)]
            await producer.flush()
            assert all(f.done() for f in futures)
            assert [f.result().offset for f in futures[:7]] == [0, 0, 0, 1, 1, 1, 1]
            batch = producer.create_batch()
            for i in range(100, 110):
                assert batch.append(key=None, value=b"%d" % i, timestamp=None) is not None
            assert batch.record_count() == 10
            first = await (await producer.send_batch(batch, topic4, partition=3))
            assert (first.partition, first.offset) == (3, 25)
            assert await producer.partitions_for(topic4) == {0, 1, 2, 3}
        async with AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(topic4, 3)])
            got: list = []
            while len(got) < 35:
                got += (await consumer.getmany(timeout_ms=2000)).get(TopicPartition(topic4, 3), [])
            assert [r.value for r in got] == [b"%d" % i for i in range(3, 100, 4)] + \
                [b"%d" % i for i in range(100, 110)]

    asyncio.run(main())


# ------------------------------------------------------------------------ settings (no broker)
def test_settings_fail_loudly():
    with pytest.raises(Errors.ConfigurationError, match="rebalance_timeout_ms"):
        AIOKafkaConsumer(rebalance_timeout_ms=5000)
    with pytest.raises(Errors.ConfigurationError):
        AIOKafkaConsumer(no_such_setting=1)
    with pytest.raises(Errors.ConfigurationError):
        AIOKafkaProducer(enable_idempotence=True)
    # Loop-less construction, aiokafka's defaults where they differ from kclient's.
    consumer = AIOKafkaConsumer("t", rebalance_timeout_ms=300000, consumer_timeout_ms=200, api_version="auto")
    assert consumer.subscription() == frozenset({"t"})
    assert consumer._settings["session_timeout_ms"] == 10000
    assert consumer._settings["partition_assignment_strategy"] == ("roundrobin",)
    with pytest.raises(Errors.IllegalStateError):
        consumer.seek(TopicPartition("t", 0), 1)


# ------------------------------------------------------------------------ TLS and SASL
@pytest.fixture(scope="module")
def secure(secure_kafka):
    return secure_kafka


class AsyncTokenProvider:
    """aiokafka's AbstractTokenProvider shape: ``async def token()``."""

    def __init__(self):
        self.calls = 0

    async def token(self) -> str:
        from kclient.network.sasl import unsecured_jws
        await asyncio.sleep(0)
        self.calls += 1
        return unsecured_jws("oauth-user", 3600)


def test_sasl_ssl_with_an_ssl_context_and_oauthbearer_with_an_async_token_provider(secure):
    from kclient.aio.helpers import create_ssl_context
    from kclient.testing.pki import SCRAM_USER

    topic = f"aio-secure-{time.monotonic_ns()}"
    secure.create_topic(topic, 1)
    secure.wait_for_topic(topic, 1)
    provider = AsyncTokenProvider()
    cases = {
        "SASL_SSL": {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                     "sasl_plain_username": SCRAM_USER[0], "sasl_plain_password": SCRAM_USER[1],
                     "ssl_context": create_ssl_context(cafile=str(secure.pki.ca_file))},
        "SASL_PLAINTEXT": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
                           "sasl_oauth_token_provider": provider},
    }

    async def main():
        for i, (listener, settings) in enumerate(cases.items()):
            bootstrap = secure.bootstrap_for(listener)
            async with AIOKafkaProducer(bootstrap_servers=bootstrap, **settings) as producer:
                await producer.send_and_wait(topic, listener.encode(), partition=0)
            tp = TopicPartition(topic, 0)
            async with AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                        **settings) as consumer:
                consumer.assign([tp])
                got: list = []
                while len(got) < i + 1:
                    got += (await consumer.getmany(timeout_ms=5000)).get(tp, [])
                assert [r.value for r in got] == [name.encode() for name in list(cases)[:i + 1]]
        assert provider.calls >= 2   # one token per connection, producer and consumer

    asyncio.run(main())
