"""kclient.aio's LazyRecords: the rows of polled columns, made into ConsumerRecords on the
event loop as getmany()/getone() take them. Checked against the records the synchronous
poll() makes from the same columns (consumer_records over each piece), for every slice and
index, over pieces of several decoded answers, with and without zero.copy.records."""
from __future__ import annotations

import gc
import random

import pytest

from kclient.aio._buffer import RecordBuffer, position_after
from kclient.aio._core import FetchPosition
from kclient.aio._lazy import LazyRecords
from kclient.consumer.columnar import ColumnarChunk, ColumnarRecords
from kclient.structs import ConsumerRecord, TopicPartition
from kcore import records as R

TP = TopicPartition("t", 3)


def answer(base: int, n: int, epoch: int) -> bytes:
    """n records from offset base in batches of 3 (headers on every other record), then a
    commit marker: the marker takes an offset and yields no row."""
    data = b""
    for start in range(0, n, 3):
        rows = [(None, 1000 + base + i, b"k%d" % (base + i) if i % 4 else None, b"v%d" % (base + i),
                 [("h", b"%d" % i)] if i % 2 else [])
                for i in range(start, min(start + 3, n))]
        data += R.encode_batch(rows, base_offset=base + start, partition_leader_epoch=epoch)
    return data


def columns(cuts: list[tuple[int, int, int, int, int]]) -> tuple[ColumnarRecords, list]:
    """ColumnarRecords over pieces (answer base, answer size, epoch, i, j) and the records
    consumer_records makes from the same pieces (the reference)."""
    pieces, want = [], []
    for base, n, epoch, i, j in cuts:
        chunk = ColumnarChunk(R.decode_columnar(answer(base, n, epoch), skip_control=True))
        pieces.append((chunk, i, j))
        want += R.consumer_records(chunk.batch, ConsumerRecord, TP.topic, TP.partition, i, j)
    return ColumnarRecords(TP, pieces), want


CUTS = [(0, 10, 2, 4, 10), (10, 7, 2, 0, 7), (17, 12, 5, 0, 9)]


@pytest.mark.parametrize("views", [False, True])
def test_every_slice_and_index_matches_the_synchronous_records(views):
    cols, want = columns(CUTS)
    lazy = LazyRecords(cols, views)
    n = len(want)
    assert len(lazy) == n == 22
    for a in range(n + 1):
        for b in range(a, n + 1):
            got = lazy[a:b]
            assert type(got) is list and got == want[a:b]
            assert all(type(r) is ConsumerRecord for r in got)
    for k in [*range(n), *range(-n, 0)]:
        assert lazy[k] == want[k]
    assert list(lazy) == want
    assert lazy[::2] == want[::2] and lazy[5:1] == [] and lazy[-3:] == want[-3:]
    with pytest.raises(IndexError):
        lazy[n]
    with pytest.raises(IndexError):
        lazy[-n - 1]
    if views:
        assert type(lazy[1].value) is memoryview


def test_slices_are_new_lists_of_untracked_records():
    cols, want = columns(CUTS)
    lazy = LazyRecords(cols, False)
    first = lazy[0:5]
    first.clear()                       # the application owns what it was handed
    assert lazy[0:5] == want[0:5]
    assert lazy[0:5] is not lazy[0:5]
    assert not any(gc.is_tracked(r) for r in lazy[0:22])


def test_getone_makes_windows_ahead_and_positions_follow():
    cols, want = columns([(0, 1200, 1, 0, 1200)])
    buf = RecordBuffer(columnar=False)
    end = FetchPosition(1201, 1, None)      # past a control record after the last one
    buf.add(TP, LazyRecords(cols, False), end)
    got = []
    for k in range(601):
        rec, _, run, stop = buf.take_one(None, set())
        got.append(rec)
        assert type(run.records) is list and len(run.records) <= 500
        assert position_after(run, stop) == FetchPosition(want[k].offset + 1, 1, None)
    # getmany() in between takes the rest of the window, then from the rest of the run.
    out, pos = buf.take(None, set(), 450)
    got += out[TP]
    assert pos[TP] == FetchPosition(want[1050].offset + 1, 1, None)
    while buf:
        rec, _, run, stop = buf.take_one(None, set())
        got.append(rec)
    assert position_after(run, stop) == end
    assert got == want and buf.count == 0


def test_the_buffer_hands_out_lazy_runs_in_batches_with_positions():
    cols, want = columns(CUTS)
    buf = RecordBuffer(columnar=False)
    end = FetchPosition(40, 5, None)
    buf.add(TP, LazyRecords(cols, False), end)
    got: list = []
    positions = []
    while buf:
        out, pos = buf.take(None, set(), 5)
        got += out[TP]
        positions.append(pos[TP])
    assert got == want
    # The position after each batch: past its last record (epoch of that record), and past
    # the control records that follow the run once the run is taken to its end.
    assert [p.offset for p in positions] == [want[k].offset + 1 for k in (4, 9, 14, 19)] + [40]
    assert positions[0].offset_epoch == 2 and positions[-1] is end
    assert buf.count == 0


def test_getone_takes_lazy_records_one_by_one():
    cols, want = columns(CUTS)
    buf = RecordBuffer(columnar=False)
    buf.add(TP, LazyRecords(cols, False), None)
    got = []
    while buf:
        rec, tp, _, _ = buf.take_one(None, set())
        got.append(rec)
    assert got == want


def test_random_batches_match():
    rng = random.Random(5)
    cols, want = columns([(0, 50, 1, 7, 50), (50, 30, 1, 0, 30), (80, 64, 3, 0, 40)])
    lazy = LazyRecords(cols, False)
    buf = RecordBuffer(columnar=False)
    buf.add(TP, lazy, None)
    got: list = []
    while buf:
        if rng.random() < 0.3:
            got.append(buf.take_one(None, set())[0])
        else:
            got += buf.take(None, set(), rng.randint(1, 40))[0][TP]
    assert got == want
