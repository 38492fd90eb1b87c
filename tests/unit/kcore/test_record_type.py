"""kcore.records.record_type: a compiled twin of a namedtuple class (kclient's ConsumerRecord).

The reference is the namedtuple class it was made from: every namedtuple behaviour a
kafka-python user relies on (unpacking, equality and hash as a tuple, _asdict, _replace,
_make, repr, pickle, copy, pattern matching, read-only fields) must be the same. The free
list behind it must be bounded, never hand out a record with stale slots, and leave
Python-made and subclass instances correct.
"""
from __future__ import annotations

import copy
import gc
import pickle
import sys
from collections import namedtuple

import pytest

from kclient.structs import ConsumerRecord
from kcore import records as R

from headers_reuse import assert_headers_lists_reused_only_when_untouched

FIELDS = ["topic", "partition", "leader_epoch", "offset", "timestamp", "timestamp_type",
          "key", "value", "headers", "checksum",
          "serialized_key_size", "serialized_value_size", "serialized_header_size"]
Reference = namedtuple("ConsumerRecord", FIELDS)
ROW = ("t", 3, 7, 42, 1_700_000_000_000, 0, b"k", b"value", [("h", b"1")], None, 1, 5, 2)
FREELIST_MAX = 32768     # kcore/recordtype.h: KC_REC_FREELIST_MAX


def test_consumer_record_is_a_compiled_namedtuple():
    assert type(ConsumerRecord) is type and ConsumerRecord.__mro__[1:] == (tuple, object)
    assert ConsumerRecord.__module__ == "kclient.structs"
    assert ConsumerRecord.__qualname__ == ConsumerRecord.__name__ == "ConsumerRecord"
    assert ConsumerRecord._fields == tuple(FIELDS) == ConsumerRecord.__match_args__
    assert "poll()" in ConsumerRecord.__doc__
    # Each field is a member descriptor (the interpreter specialises reads of those).
    assert all(type(ConsumerRecord.__dict__[f]).__name__ == "member_descriptor" for f in FIELDS)
    assert ConsumerRecord.value.__doc__ == "Alias for field number 7"


def test_behaves_as_the_namedtuple_it_was_made_from():
    rec, ref = ConsumerRecord(*ROW), Reference(*ROW)
    assert isinstance(rec, tuple) and rec == ref == ROW
    hashable = ROW[:8] + ((("h", b"1"),),) + ROW[9:]
    assert hash(ConsumerRecord(*hashable)) == hash(Reference(*hashable)) == hash(hashable)
    assert repr(rec) == repr(ref)
    assert [getattr(rec, f) for f in FIELDS] == list(ROW) == list(rec)
    assert rec[7] == rec.value == b"value" and rec[-1] == 2 and rec[2:4] == (7, 42)
    topic, partition, *_rest = rec
    assert (topic, partition) == ("t", 3)
    assert rec._asdict() == ref._asdict()
    replaced = rec._replace(value=b"other", offset=43)
    assert type(replaced) is ConsumerRecord and replaced.value == b"other" and replaced.offset == 43
    assert type(ConsumerRecord._make(ROW)) is ConsumerRecord and ConsumerRecord._make(ROW) == rec
    assert ConsumerRecord(**dict(zip(FIELDS, ROW))) == rec
    with pytest.raises(TypeError):
        ConsumerRecord(*ROW[:-1])
    with pytest.raises(AttributeError):
        rec.value = b"x"
    with pytest.raises(AttributeError):
        rec.extra = 1              # no __dict__, as with __slots__ = ()
    for loaded in (pickle.loads(pickle.dumps(rec, protocol=p)) for p in range(pickle.HIGHEST_PROTOCOL + 1)):
        assert type(loaded) is ConsumerRecord and loaded == rec
    assert copy.copy(rec) == rec and copy.deepcopy(rec) == rec
    assert copy.deepcopy(rec).headers is not rec.headers
    match rec:
        case ConsumerRecord(topic=t, offset=o):
            assert (t, o) == ("t", 42)
        case _:
            pytest.fail("a ConsumerRecord did not match its own class pattern")


def test_subclass_instances_are_namedtuple_subclass_instances():
    gc.collect()
    before = R.record_freelist_len(13)

    class Tagged(ConsumerRecord):
        def describe(self):
            return f"{self.topic}-{self.partition}@{self.offset}"

    recs = [Tagged(*ROW) for _ in range(50)]
    assert recs[0].describe() == "t-3@42" and recs[0] == ROW
    recs[0].note = "a subclass without __slots__ has a __dict__"
    del recs
    gc.collect()
    assert R.record_freelist_len(13) == before   # freed normally, never recycled


def _batch(n, value=b"v" * 20):
    data = R.encode_batch([(None, 1_700_000_000_000 + i, None, value, None) for i in range(n)],
                          base_offset=100)
    return R.decode_columnar(data)


def test_freelist_is_bounded_and_recycled_records_are_fresh():
    R.record_freelist_clear()
    assert R.record_freelist_len(13) == 0
    cb = _batch(40000)
    recs = R.consumer_records(cb, ConsumerRecord, "t", 0, 0, 10000)
    del recs
    assert R.record_freelist_len(13) == 10000          # a tuned poll's worth: all kept
    recs = R.consumer_records(cb, ConsumerRecord, "t", 0, 0, 40000)
    assert R.record_freelist_len(13) == 0
    del recs
    assert R.record_freelist_len(13) == FREELIST_MAX   # 40,000 freed, 32,768 kept
    # Reused memory holds exactly the new record's fields (a stale slot would show here).
    again = R.consumer_records(cb, ConsumerRecord, "u", 5, 10, 1010)
    assert R.record_freelist_len(13) == FREELIST_MAX - 1000
    ref = [Reference("u", 5, -1, 100 + i, 1_700_000_000_000 + i, 0, None, b"v" * 20, [], None,
                     -1, 20, -1) for i in range(10, 1010)]
    assert again == ref and all(type(r) is ConsumerRecord for r in again)
    assert len({id(r.headers) for r in again}) == 1000           # each its own headers list
    first = again[0]
    assert sys.getrefcount(first) == 3                           # the list, first, the argument
    del first
    del again, ref
    R.record_freelist_clear()
    assert R.record_freelist_len(13) == 0


def test_recycled_python_made_records_are_untracked_or_tracked_as_asked():
    R.record_freelist_clear()
    made = [ConsumerRecord(*ROW) for _ in range(20)]     # tp_alloc: tracked by the GC
    assert all(gc.is_tracked(r) for r in made)
    del made
    assert R.record_freelist_len(13) == 20
    cb = _batch(40)
    untracked = R.consumer_records(cb, ConsumerRecord, "t", 0, 0, 20)
    assert not any(gc.is_tracked(r) for r in untracked)
    assert R.record_freelist_len(13) == 0
    del untracked
    tracked = R.consumer_records(cb, ConsumerRecord, "t", 0, 0, 40, gc_untrack=False)
    assert all(gc.is_tracked(r) for r in tracked)
    assert tracked[39].offset == 139 and tracked[0].value == b"v" * 20
    gc.collect()                    # traverses the recycled, tracked records
    assert tracked[0] == R.consumer_records(cb, ConsumerRecord, "t", 0, 0, 1)[0]


def test_a_cycle_through_a_tracked_record_is_collected():
    R.record_freelist_clear()
    rec = R.consumer_records(_batch(1), ConsumerRecord, "t", 0, 0, 1, gc_untrack=False)[0]
    rec.headers.append(rec)
    del rec
    gc.collect()
    assert R.record_freelist_len(13) == 1


def test_record_type_accepts_only_namedtuple_classes():
    class Plain:
        _fields = ("a",)

    class WithDict(tuple):
        _fields = ("a",)

    Base = namedtuple("Base", "a b")

    class Derived(Base):
        __slots__ = ()

    for bad in (Plain, WithDict, Derived, tuple, Reference(*ROW), "ConsumerRecord", None):
        with pytest.raises(TypeError, match="namedtuple"):
            R.record_type(bad)
    odd = namedtuple("Odd", "a b")
    odd._fields = ("a", 2)
    with pytest.raises(TypeError, match="namedtuple"):
        R.record_type(odd)
    with pytest.raises(ValueError, match="at most 32 fields"):
        R.record_type(namedtuple("Wide", [f"f{i}" for i in range(33)]))


def test_any_namedtuple_can_be_compiled():
    Point = namedtuple("Point", "x y", defaults=[0])
    Point.__module__ = __name__
    CPoint = R.record_type(Point)
    p = CPoint(1)
    assert p == (1, 0) and p.x == 1 and p.y == 0 and repr(p) == "Point(x=1, y=0)"
    assert CPoint._field_defaults == {"y": 0}
    assert R.record_type(namedtuple("Empty", []))() == ()
    wide = R.record_type(namedtuple("Wide", [f"f{i}" for i in range(32)]))
    assert wide(*range(32)).f31 == 31


def test_empty_headers_lists_are_reused_only_when_nobody_can_tell():
    """A freed consumer record's empty headers list goes to the next record only if it is
    exactly as made (empty, never grown, untracked) and nothing else refers to it."""
    from kcore.records import consumer_records, decode_columnar, encode_batch
    cb = decode_columnar(encode_batch([(None, 1, None, b"v", [])] * 200))

    def poll(untrack=True):
        return consumer_records(cb, ConsumerRecord, "t", 0, 0, 200, gc_untrack=untrack)

    assert_headers_lists_reused_only_when_untouched(poll)
    R.record_freelist_clear()                  # frees the kept lists too
    assert all(r.headers == [] for r in poll())
