"""Mutation fuzzing of kcore.records: 100,000+ mutated batches, fixed seed, plain loop.

Every input must decode or raise a kclient.errors.KafkaError subclass: any other exception
fails the test, and a crash would take the interpreter (and the test run) down with it.
Half of the mutants get their CRC recomputed so the mutation reaches the record scanner
instead of stopping at the checksum.
"""
from __future__ import annotations

import gzip
import random
import struct
import time

from kclient.errors import KafkaError
from kcore import records as R
from test_records import ref_compress, ref_legacy_message

N_CASES = 300_000
SEED = 20240611
INTERESTING = [0, 1, -1, 2, 7, 13, 14, 48, 49, 60, 61, 127, 128, 255, 256, 0x7FFF, 0x8000,
               0xFFFF, 2**31 - 1, -2**31, 2**24, 2**16 + 1]


def corpus() -> list[bytes]:
    recs = [(None, 1_700_000_000_000 + i, b"k%d" % i if i % 3 else None,
             (b"value-%d " % i) * (i % 5), [("h", b"x"), ("n", None)] if i % 2 else [])
            for i in range(8)]
    out = [R.encode_batch(recs, base_offset=10, codec=c) for c in range(5)]
    out.append(R.encode_batch(recs[:2], producer_id=4, producer_epoch=1, transactional=True))
    key, value = R.control_record(0, 3)
    out.append(R.encode_batch([(None, 5, key, value, [])], control=True, transactional=True,
                              producer_id=4))
    out.append(R.encode_batch([(None, 1, None, b"", [])], timestamp_type=1, max_timestamp=9))
    out.append(ref_legacy_message(3, 0, b"k", b"v0") + ref_legacy_message(4, 1, None, b"v1",
                                                                          timestamp=100))
    inner = b"".join(ref_legacy_message(i, 1, b"k", b"inner%d" % i, timestamp=i)
                     for i in range(4))
    for codec in (1, 2, 3):
        out.append(ref_legacy_message(20, 1, None, ref_compress(codec, inner), attributes=codec,
                                      timestamp=50))
    out.append(ref_legacy_message(9, 0, None, gzip.compress(ref_legacy_message(9, 0, b"a", b"b")),
                                  attributes=1))
    out.append(out[0] + out[4] + out[8])
    return out


def fix_crc(buf: bytearray) -> None:
    """Recompute the checksum of every complete v2 batch / legacy message in place."""
    pos = 0
    while len(buf) - pos >= 17:
        (length,) = struct.unpack_from(">i", buf, pos + 8)
        end = pos + 12 + length
        if length < 14 or end > len(buf):
            return
        if buf[pos + 16] == 2 and length >= 49:
            struct.pack_into(">I", buf, pos + 17, R.crc32c(bytes(buf[pos + 21:end])))
        elif buf[pos + 16] in (0, 1):
            struct.pack_into(">I", buf, pos + 12, R.crc32_ieee(bytes(buf[pos + 16:end])))
        pos = end


_ROUNDS = (1, 1, 1, 2, 3, 5)


def mutate(rng: random.Random, seed: bytes) -> bytearray:
    # Uniform integers as int(random() * n): random.randrange's checks cost more than the
    # decoding of the mutant (same kinds of mutation, same ranges).
    r = rng.random
    buf = bytearray(seed)
    for _ in range(_ROUNDS[int(r() * 6)]):
        kind = int(r() * 8)
        n = len(buf)
        if n == 0:
            buf += rng.randbytes(1 + int(r() * 79))
            continue
        i = int(r() * n)
        if kind == 0:                                         # flip bits
            buf[i] ^= 1 << int(r() * 8)
        elif kind == 1:                                       # random byte
            buf[i] = int(r() * 256)
        elif kind == 2 and n >= 4:                            # interesting int32 anywhere
            j = int(r() * (n - 3))
            struct.pack_into(">i", buf, j, INTERESTING[int(r() * len(INTERESTING))])
        elif kind == 3:                                       # varint-ish runs
            run = b"\xff" * (1 + int(r() * 11)) + bytes([int(r() * 128)])
            buf[i:i + len(run)] = run
        elif kind == 4:                                       # truncate
            del buf[int(r() * n):]
        elif kind == 5:                                       # delete a slice
            del buf[i:i + 1 + int(r() * 15)]
        elif kind == 6:                                       # insert bytes
            buf[i:i] = rng.randbytes(1 + int(r() * 15))
        else:                                                 # batch-length field games
            if n >= 12:
                lengths = INTERESTING + [n - 12, n - 11, n - 13]
                struct.pack_into(">i", buf, 8, lengths[int(r() * len(lengths))])
    return buf


def test_fuzz_mutated_batches():
    rng = random.Random(SEED)
    seeds = corpus()
    ok = failed = 0
    t0 = time.monotonic()
    for case in range(N_CASES):
        buf = mutate(rng, rng.choice(seeds))
        roll = rng.random()
        if roll < 0.5:
            fix_crc(buf)
        data = bytes(buf)
        check = roll < 0.75
        try:
            res = R.decode_records(data, check_crcs=check, max_decompressed_bytes=1 << 20,
                                   skip_control=bool(case & 1), fetch_offset=case % 7 - 1,
                                   aborted_transactions=[(4, 0)] if case % 5 == 0 else None)
            assert res.bytes_consumed + res.partial_trailing_bytes == len(data)
            assert all(b.record_start <= b.record_end <= len(res.records) for b in res.batches)
            ok += 1
        except KafkaError:
            failed += 1
        except Exception as e:                                # anything else is a bug
            raise AssertionError(f"case {case}: {type(e).__name__}: {e}; input {data.hex()}") from e
        if case % 4 == 0:
            try:
                cb = R.decode_columnar(data, check_crcs=check, max_decompressed_bytes=1 << 20)
                n = cb.num_records
                assert len(cb.offsets) == n and len(cb.header_starts) == n + 1
                size = len(cb.data)
                for pos, ln in zip(cb.value_offsets.tolist(), cb.value_lengths.tolist()):
                    assert ln < 0 or 0 <= pos <= pos + ln <= size
                if case % 64 == 0:
                    cb.to_arrow().validate(full=True)
            except KafkaError:
                pass
            except Exception as e:
                raise AssertionError(f"columnar case {case}: {type(e).__name__}: {e}; "
                                     f"input {data.hex()}") from e
    elapsed = time.monotonic() - t0
    # Both outcomes must be well represented, or the mutator is not doing its job.
    assert ok > N_CASES // 20 and failed > N_CASES // 5, (ok, failed)
    print(f"\nfuzz: {N_CASES} cases, {ok} decoded, {failed} rejected, {elapsed:.1f} s")
