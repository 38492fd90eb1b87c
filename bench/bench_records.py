"""Record-batch decode benchmarks: kcore vs aiokafka (Cython) vs kafka-python (plain Python).

Run (pytest-benchmark, all cases side by side in one run):
    python -m pytest bench/bench_records.py --benchmark-only -s \
        --benchmark-columns=min,mean,ops --benchmark-group-by=group
The module prints a ratio table at the end (needs -s to show).  Quick ratios without
pytest:  python bench/bench_records.py

Workload: one batch of 10,000 records with 100-byte values and no key, uncompressed and lz4.
"Checked" cases validate the CRC the way each consumer does by default (check.crcs=true):
kcore inside decode, aiokafka and kafka-python with batch.validate_crc().  Decoding means
creating one record object per record (per-record) or the contiguous arrays (columnar).
"""
from __future__ import annotations

import random
import sys
import time

import pytest

from kcore import records as R

N_RECORDS = 10_000
VALUE_SIZE = 100


def make_values() -> list[bytes]:
    rng = random.Random(1)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"kafka", b"record", b"value", b"12345"]
    return [b" ".join(rng.choice(words) for _ in range(20))[:VALUE_SIZE].ljust(VALUE_SIZE, b".")
            for _ in range(N_RECORDS)]


VALUES = make_values()
BATCHES = {
    codec: R.encode_batch([(None, 1_700_000_000_000 + i, None, VALUES[i], [])
                           for i in range(N_RECORDS)], codec=codec)
    for codec in (0, 3)
}
CODEC_NAMES = {0: "uncompressed", 3: "lz4"}


# ------------------------------------------------------------------------- decoders
def kcore_per_record(data, check=True):
    res = R.decode_records(data, check_crcs=check)
    assert len(res.records) == N_RECORDS
    return res


def kcore_columnar(data, check=True):
    cb = R.decode_columnar(data, check_crcs=check)
    assert cb.num_records == N_RECORDS
    return cb


def kcore_arrow(data):
    return R.decode_columnar(data).to_arrow()


def aiokafka_decode(data, check=True):
    from aiokafka.record.memory_records import MemoryRecords
    mr = MemoryRecords(data)
    out = []
    while mr.has_next():
        batch = mr.next_batch()
        if check and not batch.validate_crc():
            raise ValueError("crc")
        out.extend(batch)
    assert len(out) == N_RECORDS
    return out


def kafka_python_decode(data, check=True):
    from kafka.record import MemoryRecords
    mr = MemoryRecords(data)
    out = []
    while mr.has_next():
        batch = mr.next_batch()
        if check and not batch.validate_crc():
            raise ValueError("crc")
        out.extend(batch)
    assert len(out) == N_RECORDS
    return out


CASES = {
    "kcore per-record": kcore_per_record,
    "kcore per-record no-crc": lambda d: kcore_per_record(d, False),
    "kcore columnar": kcore_columnar,
    "kcore columnar no-crc": lambda d: kcore_columnar(d, False),
    "kcore columnar+to_arrow": kcore_arrow,
    "aiokafka": aiokafka_decode,
    "aiokafka no-crc": lambda d: aiokafka_decode(d, False),
    "kafka-python (pure Python)": kafka_python_decode,
}

_RESULTS: dict[tuple[str, str], float] = {}


@pytest.fixture(scope="module", autouse=True)
def ratio_table():
    yield
    if _RESULTS:
        print("\n" + ratio_report(_RESULTS))


def ratio_report(results) -> str:
    lines = ["decode of 10,000 x 100 B records: time (min) and speed-up vs aiokafka"]
    for codec in CODEC_NAMES.values():
        base = results.get((codec, "aiokafka"))
        base_nc = results.get((codec, "aiokafka no-crc"))
        for name in CASES:
            t = results.get((codec, name))
            if t is None:
                continue
            ref = base_nc if name.endswith("no-crc") and base_nc else base
            ratio = f"{ref / t:6.2f}x" if ref else ""
            lines.append(f"  {codec:13s} {name:28s} {t * 1e6:9.0f} us  {N_RECORDS / t / 1e6:7.2f} "
                         f"M rec/s  {ratio}")
    return "\n".join(lines)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("codec", [0, 3], ids=["uncompressed", "lz4"])
def test_decode(benchmark, codec, name):
    if name.startswith("kafka-python") and codec == 3:
        pytest.skip("kafka-python's lz4 needs the lz4 package")
    benchmark.group = f"decode-{CODEC_NAMES[codec]}-10k"
    data = BATCHES[codec]
    fn = CASES[name]
    if name.startswith("kafka-python"):
        benchmark.pedantic(fn, args=(data,), rounds=3, iterations=1)
    else:
        benchmark(fn, data)
    _RESULTS[(CODEC_NAMES[codec], name)] = benchmark.stats.stats.min


# ------------------------------------------------------------------------- CRC32C
CRC_DATA = random.Random(2).randbytes(4 << 20)


@pytest.mark.parametrize("impl", ["hardware", "table", "zlib-crc32 (IEEE, for scale)"])
def test_crc32c_throughput(benchmark, impl):
    import zlib
    benchmark.group = "crc32c-4MiB"
    if impl == "hardware":
        if not R.CRC32C_HARDWARE:
            pytest.skip("no SSE4.2")
        fn = R.crc32c_hw
    elif impl == "table":
        fn = R.crc32c_sw
    else:
        fn = zlib.crc32
    benchmark(fn, CRC_DATA)
    mbps = len(CRC_DATA) / benchmark.stats.stats.min / 1e6
    print(f"\n  crc {impl}: {mbps:,.0f} MB/s")


# ------------------------------------------------------------------------- quick mode
def _best(fn, data, rounds):
    fn(data)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn(data)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    results = {}
    for codec, data in BATCHES.items():
        for name, fn in CASES.items():
            if name.startswith("kafka-python") and codec == 3:
                continue
            rounds = 3 if name.startswith("kafka-python") else 40
            try:
                results[(CODEC_NAMES[codec], name)] = _best(fn, data, rounds)
            except ImportError as exc:     # a peer client that is not installed: no row
                print(f"  skipped {name} ({codec=}): {exc}", file=sys.stderr)
    print(ratio_report(results))
    for label, fn in (("hardware", R.crc32c_hw if R.CRC32C_HARDWARE else None),
                      ("table", R.crc32c_sw)):
        if fn is not None:
            t = _best(fn, CRC_DATA, 20)
            print(f"  crc32c {label:9s} {len(CRC_DATA) / t / 1e6:9,.0f} MB/s")


if __name__ == "__main__":
    sys.exit(main())
