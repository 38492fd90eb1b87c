"""``python -m bench produce [--records N] [--size B] [--compression C] [--keyed] [--bootstrap host:port]``:
kclient's KafkaProducer against confluent-kafka's Producer in one run.

Each client produces N keyless records of B bytes (the same value bytes) to a topic of its own
(8 partitions) with the same batching settings (acks=1, linger.ms=5, batch.size=256 KiB, a
64 MiB buffer), in a fresh process of its own, one after the other. Reported per client:
records/s (first send to the end of flush) and CPU time per record (the process's user + system
time, librdkafka's threads included). ``--keyed``: records shaped like the demo's events instead
(a key from 2,000, two headers and a timestamp each). Without ``--bootstrap`` a one-node Apache Kafka broker is
started on this machine (kclient.testing) and shares its cores with the clients: the figures
are comparable within a run, less so across machines or runs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

DRIVERS = ("kclient", "confluent-kafka")
PARTITIONS = 8


KEYS = [b"user-%05d" % i for i in range(2000)]
HEADERS = [("source", b"web"), ("schema", b"click.v1")]
BASE_TS = 1_700_000_000_000


def _kclient(bootstrap: str, topic: str, records: int, value: bytes, compression: str, keyed: bool) -> None:
    from kclient.producer import KafkaProducer
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 262144,
                              "buffer.memory": 64 << 20, "compression.type": compression})
    producer.send(topic, value).get(60)           # metadata and connection before the clock starts
    started, cpu = time.perf_counter(), time.process_time()
    send = producer.send
    if keyed:
        keys, headers = KEYS, HEADERS
        for i in range(records):
            send(topic, value, keys[i % 2000], headers, None, BASE_TS + i)
    else:
        for _ in range(records):
            send(topic, value)
    producer.flush()
    _report(records, time.perf_counter() - started, time.process_time() - cpu)
    producer.close()


def _confluent(bootstrap: str, topic: str, records: int, value: bytes, compression: str, keyed: bool) -> None:
    import confluent_kafka
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                                         "batch.size": 262144, "queue.buffering.max.kbytes": 64 << 10,
                                         "queue.buffering.max.messages": 10_000_000,
                                         "compression.type": compression})
    producer.produce(topic, value)
    if producer.flush(60):
        raise SystemExit("confluent-kafka: the first record was not delivered within 60 s")
    started, cpu = time.perf_counter(), time.process_time()
    produce, poll = producer.produce, producer.poll
    if keyed:
        keys, headers = KEYS, HEADERS
        for i in range(records):
            try:
                produce(topic, value, keys[i % 2000], headers=headers, timestamp=BASE_TS + i)
            except BufferError:                   # queue full: serve delivery reports, then retry
                poll(0.005)
                produce(topic, value, keys[i % 2000], headers=headers, timestamp=BASE_TS + i)
    else:
        for _ in range(records):
            try:
                produce(topic, value)
            except BufferError:
                poll(0.005)
                produce(topic, value)
    producer.flush()
    _report(records, time.perf_counter() - started, time.process_time() - cpu)


def _report(records: int, seconds: float, cpu: float) -> None:
    print(json.dumps({"records": records, "seconds": seconds, "cpu": cpu}), flush=True)


def _child(args: argparse.Namespace) -> int:
    value = (os.urandom(args.size // 2 + 1).hex().encode())[:args.size]
    run = _kclient if args.driver == "kclient" else _confluent
    run(args.bootstrap, args.topic, args.records, value, args.compression, args.keyed)
    return 0


def _run_driver(driver: str, bootstrap: str, args: argparse.Namespace) -> dict:
    from kclient.admin import KafkaAdminClient, NewTopic
    topic = f"bench-produce-{driver}-{os.getpid()}-{int(time.time())}"
    with KafkaAdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    cmd = [sys.executable, "-m", "bench.produce", "--child", "--driver", driver, "--bootstrap", bootstrap,
           "--topic", topic, "--records", str(args.records), "--size", str(args.size),
           "--compression", args.compression] + (["--keyed"] if args.keyed else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{driver} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench produce", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes per record (default 100)")
    parser.add_argument("--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"))
    parser.add_argument("--keyed", action="store_true",
                        help="keyed records with two headers and a timestamp (the demo's events' shape)")
    parser.add_argument("--bootstrap", default=None, help="an existing cluster (default: start Apache Kafka)")
    parser.add_argument("--drivers", default=",".join(DRIVERS), help=f"comma list of {DRIVERS}")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--driver", choices=DRIVERS, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)
    drivers = [d for d in args.drivers.split(",") if d]
    unknown = set(drivers) - set(DRIVERS)
    if unknown or args.records < 1 or args.size < 1:
        parser.error(f"--drivers from {DRIVERS}, --records and --size >= 1 (got {sorted(unknown)})")

    def run_all(bootstrap: str) -> list[tuple[str, dict]]:
        return [(d, _run_driver(d, bootstrap, args)) for d in drivers]

    if args.bootstrap:
        where = args.bootstrap
        results = run_all(args.bootstrap)
    else:
        from kclient.testing import KafkaCluster
        with KafkaCluster() as kafka:
            where = f"Apache Kafka {kafka.version}, one node on this machine"
            results = run_all(kafka.bootstrap)
    load = os.getloadavg()
    shape = "keyed (2,000 keys), 2 headers, timestamps" if args.keyed else "keyless"
    print(f"{args.records:,} records x {args.size} B, {shape}, {args.compression}, acks=1, linger.ms=5, "
          f"{PARTITIONS} partitions; broker: {where}")
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
          "(1 / 5 / 15 min) at the end")
    print(f"{'client':<16} {'records/s':>12} {'CPU µs/record':>14} {'seconds':>8}")
    for driver, r in results:
        print(f"{driver:<16} {r['records'] / r['seconds']:>12,.0f} {r['cpu'] / r['records'] * 1e6:>14.2f} "
              f"{r['seconds']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
