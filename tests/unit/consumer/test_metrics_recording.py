"""ConsumerMetrics' grouped records (one lock per request, response, network poll and Fetch
answer) against the one-statistic calls they stand for: the same statistics, values and
timestamps, so every metric read from them is the same."""
from __future__ import annotations

import random

import pytest

from kclient.consumer.metric_table import TABLE
from kclient.consumer.metrics import ConsumerMetrics, WindowedStat


def _state(stats: ConsumerMetrics) -> dict:
    stats.flush()       # the events appended so far, into the statistics
    return {key: (s.total_count, s.total_sum, [list(w) for w in s._windows]) for key, s in stats._stats.items()}


def _readings(stats: ConsumerMetrics, now_ms: int) -> dict:
    out = {}
    for m in TABLE:
        if m.reading == "gauge":
            continue
        for scope in ["", "node-id=node-1", "node-id=node-2"]:
            out[(m.name, scope)] = stats.read(m, scope, now_ms)
    return out


def test_grouped_records_equal_the_single_ones():
    rng = random.Random(3)
    grouped, single = ConsumerMetrics(window_ms=100, samples=2), ConsumerMetrics(window_ms=100, samples=2)
    now = 1000
    for _ in range(500):
        now += rng.randrange(0, 40)
        node = rng.choice((1, 2))
        kind = rng.randrange(4)
        if kind == 0:
            size = rng.randrange(50, 500)
            grouped.request_sent(node, size, now)
            single.record_node(node, "request-size", size, now)
            single.record("network-io", 1, now)
        elif kind == 1:
            size, latency = rng.randrange(50, 5000), rng.randrange(0, 30)
            grouped.response_received(node, size, latency, now)
            single.record_node(node, "response-size", size, now)
            single.record_node(node, "request-latency", latency, now)
            single.record("network-io", 1, now)
        elif kind == 2:
            wait, io = rng.randrange(0, 10**7), rng.randrange(0, 10**6)
            grouped.network_polled(wait, io, now)
            single.record("select-wait-ns", wait, now)
            single.record("io-ns", io, now)
        else:
            latency = rng.randrange(0, 600)
            throttle = rng.choice((None, 0, rng.randrange(1, 100)))
            size = rng.choice((None, 0, rng.randrange(1, 10**6)))
            grouped.fetch_answered(latency, throttle, size, now)
            single.fetch_done(latency, now)
            if throttle is not None:
                single.record("fetch-throttle", throttle, now)
            if size is not None:
                single.record("fetch-size", size, now)
        if rng.random() < 0.05:
            assert _readings(grouped, now) == _readings(single, now)
    assert _state(grouped) == _state(single)
    assert _readings(grouped, now + 50) == _readings(single, now + 50)


@pytest.mark.parametrize("values", [[5], [3, 1, 4, 1, 5, 9, 2, 6], [7, 7, 7], [-1, -5, 2], [0.5, 0.25, 1.5]])
def test_a_windows_count_sum_max_and_min(values):
    s = WindowedStat(1000, 2)
    for v in values:
        s.record(v, 10)
    assert (s.total_count, s.total_sum) == (len(values), sum(values))
    assert (s.max(10), s.min(10), s.avg(10)) == (max(values), min(values), sum(values) / len(values))
    s.record(-100, 1500)            # a new window: the old one still counts
    assert (s.max(1500), s.min(1500)) == (max(values), -100)
    s.record(3, 4600)               # both earlier windows are past
    assert (s.max(4600), s.min(4600), s.window_count(4600)) == (3, 3, 1)


def test_record_many_equals_one_record_per_value():
    rng = random.Random(7)
    many, single = WindowedStat(100, 2), WindowedStat(100, 2)
    now = 0
    for _ in range(300):
        now += rng.randrange(0, 60)
        values = [rng.randrange(-50, 10**6) for _ in range(rng.randrange(0, 6))]
        many.record_many(values, now)
        for v in values:
            single.record(v, now)
        assert (many.total_count, many.total_sum, many._windows) == (single.total_count, single.total_sum,
                                                                     single._windows)


def test_record_sets_of_several_topics_equal_one_record_per_set():
    rng = random.Random(11)
    grouped, single = ConsumerMetrics(window_ms=100, samples=2), ConsumerMetrics(window_ms=100, samples=2)
    now = 0
    for _ in range(200):
        now += rng.randrange(0, 60)
        sets = [(rng.choice("abc"), rng.randrange(1, 50), rng.randrange(100, 10**5)) for _ in range(rng.randrange(0, 8))]
        grouped.record_sets(sets, now)
        for s in sets:
            single.record_sets([s], now)
    assert _state(grouped) == _state(single)


def test_record_series_equals_one_record_per_value_across_windows():
    rng = random.Random(5)
    series, single = WindowedStat(100, 2), WindowedStat(100, 2)
    now = 0
    for _ in range(300):
        values, times = [], []
        for _ in range(rng.randrange(1, 12)):
            now += rng.randrange(0, 40)
            values.append(rng.randrange(-50, 10**6))
            times.append(now - rng.randrange(0, 3))     # threads' clocks read a little apart
        series.record_series(values, times)
        for v, t in zip(values, times):
            single.record(v, t)
        assert (series.total_count, series.total_sum, series._windows) == (single.total_count, single.total_sum,
                                                                           single._windows)


def test_polls_folded_in_bulk_equal_their_statistics_recorded_at_once():
    rng = random.Random(13)
    folded, single = ConsumerMetrics(window_ms=100, samples=2), ConsumerMetrics(window_ms=100, samples=2)
    now = 0
    last: int | None = None
    for _ in range(600):
        now += rng.randrange(0, 30)
        records = rng.randrange(1, 50)
        sets = [(rng.choice("ab"), rng.randrange(1, 50), rng.randrange(100, 10**5)) for _ in range(rng.randrange(0, 3))]
        positions = [(rng.choice("ab"), rng.randrange(3), rng.randrange(0, 1000), rng.choice((None, rng.randrange(99))))
                     for _ in range(rng.randrange(0, 4))]
        folded.poll_started(now)
        folded.polled(records, 10 * records, sets, positions, now)
        single.record("records", records, now)
        single.record("bytes", 10 * records, now)
        single.record_sets(sets, now)
        single.record_positions(positions, now)
        if last is not None:
            single.record("time-between-poll", now - last, now)
        last = now
        if rng.random() < 0.02:
            assert _readings(folded, now) == _readings(single, now)
    assert _state(folded) == _state(single)
