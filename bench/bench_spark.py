"""PySpark read benchmark: records per second into a DataFrame, three ways, in one run.

    python bench/bench_spark.py [--records 1000000] [--partitions 8] [--value-size 100]
                                [--broker kafka|tansu | --bootstrap HOST:PORT] [--master local[2]]
                                [--repeat 2] [--pyspark auto|installed|VERSION]
                                [--spark-kafka-version V]

Seeds a topic (kclient producer; Apache Kafka unless --broker tansu or --bootstrap), plans the
offset ranges once (one per partition), then times the same ranges read into a Spark
DataFrame (consumed by the ``noop`` sink, which materializes every row):

  kclient-source  spark.read.format("kclient"): the Python data source, columnar decode -> Arrow,
                  as many tasks as the planner picks (kclient.spark.tasks)
  kclient-source-per-partition  the same with one task per Kafka partition (kclient.maxPartitions
                  = the partitions), the layout of Spark's own source
  mapInArrow      kclient's Arrow range reader wired by hand: ranges DataFrame + mapInArrow
  mapPartitions   kclient.spark.range_rows: kclient per-record poll() -> Python tuples
  kafka-python    kafka-python's KafkaConsumer (assign + seek + poll) inside mapPartitions -> tuples
  spark-kafka     Spark's own Kafka source (spark-sql-kafka-0-10, JVM), the same offsets

The JVM connector's jars come from Maven Central (cached in ~/.cache/kclient), passed through
``spark.jars``; the connector must match Spark's version. Maven Central serves it for some
Spark releases only: when the installed PySpark has none, the benchmark re-runs itself under
the newest PySpark that has one (bench/spark_env.py; installed once into ~/.cache/kclient, not
into your environment) and says so. ``--pyspark installed`` keeps the installed PySpark (the
spark-kafka case is then skipped unless ``--spark-kafka-version`` names a connector to try).

and as micro-batches (Structured Streaming, Trigger.AvailableNow from the same starting offsets,
maxOffsetsPerTrigger a quarter of the records, so four micro-batches, into the noop sink; a
fresh checkpoint per run, so query start-up is in the time):

  kclient-stream         spark.readStream.format("kclient"), default options
  kclient-stream-per-partition  the same with one task per Kafka partition per micro-batch
                         (kclient.maxPartitions = the partitions), the layout of Spark's source
  spark-kafka-stream     spark.readStream.format("kafka") (the JVM connector)

and, for reference, the driver alone reading the same ranges with kclient (no Spark):
  direct-arrow    kclient.spark.arrow_batches in one process
kclient's modules are compiled to bytecode first where it is missing (see _compile_kclient).
Each case runs --repeat times after a warm-up job; the best time is reported, and for the
micro-batch cases where that run's time went (start-up before the first trigger, the
triggers' jobs, Spark's own per-trigger work). Figures drift on shared machines: compare the
ratios within one run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _seed(bootstrap: str, topic: str, records: int, partitions: int, value_size: int) -> None:
    from kclient.admin import KafkaAdminClient, NewTopic
    from kclient.producer import KafkaProducer
    with KafkaAdminClient({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    value = (b"0123456789abcdef" * (value_size // 16 + 1))[:value_size]
    p = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 262144,
                       "max.request.size": 4 << 20, "buffer.memory": 64 << 20})
    for i in range(records):
        p.send(topic, value=value, key=b"%08d" % i, partition=i % partitions)
    p.flush()
    p.close()


def _compile_kclient() -> str:
    """Bytecode for kclient's modules where it is missing or stale, as an installed kclient
    has it (pip compiles a package when it installs it; an editable checkout gets it from the
    first import). Spark's Python processes import kclient anew (a new one per streaming
    query), and without bytecode, where Python may not write it (PYTHONDONTWRITEBYTECODE, a
    read-only tree), each of them compiles kclient's sources again: 0.1-0.3 s of CPU per
    query that no installation pays. Returns what was done, for the report."""
    import compileall
    import io
    import kclient
    import kcore
    import pyspark_kclient
    roots = [os.path.dirname(m.__file__) for m in (kclient, kcore, pyspark_kclient)]
    out = io.StringIO()
    stdout, sys.stdout = sys.stdout, out
    try:
        ok = all(compileall.compile_dir(root, quiet=0) for root in roots)
    finally:
        sys.stdout = stdout
    written = sum(1 for line in out.getvalue().splitlines() if line.startswith("Compiling"))
    where = ", ".join(roots)
    if not ok:
        return f"could not compile every module under {where} (Spark's processes compile what is missing)"
    return f"up to date under {where}" if not written else f"compiled {written} module(s) under {where}"


def _kafka_python_rows(bootstrap: str):
    """mapPartitions function: kafka-python reads each range and yields Spark-schema tuples."""
    def read(rows):
        import datetime
        from kafka import KafkaConsumer, TopicPartition as KTP
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                 auto_offset_reset="none", max_partition_fetch_bytes=4 << 20,
                                 fetch_max_bytes=64 << 20)
        try:
            for topic, partition, start, until in rows:
                tp = KTP(topic, partition)
                consumer.assign([tp])
                consumer.seek(tp, start)
                while consumer.position(tp) < until:
                    for records in consumer.poll(timeout_ms=1000, max_records=10000).values():
                        for r in records:
                            if r.offset >= until:
                                break
                            yield (r.key, r.value, r.topic, r.partition, r.offset,
                                   epoch + datetime.timedelta(milliseconds=r.timestamp), r.timestamp_type)
        finally:
            consumer.close()
    return read


def _connector(spark_version: str, wanted: str | None) -> tuple[str, list]:
    """(connector version, jars) for Spark's Kafka source, resolved with Maven once."""
    from bench.spark_env import connector_jars
    version = wanted or spark_version
    return version, connector_jars(version)


def _stream(spark, fmt: str, options: dict, max_per_trigger: int):
    """A case: read the topic as micro-batches (Trigger.AvailableNow) into the noop sink;
    returns where the query's time went (_stream_times)."""
    def run() -> dict:
        with tempfile.TemporaryDirectory(prefix="bench-spark-checkpoint-") as checkpoint:
            started = time.time()
            query = (spark.readStream.format(fmt).options(**options)
                     .option("maxOffsetsPerTrigger", str(max_per_trigger)).load()
                     .writeStream.format("noop").trigger(availableNow=True)
                     .option("checkpointLocation", checkpoint).start())
            query.awaitTermination()
            ended = time.time()
            if query.exception() is not None:
                raise SystemExit(f"{fmt} stream failed: {query.exception()}")
            return _stream_times(query.recentProgress, started, ended)
    return run


def _stream_times(progress, started: float, ended: float) -> dict:
    """Seconds of a micro-batch query, from Spark's progress reports: before the first
    trigger (query start-up: for a Python source, its planner's Python process too), in
    triggers (``addBatch`` is the tasks' job; the rest is Spark's per-trigger work: offsets
    log, commit log, planning, ``latestOffset``), and after the last one."""
    import datetime
    triggers = [p for p in progress if p.numInputRows]
    if not triggers:
        return {}
    first = datetime.datetime.fromisoformat(triggers[0].timestamp.replace("Z", "+00:00")).timestamp()
    last = triggers[-1]
    last_end = (datetime.datetime.fromisoformat(last.timestamp.replace("Z", "+00:00")).timestamp()
                + last.durationMs.get("triggerExecution", 0) / 1000.0)
    in_triggers = sum(p.durationMs.get("triggerExecution", 0) for p in triggers) / 1000.0
    add_batch = sum(p.durationMs.get("addBatch", 0) for p in triggers) / 1000.0
    return {"triggers": len(triggers), "start-up": first - started, "addBatch": add_batch,
            "rest of triggers": in_triggers - add_batch, "after": ended - last_end}


def _best(fn, repeat: int) -> tuple[float, object]:
    """(the best time of fn, what fn returned on that run)."""
    best, kept = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t
        if seconds < best:
            best, kept = seconds, out
    return best, kept


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--broker", choices=["kafka", "tansu"], default="kafka",
                    help="the broker started for the run (default: Apache Kafka, the reference)")
    ap.add_argument("--bootstrap", default=None, help="use this cluster instead of starting a broker")
    ap.add_argument("--pyspark", default="auto", metavar="auto|installed|VERSION",
                    help="PySpark to run: auto (default): the installed one if Maven Central serves its "
                         "Kafka connector, else the pinned one (bench/spark_env.py); installed; or a version")
    ap.add_argument("--spark-kafka-version", default=None,
                    help="spark-sql-kafka connector version (default: the running PySpark's own)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip", action="append", default=[], help="case to skip (repeatable)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)

    import pyspark
    from bench import spark_env
    pyspark_note, spark_kafka_skip = "installed", None
    if "spark-kafka" not in args.skip:
        version, pyspark_note = spark_env.choose(pyspark.__version__, args.pyspark, args.spark_kafka_version)
        if version is not None:
            print(f"bench_spark: running under PySpark {version} ({pyspark_note})", file=sys.stderr, flush=True)
            try:
                spark_env.reexec_with(version, pyspark_note, sys.argv[1:] if argv is None else list(argv),
                                      os.path.abspath(__file__))
            except (spark_env.SparkEnvError, ValueError) as exc:  # stay, and say why spark-kafka is off
                pyspark_note = f"installed; PySpark {version} unavailable: {str(exc).splitlines()[0]}"
                args.skip.append("spark-kafka")
                spark_kafka_skip = pyspark_note

    from kclient.spark import (arrow_batches, arrow_reader, kafka_schema, local_session, plan_offset_ranges,
                               range_rows, ranges_dataframe, read_kafka, register)
    bytecode_note = _compile_kclient()
    broker = None
    if args.bootstrap:
        bootstrap, broker_label = args.bootstrap, "external"
    elif args.broker == "tansu":
        from kclient.testing import TansuBroker
        broker = TansuBroker().start()
        bootstrap, broker_label = broker.bootstrap, "Tansu (embedded)"
    else:
        from kclient.testing import KafkaCluster
        broker = KafkaCluster(profile="throughput").start()
        bootstrap, broker_label = broker.bootstrap, f"Apache Kafka {broker.version}"
    connector, jars, connector_error = None, [], spark_kafka_skip
    if "spark-kafka" not in args.skip:
        try:
            connector, jars = _connector(pyspark.__version__, args.spark_kafka_version)
        except Exception as exc:  # reported with the results; the other cases still run
            connector_error = str(exc).splitlines()[0]
            if not args.spark_kafka_version:
                connector_error += (f" (Maven Central may serve no connector for Spark {pyspark.__version__}: "
                                    "--pyspark auto runs a PySpark that has one)")
    topic = f"bench-spark-{int(time.time())}"
    try:
        t = time.perf_counter()
        _seed(bootstrap, topic, args.records, args.partitions, args.value_size)
        print(f"seeded {args.records:,} records of {args.value_size} B into {args.partitions} partitions "
              f"in {time.perf_counter() - t:.1f} s", flush=True)
        opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                "kafka.max.partition.fetch.bytes": str(4 << 20), "kafka.fetch.max.bytes": str(64 << 20)}
        ranges = plan_offset_ranges(opts)
        total = sum(r.size for r in ranges)
        assert total == args.records, (total, args.records)
        conf = {"spark.jars": ",".join(str(j) for j in jars)} if jars else {}
        spark = local_session(args.master, "kclient-bench", conf)
        # The driver, the JVM and the Python workers must all run the same Spark (a pinned PySpark
        # reaches the workers through PYTHONPATH; see bench/spark_env.py).
        worker = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__version__).first()
        if not pyspark.__version__ == spark.version == worker:
            raise SystemExit(f"mixed Spark versions: PySpark {pyspark.__version__} in the driver, "
                             f"{worker} in the workers, Spark {spark.version} in the JVM")
        schema = kafka_schema(False)

        def noop(df):
            df.write.format("noop").mode("overwrite").save()

        ranges_df = ranges_dataframe(spark, ranges)
        register(spark)
        # The same offsets as the planned ranges, for the sources that plan them themselves.
        starts = json.dumps({topic: {str(r.partition): r.from_offset for r in ranges}})
        ends = json.dumps({topic: {str(r.partition): r.until_offset for r in ranges}})
        per_trigger = max(total // 4, 1)
        def kclient_source(**extra):     # a reader of its own: option() changes the reader it is called on
            return spark.read.format("kclient").options(**opts, **extra).option("startingOffsets", starts) \
                .option("endingOffsets", ends)

        source = kclient_source()
        per_partition = kclient_source(**{"kclient.maxPartitions": str(args.partitions)})
        cases = {
            "kclient-source": lambda: noop(source.load()),
            "kclient-source-per-partition": lambda: noop(per_partition.load()),
            "mapInArrow": lambda: noop(ranges_df.mapInArrow(arrow_reader(opts), schema)),
            "mapPartitions": lambda: noop(spark.createDataFrame(
                ranges_df.rdd.mapPartitions(lambda it: range_rows(it, opts)), schema)),
            "kafka-python": lambda: noop(spark.createDataFrame(
                ranges_df.rdd.mapPartitions(_kafka_python_rows(bootstrap)), schema)),
            "kclient-stream": _stream(spark, "kclient", {**opts, "startingOffsets": starts}, per_trigger),
            "kclient-stream-per-partition": _stream(spark, "kclient", {
                **opts, "startingOffsets": starts, "kclient.maxPartitions": str(args.partitions)}, per_trigger),
            "direct-arrow": lambda: sum(b.num_rows for r in ranges for b in arrow_batches(r, opts)),
        }
        assert source.load().count() == total, "the kclient source read another number of records"
        if jars:
            # The same offsets as the planned ranges, through Spark's JVM source.
            jvm_options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                           "kafka.max.partition.fetch.bytes": str(4 << 20), "kafka.fetch.max.bytes": str(64 << 20)}
            jvm = spark.read.format("kafka").options(**jvm_options).option("startingOffsets", starts) \
                .option("endingOffsets", ends)
            assert jvm.load().count() == total, "Spark's Kafka source read another number of records"
            cases["spark-kafka"] = lambda: noop(jvm.load())
            cases["spark-kafka-stream"] = _stream(spark, "kafka", {**jvm_options, "startingOffsets": starts},
                                                  per_trigger)
        # warm-up: JVM, Python workers and each reader's imports
        warm = [r.__class__(r.topic, r.partition, r.from_offset, min(r.until_offset, r.from_offset + 100))
                for r in ranges]
        noop(read_kafka(spark, opts, ranges=warm))
        noop(spark.createDataFrame(ranges_dataframe(spark, warm).rdd.mapPartitions(_kafka_python_rows(bootstrap)),
                                   schema))
        results, stream_times = {}, {}
        for name, fn in cases.items():
            if name in args.skip:
                continue
            seconds, out = _best(fn, args.repeat)
            results[name] = seconds
            if isinstance(out, dict) and out:
                stream_times[name] = out
            print(f"{name:>28}: {total / seconds:>12,.0f} records/s  ({seconds:.2f} s for {total:,})", flush=True)
        spark.stop()
        print()
        print(f"{args.records:,} records x {args.value_size} B, {args.partitions} partitions, "
              f"Spark {pyspark.__version__} {args.master}, best of {args.repeat}, broker {broker_label}")
        print(f"  PySpark {pyspark.__version__}: {pyspark_note}")
        print(f"  kclient's bytecode: {bytecode_note}")
        if connector:
            print(f"  spark-kafka: spark-sql-kafka-0-10_2.13 {connector}"
                  + ("" if connector == pyspark.__version__ else
                     f" (NOT Spark's own version {pyspark.__version__}: asked with --spark-kafka-version)"))
        elif connector_error:
            print(f"  spark-kafka: skipped: {connector_error}")
        base = results.get("kafka-python")
        for name, seconds in results.items():
            # micro-batch cases are compared with the JVM source's micro-batches, batch with batch
            jvm_name = "spark-kafka-stream" if "-stream" in name else "spark-kafka"
            jvm_s = results.get(jvm_name)
            ratio = f"  {base / seconds:5.1f}x kafka-python" if base else ""
            ratio += f"  {jvm_s / seconds:5.2f}x {jvm_name}" if jvm_s else ""
            print(f"  {name:<28} {total / seconds:>12,.0f} rec/s{ratio}")
        if stream_times:
            print("  micro-batch queries, best run, seconds (Spark's progress reports):")
            jvm_times = stream_times.get("spark-kafka-stream")
            jvm_triggers = jvm_times["addBatch"] + jvm_times["rest of triggers"] if jvm_times else None
            for name, times in stream_times.items():
                parts = ", ".join(f"{k} {v:.2f}" for k, v in times.items() if k != "triggers")
                in_triggers = times["addBatch"] + times["rest of triggers"]
                versus = (f"; in triggers {jvm_triggers / in_triggers:.2f}x spark-kafka-stream"
                          if jvm_triggers and name != "spark-kafka-stream" else "")
                print(f"    {name:<28} {times['triggers']} triggers: {parts}{versus}")
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
