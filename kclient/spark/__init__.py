"""kclient for PySpark: Kafka reads, batch and streaming, without Spark's Kafka connector jar.

- ``spark.read.format("kclient")`` / ``spark.readStream.format("kclient")`` with the options
  and schema of Spark's Kafka source (kclient.spark.datasource; ``register(spark)`` where
  Spark does not discover it by itself).

- ``plan_offset_ranges(options) -> [OffsetRange]`` on the driver, with the options of Spark's
  Kafka source (kclient.spark.planning documents them).
- ``read_kafka(spark, options)``: the drop-in for ``spark.read.format("kafka")...load()``
  (mapInArrow over the planned ranges, Spark's schema).
- ``read_offset_range(range, options)`` / ``range_rows`` for ``foreachPartition`` and
  ``mapPartitions``; ``arrow_reader(options)`` / ``arrow_batches`` for ``mapInArrow``.
- ``commit_offset_ranges(ranges, options, group_id)`` so the next run resumes with
  ``startingOffsets="committed"``.

Executors keep one client per worker process (fork-safe; see kclient.spark.reader).
Names are imported lazily: planning works without pyspark installed. Type checkers read them
from ``__init__.pyi``, which imports each from its module.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "OffsetRange": "kclient.spark.planning",
    "SourceOptions": "kclient.spark.planning",
    "parse_options": "kclient.spark.planning",
    "plan_offset_ranges": "kclient.spark.planning",
    "split_offset_ranges": "kclient.spark.planning",
    "group_offset_ranges": "kclient.spark.planning",
    "read_offset_range": "kclient.spark.reader",
    "read_offset_ranges": "kclient.spark.reader",
    "range_rows": "kclient.spark.reader",
    "cached_consumer": "kclient.spark.reader",
    "client_cache_info": "kclient.spark.reader",
    "close_cached_consumers": "kclient.spark.reader",
    "kafka_schema": "kclient.spark.arrow",
    "kafka_arrow_schema": "kclient.spark.arrow",
    "arrow_batches": "kclient.spark.arrow",
    "arrow_reader": "kclient.spark.arrow",
    "read_kafka": "kclient.spark.source",
    "register": "kclient.spark.datasource",
    "KafkaDataSource": "kclient.spark.datasource",
    "ranges_dataframe": "kclient.spark.source",
    "commit_offset_ranges": "kclient.spark.source",
    "ensure_spark_env": "kclient.spark.source",
    "local_session": "kclient.spark.source",
}

__all__ = sorted(_LAZY)  # noqa: PLE0605 (the lazily imported names are the public ones)


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'kclient.spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value
