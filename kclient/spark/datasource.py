"""``spark.read.format("kclient")`` and ``spark.readStream.format("kclient")``: kclient as a
Spark data source (Spark 4's Python Data Source API), with no JVM connector jar.

``register(spark)`` registers it under the name "kclient" (Spark's built-in "kafka" would win
over a Python source of that name). Spark also discovers it by itself: its lookup imports
every top-level ``pyspark_*`` module that defines ``DefaultSource``, and kclient ships
``pyspark_kclient``; ``register`` is for sessions where that module is not on the workers'
path.

Options and schema are those of Spark's Kafka source (kclient.spark.planning documents the
options; kclient.spark.arrow the schema). A batch read plans offset ranges on the driver
exactly as ``read_kafka`` does, and gives them to as many tasks as the session's cores and
the number of records call for (kclient.spark.tasks), each task reading its ranges one after
the other; ``kclient.maxPartitions`` or ``minPartitions`` decide instead where given. The
stream reader is in kclient.spark.stream. Partitions (kclient.spark.partitions) are read on executors by the Arrow
range reader, through the per-worker client pool (kclient.spark.reader), yielding
``pyarrow.RecordBatch``.

The extension option ``kclient.offsetRanges`` (JSON ``[["topic", partition, from, until],
...]``, batch only) reads exactly those ranges instead of planning: ``read_kafka(...,
ranges=...)`` uses it so that a DataFrame reads what was planned (and can be committed) no
matter how often it runs.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Iterator, Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kclient import errors as Errors
from kclient.spark.arrow import kafka_schema
from kclient.spark.partitions import RangePartition, read_partition, spark_arrow_schema
from kclient.spark.planning import OffsetRange, _as_bool, canonical_options, _plan_offset_ranges, parse_options
from kclient.spark.tasks import planning_cores, task_groups

__all__ = ["KafkaDataSource", "RangePartition", "register", "read_partition", "NAME", "OFFSET_RANGES_OPTION"]

log = logging.getLogger(__name__)

NAME = "kclient"
OFFSET_RANGES_OPTION = "kclient.offsetRanges"


def _fixed_schema(options: Mapping[str, Any], schema) -> bool:
    """includeHeaders, after checking a schema given by the user is the source's own."""
    include_headers = _as_bool("includeHeaders", options.get("includeHeaders", False))
    expected = kafka_schema(include_headers)
    if schema is not None and schema != expected:
        raise Errors.ConfigurationError(
            f"the kclient source has a fixed schema (Spark's Kafka source schema) and cannot take a custom one: "
            f"expected {expected.simpleString()}, got {schema.simpleString()}")
    return include_headers


def _ranges_option(value: Any) -> list[OffsetRange]:
    try:
        rows = json.loads(value) if isinstance(value, str) else value
        return [OffsetRange(str(t), int(p), int(lo), int(hi)) for t, p, lo, hi in rows]
    except (TypeError, ValueError) as exc:
        raise Errors.ConfigurationError(
            f"option {OFFSET_RANGES_OPTION!r} must be a JSON list of [topic, partition, from, until] "
            f"({exc}): {value!r}") from None


def _check_options(options: dict[str, Any]) -> None:
    """Fail at load(), before Spark knows whether the query is batch or streaming, on options
    neither accepts (an unknown name, a bad value); the reader checks the rest."""
    try:
        parse_options(options)
    except Errors.ConfigurationError as batch_error:
        try:
            parse_options(options, streaming=True)
        except Errors.ConfigurationError:
            raise batch_error from None


class KafkaBatchReader(DataSourceReader):
    """Planning on the driver (partitions), reading on executors (read)."""

    def __init__(self, options: dict[str, Any], ranges: list[OffsetRange] | None, include_headers: bool,
                 session_cores: int | None = None):
        self.options = options
        self.opts = parse_options(options)        # bad options fail here, on the driver
        self.planned = ranges
        self.arrow_schema = spark_arrow_schema(include_headers)
        self.session_cores = session_cores

    def partitions(self) -> list[RangePartition]:
        ranges = self.planned if self.planned is not None else _plan_offset_ranges(self.opts)
        groups = task_groups(ranges, self.opts, planning_cores(self.session_cores))
        log.info("reading %d record(s) in %d task(s)", sum(r.size for r in ranges), len(groups))
        return [RangePartition(group) for group in groups]

    def read(self, partition: InputPartition) -> Iterator:
        return read_partition(partition, self.opts, self.arrow_schema)


class KafkaDataSource(DataSource):
    """The "kclient" source: Spark's Kafka source options and schema (see the module doc)."""

    #: The session's default parallelism, set on the class that register(spark) registers
    #: (kclient.spark.tasks plans the number of tasks with it); None: the planner's CPUs.
    session_cores: int | None = None

    @classmethod
    def name(cls) -> str:
        return NAME

    def __init__(self, options):
        super().__init__(options)
        # Spark lower-cases option names; messages should spell them as the docs do.
        self.source_options = canonical_options(options)
        spelled = [k for k in self.source_options if k.lower() == OFFSET_RANGES_OPTION.lower()]
        ranges = self.source_options.pop(spelled[0]) if spelled else None
        self.ranges = None if ranges is None else _ranges_option(ranges)
        _check_options(self.source_options)

    def schema(self):
        return kafka_schema(_fixed_schema(self.source_options, None))

    def reader(self, schema) -> KafkaBatchReader:
        return KafkaBatchReader(self.source_options, self.ranges, _fixed_schema(self.source_options, schema),
                                self.session_cores)

    def streamReader(self, schema):
        try:
            from kclient.spark.stream import KafkaStreamReader
        except ImportError as exc:     # admission control for Python sources came in Spark 4.2
            raise Errors.IllegalStateError(f"streaming from the kclient source needs PySpark 4.2 or later ({exc})") \
                from None
        if self.ranges is not None:
            raise Errors.ConfigurationError(f"option {OFFSET_RANGES_OPTION!r} is for batch reads only")
        include_headers = _fixed_schema(self.source_options, schema)
        return KafkaStreamReader(self.source_options, spark_arrow_schema(include_headers), self.session_cores)


def register(spark) -> None:
    """Register the "kclient" source with this SparkSession (see the module doc), telling it
    the session's default parallelism: Spark hands a Python source's planner no such thing,
    and the class registered is what reaches it (pickled by value)."""
    cores = _default_parallelism(spark)
    source = KafkaDataSource if cores is None else type(
        "KafkaDataSource", (KafkaDataSource,),
        {"session_cores": cores, "__module__": __name__, "__qualname__": "KafkaDataSource.for_session",
         "__doc__": KafkaDataSource.__doc__})
    spark.dataSource.register(source)
    log.debug("registered the %r data source (default parallelism %s)", NAME, cores)


def _default_parallelism(spark) -> int | None:
    """The session's default parallelism, or None where it has no SparkContext (Spark Connect)."""
    try:
        cores = int(spark.sparkContext.defaultParallelism)
    except Exception as exc:  # Spark Connect sessions refuse sparkContext
        log.debug("no default parallelism from the session (%s): planning for the driver's CPUs", exc)
        return None
    return cores if cores >= 1 else None
