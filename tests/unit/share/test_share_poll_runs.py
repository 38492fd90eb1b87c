"""A poll's acknowledgements a run at a time: PendingAcks.put_runs against put() one run at a
time, the counted (not listed) outcome of acknowledgements, and a share session's plan for an
unchanged set of partitions."""
from __future__ import annotations

import random

from kclient.share.acknowledgements import GAP, AcknowledgeType, OffsetRanges, PendingAcks
from kclient.share.fetcher import AckResult
from kclient.share.session import ShareSession
from kclient.structs import TopicPartition
from share_fakes import TID

TP = TopicPartition("orders", 0)
ACCEPT, RELEASE = int(AcknowledgeType.ACCEPT), int(AcknowledgeType.RELEASE)


def _by_put(start: list[tuple[int, int, int]], runs, kind) -> PendingAcks:
    acks = PendingAcks()
    for first, last, k in start:
        acks.put(first, last, k)
    for first, last in runs:
        acks.put(first, last, kind)
    return acks


def test_put_runs_is_put_one_run_at_a_time():
    rnd = random.Random(7)
    for _ in range(500):
        start = [(f, f + rnd.randrange(3), rnd.choice((GAP, ACCEPT, RELEASE)))
                 for f in rnd.sample(range(40), rnd.randrange(3))]
        runs = []
        for f in sorted(rnd.sample(range(40), rnd.randrange(5))):   # sorted: a poll's; may overlap
            runs.append((f, f + rnd.randrange(4)))
        if rnd.random() < 0.2:
            rnd.shuffle(runs)                                         # not a poll's: any order
        got = _by_put(start, [], 0)
        got.put_runs(runs, ACCEPT)
        want = _by_put(start, runs, ACCEPT)
        assert got.batches() == want.batches(), (start, runs)
        assert got.offsets() == want.offsets() and len(got) == len(want)
        assert got.count() == len(got.offsets())


def test_put_runs_of_a_poll_go_in_as_they_are():
    acks = PendingAcks()
    acks.put_runs([(0, 9), (12, 12), (14, 20)], ACCEPT)
    assert acks.runs == [(0, 9, ACCEPT), (14, 20, ACCEPT)] and acks.singles == {12: ACCEPT}
    assert acks.batches() == [{"first_offset": 0, "last_offset": 9, "acknowledge_types": [1]},
                              {"first_offset": 12, "last_offset": 12, "acknowledge_types": [1]},
                              {"first_offset": 14, "last_offset": 20, "acknowledge_types": [1]}]


def test_an_outcome_counts_the_applications_offsets_and_lists_them_when_read():
    acks = PendingAcks()
    acks.put_runs([(0, 9), (15, 15)], ACCEPT)
    acks.put(12, 13, GAP)                 # the fetcher's own: not the application's
    r = AckResult.of(TP, acks, None)
    assert r.count == 11 and r._offsets is None
    assert r.offsets == OffsetRanges([(0, 9), (15, 15)]) and sorted(r.offsets)[-1] == 15
    assert r == AckResult(TP, OffsetRanges([(0, 9), (15, 15)]), None)
    assert r != AckResult(TP, OffsetRanges([(0, 9)]), None)
    assert "partition=TopicPartition(topic='orders', partition=0)" in repr(r) and "0..9" in repr(r)
    assert AckResult(TP, OffsetRanges([(3, 4)]), None).count == 2


def test_a_session_plans_the_same_partitions_once():
    s = ShareSession(1)
    a, b = (TID, 0), (TID, 1)
    wanted = {a: "tp-a", b: "tp-b"}                  # the fetcher's map: the same object each time
    assert s.plan(wanted) == (0, {a, b}, set())
    s.answered()
    assert s.plan(wanted) == (1, set(), set())
    s.answered()
    assert s.plan(wanted) == (2, set(), set()) and s.partitions == {a, b}
    s.answered()
    assert s.plan({a: "tp-a"}) == (3, set(), {b})    # another map: worked out
    s.answered()
    assert s.partitions == {a}
    assert s.plan(wanted) == (4, {b}, set())        # the earlier map again: worked out again
    s.answered()
    assert s.plan(wanted) == (5, set(), set())
    s.reset("test")
    assert s.plan(wanted) == (0, {a, b}, set())     # a new session names everything again
    s.reset("the request failed")
    assert s.plan(wanted) == (0, {a, b}, set())
