"""A poll's time-between-poll recorded in the event of what it handed out (poll_gap, then
polled(..., gap) or record_poll_gap) gives the statistics that recording it as the poll
starts (poll_started) gives, whatever the mix of polls with and without records and reads
in between."""
from __future__ import annotations

import random

from test_metrics_recording import _readings, _state

from kclient.consumer.metrics import ConsumerMetrics


def test_a_gap_carried_by_the_polled_event_equals_one_recorded_at_the_start():
    rng = random.Random(17)
    carried, started = ConsumerMetrics(window_ms=100, samples=2), ConsumerMetrics(window_ms=100, samples=2)
    now = 0
    for _ in range(800):
        now += rng.randrange(0, 30)
        gap = carried.poll_gap(now)
        started.poll_started(now)
        if rng.random() < 0.3:          # nothing handed out
            if gap is not None:
                carried.record_poll_gap(gap)
        else:
            records = rng.randrange(1, 50)
            sets = [(rng.choice("ab"), rng.randrange(1, 50), rng.randrange(100, 10**5))
                    for _ in range(rng.randrange(0, 3))]
            positions = [(rng.choice("ab"), rng.randrange(3), rng.randrange(0, 1000),
                          rng.choice((None, rng.randrange(99)))) for _ in range(rng.randrange(0, 4))]
            later = now + rng.randrange(0, 5)
            carried.polled(records, 10 * records, sets, positions, later, gap)
            started.polled(records, 10 * records, sets, positions, later)
        if rng.random() < 0.02:
            assert _readings(carried, now) == _readings(started, now)
    assert _state(carried) == _state(started)
    assert carried.last_poll_start_ms == started.last_poll_start_ms == now
