"""kcore.fetchscan.next_fetch_offset: where a partition's next fetch starts, from the batch
headers of the records an answer returned.

The reference is the same walk in plain Python (below); hostile bytes (random, truncated,
flipped, lengths out of range, offsets at the top of the int64 range) must give the
reference's answer without reading past the data, and offsets that would pass 2**63 - 1
stop the walk.
"""
from __future__ import annotations

import random
import struct

import pytest

from kcore import layout
from kcore.fetchscan import next_fetch_offset
from kcore.records import decode_records, encode_batch

INT64_MAX = 2**63 - 1
_HEAD = struct.Struct(">qi")
_I32 = struct.Struct(">i")


def reference(raw, fetch_offset: int) -> tuple[int, int]:
    n, pos, nxt, epoch = len(raw), 0, fetch_offset, -1
    while n - pos >= layout.V2_LAST_OFFSET_DELTA + 4:
        base, length = _HEAD.unpack_from(raw, pos + layout.ENTRY_BASE_OFFSET)
        if length < layout.LEGACY_MIN_SIZE or pos + layout.LOG_OVERHEAD + length > n:
            break
        if raw[pos + layout.ENTRY_MAGIC] == 2:
            last = base + _I32.unpack_from(raw, pos + layout.V2_LAST_OFFSET_DELTA)[0]
            batch_epoch = _I32.unpack_from(raw, pos + layout.V2_PARTITION_LEADER_EPOCH)[0]
        else:
            last, batch_epoch = base, -1
        if last >= nxt:
            nxt, epoch = last + 1, batch_epoch
        pos += layout.LOG_OVERHEAD + length
    return nxt, epoch


def _batch(base: int, n: int, epoch: int) -> bytes:
    return bytes(encode_batch([(None, 1_700_000_000_000 + i, None, b"v" * i, []) for i in range(n)],
                              base_offset=base, partition_leader_epoch=epoch))


def _legacy(offset: int, magic: int, size: int, rng: random.Random) -> bytes:
    # Only the entry's head is read: base offset, length, magic.
    body = bytes([0, 0, 0, 0, magic]) + bytes(rng.randrange(256) for _ in range(size - 5))
    return _HEAD.pack(offset, len(body)) + body


def _entries(rng: random.Random) -> bytes:
    out, base = [], rng.randrange(0, 1000)
    for _ in range(rng.randrange(0, 6)):
        if rng.random() < 0.8:
            n = rng.randrange(1, 5)
            out.append(_batch(base, n, rng.randrange(-1, 5)))
            base += n + rng.randrange(0, 3)
        else:
            out.append(_legacy(base, rng.randrange(0, 2), rng.randrange(layout.LEGACY_MIN_SIZE, 40), rng))
            base += 1 + rng.randrange(0, 2)
    return b"".join(out)


def test_well_formed_records_match_the_reference_and_the_decoder():
    rng = random.Random(11)
    for _ in range(300):
        data = _entries(rng)
        for cut in (len(data), rng.randrange(0, len(data) + 1)):
            view = memoryview(data)[:cut]
            fetch_offset = rng.choice((0, 17, 500, 2000))
            assert next_fetch_offset(view, fetch_offset) == reference(view, fetch_offset)
    only_v2 = b"".join(_batch(b, 3, 2) for b in (5, 8, 11))
    assert next_fetch_offset(only_v2, 0) == (decode_records(only_v2).next_offset, 2) == (14, 2)


def test_nothing_complete_past_the_fetch_offset_leaves_it():
    assert next_fetch_offset(b"", 42) == (42, -1)
    assert next_fetch_offset(bytearray(26), 42) == (42, -1)
    batch = _batch(10, 3, 1)
    assert next_fetch_offset(batch[:-1], 5) == (5, -1)      # the batch is incomplete
    assert next_fetch_offset(batch, 100) == (100, -1)       # it ends before the fetch offset
    assert next_fetch_offset(batch, 12) == (13, 1)


def test_hostile_bytes_give_the_references_answer():
    rng = random.Random(5)
    for _ in range(3000):
        kind = rng.randrange(4)
        if kind == 0:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 120)))
        else:
            data = bytearray(_entries(rng) or _batch(0, 1, 0))
            if kind == 1:       # flipped bytes
                for _ in range(rng.randrange(1, 4)):
                    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            elif kind == 2:     # a length out of range
                pos = 0 if rng.random() < 0.5 else rng.randrange(len(data))
                if pos + 12 <= len(data):
                    data[pos + 8:pos + 12] = _I32.pack(rng.choice((-1, -2**31, 0, 13, 2**31 - 1, len(data))))
            else:               # base offsets near the ends of the int64 range
                if len(data) >= 8:
                    data[0:8] = struct.pack(">q", rng.choice((-2**63, -1, INT64_MAX - 1000, INT64_MAX - 1)))
        fetch_offset = rng.choice((-5, 0, 100))
        expected = reference(data, fetch_offset)
        if expected[0] > INT64_MAX:
            continue            # past int64: see test_offsets_past_int64_stop_the_walk
        assert next_fetch_offset(data, fetch_offset) == expected, bytes(data).hex()


def test_offsets_past_int64_stop_the_walk():
    first = _batch(10, 2, 4)
    top = bytearray(_batch(0, 3, 7))
    top[0:8] = struct.pack(">q", INT64_MAX - 1)         # last offset delta 2: past 2**63 - 1
    assert next_fetch_offset(first + bytes(top), 0) == (12, 4)
    top[0:8] = struct.pack(">q", INT64_MAX - 2)         # last offset INT64_MAX: no offset after it
    assert next_fetch_offset(first + bytes(top), 0) == (12, 4)
    top[0:8] = struct.pack(">q", INT64_MAX - 3)
    assert next_fetch_offset(first + bytes(top), 0) == (INT64_MAX, 7)


@pytest.mark.parametrize("arg", [None, 5, "text"])
def test_what_is_not_a_buffer_is_refused(arg):
    with pytest.raises(TypeError):
        next_fetch_offset(arg, 0)
