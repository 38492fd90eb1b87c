"""``zero.copy.records``: consumer_records(views=True) hands out each key and value as a
read-only memoryview into the decoded data instead of a bytes copy.

The reference is the bytes path (and through it the plain-Python conversion of
test_record_deserializing): same records field by field, content equal, only the type of
key and value differs. A view must keep the memory it points into alive as long as it is
referenced, whatever else is dropped (the batch, the caller's buffer, later polls).
"""
from __future__ import annotations

import gc
import random
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kclient.structs import ConsumerRecord
from kcore import records as R
from test_fetcher import T, TP0, TP1
from test_record_deserializing import (_answer, _fetcher, fetch_bytes, mutated_cases, ref_consumer_records,
                                       rows_in_slices)

CR = ConsumerRecord


def view_rows(data, topic, partition, cuts, **kw):
    """rows_in_slices with views=True."""
    cb = R.decode_columnar(data, skip_control=True, **kw)
    out, i, k = [], 0, 0
    while i < cb.num_records:
        j = min(i + cuts[k % len(cuts)], cb.num_records)
        out += R.consumer_records(cb, CR, topic, partition, i, j, views=True)
        i, k = j, k + 1
    return cb, out


def assert_views_match(got, want):
    """got (views) and want (bytes) are the same records; got's key/value are read-only
    memoryviews (or None where want's are)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is CR
        for field in ("key", "value"):
            gv, wv = getattr(g, field), getattr(w, field)
            if wv is None:
                assert gv is None
            else:
                assert type(gv) is memoryview and gv.readonly and gv.format == "B" and gv.ndim == 1
                assert gv.tobytes() == wv and len(gv) == len(wv) and gv == wv
        assert g._replace(key=w.key, value=w.value) == w
        assert [type(x) for x in g[:6]] == [type(x) for x in w[:6]]
        assert [type(x) for x in g[8:]] == [type(x) for x in w[8:]]
    assert got == want                      # a "B" memoryview equals the bytes it holds


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fetch_bytes(), st.booleans(), st.integers(0, 2**31 - 1),
       st.lists(st.integers(1, 9), min_size=1, max_size=4))
def test_views_equal_the_bytes_path(case, check_crcs, partition, cuts):
    data, aborted, fetch_offset = case
    kw = dict(check_crcs=check_crcs, fetch_offset=fetch_offset, aborted_transactions=aborted)
    want = ref_consumer_records(data, "topic", partition, **kw)[1]
    assert rows_in_slices(data, "topic", partition, cuts, **kw)[1] == want
    assert_views_match(view_rows(data, "topic", partition, cuts, **kw)[1], want)


@pytest.mark.parametrize("codec", range(5))
def test_views_outlive_the_batch_and_the_callers_buffer(codec):
    big = random.Random(9).randbytes(10_000)
    records = [(None, 1, b"k%d" % i, big[i:] if i % 2 else b"", [("h", b"x")] if i % 3 else []) for i in range(40)]
    records.append((None, 2, None, None, []))
    data = bytearray(R.encode_batch(records, codec=codec))
    want = ref_consumer_records(bytes(data), "t", 0)[1]
    cb, got = view_rows(data, "t", 0, [7])
    assert_views_match(got, want)
    if codec == 0:
        # Uncompressed: the views point into the caller's buffer, which cannot be resized
        # (so never reallocated under them) while one exists.
        with pytest.raises(BufferError):
            data.extend(b"x")
    del cb
    data = None
    gc.collect()
    assert_views_match(got, want)
    keep = got[5].value
    del got
    gc.collect()
    assert keep == want[5].value
    blob = R.encode_batch(records, codec=codec)
    for _ in range(3):                      # later batches take the freed memory, not keep's
        view_rows(blob, "t", 0, [40])
    assert keep == want[5].value


def test_views_into_a_writable_buffer_are_read_only():
    data = bytearray(R.encode_batch([(None, 1, b"key", b"value", [])]))
    (rec,) = view_rows(data, "t", 0, [1])[1]
    with pytest.raises(TypeError):
        rec.value[0] = 0
    assert bytes(data).count(b"value") == 1


def test_sizes_past_the_small_int_cache_are_right_per_record():
    sizes = [300, 300, 5000, 300, 257, 257, 0, 256, 70_000, 5000]
    data = R.encode_batch([(None, 1, b"k" * (s // 2), b"v" * s, []) for s in sizes])
    for views in (False, True):
        cb = R.decode_columnar(data)
        recs = R.consumer_records(cb, CR, "t", 0, 0, len(sizes), views=views)
        assert [r.serialized_value_size for r in recs] == sizes
        assert [r.serialized_key_size for r in recs] == [s // 2 for s in sizes]
        assert [len(r.value) for r in recs] == sizes


def test_views_leak_no_references():
    blob = R.encode_batch([(None, 5 + i, b"k", b"v%d" % i, [("h", b"1")] if i % 2 else []) for i in range(300)])
    cb = R.decode_columnar(blob)
    gc.collect()
    base = (sys.getrefcount(blob), sys.getrefcount(cb))
    for _ in range(3):
        recs = R.consumer_records(cb, CR, "t", 1, 10, 300, views=True)
        assert recs[0].value == b"v10"
        del recs
        with pytest.raises(IndexError):
            R.consumer_records(cb, CR, "t", 1, 10, 301, views=True)
    gc.collect()
    assert (sys.getrefcount(blob), sys.getrefcount(cb)) == base


def test_views_of_hostile_bytes_match_the_reference_or_fail_in_decode_columnar():
    ok = 0
    for rng, data, kw in mutated_cases(91, 1500):
        try:
            want = ref_consumer_records(data, "t", 9, **kw)[1]
        except Exception:
            continue
        ok += 1
        assert_views_match(view_rows(data, "t", 9, [rng.randint(1, 7)], **kw)[1], want)
    assert ok > 50


def test_views_of_a_batch_with_tampered_arrays_fail_cleanly():
    blob = R.encode_batch([(None, 5 + i, b"k", b"v", []) for i in range(4)])
    for mutate in (list.clear, lambda b: b.insert(0, "junk"), lambda b: b.reverse()):
        cb = R.decode_columnar(blob + R.encode_batch([(None, 1, None, b"w", [])], base_offset=4))
        mutate(cb.batches)
        try:
            recs = R.consumer_records(cb, CR, "t", 0, 0, 5, views=True)
        except (TypeError, ValueError):
            continue
        assert [bytes(r.value) for r in recs] == [b"v"] * 4 + [b"w"]
    assert R.consumer_records(R.decode_columnar(None), CR, "t", 0, 0, 0, views=True) == []


def test_fetcher_hands_out_views_with_the_setting_and_bytes_without():
    data0 = R.encode_batch([(None, 10 + i, b"k%d" % i, b"v%d" % i, []) for i in range(6)])
    data1 = R.encode_batch([(None, 30 + i, None, b"p1-%d" % i, []) for i in range(5)], codec=3)
    results = {}
    for zero_copy in (False, True):
        env = _fetcher(**{"max.poll.records": 4, "zero.copy.records": zero_copy})
        _answer(env, data0, data1)
        got: dict = {}
        for _ in range(4):
            for tp, recs in env.fetcher.fetched_records()[0].items():
                got.setdefault(tp, []).extend(recs)
        assert {type(r.value) for rs in got.values() for r in rs} == {memoryview if zero_copy else bytes}
        assert env.subs.position(TP0).offset == 6 and env.subs.position(TP1).offset == 5
        results[zero_copy] = got
    assert results[True] == results[False]
    assert results[True][TP0][0].value == b"v0" and results[True][TP1][0].key is None
    assert T == TP0.topic


def test_fetcher_deserializers_receive_the_views():
    seen = []

    def value_de(data):
        seen.append(type(data))
        return bytes(data).decode()

    env = _fetcher(**{"zero.copy.records": True, "value.deserializer": value_de})
    _answer(env, R.encode_batch([(None, 1, b"kk", b"vvv", [])]), None)
    (rec,) = env.fetcher.fetched_records()[0][TP0]
    assert rec.value == "vvv" and type(rec.key) is memoryview and rec.serialized_value_size == 3
    assert seen == [memoryview]


def test_views_are_untracked_while_their_record_holds_them_and_tracked_after():
    """A record type's views stay out of the cyclic GC while the record holds them (their
    collections cost more than the copy saved); a memoryview's dealloc needs it tracked, so
    the record's dealloc tracks each one again, whoever else still refers to it."""
    from collections import namedtuple
    blob = R.encode_batch([(None, 1, b"k%d" % i, b"value-%d" % i, []) for i in range(50)])
    cb = R.decode_columnar(blob)
    recs = R.consumer_records(cb, CR, "t", 0, 0, 50, views=True)
    assert not any(gc.is_tracked(r.value) or gc.is_tracked(r.key) for r in recs)
    kept_value, kept_key = recs[3].value, recs[4].key
    replaced = recs[5]._replace(offset=99)              # shares recs[5]'s views
    as_tuple, as_list = tuple(recs[6]), [recs[7].value]
    del recs
    gc.collect()
    assert gc.is_tracked(kept_value) and gc.is_tracked(kept_key) and gc.is_tracked(replaced.value)
    assert gc.is_tracked(as_tuple[7]) and gc.is_tracked(as_list[0])
    assert (kept_value, kept_key, replaced.value, as_tuple[7], as_list[0]) == \
        (b"value-3", b"k4", b"value-5", b"value-6", b"value-7")
    del kept_value, kept_key, replaced, as_tuple, as_list
    gc.collect()
    # Other classes (their dealloc is tuple's) and gc_untrack=False keep their views tracked.
    Plain = namedtuple("Plain", CR._fields)
    for cls, untrack in ((Plain, True), (CR, False)):
        recs = R.consumer_records(cb, cls, "t", 0, 0, 50, views=True, gc_untrack=untrack)
        assert all(gc.is_tracked(r.value) for r in recs)
        one = recs[0].value
        del recs
        gc.collect()
        assert one == b"value-0"


def test_views_survive_any_order_of_drops():
    rng = random.Random(4)
    blob = R.encode_batch([(None, 1, b"k" if i % 2 else None, b"v" * (i % 7), []) for i in range(200)], codec=2)
    # Young-generation collections inside the loop (a full one costs as much as the whole heap
    # of the test process), a full one per round.
    for _ in range(8):
        cb = R.decode_columnar(blob)
        recs = R.consumer_records(cb, CR, "t", 0, 0, 200, views=True)
        held = [rng.choice((r.key, r.value, r, r._replace(partition=1))) for r in rng.sample(recs, 60)]
        del cb
        rng.shuffle(recs)
        while recs:
            recs.pop()
            if rng.random() < 0.05:
                gc.collect(0)
        rng.shuffle(held)
        for h in held:
            if type(h) is memoryview:
                assert gc.is_tracked(h) and set(bytes(h)) <= {ord("k"), ord("v")}
        del held
        gc.collect()
