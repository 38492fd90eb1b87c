"""kcore.records.decode_consumer_records and consumer_records: kafka-python-shaped
ConsumerRecords built in C, from the bytes in one call or from a decode_columnar result a
slice of rows at a time (the fetcher's per-record path).

The reference is the path they replace: decode_records(skip_control=True) into Record
objects, then a plain-Python conversion into ConsumerRecord (``ref_consumer_records`` below,
the fetcher's former ``_convert``). They must agree on every record, every type, the batch
metadata, and on which error (class and message) hostile input raises.
"""
from __future__ import annotations

import copy
import gc
import pickle
import random
import sys
import weakref
from collections import namedtuple
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kclient.clock import FakeClock
from kclient.config import ConsumerConfig
from kclient.errors import (CorruptRecordError, CrcMismatchError, DecompressionLimitError,
                            InvalidRecordLengthError, KafkaError, RecordVarintError,
                            UnsupportedCodecError)
from kclient.consumer.fetch_config import FetchConfig
from kclient.consumer.fetcher import Fetcher
from kclient.structs import ConsumerRecord
from kclient.subscription.state import SubscriptionState
from kcore import records as R
from test_fetcher import T, TP0, TP1, ScriptedClient, fetch_response, make_metadata, partition_data
from test_records_fuzz import corpus, fix_crc, mutate
from test_records import _control_batch, ref_compress, ref_legacy_message, ref_varint, record_st

CR = ConsumerRecord


# ============================================================================ reference
def ref_header_size(headers) -> int:
    if not headers:
        return -1
    return sum(len(k.encode("utf-8")) + (len(v) if v is not None else 0) for k, v in headers)


def ref_consumer_records(data, topic, partition, **kw):
    """decode_records + the Python conversion the fetcher used before decode_consumer_records."""
    res = R.decode_records(data, skip_control=True, topic=topic, partition=partition, **kw)
    recs = [CR(topic, partition, r.leader_epoch, r.offset, r.timestamp, r.timestamp_type,
               r.key, r.value, r.headers, None,
               -1 if r.key is None else len(r.key), -1 if r.value is None else len(r.value),
               ref_header_size(r.headers))
            for r in res.records]
    return res, recs


def batch_summary(res):
    return [(b.base_offset, b.last_offset, b.magic, b.codec, b.is_control, b.control_type,
             b.aborted, b.record_start, b.record_end) for b in res.batches]


def assert_same(data, topic="t", partition=0, **kw):
    """New path == reference path on data; returns the new result."""
    ref_res, want = ref_consumer_records(data, topic, partition, **kw)
    res = R.decode_consumer_records(data, CR, topic, partition, **kw)
    assert res.records == want
    assert all(type(r) is CR for r in res.records)
    for got, exp in zip(res.records, want):
        # Tuple equality treats 1 == 1.0 == True: compare the types of every field too.
        assert [type(x) for x in got] == [type(x) for x in exp], (got, exp)
        assert all(type(h) is tuple and type(h[0]) is str for h in got.headers)
    assert (res.next_offset, res.bytes_consumed, res.partial_trailing_bytes,
            res.incomplete_batch_size, res.first_batch_incomplete) == \
        (ref_res.next_offset, ref_res.bytes_consumed, ref_res.partial_trailing_bytes,
         ref_res.incomplete_batch_size, ref_res.first_batch_incomplete)
    assert batch_summary(res) == batch_summary(ref_res)
    assert len(res) == len(want) and list(res) == want
    return res


def outcome(fn):
    try:
        return "ok", fn()
    except KafkaError as e:
        return type(e), str(e)


# ============================================================================ equivalence
def _entry(draw, kind, off, pid):
    """One log entry at offset off: (bytes, number of offsets it takes)."""
    if kind == "data":
        recs = draw(st.lists(record_st, min_size=1, max_size=6))
        txn = pid >= 0
        return R.encode_batch([(None, 1_700_000_000_000 + d, k, v, h) for d, k, v, h in recs],
                              base_offset=off, codec=draw(st.sampled_from([0, 1, 2, 3, 4])),
                              timestamp_type=draw(st.sampled_from([0, 1])),
                              producer_id=pid, producer_epoch=0 if txn else -1,
                              transactional=txn,
                              partition_leader_epoch=draw(st.integers(-1, 300))), len(recs)
    if kind in ("commit", "abort"):
        return _control_batch(off, max(pid, 1), 1 if kind == "commit" else 0), 1
    if kind == "legacy":
        magic = draw(st.sampled_from([0, 1]))
        return ref_legacy_message(off, magic, draw(st.one_of(st.none(), st.binary(max_size=8))),
                                  draw(st.one_of(st.none(), st.binary(max_size=40))),
                                  timestamp=123 if magic else None), 1
    # legacy compressed wrapper (v1 relative inner offsets)
    codec = draw(st.sampled_from([1, 2, 3]))
    n = draw(st.integers(1, 4))
    inner = b"".join(ref_legacy_message(i, 1, None, b"in%d" % i, timestamp=7 + i) for i in range(n))
    return ref_legacy_message(off + n - 1, 1, None, ref_compress(codec, inner), attributes=codec,
                              timestamp=50), n


@st.composite
def fetch_bytes(draw):
    kinds = draw(st.lists(st.sampled_from(["data", "data", "data", "commit", "abort", "legacy",
                                           "wrapper"]), min_size=1, max_size=7))
    blobs, off = [], draw(st.integers(0, 2**40))
    first = off
    for kind in kinds:
        pid = draw(st.sampled_from([-1, 1, 2]))
        blob, n = _entry(draw, kind, off, pid)
        blobs.append(blob)
        off += n
    data = b"".join(blobs)
    if draw(st.booleans()):                     # a broker cut the response mid-batch
        data = data[:draw(st.integers(0, len(data)))]
    aborted = draw(st.one_of(st.none(), st.lists(st.tuples(st.integers(1, 2),
                                                           st.integers(first, off)), max_size=3)))
    fetch_offset = draw(st.one_of(st.just(-1), st.integers(first, off)))
    return data, aborted, fetch_offset


@pytest.mark.parametrize("codec", range(5))
def test_null_empty_and_large_keys_values_headers(codec):
    big = random.Random(3).randbytes(300) * 1000           # 300 KB
    records = [(None, 1, None, None, []), (None, 2, b"", b"", [("", b"")]),
               (None, 3, b"k" * 70_000, big, [("h", None), ("\u20ac", b"x" * 5000)]),
               (None, 4, None, big[:1], [("a", b"1")] * 50), (None, -5, b"\x00", b"", [])]
    res = assert_same(R.encode_batch(records, base_offset=2**40, codec=codec,
                                     partition_leader_epoch=9), "t", 3)
    r = res.records[2]
    assert (r.serialized_key_size, r.serialized_value_size, r.value) == (70_000, len(big), big)
    assert r.serialized_header_size == 1 + 3 + 5000
    assert res.records[0].headers == [] and res.records[0].serialized_header_size == -1
    assert res.records[1].serialized_header_size == 0


def test_malformed_utf8_header_key_counts_the_replacement_characters():
    blob = R.encode_batch([(None, 1, None, b"v", [(b"\xff\xfeok", b"12")])])
    res = assert_same(blob)
    assert res.records[0].headers == [("\ufffd\ufffdok", b"12")]
    assert res.records[0].serialized_header_size == len("\ufffd\ufffdok".encode()) + 2


def test_control_batches_skipped_and_aborted_transactions_filtered():
    data = (R.encode_batch([(None, 1, None, b"a", [])], base_offset=0, producer_id=5,
                           producer_epoch=0, transactional=True)
            + _control_batch(1, 5, R.CONTROL_ABORT)
            + R.encode_batch([(None, 2, None, b"b", [])], base_offset=2)
            + _control_batch(3, 6, R.CONTROL_COMMIT))
    res = assert_same(data, aborted_transactions=[(5, 0)])
    assert [r.offset for r in res.records] == [2]
    assert [b.aborted for b in res.batches] == [True, False, False, False]
    assert res.next_offset == 4
    assert [r.offset for r in assert_same(data).records] == [0, 2]          # read_uncommitted
    dicts = [{"producer_id": 5, "first_offset": 0}]
    assert [r.offset for r in assert_same(data, aborted_transactions=dicts).records] == [2]


def test_fetch_offset_drops_earlier_records_of_a_batch():
    data = (R.encode_batch([(None, i, None, b"%d" % i, [("h", b"%d" % i)]) for i in range(5)],
                           base_offset=10)
            + R.encode_batch([(None, i, None, b"%d" % i, []) for i in range(5)], base_offset=15))
    for start, want in ((13, list(range(13, 20))), (16, [16, 17, 18, 19]), (25, [])):
        res = assert_same(data, fetch_offset=start)
        assert [r.offset for r in res.records] == want
    assert assert_same(data, fetch_offset=13).records[0].headers == [("h", b"3")]


def test_timestamps_shared_between_records_are_correct_per_record():
    # The decoder reuses one int object while consecutive records share a timestamp.
    recs = [(None, 1000 + i // 3, None, b"v", []) for i in range(10)] + [(None, 999, None, b"w", [])]
    res = assert_same(R.encode_batch(recs) + R.encode_batch(recs, base_offset=11, timestamp_type=1,
                                                            max_timestamp=77))
    assert [r.timestamp for r in res.records] == [1000 + i // 3 for i in range(10)] + [999] + [77] * 11
    assert [r.timestamp_type for r in res.records] == [0] * 11 + [1] * 11


def test_empty_none_and_memoryview_input():
    for data in (None, b"", bytearray(), memoryview(b"")):
        res = R.decode_consumer_records(data, CR, "t", 0)
        assert res.records == [] and res.next_offset == -1 and res.batches == []
    blob = b"junk" + R.encode_batch([(None, 1, b"k", b"v", [])], base_offset=4) + b"tail"
    view = memoryview(blob)[4:-4]
    assert assert_same(view).records[0].value == b"v"
    assert assert_same(bytearray(view)).records[0].offset == 4


# ============================================================================ record objects
def _one():
    blob = R.encode_batch([(None, 5, b"key", b"value", [("h", b"1")]), (None, 6, None, b"", [])],
                          base_offset=41, partition_leader_epoch=7)
    return R.decode_consumer_records(blob, CR, "topic", 2).records


def test_records_are_real_consumer_record_namedtuples():
    r, e = _one()
    assert type(r) is CR and isinstance(r, tuple) and len(r) == 13
    want = ("topic", 2, 7, 41, 5, 0, b"key", b"value", [("h", b"1")], None, 3, 5, 2)
    assert r == want and tuple(r) == want and r == CR(*want)
    with pytest.raises(TypeError):
        hash(r)                                  # a list inside, as in kafka-python
    assert (r.topic, r.partition, r.leader_epoch, r.offset, r.timestamp, r.timestamp_type) == \
        ("topic", 2, 7, 41, 5, 0)
    assert (r.key, r.value, r.headers, r.checksum) == (b"key", b"value", [("h", b"1")], None)
    assert (r.serialized_key_size, r.serialized_value_size, r.serialized_header_size) == (3, 5, 2)
    assert r._asdict() == dict(zip(CR._fields, want))
    assert r._replace(value=b"x") == CR(*want[:7], b"x", *want[8:])
    assert repr(r).startswith("ConsumerRecord(topic='topic', partition=2, leader_epoch=7, offset=41")
    topic, partition, *_rest = r
    assert (topic, partition) == ("topic", 2)
    assert (e.key, e.headers, e.serialized_key_size, e.serialized_header_size) == (None, [], -1, -1)
    assert type(e.headers) is list
    with pytest.raises(AttributeError):
        r.offset = 3
    with pytest.raises(AttributeError):
        r.extra = 1                                         # __slots__ = (): no __dict__


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_and_copy(protocol):
    for r in _one():
        back = pickle.loads(pickle.dumps(r, protocol))
        assert back == r and type(back) is CR
        assert copy.copy(r) == r and copy.deepcopy(r) == r and type(copy.deepcopy(r)) is CR


def test_each_record_has_its_own_headers_list():
    a, b = _one()[1], _one()[1]
    recs = R.decode_consumer_records(R.encode_batch([(None, 1, None, b"", [])] * 3), CR, "t", 0).records
    assert len({id(r.headers) for r in recs}) == 3 and a.headers is not b.headers
    recs[0].headers.append(("x", b"y"))                       # mutating one touches no other
    assert [r.headers for r in recs] == [[("x", b"y")], [], []]


def test_other_namedtuple_classes_and_rejected_classes():
    Alt = namedtuple("Alt", [f"f{i}" for i in range(13)])
    (r, _e) = R.decode_consumer_records(
        R.encode_batch([(None, 5, b"k", b"v", []), (None, 6, None, b"", [])]), Alt, None, 1).records
    assert type(r) is Alt and r.f0 is None and r.f3 == 0 and r.f7 == b"v"

    class WithDict(tuple):
        pass

    class Slotted(tuple):
        __slots__ = ()
        _fields = tuple("abcdefghijklm")

    Short = namedtuple("Short", "a b c")
    blob = R.encode_batch([(None, 5, None, b"v", [])])
    assert type(R.decode_consumer_records(blob, Slotted, "t", 0).records[0]) is Slotted
    for bad in (tuple, WithDict, Short, list, CR(*range(13)), "ConsumerRecord", None, int):
        with pytest.raises(TypeError):
            R.decode_consumer_records(blob, bad, "t", 0)


# ============================================================================ GC and references
def test_untracked_by_default_and_tracked_on_request():
    blob = R.encode_batch([(None, 5, None, b"v", [("h", b"1")]), (None, 6, None, b"", [])])
    r, e = R.decode_consumer_records(blob, CR, "t", 0).records
    assert not gc.is_tracked(r) and not gc.is_tracked(e)
    assert not gc.is_tracked(r.headers) and not gc.is_tracked(e.headers)
    assert not gc.is_tracked(r.headers[0])
    r2, e2 = R.decode_consumer_records(blob, CR, "t", 0, gc_untrack=False).records
    assert gc.is_tracked(r2) and gc.is_tracked(e2) and gc.is_tracked(e2.headers)
    assert gc.is_tracked(r2.headers) and not gc.is_tracked(r2.headers[0])   # pairs never can cycle
    assert (r2, e2) == (r, e)
    gc.collect()                       # untracked records stay valid through a collection
    assert r == ("t", 0, -1, 0, 5, 0, None, b"v", [("h", b"1")], None, -1, 1, 2)


class _Marker:
    pass


def _cycle_through_headers(untrack: bool):
    rec = R.decode_consumer_records(R.encode_batch([(None, 5, None, b"v", [])]), CR, "t", 0,
                                    gc_untrack=untrack).records[0]
    m = _Marker()
    m.rec = rec
    rec.headers.append(m)                        # rec -> headers -> m -> rec
    return weakref.ref(m), rec.headers


def test_the_documented_trade_off_a_cycle_through_headers():
    gc.collect()
    ref, headers = _cycle_through_headers(untrack=False)
    del headers
    gc.collect()
    assert ref() is None                         # tracked: the collector frees the cycle
    ref, headers = _cycle_through_headers(untrack=True)
    del headers
    gc.collect()
    assert ref() is not None                     # untracked: the cycle is never collected...
    ref().rec.headers.clear()                    # ...until the application breaks it
    assert ref() is None


def test_no_references_leak_on_success_or_error():
    topic = "".join(["leak-", "check"])          # a private str object
    blob = R.encode_batch([(None, 5 + i, b"k", b"v%d" % i, [("h", b"1")] if i % 2 else [])
                           for i in range(300)])
    bad = bytearray(blob)
    bad[-1] ^= 0xFF                                # CRC mismatch in the second batch
    gc.collect()
    base_topic, base_cls = sys.getrefcount(topic), sys.getrefcount(CR)
    for untrack in (True, False):
        for _ in range(3):
            res = R.decode_consumer_records(blob, CR, topic, 1, gc_untrack=untrack)
            assert sys.getrefcount(topic) == base_topic + 300
            del res
            with pytest.raises(CrcMismatchError):
                # the first batch's 300 records exist when the second one fails
                R.decode_consumer_records(blob + bytes(bad), CR, topic, 1, gc_untrack=untrack)
            with pytest.raises(RecordVarintError):
                R.decode_consumer_records(blob + _varint_bomb(), CR, topic, 1, gc_untrack=untrack)
    gc.collect()
    assert (sys.getrefcount(topic), sys.getrefcount(CR)) == (base_topic, base_cls)


def test_repeated_decodes_do_not_grow_memory():
    import tracemalloc
    blob = R.encode_batch([(None, 5 + i // 10, None, b"x" * 100, [("h", b"1")] if i % 7 else [])
                           for i in range(2000)])
    for _ in range(3):
        R.decode_consumer_records(blob, CR, "t", 0)
    tracemalloc.start()
    try:
        for _ in range(50):
            R.decode_consumer_records(blob, CR, "t", 0)
        gc.collect()
        current, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current < 200_000, current            # one decode's records alone are ~600 KB


# ============================================================================ hostile input
def _varint_bomb() -> bytes:
    """A complete, CRC-valid batch whose second record's key length is an overlong varint."""
    good = R.encode_batch([(None, 1, None, b"a", [])])[61:]
    body = b"\x00\x00\x02" + b"\xff" * 6 + b"\x01"
    return _batch(good + ref_varint(len(body)) + body, count=2, base_offset=300)


def _batch(region: bytes, *, count: int, codec: int = 0, base_offset: int = 0) -> bytes:
    import struct
    after_crc = struct.pack(">hiqqqhii", codec, max(count - 1, 0), 1000, 1000, -1, -1, -1,
                            count) + region
    head = struct.pack(">iBI", -1, 2, R.crc32c(after_crc))
    return struct.pack(">qi", base_offset, len(head) + len(after_crc)) + head + after_crc


def _same_error(data, exc_type, **kw):
    ref = outcome(lambda: R.decode_records(data, skip_control=True, topic="t", partition=0, **kw))
    new = outcome(lambda: R.decode_consumer_records(data, CR, "t", 0, **kw))
    assert ref[0] is exc_type and new == ref, (new, ref)


GOOD = R.encode_batch([(None, 1000 + i, b"key%d" % i, b"value-%d" % i * 3, [("h%d" % i, b"x" * i)])
                       for i in range(6)], base_offset=50)


def test_hostile_inputs_raise_the_same_errors_as_decode_records():
    import struct
    _key, value = R.control_record(0)
    cases = [
        (_varint_bomb(), RecordVarintError, {}),
        (GOOD[:-3] + b"\x00\x00\x00", CrcMismatchError, {}),
        (GOOD[:8] + struct.pack(">i", 5) + GOOD[12:], InvalidRecordLengthError, {}),
        (GOOD[:16] + b"\x07" + GOOD[17:], CorruptRecordError, {}),
        (_batch(GOOD[61:], count=7), CorruptRecordError, {}),
        (_batch(GOOD[61:], count=-1), InvalidRecordLengthError, {}),
        (_batch(GOOD[61:], count=6, codec=6), UnsupportedCodecError, {}),
        (_batch(ref_varint(3) + b"\x00\x00\x00", count=1), CorruptRecordError, {}),
        (R.encode_batch([(None, 1, b"\x00", value, [])], control=True, transactional=True,
                        producer_id=1), CorruptRecordError, {}),     # control key < 4 bytes
        (_batch(ref_compress(4, b"\x00" * (2 << 20)), count=1, codec=4), DecompressionLimitError,
         {"max_decompressed_bytes": 1 << 20}),
        (ref_legacy_message(3, 1, None, b"v", attributes=4, timestamp=1), UnsupportedCodecError, {}),
        (ref_legacy_message(3, 1, None, b"garbage", attributes=1, timestamp=1), KafkaError, {}),
    ]
    for data, exc_type, kw in cases:
        ref = outcome(lambda: R.decode_records(data, skip_control=True, **kw))
        assert issubclass(ref[0], exc_type), (ref, exc_type)
        _same_error(data, ref[0], **kw)
    with pytest.raises(ValueError):
        R.decode_consumer_records(GOOD, CR, "t", 0, max_decompressed_bytes=-1)


def mutated_cases(seed, count):
    """(rng, data, decode keywords): mutated batches (the corpus and mutator of
    test_records_fuzz), CRCs fixed half of the time, with varied decode options."""
    rng = random.Random(seed)
    seeds = corpus()
    for case in range(count):
        buf = mutate(rng, rng.choice(seeds))
        if rng.random() < 0.5:
            fix_crc(buf)
        kw = dict(check_crcs=rng.random() < 0.75, max_decompressed_bytes=1 << 20,
                  fetch_offset=rng.choice([-1, 0, 3, 11, 21]),
                  aborted_transactions=[(4, 0)] if case % 5 == 0 else None)
        yield rng, bytes(buf), kw


def test_mutated_batches_same_outcome_as_decode_records():
    """Mutation fuzzing: both paths decode the same records or raise the same error class
    with the same message."""
    ok = failed = 0
    for _, data, kw in mutated_cases(4242, 6000):
        try:
            ref = ref_consumer_records(data, "t", 9, **kw)[1]
        except KafkaError as e:
            failed += 1
            new = outcome(lambda: R.decode_consumer_records(data, CR, "t", 9, **kw))
            assert new == (type(e), str(e)), data.hex()
            continue
        ok += 1
        assert R.decode_consumer_records(data, CR, "t", 9, **kw).records == ref, data.hex()
    assert ok > 300 and failed > 1000, (ok, failed)


# ============================================================================ consumer_records
def rows_in_slices(data, topic, partition, cuts, **kw):
    """decode_columnar(data) turned into records by consumer_records, `cuts` rows at a time
    (cycling through the list), as the fetcher does once per poll."""
    cb = R.decode_columnar(data, skip_control=True, **kw)
    out, i, k = [], 0, 0
    while i < cb.num_records:
        j = min(i + cuts[k % len(cuts)], cb.num_records)
        part = R.consumer_records(cb, CR, topic, partition, i, j)
        assert type(part) is list and len(part) == j - i
        out += part
        i, k = j, k + 1
    return cb, out


def assert_rows_same(data, topic="t", partition=0, cuts=(1_000_000,), **kw):
    """consumer_records over decode_columnar == the reference path, field types included."""
    ref_res, want = ref_consumer_records(data, topic, partition, **kw)
    cb, got = rows_in_slices(data, topic, partition, list(cuts), **kw)
    assert got == want
    for g, exp in zip(got, want):
        assert type(g) is CR
        assert [type(x) for x in g] == [type(x) for x in exp], (g, exp)
        assert all(type(h) is tuple and type(h[0]) is str for h in g.headers)
    assert cb.next_offset == ref_res.next_offset
    return got


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fetch_bytes(), st.booleans(), st.integers(0, 2**31 - 1),
       st.lists(st.integers(1, 9), min_size=1, max_size=4))
def test_both_paths_equal_per_record_path_plus_python_conversion(case, check_crcs, partition, cuts):
    """decode_consumer_records (in one call) and consumer_records over decode_columnar (`cuts`
    rows at a time) each equal the reference on the same drawn fetch: drawing the fetch is
    most of the time, so one drawn set serves both paths."""
    data, aborted, fetch_offset = case
    assert_same(data, "topic-\u00e9", partition, check_crcs=check_crcs, fetch_offset=fetch_offset,
                aborted_transactions=aborted)
    assert_rows_same(data, "topic-\u00e9", partition, cuts, check_crcs=check_crcs,
                     fetch_offset=fetch_offset, aborted_transactions=aborted)


@pytest.mark.parametrize("codec", range(5))
def test_consumer_records_large_null_and_header_fields(codec):
    big = random.Random(5).randbytes(300) * 1000
    records = [(None, 1, None, None, []), (None, 2, b"", b"", [("", b"")]),
               (None, 3, b"k" * 70_000, big, [("h", None), ("\u20ac", b"x" * 5000)]),
               (None, 4, None, big[:1], [("a", b"1")] * 50), (None, -5, b"\\x00", b"", []),
               (None, 6, None, b"v", [(b"\xff\xfeok", b"12")])]
    data = (R.encode_batch(records, base_offset=2**40, codec=codec, partition_leader_epoch=9)
            + R.encode_batch(records, base_offset=2**40 + 6, codec=codec, partition_leader_epoch=10))
    for cuts in ((1,), (2, 5), (12,)):
        got = assert_rows_same(data, "t", 3, cuts)
        assert [r.leader_epoch for r in got] == [9] * 6 + [10] * 6
    assert got[2].value == big and got[5].serialized_header_size == len("\ufffd\ufffdok".encode()) + 2


def test_consumer_records_leader_epoch_across_skipped_batches():
    # Batches that produce no rows (control, aborted, below the fetch offset) sit between
    # the ones that do: every row still gets its own batch's epoch.
    data = (R.encode_batch([(None, 1, None, b"a", [])] * 3, base_offset=0, partition_leader_epoch=1)
            + R.encode_batch([(None, 1, None, b"b", [])], base_offset=3, producer_id=5,
                             producer_epoch=0, transactional=True, partition_leader_epoch=2)
            + _control_batch(4, 5, R.CONTROL_ABORT)
            + R.encode_batch([(None, 1, None, b"c", [])] * 2, base_offset=5, partition_leader_epoch=3))
    for start in (-1, 1, 3, 5, 6):
        for cuts in ((1,), (2,), (10,)):
            got = assert_rows_same(data, cuts=cuts, fetch_offset=start, aborted_transactions=[(5, 3)])
            assert [(r.offset, r.leader_epoch) for r in got] == \
                [(o, e) for o, e in ((0, 1), (1, 1), (2, 1), (5, 3), (6, 3)) if o >= start]


def test_consumer_records_rows_are_made_per_call_and_untracked():
    blob = R.encode_batch([(None, 5, None, b"v", [("h", b"1")]), (None, 6, None, b"", [])] * 3)
    cb = R.decode_columnar(blob)
    first = R.consumer_records(cb, CR, "t", 0, 0, 2)
    again = R.consumer_records(cb, CR, "t", 0, 0, 2)
    assert first == again and first[0] is not again[0] and first[1].headers is not again[1].headers
    r, e = first
    assert not gc.is_tracked(r) and not gc.is_tracked(e) and not gc.is_tracked(r.headers)
    assert not gc.is_tracked(e.headers) and not gc.is_tracked(r.headers[0])
    r2, e2 = R.consumer_records(cb, CR, "t", 0, 0, 2, gc_untrack=False)
    assert gc.is_tracked(r2) and gc.is_tracked(e2.headers) and (r2, e2) == (r, e)
    assert R.consumer_records(cb, CR, "t", 0, 6, 6) == []
    assert R.consumer_records(cb, CR, "t", 0, 2, 3)[0].offset == 2
    del cb
    gc.collect()                         # the records own their bytes: the columns may go
    assert r == ("t", 0, -1, 0, 5, 0, None, b"v", [("h", b"1")], None, -1, 1, 2)


def test_consumer_records_no_references_leak():
    topic = "".join(["rows-", "leak"])
    cb = R.decode_columnar(R.encode_batch([(None, 5 + i, b"k", b"v%d" % i, [("h", b"1")] if i % 2 else [])
                                           for i in range(300)]))
    gc.collect()
    base_topic, base_cls, base_cb = sys.getrefcount(topic), sys.getrefcount(CR), sys.getrefcount(cb)
    for untrack in (True, False):
        for _ in range(3):
            recs = R.consumer_records(cb, CR, topic, 1, 10, 300, gc_untrack=untrack)
            assert sys.getrefcount(topic) == base_topic + 290
            del recs
            with pytest.raises(IndexError):
                R.consumer_records(cb, CR, topic, 1, 10, 301, gc_untrack=untrack)
    gc.collect()
    assert (sys.getrefcount(topic), sys.getrefcount(CR), sys.getrefcount(cb)) == \
        (base_topic, base_cls, base_cb)


def test_consumer_records_hostile_arguments():
    blob = R.encode_batch([(None, 5 + i, None, b"v", [("h", b"1")]) for i in range(4)])
    cb = R.decode_columnar(blob)
    for start, stop in ((-1, 2), (2, 1), (0, 5), (5, 5), (-3, -1), (0, 2**62)):
        with pytest.raises(IndexError):
            R.consumer_records(cb, CR, "t", 0, start, stop)
    for bad in (tuple, namedtuple("Short", "a b c"), CR(*range(13)), None, int):
        with pytest.raises(TypeError):
            R.consumer_records(cb, bad, "t", 0, 0, 1)
    for not_a_batch in (None, blob, R.decode_consumer_records(blob, CR, "t", 0)):
        with pytest.raises(TypeError):
            R.consumer_records(not_a_batch, CR, "t", 0, 0, 1)
    empty = R.ColumnarBatch.__new__(R.ColumnarBatch)      # no arrays at all
    assert R.consumer_records(empty, CR, "t", 0, 0, 0) == []
    with pytest.raises(IndexError):
        R.consumer_records(empty, CR, "t", 0, 0, 1)
    # The batches list is the one mutable part: whatever it holds, no crash and no record
    # with another batch's epoch.
    for mutate_batches in (list.clear, lambda b: b.insert(0, "junk"), lambda b: b.reverse(),
                           lambda b: b.__setitem__(0, R.decode_columnar(blob).batches[0])):
        cb = R.decode_columnar(blob + R.encode_batch([(None, 1, None, b"w", [])], base_offset=4))
        mutate_batches(cb.batches)
        try:
            recs = R.consumer_records(cb, CR, "t", 0, 0, 5)
        except (TypeError, ValueError):
            continue
        assert [r.offset for r in recs] == [0, 1, 2, 3, 4]
    assert R.consumer_records(R.decode_columnar(None), CR, "t", 0, 0, 0) == []


def test_consumer_records_hostile_bytes_fail_in_decode_columnar_first():
    """The columns are validated when decoded: mutated input either decodes to the
    reference's records (in any slicing) or raises the reference's error there."""
    ok = failed = 0
    for rng, data, kw in mutated_cases(77, 3000):
        try:
            ref = ref_consumer_records(data, "t", 9, **kw)[1]
        except KafkaError as e:
            failed += 1
            new = outcome(lambda: R.decode_columnar(data, skip_control=True, **kw))
            assert new[0] is type(e), data.hex()
            continue
        ok += 1
        assert rows_in_slices(data, "t", 9, [rng.randint(1, 7)], **kw)[1] == ref, data.hex()
    assert ok > 150 and failed > 500, (ok, failed)


# ============================================================================ the fetcher
def _fetcher(**cfg):
    md = make_metadata()
    client = ScriptedClient(md)
    subs = SubscriptionState("earliest")
    fetcher = Fetcher(client, subs, FetchConfig.of(ConsumerConfig({"bootstrap.servers": "h1:9092", **cfg})),
                      clock=FakeClock())
    subs.assign_from_user([TP0, TP1])
    subs.seek(TP0, 0)
    subs.seek(TP1, 3)
    fetcher.send_fetches()
    return SimpleNamespace(fetcher=fetcher, client=client, subs=subs)


def _answer(env, data0, data1):
    (req,) = env.client.take()
    req.future.complete(fetch_response([partition_data(0, data0), partition_data(1, data1)]))


def test_fetcher_returns_the_c_built_records_over_several_polls():
    env = _fetcher(**{"max.poll.records": 7})
    data0 = (R.encode_batch([(None, 10 + i, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)] if i % 3 else [])
                             for i in range(6)], partition_leader_epoch=4)
             + _control_batch(6, 9, R.CONTROL_COMMIT)
             + R.encode_batch([(None, 20, None, b"last", [])], base_offset=7, partition_leader_epoch=4))
    data1 = R.encode_batch([(None, 30 + i, None, b"p1-%d" % i, []) for i in range(5)], codec=3)
    _answer(env, data0, data1)
    want0 = ref_consumer_records(data0, T, 0)[1]
    want1 = ref_consumer_records(data1, T, 1, fetch_offset=3)[1]
    got: dict = {}
    for _ in range(5):
        out, _ends = env.fetcher.fetched_records()
        assert sum(map(len, out.values())) <= 7
        for tp, recs in out.items():
            got.setdefault(tp, []).extend(recs)
    assert got == {TP0: want0, TP1: want1}
    assert all(type(r) is CR and not gc.is_tracked(r) for rs in got.values() for r in rs)
    assert env.subs.position(TP0).offset == 8 and env.subs.position(TP0).offset_epoch == 4
    assert env.subs.position(TP1).offset == 5


def test_fetcher_deserializers_see_the_headers_and_keep_the_byte_sizes():
    seen = []

    class KeyDe:                                 # kafka-python 3's deserialize(topic, headers, data)
        def deserialize(self, topic, headers, data):
            seen.append((topic, list(headers)))
            return None if data is None else data.decode()

    env = _fetcher(**{"key.deserializer": KeyDe(), "value.deserializer": lambda b: {"v": b}})
    data = R.encode_batch([(None, 1, b"kk", b"vvv", [("h", b"1")]), (None, 2, None, None, [])])
    _answer(env, data, None)
    recs = env.fetcher.fetched_records()[0][TP0]
    want = ref_consumer_records(data, T, 0)[1]
    assert [r.key for r in recs] == ["kk", None]
    assert [r.value for r in recs] == [{"v": b"vvv"}, {"v": None}]
    assert [r._replace(key=w.key, value=w.value) for r, w in zip(recs, want)] == want
    assert [r.serialized_key_size for r in recs] == [2, -1]
    assert [r.serialized_value_size for r in recs] == [3, -1]
    assert seen == [(T, [("h", b"1")]), (T, [])]
    assert all(type(r) is CR and gc.is_tracked(r) for r in recs)     # values may be containers


def test_fetcher_record_and_columnar_polls_drain_one_decode():
    """poll() and poll_columnar() on the same answer: one decode, every row handed out once,
    in order, and positions after the last row handed out."""
    env = _fetcher(**{"max.poll.records": 4})
    data0 = (R.encode_batch([(None, 10 + i, None, b"v%d" % i, []) for i in range(5)], partition_leader_epoch=2)
             + R.encode_batch([(None, 20 + i, b"k", b"w%d" % i, [("h", b"x")]) for i in range(6)],
                              base_offset=5, partition_leader_epoch=3, codec=1))
    _answer(env, data0, None)
    want = ref_consumer_records(data0, T, 0)[1]
    got = []
    out, _ = env.fetcher.fetched_records()
    got += out[TP0]
    assert env.subs.position(TP0).offset == 4
    cols, _ = env.fetcher.fetched_columnar(3)
    got += list(cols[TP0])
    assert [r.offset for r in got] == list(range(7)) and env.subs.position(TP0).offset == 7
    out, _ = env.fetcher.fetched_records()
    got += out[TP0]
    assert out[TP0] == want[7:]
    assert [r.offset for r in got] == list(range(11))
    assert [(r.offset, r.value, r.leader_epoch) for r in got] == [(r.offset, r.value, r.leader_epoch) for r in want]
    assert env.subs.position(TP0).offset == 11 and env.subs.position(TP0).offset_epoch == 3
    assert env.fetcher.fetched_records()[0] == {}
