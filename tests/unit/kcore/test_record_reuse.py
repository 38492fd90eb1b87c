"""Consumer records refill the value bytes and offset ints of freed records (recordtype.h).

The reference is the data written: whatever was freed before, every record's value and
offset equal what the batch holds, hash like fresh objects, and an object the application
still holds (the value, the offset, or the record itself) is never refilled under it.
"""
from __future__ import annotations

import gc

from kcore import records as R

from kclient.structs import ConsumerRecord

TOPIC = "t"


def _batch(base: int, n: int, size: int) -> R.ColumnarBatch:
    rows = [(None, 1_700_000_000_000 + i, None, bytes([65 + (base + i) % 26]) * size + b"%d" % (base + i), [])
            for i in range(n)]
    return R.decode_columnar(R.encode_batch(rows, base_offset=base))


def _records(batch: R.ColumnarBatch) -> list:
    return R.consumer_records(batch, ConsumerRecord, TOPIC, 0, 0, batch.num_records)


def _expected(base: int, i: int, size: int) -> bytes:
    return bytes([65 + (base + i) % 26]) * size + b"%d" % (base + i)


def test_refilled_values_and_offsets_equal_the_data_and_hash_as_new_objects():
    R.record_freelist_clear()
    for base in (1_000_000, 1_000_500, 5_000_000_000, 2**59 + 7, 300):
        # the same value size every round (the suffix has as many digits): values are refilled
        recs = _records(_batch(base, 500, 90 - len(str(base))))
        for i, r in enumerate(recs):
            value = _expected(base, i, 90 - len(str(base)))
            assert r.offset == base + i and type(r.offset) is int
            assert r.value == value and type(r.value) is bytes
            assert hash(r.value) == hash(bytes(value)) and hash(r.offset) == hash(base + i)
        del recs, r


def test_an_object_the_application_holds_is_never_refilled():
    R.record_freelist_clear()
    recs = _records(_batch(10_000, 300, 50))
    held_values = [r.value for r in recs[::7]]
    held_offsets = [r.offset for r in recs[::5]]
    held_records = recs[::11]
    hashes = [hash(v) for v in held_values]
    want_values = [bytes(v) for v in held_values]
    want_offsets = [int(str(o)) for o in held_offsets]
    want_records = [(r.offset, bytes(r.value)) for r in held_records]
    del recs
    gc.collect()
    for base in (20_000, 30_000):           # more records made from the freed ones
        more = _records(_batch(base, 300, 50))
        assert [r.offset for r in more] == list(range(base, base + 300))
        del more
    assert held_values == want_values and [hash(v) for v in held_values] == hashes
    assert held_offsets == want_offsets
    assert [(r.offset, bytes(r.value)) for r in held_records] == want_records


def test_other_sizes_and_clearing_the_free_lists_change_nothing_visible():
    for size in (3, 100, 100, 4000, 20_000, 3):
        recs = _records(_batch(7_000, 200, size))
        assert [len(r.value) for r in recs] == [size + 4] * 200
        assert all(r.value == _expected(7_000, i, size) for i, r in enumerate(recs))
        del recs
        if size == 4000:
            R.record_freelist_clear()
