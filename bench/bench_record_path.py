"""CPU per record of the consumer's record path, in process, without a broker.

Run:  python bench/bench_record_path.py [--sizes 100,1000,10000] [--records 400000] [--repeat 5]

What a poll() or a ``for record in consumer`` loop spends per record once the answer is in
memory, step by step, over fetched bytes made like a benchmark topic's (8 partitions, 16 KiB
producer batches, keyless values of the given size, a timestamp shared by 50 records):

- decode: decode_columnar of each partition's bytes (CRC check, validation, arrays);
- records: consumer_records in slices of max.poll.records (500), each list dropped at once
  (making and freeing the ConsumerRecords);
- records + loop: the same with the application's loop over each list reading every value's
  length (what the poll() benchmark drivers do per record);
- views + loop: the same with ``views=True`` (the ``zero.copy.records`` setting);
- cursor loop: the iteration's compiled cursor over records already made, read through
  islice as the for-loop benchmark driver does, against a plain loop over the same lists.

Each figure is the best of --repeat runs of process CPU time, divided by the records.
"""
from __future__ import annotations

import argparse
import gc
import itertools
import os
import sys
import time

if __name__ == "__main__":     # run as a script: make the in-place kcore importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kcore import records as R
from kcore.cursor import ListCursor

PARTITIONS = 8
POLL = 500


def fetched(size: int, total: int) -> list[bytes]:
    """Each partition's bytes as a fetch answer carries them."""
    per_batch = max(16384 // size, 1)
    value = b"v" * size
    out = []
    for _ in range(PARTITIONS):
        blobs, off = [], 0
        while off < total // PARTITIONS:
            n = min(per_batch, total // PARTITIONS - off)
            blobs.append(R.encode_batch([(None, 1_700_000_000_000 + (off + i) // 50, None, value, [])
                                         for i in range(n)], base_offset=off))
            off += n
        out.append(b"".join(blobs))
    return out


def _stop():
    raise StopIteration


def measure(size: int, total: int, repeat: int) -> dict[str, float]:
    from kclient.structs import ConsumerRecord as CR
    data = fetched(size, total)
    cols = [R.decode_columnar(d) for d in data]
    n_total = sum(c.num_records for c in cols)

    def decode():
        for d in data:
            R.decode_columnar(d)

    def records(views=False, loop=False):
        nbytes = 0
        for p, cb in enumerate(cols):
            n = cb.num_records
            for i in range(0, n, POLL):
                part = (R.consumer_records(cb, CR, "topic", p, i, min(i + POLL, n), views=True) if views
                        else R.consumer_records(cb, CR, "topic", p, i, min(i + POLL, n)))
                if loop:
                    for r in part:
                        nbytes += len(r.value)
        return nbytes

    made = [R.consumer_records(cb, CR, "topic", p, 0, cb.num_records) for p, cb in enumerate(cols)]

    def plain_loop():
        nbytes = 0
        for part in made:
            for r in part:
                nbytes += len(r.value)
        return nbytes

    def cursor_loop():
        nbytes = 0
        for part in made:
            cursor = ListCursor(_stop)
            cursor.load(part)
            while cursor.remaining:
                for r in itertools.islice(cursor, 4096):
                    nbytes += len(r.value)
        return nbytes

    cases = {
        "decode": decode,
        "records": records,
        "records + loop": lambda: records(loop=True),
        "views + loop": lambda: records(views=True, loop=True),
        "plain loop over lists": plain_loop,
        "cursor loop (islice)": cursor_loop,
    }
    try:
        R.consumer_records(cols[0], CR, "topic", 0, 0, 1, views=True)
    except TypeError:           # a build without views (--baseline style comparisons)
        del cases["views + loop"]
    out = {}
    for name, fn in cases.items():
        best = float("inf")
        for _ in range(repeat):
            gc.collect()
            t = time.process_time()
            fn()
            best = min(best, time.process_time() - t)
        out[name] = best / n_total * 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--records", type=int, default=400_000, help="records at 100 B (fewer for larger values)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {s: measure(s, max(args.records * 100 // max(s, 100), 8 * POLL), args.repeat) for s in sizes}
    names = list(dict.fromkeys(n for r in results.values() for n in r))
    print("| CPU µs/record | " + " | ".join(f"{s} B" for s in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for name in names:
        print(f"| {name} | " + " | ".join(f"{results[s][name]:.3f}" if name in results[s] else "–"
                                           for s in sizes) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
