"""``read_kafka(spark, options)``: a drop-in for ``spark.read.format("kafka").options(**o).load()``.

Spark's own Kafka source needs its connector jar (from Maven); this one needs only kclient
on the driver and the Python workers. ``read_kafka`` is a thin wrapper over the "kclient"
data source (kclient.spark.datasource): it plans the ranges on the driver
(``plan_offset_ranges``) and hands them to ``spark.read.format("kclient")`` (which gives them
to as many tasks as the session's cores call for: kclient.spark.tasks), so they are fixed
when ``read_kafka`` is called: every action on the
DataFrame reads the same records (Spark's batch source, and ``format("kclient")`` without
planned ranges, re-resolve "latest" per action). ``ranges_dataframe`` + ``arrow_reader``
remain for wiring ``mapInArrow`` by hand.

``commit_offset_ranges(ranges, options, group_id)`` commits a finished job's ranges to a
consumer group, so the next run can start with ``startingOffsets="committed"``.

``local_session()`` starts a local SparkSession for kclient (tests, the demo, benchmarks):
``ensure_spark_env()`` first fills in what Spark needs from the environment if missing:
JAVA_HOME (from the ``java`` on PATH), SPARK_LOCAL_IP (loopback), PYSPARK_PYTHON (this
interpreter, so workers import the same kclient) and PYTHONPATH (the directory holding
kclient and kcore, for workers of a source checkout).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from kclient import errors as Errors
from kclient.spark.arrow import RANGE_COLUMNS
from kclient.spark.planning import OffsetRange, SourceOptions, _plan_offset_ranges, parse_options
from kclient.structs import OffsetAndMetadata, TopicPartition

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["read_kafka", "ranges_dataframe", "commit_offset_ranges", "ensure_spark_env", "local_session"]

log = logging.getLogger(__name__)

COMMIT_METADATA = "kclient.spark"


def ensure_spark_env() -> dict[str, str]:
    """Set JAVA_HOME, SPARK_LOCAL_IP, PYSPARK_PYTHON and PYTHONPATH when missing (see the
    module doc); returns the values set. Call before the first SparkSession starts."""
    changed: dict[str, str] = {}
    if not os.environ.get("JAVA_HOME"):
        java = shutil.which("java")
        if java is None:
            raise Errors.IllegalStateError("Spark needs Java: install a JDK (17+) or set JAVA_HOME")
        home = Path(os.path.realpath(java)).parent.parent   # <home>/bin/java
        changed["JAVA_HOME"] = str(home)
    if not os.environ.get("SPARK_LOCAL_IP"):
        changed["SPARK_LOCAL_IP"] = "127.0.0.1"
    if not os.environ.get("PYSPARK_PYTHON"):
        changed["PYSPARK_PYTHON"] = sys.executable
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        changed["PYTHONPATH"] = os.pathsep.join([root] + paths)
    os.environ.update(changed)
    if changed:
        log.info("Spark environment: %s", changed)
    return changed


def local_session(master: str = "local[2]", app_name: str = "kclient", conf: Mapping[str, str] | None = None):
    """A local SparkSession (getOrCreate) after ensure_spark_env(); quiet logs, no UI."""
    ensure_spark_env()
    from pyspark.sql import SparkSession
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def ranges_dataframe(spark, ranges: Iterable[OffsetRange]):
    """A DataFrame of ranges (topic, partition, from_offset, until_offset), one per Spark partition."""
    rows = [(r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges]
    schema = "topic string, partition int, from_offset long, until_offset long"
    rdd = spark.sparkContext.parallelize(rows, max(len(rows), 1))
    df = spark.createDataFrame(rdd, schema)
    assert tuple(df.columns) == RANGE_COLUMNS
    return df


def read_kafka(spark: SparkSession, options: Mapping[str, Any], *,
               ranges: Iterable[OffsetRange] | None = None) -> DataFrame:
    """A DataFrame of the records the options select, in the Spark Kafka source's schema.

    ``ranges``: read these planned ranges instead of planning now (keep them to commit them
    with commit_offset_ranges() once the job has finished)."""
    from kclient.spark.datasource import NAME, OFFSET_RANGES_OPTION, register
    raw = dict(options)
    opts = parse_options(raw)
    planned = list(ranges) if ranges is not None else _plan_offset_ranges(opts)
    register(spark)
    texts = {key: _option_text(value) for key, value in raw.items()}
    texts[OFFSET_RANGES_OPTION] = json.dumps([[r.topic, r.partition, r.from_offset, r.until_offset] for r in planned])
    return spark.read.format(NAME).options(**texts).load()


def _option_text(value: Any) -> str:
    """A Python option value as the text Spark passes on (options are strings there)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def commit_offset_ranges(ranges: Iterable[OffsetRange], options: Mapping[str, Any] | SourceOptions,
                         group_id: str | None = None, *, timeout_ms: int | None = None) -> dict[TopicPartition, int]:
    """Commit, for every partition in ranges, the end of its last range as the group's
    offset (without joining the group). group_id defaults to the option kafka.group.id.
    Returns {TopicPartition: committed offset}."""
    from kclient.consumer.kafka_consumer import KafkaConsumer
    opts = parse_options(options)
    group = group_id or opts.group_id
    if not group:
        raise Errors.IllegalArgumentError("commit_offset_ranges needs a group_id (or the option kafka.group.id)")
    ends: dict[TopicPartition, int] = {}
    for r in ranges:
        tp = r.topic_partition
        ends[tp] = max(ends.get(tp, r.until_offset), r.until_offset)
    if not ends:
        return {}
    params = opts.client_params()
    params["group.id"] = group
    with KafkaConsumer(params) as consumer:
        consumer.assign(sorted(ends))
        consumer.commit({tp: OffsetAndMetadata(off, COMMIT_METADATA, -1) for tp, off in ends.items()},
                        timeout_ms=timeout_ms)
    log.info("committed %d partition offset(s) for group %r", len(ends), group)
    return ends
