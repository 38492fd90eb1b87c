"""kcore.sharerecords.share_records_of (share records made in one step from a columnar decode)
and share_record_type, against a plain-Python reference, and hostile input."""
from __future__ import annotations

import gc
import pickle
import random
from collections import namedtuple

import pytest
from hypothesis import given, settings, strategies as st

from kcore.columnar import ColumnarBatch
from kcore.records import decode_columnar, decode_consumer_records, encode_batch
from kcore.sharerecords import share_record_type, share_records_of

from kclient.share.records import ShareConsumerRecord
from kclient.structs import ConsumerRecord
from share_reference import share_reference

from headers_reuse import assert_headers_lists_reused_only_when_untouched

PlainShareRecord = namedtuple("PlainShareRecord", ShareConsumerRecord._fields)


def answer(batches):
    """The bytes of a ShareFetch answer: ``batches`` is [(base offset, leader epoch, [offset
    deltas])], each a producer batch of records with a key on some, headers on others (one
    with a header key that is not valid UTF-8)."""
    data = b""
    for base, epoch, deltas in batches:
        records = []
        for d in deltas:
            o = base + d
            headers = [("h", b"x"), ("\u00e9", None)] if o % 5 == 0 else ([(b"\xff\xfe", b"y")] if o % 7 == 0 else [])
            records.append((d, 1000 + o, f"k{o}".encode() if o % 3 else None, f"v{o}".encode() if o % 4 else None,
                            headers))
        data += encode_batch(records, base_offset=base, partition_leader_epoch=epoch,
                             last_offset_delta=max(deltas))
    return data


def reference(data, ranges, cls=PlainShareRecord):
    """What share_records_of does, in Python, from the record decoder (not the columnar one)."""
    return share_reference(decode_consumer_records(data, ConsumerRecord, "orders", 3).records, ranges, cls)


def of(data, ranges, cls=ShareConsumerRecord, **kw):
    return share_records_of(decode_columnar(data), cls, "orders", 3, ranges, **kw)


def test_rows_inside_ranges_become_share_records_item_for_item():
    data = answer([(10, 4, [0, 1, 2, 3, 4]), (16, 5, [0]), (20, 6, [0, 1])])     # no 15, 17-19
    ranges = [(10, 11, 2), (13, 17, 1), (19, 21, 5)]
    out, held, gaps = of(data, ranges)
    assert [(r.offset, r.delivery_count, r.leader_epoch) for r in out] == [
        (10, 2, 4), (11, 2, 4), (13, 1, 4), (14, 1, 4), (16, 1, 5), (20, 5, 6), (21, 5, 6)]
    assert all(type(r) is ShareConsumerRecord for r in out)
    assert held == [(10, 11), (13, 14), (16, 16), (20, 21)] and gaps == [(15, 15), (17, 17), (19, 19)]
    want = reference(data, ranges)
    assert (out, held, gaps) == want
    assert [tuple(r) for r in out] == [tuple(r) for r in want[0]]
    assert out[0].headers == [("h", b"x"), ("\u00e9", None)] and out[0].serialized_header_size == 4
    assert out[1].headers == [] and out[1].serialized_header_size == -1 and out[1].key == b"k11"


def test_nothing_acquired_or_nothing_decoded():
    data = answer([(0, 1, [0, 1, 2])])
    assert of(data, []) == ([], [], [])
    assert of(data, [(5, 8, 1)]) == ([], [], [(5, 8)])
    assert share_records_of(decode_columnar(b""), ShareConsumerRecord, "t", 0, [(4, 6, 1)]) == ([], [], [(4, 6)])


def test_records_are_untracked_by_the_gc_unless_asked():
    data = answer([(1, 0, [0, 1])])
    out, _, _ = of(data, [(1, 2, 1)])
    assert not any(gc.is_tracked(r) for r in out) and not any(gc.is_tracked(r.headers) for r in out)
    out, _, _ = of(data, [(1, 2, 1)], gc_untrack=False)
    assert all(gc.is_tracked(r) for r in out)
    out, _, _ = of(data, [(1, 2, 1)], cls=PlainShareRecord, gc_untrack=False)
    assert all(gc.is_tracked(r) and type(r) is PlainShareRecord for r in out)
    del out
    gc.collect()


def test_empty_headers_lists_are_reused_only_when_nobody_can_tell():
    """A freed share record's empty headers list goes to the next record (as a consumer
    record's does) only if it is exactly as made and nothing else refers to it."""
    data = encode_batch([(d, 1, None, b"v", []) for d in range(200)], base_offset=0, last_offset_delta=199)

    def poll(untrack=True):
        return of(data, [(0, 199, 1)], gc_untrack=untrack)[0]

    def counts(records):
        assert [(r.offset, r.delivery_count) for r in records] == [(o, 1) for o in range(200)]

    assert_headers_lists_reused_only_when_untouched(poll, counts)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sets(st.integers(0, 6), min_size=1, max_size=5)), max_size=8),
       st.lists(st.tuples(st.integers(0, 8), st.integers(1, 10)), max_size=8), st.integers(0, 10))
def test_against_the_reference(batches, spans, start):
    at, made = 0, []
    for gap, deltas in batches:        # ascending batches, with holes between and inside them
        made.append((at + gap, gap, sorted(deltas)))
        at += gap + max(deltas) + 1
    data = answer(made)
    ranges, at = [], start
    for length, count in spans:        # ascending, disjoint ranges with holes between them
        ranges.append((at, at + length, count))
        at += length + 1 + random.Random(at).randint(0, 3)
    got = of(data, ranges, cls=PlainShareRecord)
    assert got == reference(data, ranges)
    assert [r.leader_epoch for r in got[0]] == [r.leader_epoch for r in reference(data, ranges)[0]]


def test_share_record_type_is_the_namedtuple_compiled():
    out, _, _ = of(answer([(0, 1, [0, 1])]), [(0, 1, 7)])
    r = out[0]
    assert ShareConsumerRecord._fields == PlainShareRecord._fields and r == tuple(r)
    assert r._replace(value=b"new").value == b"new" and r._asdict()["delivery_count"] == 7
    assert pickle.loads(pickle.dumps(r)) == r and type(pickle.loads(pickle.dumps(r))) is ShareConsumerRecord
    made = ShareConsumerRecord(*r)
    assert made == r and type(made) is ShareConsumerRecord
    for _ in range(3):          # freed records are reused: nothing leaks or breaks over rounds
        out, _, _ = of(answer([(0, 1, [0, 1])]), [(0, 1, 7)])
        del out
    for bad in (tuple, int, None, "ShareConsumerRecord", type("T", (tuple,), {"_fields": ("a",)})):
        with pytest.raises(TypeError):
            share_record_type(bad)


@pytest.mark.parametrize("ranges, error", [
    ([(5, 4, 1)], ValueError), ([(-1, 4, 1)], ValueError), ([(0, 4, 1), (4, 6, 1)], ValueError),
    ([(5, 6, 1), (0, 1, 1)], ValueError), ([(0, 1)], TypeError), ([(0, 1, 1, 1)], TypeError),
    ([[0, 1, 1]], TypeError), ([(0, 1, "1")], TypeError), ([("0", 1, 1)], TypeError), ([None], TypeError),
    (5, TypeError), ([(0, 2**64, 1)], OverflowError),
])
def test_bad_ranges_are_refused(ranges, error):
    with pytest.raises(error):
        of(answer([(0, 1, [0, 1])]), ranges)


def test_offsets_out_of_order_or_repeated_are_value_errors():
    for data in (answer([(5, 1, [0])]) + answer([(3, 1, [0])]), answer([(5, 1, [0])]) * 2):
        with pytest.raises(ValueError, match="ascending"):
            of(data, [(0, 10, 1)])


@pytest.mark.parametrize("cls", [ConsumerRecord, tuple, int, "ShareConsumerRecord", None,
                                 type("WithDict", (tuple,), {"_fields": tuple("abcdefghijklmn")})])
def test_record_cls_must_be_a_14_field_tuple_class(cls):
    with pytest.raises(TypeError):
        of(answer([(0, 1, [0])]), [(0, 0, 1)], cls=cls)


def test_a_batch_not_made_by_decode_columnar_is_refused():
    with pytest.raises(TypeError):
        share_records_of(ColumnarBatch(), ShareConsumerRecord, "t", 0, [(0, 0, 1)])
    with pytest.raises(TypeError):
        share_records_of(None, ShareConsumerRecord, "t", 0, [(0, 0, 1)])       # type: ignore[arg-type]
    with pytest.raises(TypeError):
        share_records_of(b"\x00", ShareConsumerRecord, "t", 0, [(0, 0, 1)])    # type: ignore[arg-type]


def test_a_failure_part_way_leaves_nothing_half_made():
    """The list of records is filled in place: an error after some records were made (here
    a batch list altered under the decode) raises, and the records made so far are freed."""
    data = answer([(0, 1, [0, 1, 2]), (3, 1, [0, 1, 2])])
    batch = decode_columnar(data)
    good = batch.batches[1]
    batch.batches[1] = "not a BatchInfo"
    with pytest.raises(TypeError):
        share_records_of(batch, ShareConsumerRecord, "orders", 3, [(0, 5, 1)])
    gc.collect()
    batch.batches[1] = good
    out, held, gaps = share_records_of(batch, ShareConsumerRecord, "orders", 3, [(0, 5, 1)])
    assert [r.offset for r in out] == list(range(6)) and held == [(0, 5)] and gaps == []
    with pytest.raises(TypeError, match="delivery count"):     # checked before any record is made
        share_records_of(batch, ShareConsumerRecord, "orders", 3, [(0, 1, 1), (2, 5, "1")])

