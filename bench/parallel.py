"""``python -m bench parallel``: ParallelConsumer against a plain poll loop, for I/O-like handlers.

One topic (8 partitions, 20,000 records by default, keyed, 100-byte values) on Apache Kafka
(``kclient.testing.KafkaCluster(profile="throughput")``, or ``--bootstrap``). Each row reads it
with a fresh group and manually assigned partitions (no join time in the measurement):

- ``plain loop``: ``poll()`` then ``handle(record)`` for each record, on the polling thread;
- ``ParallelConsumer, N workers``: ``run(handle)``, ordering="key" by default.

The I/O-like handler waits 5 ms in ``time.sleep`` (it releases the GIL, like a socket wait).
The CPU-bound rows spin in pure Python for about as long as one wait: threads cannot run
Python bytecode in parallel (the GIL), so more workers do not help there, and the table says so.

Throughput = records / (time of the last record handled - time the first handler started).
The slow rows (plain loop, 1 worker, CPU-bound) read only ``--slow-records`` of the records:
their rate is what is compared, and reading 20,000 at 200 records/s would take 100 s per row.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid

WORKERS = [1, 8, 64, 256]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def produce(bootstrap: str, topic: str, records: int, partitions: int, keys: int) -> None:
    from kclient import KafkaProducer
    pad = b"." * 90
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=256 * 1024) as producer:
        futures = [producer.send(topic, value=b"%010d" % i + pad, key=b"k%d" % (i % keys), partition=i % partitions)
                   for i in range(records)]
        producer.flush(120)
        for f in futures:
            f.get(120)


def io_handler(wait_s: float):
    def handle(record):
        time.sleep(wait_s)        # the simulated I/O (an HTTP call, a database write)
    return handle


def cpu_handler(wait_s: float):
    # Calibrated once: the loop count that keeps one core busy for about wait_s.
    n = 10_000
    while True:
        t = time.perf_counter()
        x = 0
        for i in range(n):
            x += i * i
        took = time.perf_counter() - t
        if took >= 0.02:
            break
        n *= 2
    spins = max(int(n * wait_s / took), 1)

    def handle(record):
        x = 0
        for i in range(spins):
            x += i * i
        return x
    return handle


def new_consumer(bootstrap: str, topic: str, partitions: int):
    from kclient import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=f"bench-parallel-{uuid.uuid4().hex[:8]}",
                             enable_auto_commit=False, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    return consumer


def run_plain(bootstrap: str, topic: str, partitions: int, records: int, handle, timeout_s: float) -> dict:
    consumer = new_consumer(bootstrap, topic, partitions)
    try:
        n, started = 0, None
        deadline = time.monotonic() + timeout_s
        while n < records and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=100, max_records=500).values():
                for r in batch:
                    if started is None:
                        started = time.perf_counter()
                    handle(r)
                    n += 1
                    if n >= records:
                        break
                if n >= records:
                    break
        elapsed = time.perf_counter() - started if started else float("nan")
        if n >= records:
            consumer.commit()
        return {"handled": n, "seconds": elapsed, "ok": n >= records}
    finally:
        consumer.close()


def run_parallel(bootstrap: str, topic: str, partitions: int, records: int, handle, workers: int,
                 ordering: str, timeout_s: float) -> dict:
    from kclient.parallel import ParallelConsumer
    consumer = new_consumer(bootstrap, topic, partitions)
    lock = threading.Lock()
    state = {"n": 0, "first": None, "last": None}
    stop = threading.Event()

    def counted(record):
        with lock:
            if state["first"] is None:
                state["first"] = time.perf_counter()
        handle(record)
        with lock:
            state["n"] += 1
            if state["n"] == records:
                state["last"] = time.perf_counter()
                stop.set()

    timer = threading.Timer(timeout_s, stop.set)
    timer.start()
    try:
        with ParallelConsumer(consumer, max_workers=workers, ordering=ordering) as pc:
            pc.run(counted, stop=stop)
            m = pc.metrics()
        ok = state["last"] is not None
        elapsed = (state["last"] - state["first"]) if ok else float("nan")
        return {"handled": state["n"], "seconds": elapsed, "ok": ok, "max_in_flight": m.max_in_flight}
    finally:
        timer.cancel()
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench parallel", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="an existing cluster (default: start Apache Kafka, profile=throughput)")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--slow-records", type=int, default=1_000,
                        help="records read by the slow rows (plain loop, 1 worker, CPU-bound)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--keys", type=int, default=5_000, help="distinct record keys")
    parser.add_argument("--wait-ms", type=float, default=5.0, help="the I/O-like handler's wait")
    parser.add_argument("--workers", type=int, nargs="+", default=WORKERS)
    parser.add_argument("--ordering", choices=["key", "partition", "unordered"], default="key")
    parser.add_argument("--cpu-workers", type=int, default=8, help="workers of the CPU-bound row (0: skip it)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per row")
    parser.add_argument("--json", help="also write the results here")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    for name in ("records", "slow_records", "partitions", "keys", "timeout"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.wait_ms <= 0 or any(w < 1 for w in args.workers):
        parser.error("--wait-ms and --workers must be positive")

    load_before = os.getloadavg()
    cluster = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from kclient.testing import KafkaCluster
        log("starting Apache Kafka (profile=throughput) ...")
        cluster = KafkaCluster(profile="throughput").start()
        bootstrap = cluster.bootstrap
    try:
        from kclient import KafkaAdminClient, NewTopic
        topic = f"bench-parallel-{uuid.uuid4().hex[:8]}"
        if cluster is not None:
            cluster.create_topic(topic, args.partitions)
            cluster.wait_for_topic(topic, args.partitions)
        else:
            with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
                admin.create_topics([NewTopic(topic, args.partitions, 1)])
        log(f"producing {args.records:,} records to {topic} ...")
        produce(bootstrap, topic, args.records, args.partitions, args.keys)
        wait_s = args.wait_ms / 1000.0
        slow = min(args.slow_records, args.records)
        rows = []

        def row(name, result, records):
            rate = records / result["seconds"] if result["ok"] and result["seconds"] > 0 else None
            rows.append({"row": name, **result, "records": records, "records_per_s": rate})
            log(f"  {name}: " + (f"{rate:,.0f} records/s" if rate else f"FAILED ({result['handled']} records)"))

        log(f"I/O-like handler ({args.wait_ms:g} ms wait):")
        row("plain poll loop", run_plain(bootstrap, topic, args.partitions, slow, io_handler(wait_s), args.timeout),
            slow)
        for w in args.workers:
            n = slow if w == 1 else args.records
            row(f"ParallelConsumer, {w} worker{'s' if w > 1 else ''}", run_parallel(bootstrap, topic, args.partitions, n, io_handler(wait_s),
                                                             w, args.ordering, args.timeout), n)
        if args.cpu_workers:
            log(f"CPU-bound handler (~{args.wait_ms:g} ms of pure Python):")
            handle = cpu_handler(wait_s)
            row("CPU-bound, plain poll loop", run_plain(bootstrap, topic, args.partitions, slow, handle, args.timeout),
                slow)
            row(f"CPU-bound, ParallelConsumer, {args.cpu_workers} workers",
                run_parallel(bootstrap, topic, args.partitions, slow, handle, args.cpu_workers, args.ordering,
                             args.timeout), slow)
    finally:
        if cluster is not None:
            cluster.stop()

    io_base = rows[0]["records_per_s"]
    cpu_base = next((r["records_per_s"] for r in rows if r["row"] == "CPU-bound, plain poll loop"), None)
    print(f"\nCommand: python -m bench parallel {' '.join(argv)}".rstrip())
    print(f"{args.partitions} partitions, {args.records:,} records ({slow:,} for the slow rows), "
          f"ordering={args.ordering}, {os.cpu_count()} CPUs, load average before: "
          f"{' '.join(f'{x:.2f}' for x in load_before)}\n")
    print("| handler | reader | records | records/s | vs plain loop | max in flight |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        cpu = r["row"].startswith("CPU-bound")
        base = cpu_base if cpu else io_base
        rate = r["records_per_s"]
        vs = f"{rate / base:.1f}x" if rate and base else "-"
        handler = "CPU-bound (GIL)" if cpu else f"I/O-like {args.wait_ms:g} ms"
        reader = r["row"].removeprefix("CPU-bound, ")
        print(f"| {handler} | {reader} | {r['records']:,} | {f'{rate:,.0f}' if rate else 'failed'} | {vs} | "
              f"{r.get('max_in_flight', 1)} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=2)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
