"""kcore.sharerecords.share_records against a plain-Python reference, and hostile input."""
from __future__ import annotations

import gc
import random

import pytest
from hypothesis import given, settings, strategies as st

from array import array

from kcore.records import decode_columnar, decode_consumer_records, encode_batch
from kcore.sharerecords import acquired_rows, share_records

from kclient.share.records import ShareConsumerRecord
from kclient.structs import ConsumerRecord
from share_reference import share_reference


def reference(records, ranges):
    """What share_records does, in Python."""
    return share_reference(records, ranges, ShareConsumerRecord)


def consumer_records(offsets):
    """Consumer records at ``offsets`` (ascending), decoded from real batches."""
    data = b"".join(encode_batch([(None, 1000 + o, f"k{o}".encode() if o % 3 else None, f"v{o}".encode(),
                                   [("h", b"x")] if o % 5 == 0 else [])], base_offset=o)
                    for o in offsets)
    return decode_consumer_records(data, ConsumerRecord, "orders", 2).records


def test_records_inside_ranges_get_their_delivery_count_and_gaps_are_runs():
    recs = consumer_records([10, 11, 12, 13, 14, 16, 20])
    ranges = [(10, 11, 2), (13, 17, 1), (19, 21, 5)]
    out, held, gaps = share_records(recs, ShareConsumerRecord, ranges)
    assert [(r.offset, r.delivery_count) for r in out] == [(10, 2), (11, 2), (13, 1), (14, 1), (16, 1), (20, 5)]
    assert all(type(r) is ShareConsumerRecord for r in out)
    assert out[0][:13] == tuple(recs[0]) and out[0].topic == "orders" and out[0].partition == 2
    assert held == [(10, 11), (13, 14), (16, 16), (20, 20)]
    assert gaps == [(15, 15), (17, 17), (19, 19), (21, 21)]
    assert (out, held, gaps) == reference(recs, ranges)


def test_adjacent_ranges_make_one_held_run_and_nothing_acquired_makes_nothing():
    recs = consumer_records(range(6))
    out, held, gaps = share_records(recs, ShareConsumerRecord, [(0, 2, 1), (3, 5, 2)])
    assert held == [(0, 5)] and gaps == [] and [r.delivery_count for r in out] == [1, 1, 1, 2, 2, 2]
    assert share_records(recs, ShareConsumerRecord, []) == ([], [], [])
    assert share_records([], ShareConsumerRecord, [(4, 6, 1)]) == ([], [], [(4, 6)])


def test_records_are_untracked_by_the_gc_unless_asked():
    recs = consumer_records([1, 2])
    out, _, _ = share_records(recs, ShareConsumerRecord, [(1, 2, 1)])
    assert not any(gc.is_tracked(r) for r in out)
    out, _, _ = share_records(recs, ShareConsumerRecord, [(1, 2, 1)], gc_untrack=False)
    assert all(gc.is_tracked(r) for r in out)
    del out, recs
    gc.collect()


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 60), max_size=40), st.lists(st.tuples(st.integers(0, 8), st.integers(1, 10)), max_size=8),
       st.integers(0, 10))
def test_against_the_reference(present, spans, start):
    recs = consumer_records(sorted(present))
    ranges, at = [], start
    for skip_len, count in spans:       # ascending, disjoint ranges with holes between them
        length = skip_len + 1
        ranges.append((at, at + length - 1, count))
        at += length + random.Random(at).randint(0, 3)
    assert share_records(recs, ShareConsumerRecord, ranges) == reference(recs, ranges)


@pytest.mark.parametrize("ranges, message", [
    ([(5, 4, 1)], "not a range"),
    ([(-1, 4, 1)], "not a range"),
    ([(0, 4, 1), (4, 6, 1)], "overlaps"),
    ([(5, 6, 1), (0, 1, 1)], "overlaps or precedes"),
])
def test_bad_ranges_are_value_errors(ranges, message):
    with pytest.raises(ValueError, match=message):
        share_records(consumer_records([0, 1]), ShareConsumerRecord, ranges)


@pytest.mark.parametrize("ranges", [[(0, 1)], [(0, 1, 1, 1)], [[0, 1, 1]], [(0, 1, "1")], [("0", 1, 1)],
                                    [None], 5])
def test_malformed_ranges_are_type_errors(ranges):
    with pytest.raises(TypeError):
        share_records(consumer_records([0, 1]), ShareConsumerRecord, ranges)


def test_oversized_offsets_are_refused():
    with pytest.raises(OverflowError):
        share_records([], ShareConsumerRecord, [(0, 2**64, 1)])


def test_records_out_of_order_or_repeated_are_value_errors():
    a, b = consumer_records([3, 4])
    for records in ([b, a], [a, a]):
        with pytest.raises(ValueError, match="ascending"):
            share_records(records, ShareConsumerRecord, [(0, 10, 1)])


@pytest.mark.parametrize("records", [[("short",)], [None], [tuple(range(14))], [(*range(3), "x", *range(9))]])
def test_records_that_are_not_consumer_records_are_refused(records):
    with pytest.raises(TypeError):
        share_records(records, ShareConsumerRecord, [(0, 10, 1)])


@pytest.mark.parametrize("cls", [ConsumerRecord, tuple, int, "ShareConsumerRecord", None])
def test_record_cls_must_be_a_14_field_tuple_class(cls):
    with pytest.raises(TypeError):
        share_records(consumer_records([0]), cls, [(0, 0, 1)])


def test_a_list_is_required():
    with pytest.raises(TypeError):
        share_records(None, ShareConsumerRecord, [])     # type: ignore[arg-type]
    with pytest.raises(TypeError):
        share_records(tuple(consumer_records([0])), ShareConsumerRecord, [])    # type: ignore[arg-type]


def rows_reference(offsets, ranges):
    """What acquired_rows does, in Python: the rows inside a range, as merged (start, stop) spans."""
    rows = [k for k, o in enumerate(offsets) if any(f <= o <= la for f, la, _ in ranges)]
    spans = []
    for k in rows:
        if spans and spans[-1][1] == k:
            spans[-1] = (spans[-1][0], k + 1)
        else:
            spans.append((k, k + 1))
    return spans


def test_acquired_rows_of_a_decoded_answer():
    data = b"".join(encode_batch([(None, 1, None, b"v", [])], base_offset=o) for o in [1, 2, 3, 5, 6, 9])
    offsets = decode_columnar(data).offsets
    assert acquired_rows(offsets, [(0, 2, 1), (3, 5, 2), (9, 9, 1)]) == [(0, 4), (5, 6)]
    assert acquired_rows(offsets, []) == [] and acquired_rows(array("q"), [(0, 5, 1)]) == []
    assert acquired_rows(offsets, [(7, 8, 1), (10, 20, 1)]) == []


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 60), max_size=40), st.lists(st.tuples(st.integers(0, 8), st.integers(0, 3)), max_size=8),
       st.integers(0, 10))
def test_acquired_rows_against_the_reference(present, spans, start):
    offsets = array("q", sorted(present))
    ranges, at = [], start
    for length, hole in spans:
        ranges.append((at, at + length, 1))
        at += length + 1 + hole
    assert acquired_rows(offsets, ranges) == rows_reference(list(offsets), ranges)


def test_acquired_rows_refuses_unordered_offsets_bad_ranges_and_wrong_buffers():
    with pytest.raises(ValueError, match="ascending"):
        acquired_rows(array("q", [1, 3, 2]), [(0, 5, 1)])
    with pytest.raises(ValueError, match="ascending"):
        acquired_rows(array("q", [1, 1]), [(0, 5, 1)])
    with pytest.raises(ValueError):
        acquired_rows(array("q", [1]), [(5, 4, 1)])
    with pytest.raises(ValueError):
        acquired_rows(array("q", [1]), [(0, 4, 1), (3, 6, 1)])
    with pytest.raises(TypeError):
        acquired_rows(array("q", [1]), [(0, 4)])
    with pytest.raises(OverflowError):
        acquired_rows(array("q", [1]), [(0, 2**64, 1)])
    for bad in (array("i", [1, 2]), b"\x00" * 16, None, memoryview(array("q", [1, 2, 3, 4]))[::2]):
        with pytest.raises((TypeError, ValueError, BufferError)):
            acquired_rows(bad, [(0, 4, 1)])
