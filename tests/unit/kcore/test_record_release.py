"""Making and freeing compiled records (kcore/consumerrecord.h, kcore/recordtype.h) around the
two shortcuts of the per-record path.

- A record's 13 slots are written without being zeroed first: the cyclic GC must never see a
  record whose slots are not all written, even when collections run while records are made
  from recycled memory (whose slots still point at the previous records' freed objects).
- A freed record whose items are all still referred to elsewhere releases them without the
  trashcan; a record that frees an item with itself goes through it, so that a long chain of
  records (through a slot or a headers list) is freed without exhausting the C stack.
The plain-Python reference is the namedtuple the record type is made from: the same chains of
namedtuples free without error, and every reference count comes back to where it was.
"""
from __future__ import annotations

import gc
import sys
from collections import namedtuple

from kclient.structs import ConsumerRecord
from kcore import records as R

FIELDS = ConsumerRecord._fields
Reference = namedtuple("ConsumerRecord", FIELDS)
TOPIC = "release-topic"
DEPTH = 200_000        # far past what nested deallocs survive on a default C stack


def _batch(n: int, headers: bool = False):
    rows = [(None, 1_700_000_000_000 + i // 7, None, b"v" * 20, [("h", b"x")] if headers else [])
            for i in range(n)]
    return R.decode_columnar(R.encode_batch(rows, base_offset=100))


def test_collections_while_records_are_made_never_see_unwritten_slots():
    R.record_freelist_clear()
    cb = _batch(4000, headers=True)
    # Recycled memory first: freed records whose slots still point at freed objects.
    del R.consumer_records(cb, ConsumerRecord, TOPIC, 0, 0, 4000)[:]
    assert R.record_freelist_len(13) > 0
    seen = []

    def walk(phase, info):
        if phase == "start":
            for o in gc.get_objects(0):      # the records being made are young
                if type(o) is ConsumerRecord and o.topic == TOPIC:
                    # Every slot of a record the collector tracks is a written one.
                    seen.append((type(o.value) is bytes, type(o.headers) is list,
                                 type(o.offset) is int, o.serialized_value_size))

    old = gc.get_threshold()
    gc.callbacks.append(walk)
    gc.set_threshold(20)
    try:
        got = R.consumer_records(cb, ConsumerRecord, TOPIC, 0, 0, 4000, gc_untrack=False)
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(walk)
    assert seen, "no collection ran while the records were made"
    assert set(seen) == {(True, True, True, 20)}
    assert all(gc.is_tracked(r) for r in got)
    ref = [Reference(TOPIC, 0, -1, 100 + i, 1_700_000_000_000 + i // 7, 0, None, b"v" * 20,
                     [("h", b"x")], None, -1, 20, 2) for i in range(4000)]
    assert got == ref


def test_freeing_records_gives_every_shared_item_its_reference_back():
    R.record_freelist_clear()
    cb = _batch(3000)
    topic = "".join(["shared-", "topic"])       # a str of its own, counted below
    partition = 123_456_789
    counts = sys.getrefcount(topic), sys.getrefcount(partition), sys.getrefcount(None)
    for _ in range(3):
        recs = R.consumer_records(cb, ConsumerRecord, topic, partition, 0, 3000)
        assert sys.getrefcount(topic) == counts[0] + 3000
        del recs
    assert (sys.getrefcount(topic), sys.getrefcount(partition)) == counts[:2]
    assert abs(sys.getrefcount(None) - counts[2]) < 100      # None is everyone's


def test_an_item_freed_with_its_record_is_freed():
    class Tracked:
        freed = 0

        def __del__(self):
            Tracked.freed += 1

    rec = ConsumerRecord(TOPIC, 0, -1, 5, 0, 0, None, Tracked(), [], None, -1, 1, -1)
    mixed = ConsumerRecord(TOPIC, 0, -1, 6, 0, 0, Tracked(), b"shared", [Tracked()], None, -1, 6, -1)
    del rec, mixed
    assert Tracked.freed == 3


def _chain(make, depth: int):
    head = None
    for i in range(depth):
        head = make(i, head)
    return head


def test_a_long_chain_of_records_through_a_slot_is_freed():
    for cls in (Reference, ConsumerRecord):
        head = _chain(lambda i, prev: cls(TOPIC, 0, -1, i, 0, 0, None, prev, [], None, -1, 0, -1), DEPTH)
        assert head.value.value.offset == DEPTH - 3
        del head                         # a crash here: the trashcan was skipped


def test_a_long_chain_of_records_through_headers_is_freed():
    R.record_freelist_clear()
    cb = _batch(1)
    made = R.consumer_records(cb, ConsumerRecord, TOPIC, 0, 0, 1)[0]

    head = _chain(lambda i, prev: ConsumerRecord(TOPIC, 0, -1, i, 0, 0, None, b"v", [("h", prev)],
                                                 None, -1, 1, -1), DEPTH)
    made.headers.append(("h", head))
    del head
    del made                             # frees the whole chain from a compiled record
    assert R.record_freelist_len(13) > 0
