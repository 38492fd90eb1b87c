"""What every poll() does when records are buffered, kept lean: one locked metrics call for the
poll's statistics plus the poll's end, one locked subscription call that moves the positions
and reads the log start offsets, the clock read at the start and at the end only; and the
coordinator's work (heartbeat checks, auto-commit) still runs at every poll, at the poll's time.

No broker: answers are put into the consumer's FetchBuffer as a Fetch would, with a FakeClock.
"""
from __future__ import annotations

import dataclasses
import pickle
import threading

import pytest
from kcore import records as R

from kclient.clock import FakeClock
from kclient.consumer.fetch_buffer import CompletedFetch
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.consumer.metrics import ConsumerMetrics
from kclient.subscription.state import FetchPosition, SubscriptionState
from kclient.structs import TopicPartition

from fake_coordinator import RecordingCoordinator

TOPIC = "t"
TP0, TP1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


class CountingLock:
    """A lock that counts its acquisitions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def __enter__(self):
        self.count += 1
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)

    def acquire(self, *args):
        self.count += 1
        return self._lock.acquire(*args)

    def release(self):
        return self._lock.release()


class CountingClock(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def now_ms(self) -> int:
        self.reads += 1
        return super().now_ms()


def buffered_consumer(clock: FakeClock, per_partition: int = 100, max_poll_records: int = 10):
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9", api_version=(3, 0), enable_auto_commit=False,
                             max_poll_records=max_poll_records, clock=clock)
    tps = [TP0, TP1]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    fetcher = consumer._fetcher
    fetcher.send_fetches = lambda: 0       # everything is buffered already: no network
    buffer = fetcher.buffer
    buffer.check_assignment()
    subs = consumer.subscription_state
    raw = R.encode_batch([(None, 1_700_000_000_000, None, b"%d" % i, []) for i in range(per_partition)],
                         base_offset=0)
    for tp in tps:
        pipe = buffer.pipe(tp)
        pipe.end_offset = per_partition + 50        # the high watermark the answer gave
        buffer.add(CompletedFetch(tp, 0, pipe.epoch, subs.assignment_id, memoryview(raw), None,
                                  buffer.new_frame(len(raw))), pipe)
    subs.record_fetched_offsets([(tp, per_partition + 50, -1, 0) for tp in tps])
    coordinator = RecordingCoordinator(clock)
    consumer._coordinator = coordinator
    return consumer, coordinator


def test_a_buffered_poll_takes_no_metrics_lock_one_subscription_move_and_two_clock_reads():
    clock = CountingClock()
    consumer, _ = buffered_consumer(clock)
    try:
        consumer.poll(0)                       # the first poll (nothing before it to time)
        stats_lock = consumer._stats._lock = CountingLock()
        subs = consumer.subscription_state
        moves = []
        advance = subs.advance_positions

        def spy(positions, log_starts=False):
            moves.append(log_starts)
            return advance(positions, log_starts)
        subs.advance_positions = spy
        clock.reads = 0
        got = consumer.poll(0)
        assert sum(map(len, got.values())) == 10
        assert stats_lock.count == 0           # polled, poll_ended, time-between-poll: appended, folded later
        assert moves == [True]                 # positions and log start offsets: one locked call
        assert clock.reads == 2                # the poll's start and its end
    finally:
        consumer.close(autocommit=False)


def test_coordinator_work_runs_at_every_buffered_poll_at_the_polls_time():
    """Heartbeat checks and auto-commit live in the coordinator's poll: a poll served from the
    buffer still calls it, with the clock the poll read, however quick the polls."""
    clock = FakeClock()
    consumer, coordinator = buffered_consumer(clock, per_partition=200)
    try:
        times = []
        for i in range(30):
            clock.advance(7 if i % 3 else 1)
            times.append(clock.now_ms())
            got = consumer.poll(0)
            assert sum(map(len, got.values())) == 10
        assert coordinator.recorded == times
        assert coordinator.polled_at == times
        # The positions follow the records returned, one poll at a time.
        assert consumer.position(TP0) + consumer.position(TP1) == 300
    finally:
        consumer.close(autocommit=False)


def test_poll_metrics_after_buffered_polls():
    clock = FakeClock()
    consumer, _ = buffered_consumer(clock, per_partition=100)
    try:
        for _ in range(5):
            consumer.poll(0)
            clock.advance(10)
        m = consumer.metrics()
        fm = m["consumer-fetch-manager-metrics"]
        assert fm["records-consumed-total"] == 50
        assert m["consumer-metrics"]["time-between-poll-avg"] == 10
        assert m["consumer-metrics"]["time-between-poll-max"] == 10
        part = m[f"consumer-fetch-manager-metrics,topic={TOPIC},partition=0"]
        # 50 records from partition 0 (max.poll.records 10, oldest answer first), the answer
        # reported a high watermark of 150 and a log start of 0.
        assert part["records-lag"] == 100 and part["records-lead"] == 50
    finally:
        consumer.close(autocommit=False)


def test_time_between_poll_is_recorded_once_for_every_poll():
    stats = ConsumerMetrics()
    def between(now: int):
        stats.flush()
        return stats._stats[("", "time-between-poll")]
    read = {"between": between}
    stats.poll_started(1000)
    stats.polled(5, 50, [], [], 1000)
    stats.poll_ended(1001)
    stats.flush()
    assert ("", "time-between-poll") not in stats._stats     # the first poll has no gap before it
    stats.poll_started(1010)                                 # a poll that returns records
    stats.polled(5, 50, [], [], 1010)
    stats.poll_ended(1011)
    assert read["between"](1011).total_count == 1
    stats.poll_started(1030)                                 # nothing returned, no end (iteration waiting)
    assert read["between"](1030).total_count == 2
    assert read["between"](1030).total_sum == 10 + 20
    stats.poll_started(1050)                                 # the poll under way's gap counts at once
    # A reader sees the poll under way's gap too, and it is not recorded twice.
    from kclient.consumer.metric_table import TABLE
    avg = next(m for m in TABLE if m.name == "time-between-poll-avg")
    assert stats.read(avg, "", 1050) == (10 + 20 + 20) / 3
    stats.poll_ended(1051)
    assert read["between"](1051).total_count == 3
    stats.flush()
    idle = stats._stats[("", "poll-idle-ratio")]
    assert idle.total_count == 2 and idle.total_sum == pytest.approx(1 / 10 + 1 / 40)


def test_advance_positions_can_return_the_log_start_offsets():
    s = SubscriptionState("earliest")
    s.assign_from_user([TP0, TP1])
    for tp in (TP0, TP1):
        s.seek(tp, 0)
    s.record_fetched_offsets([(TP0, 100, -1, 7)])
    assert s.advance_positions([(TP0, FetchPosition(10)), (TP1, FetchPosition(4))]) is None
    assert s.advance_positions([(TP0, FetchPosition(12)), (TP1, FetchPosition(5)),
                                (TopicPartition(TOPIC, 9), FetchPosition(1))], log_starts=True) == [7, None, None]
    assert s.valid_positions([TP0, TP1]) == [FetchPosition(12), FetchPosition(5)]


def test_fetch_position_is_still_a_frozen_dataclass():
    p = FetchPosition(5, 1, 2)
    assert p == FetchPosition(offset=5, offset_epoch=1, current_leader_epoch=2)
    assert hash(p) == hash(FetchPosition(5, 1, 2)) and p != FetchPosition(5, 1, 3)
    assert FetchPosition(5) == FetchPosition(5, None, None)
    assert repr(p) == "FetchPosition(offset=5, offset_epoch=1, current_leader_epoch=2)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.offset = 6  # type: ignore[misc]
    assert dataclasses.replace(p, offset=9) == FetchPosition(9, 1, 2)
    assert pickle.loads(pickle.dumps(p)) == p
    assert dataclasses.astuple(p) == (5, 1, 2)
    with pytest.raises(TypeError):
        FetchPosition()  # type: ignore[call-arg]
