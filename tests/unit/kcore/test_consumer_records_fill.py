"""consumer_records against a plain-Python reference where its compiled shortcuts matter: the
ints the interpreter caches (-5..256) and those just outside them, in every int field of a
record (offset, timestamp type, key/value/header sizes); the list it returns, sized up front and
filled in place; and the cyclic GC, which never sees that list before it is filled."""
from __future__ import annotations

import gc

import pytest
from kcore import records as R

from kclient.structs import ConsumerRecord

TOPIC = "t"


def _rows(n: int):
    """Rows whose sizes walk across the small-int bounds."""
    sizes = [None, 0, 1, 2, 255, 256, 257, 300, 1000]
    out = []
    for i in range(n):
        ks = sizes[i % len(sizes)]
        vs = sizes[(i // 3) % len(sizes)]
        key = None if ks is None else bytes([65 + i % 26]) * ks
        value = None if vs is None else bytes([97 + i % 26]) * vs
        headers = [] if i % 4 else [("h" * (i % 7), b"x" * (i % 300)), ("é", None)][: 1 + i % 2]
        out.append((None, 1_700_000_000_000 + i, key, value, headers))
    return out


def _reference(rows, base_offset: int, ts_type: int, epoch: int, partition: int):
    """What each record must be, from the rows written (kafka-python's ConsumerRecord fields)."""
    want = []
    for i, (_, ts, key, value, headers) in enumerate(rows):
        hsize = (sum(len(k.encode()) + (0 if v is None else len(v)) for k, v in headers)
                 if headers else -1)
        want.append(ConsumerRecord(TOPIC, partition, None if epoch < 0 else epoch, base_offset + i,
                                   ts, ts_type, key, value, list(headers), None,
                                   -1 if key is None else len(key), -1 if value is None else len(value),
                                   hsize))
    return want


@pytest.mark.parametrize("base_offset", [0, 250, 2**40])
@pytest.mark.parametrize("ts_type", [0, 1])
def test_every_field_matches_the_reference_across_the_small_int_bounds(base_offset, ts_type):
    rows = _rows(40)
    data = R.encode_batch(rows, base_offset=base_offset, timestamp_type=ts_type, partition_leader_epoch=3)
    cb = R.decode_columnar(data)
    want = _reference(rows, base_offset, ts_type, 3, 7)
    if ts_type == 1:   # log-append time: every record carries the batch's max timestamp
        want = [w._replace(timestamp=max(r[1] for r in rows)) for w in want]
    for start, stop in [(0, 40), (0, 1), (5, 17), (39, 40), (13, 13)]:
        got = R.consumer_records(cb, ConsumerRecord, TOPIC, 7, start, stop)
        assert type(got) is list and len(got) == stop - start
        assert [tuple(g) for g in got] == [tuple(w) for w in want[start:stop]]
        for g in got:
            assert all(type(g[k]) is int for k in (1, 3, 5, 10, 11, 12))
        assert gc.is_tracked(got) or not got
        assert not any(gc.is_tracked(g) for g in got)


def test_offsets_and_sizes_around_the_bounds_are_equal_ints_not_shared_state():
    rows = [(None, 1_700_000_000_000, None, b"v" * 256, []), (None, 1_700_000_000_000, None, b"v" * 257, [])]
    cb = R.decode_columnar(R.encode_batch(rows, base_offset=-5 + 5))
    a = R.consumer_records(cb, ConsumerRecord, TOPIC, 0, 0, 2)
    b = R.consumer_records(cb, ConsumerRecord, TOPIC, 0, 0, 2)
    assert [r.serialized_value_size for r in a] == [256, 257] == [r.serialized_value_size for r in b]
    assert [r.offset for r in a + b] == [0, 1, 0, 1]
    assert a[0].serialized_key_size == -1 and a[0].serialized_header_size == -1


def test_rows_outside_the_batch_raise_before_anything_is_made():
    cb = R.decode_columnar(R.encode_batch(_rows(10)))
    for start, stop in [(-1, 3), (3, 2), (0, 11), (11, 11)]:
        with pytest.raises(IndexError):
            R.consumer_records(cb, ConsumerRecord, TOPIC, 0, start, stop)
    assert R.consumer_records(cb, ConsumerRecord, TOPIC, 0, 10, 10) == []


def test_the_gc_never_sees_the_list_while_it_is_being_filled():
    """Records with headers allocate tracked objects while the list is filled, so collections
    run in the middle of it; a GC callback walking every tracked list would crash on a slot
    not filled yet."""
    rows = [(None, 1_700_000_000_000 + i, b"k", b"v", [("h", b"x")]) for i in range(3000)]
    cb = R.decode_columnar(R.encode_batch(rows))
    seen = []

    def walk(phase, info):
        if phase == "start":
            n = 0
            for o in gc.get_objects(0):
                if type(o) is list:
                    for item in o:       # a NULL slot here would crash the interpreter
                        n += item is None
            seen.append(n)

    old = gc.get_threshold()
    gc.callbacks.append(walk)
    gc.set_threshold(50)
    try:
        got = R.consumer_records(cb, ConsumerRecord, TOPIC, 0, 0, 3000, gc_untrack=False)
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(walk)
    assert seen, "no collection ran while the records were made"
    assert len(got) == 3000 and all(r.headers == [("h", b"x")] for r in got)
    assert gc.is_tracked(got)
