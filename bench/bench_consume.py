"""Consume throughput against Tansu: kclient per record, columnar and iteration, with peers.

    python bench/bench_consume.py                       # 1,000,000 x 100 B, 8 partitions
    python bench/bench_consume.py --peers confluent,aiokafka,kafka-python
    python bench/bench_consume.py --bootstrap host:9092 # an existing cluster instead of Tansu
    python bench/bench_consume.py --memory              # RSS bound while consuming slowly

The records are written once (confluent-kafka, large batches) and every client reads them
all in assign mode from the beginning, each touching every record (per-record clients read
``value``; the columnar path touches the arrays). Figures: wall records/s, and client CPU
per record (process CPU time, all threads). Shared machines drift: compare within one run.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

log = logging.getLogger("bench_consume")


def produce(bootstrap: str, topic: str, n: int, partitions: int, value_size: int) -> float:
    import confluent_kafka
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                                  "batch.num.messages": 100_000, "queue.buffering.max.messages": 2_000_000,
                                  "queue.buffering.max.kbytes": 2_000_000, "log_level": 3})
    pad = b"." * max(value_size - 8, 0)
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, b"%08d" % i + pad, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(300):
        raise RuntimeError("records left unsent")
    return time.perf_counter() - start


def measure(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    n = fn()
    return n, time.perf_counter() - wall, time.process_time() - cpu


# ---------------------------------------------------------------------- clients
def kclient_records(bootstrap, topic, n, partitions, **cfg):
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.structs import TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **cfg)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])

    def run():
        got = 0
        size = 0
        while got < n:
            for recs in c.poll(1000).values():
                got += len(recs)
                for r in recs:
                    size += len(r.value)
        return got
    try:
        return measure(run)
    finally:
        c.close()


def kclient_iter(bootstrap, topic, n, partitions, **cfg):
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.structs import TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10_000, **cfg)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])

    def run():
        got = 0
        size = 0
        for msg in c:
            size += len(msg.value)
            got += 1
            if got >= n:
                break
        return got
    try:
        return measure(run)
    finally:
        c.close()


def kclient_columnar(bootstrap, topic, n, partitions, arrow=False, **cfg):
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.structs import TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **cfg)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])

    def run():
        got = 0
        total = 0
        while got < n:
            for batch in c.poll_columnar(1000, max_records=1_000_000).values():
                got += len(batch)
                if arrow:
                    total += batch.to_arrow().num_rows
                else:
                    lengths = batch.value_lengths
                    total += lengths[len(lengths) - 1] if len(lengths) else 0
        return got
    try:
        return measure(run)
    finally:
        c.close()


def confluent(bootstrap, topic, n, partitions, tuned=False):
    import confluent_kafka
    conf = {"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
            "enable.auto.commit": False, "log_level": 3}
    if tuned:
        conf.update({"fetch.wait.max.ms": 10, "fetch.max.bytes": 52428800,
                     "max.partition.fetch.bytes": 10485760, "queued.max.messages.kbytes": 1048576})
    c = confluent_kafka.Consumer(conf)
    c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(partitions)])

    def run():
        got = 0
        size = 0
        while got < n:
            for m in c.consume(10_000, 1.0):
                if m.error() is None:
                    size += len(m.value())
                    got += 1
        return got
    try:
        return measure(run)
    finally:
        c.close()


def aiokafka_client(bootstrap, topic, n, partitions):
    import aiokafka

    async def main():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                      enable_auto_commit=False)
        await c.start()
        try:
            c.assign([aiokafka.TopicPartition(topic, p) for p in range(partitions)])
            await c.seek_to_beginning()

            async def run():
                got = 0
                size = 0
                while got < n:
                    for recs in (await c.getmany(timeout_ms=1000, max_records=10_000)).values():
                        got += len(recs)
                        for r in recs:
                            size += len(r.value)
                return got
            wall, cpu = time.perf_counter(), time.process_time()
            got = await run()
            return got, time.perf_counter() - wall, time.process_time() - cpu
        finally:
            await c.stop()
    return asyncio.run(main())


def kafka_python_client(bootstrap, topic, n, partitions):
    import kafka
    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    c.assign([kafka.TopicPartition(topic, p) for p in range(partitions)])

    def run():
        got = 0
        size = 0
        while got < n:
            for recs in c.poll(1000).values():
                got += len(recs)
                for r in recs:
                    size += len(r.value)
        return got
    try:
        return measure(run)
    finally:
        c.close()


CLIENTS = {
    "kclient-records": kclient_records,
    "kclient-iter": kclient_iter,
    "kclient-columnar": kclient_columnar,
    "kclient-arrow": lambda *a: kclient_columnar(*a, arrow=True),
    "confluent": confluent,
    "confluent-tuned": lambda *a: confluent(*a, tuned=True),
    "aiokafka": aiokafka_client,
    "kafka-python": kafka_python_client,
}


# ---------------------------------------------------------------------- memory bound
def memory_run(bootstrap, topic, n, partitions, value_size, fetch_max_bytes, partition_bytes):
    """Consume slowly (the loop sleeps per poll, simulating processing) and track RSS."""
    import psutil
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.structs import TopicPartition
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = base
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_bytes=fetch_max_bytes,
                      max_partition_fetch_bytes=partition_bytes)
    c.assign([TopicPartition(topic, p) for p in range(partitions)])
    got = 0
    pause = time.sleep  # a slow application: the prefetch buffer must stay bounded meanwhile
    while got < n:
        for recs in c.poll(1000).values():
            got += len(recs)
        peak = max(peak, proc.memory_info().rss)
        pause(0.002)
    c.close()
    return got, base, peak


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--bootstrap", default=None, help="an existing cluster (default: start Tansu)")
    ap.add_argument("--clients", default="kclient-records,kclient-iter,kclient-columnar,kclient-arrow",
                    help=f"comma list of {sorted(CLIENTS)}")
    ap.add_argument("--peers", default="confluent", help="peer clients to add (comma list, '' for none)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--memory", action="store_true", help="run the memory-bound check instead")
    ap.add_argument("--fetch-max-bytes", type=int, default=52428800)
    ap.add_argument("--max-partition-fetch-bytes", type=int, default=1048576)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from kclient.testing import TansuBroker
        broker = TansuBroker().start()
        bootstrap = broker.bootstrap
    try:
        from kclient.admin import KafkaAdminClient, NewTopic
        topic = f"bench-{time.monotonic_ns()}"
        with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
            admin.create_topics([NewTopic(topic, args.partitions, 1)])
        secs = produce(bootstrap, topic, args.records, args.partitions, args.value_size)
        print(f"produced {args.records:,} x {args.value_size} B into {args.partitions} partitions in {secs:.1f} s")
        if args.memory:
            got, base, peak = memory_run(bootstrap, topic, args.records, args.partitions, args.value_size,
                                         args.fetch_max_bytes, args.max_partition_fetch_bytes)
            bound = 2 * args.fetch_max_bytes + 50 * 2**20
            print(f"consumed {got:,}; RSS {base / 2**20:.0f} MiB -> peak {peak / 2**20:.0f} MiB; growth "
                  f"{(peak - base) / 2**20:.0f} MiB (bound 2 x fetch.max.bytes + 50 MiB = {bound / 2**20:.0f} MiB)"
                  f": {'OK' if peak - base < bound else 'EXCEEDED'}")
            return 0 if peak - base < bound else 1
        names = [c for c in args.clients.split(",") if c] + [p for p in args.peers.split(",") if p]
        print(f"{'client':<18} {'records':>10} {'wall s':>8} {'records/s':>12} {'CPU us/record':>14}")
        for _ in range(args.repeat):
            for name in names:
                fn = CLIENTS[name]
                try:
                    n, wall, cpu = fn(bootstrap, topic, args.records, args.partitions)
                except ImportError as exc:
                    print(f"{name:<18} skipped: {exc}")
                    continue
                print(f"{name:<18} {n:>10,} {wall:>8.2f} {n / wall:>12,.0f} {cpu / n * 1e6:>14.2f}", flush=True)
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
