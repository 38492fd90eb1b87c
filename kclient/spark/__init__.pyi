# The public names for type checkers. At run time kclient/spark/__init__.py imports them lazily,
# on first use, so that planning works without pyspark installed; tests/test_public_stubs.py
# keeps the two in agreement.
from kclient.spark.arrow import arrow_batches as arrow_batches
from kclient.spark.arrow import arrow_reader as arrow_reader
from kclient.spark.arrow import kafka_arrow_schema as kafka_arrow_schema
from kclient.spark.arrow import kafka_schema as kafka_schema
from kclient.spark.datasource import KafkaDataSource as KafkaDataSource
from kclient.spark.datasource import register as register
from kclient.spark.planning import OffsetRange as OffsetRange
from kclient.spark.planning import SourceOptions as SourceOptions
from kclient.spark.planning import group_offset_ranges as group_offset_ranges
from kclient.spark.planning import parse_options as parse_options
from kclient.spark.planning import plan_offset_ranges as plan_offset_ranges
from kclient.spark.planning import split_offset_ranges as split_offset_ranges
from kclient.spark.reader import cached_consumer as cached_consumer
from kclient.spark.reader import client_cache_info as client_cache_info
from kclient.spark.reader import close_cached_consumers as close_cached_consumers
from kclient.spark.reader import range_rows as range_rows
from kclient.spark.reader import read_offset_range as read_offset_range
from kclient.spark.reader import read_offset_ranges as read_offset_ranges
from kclient.spark.source import commit_offset_ranges as commit_offset_ranges
from kclient.spark.source import ensure_spark_env as ensure_spark_env
from kclient.spark.source import local_session as local_session
from kclient.spark.source import ranges_dataframe as ranges_dataframe
from kclient.spark.source import read_kafka as read_kafka

__all__ = [
    "KafkaDataSource",
    "OffsetRange",
    "SourceOptions",
    "arrow_batches",
    "arrow_reader",
    "cached_consumer",
    "client_cache_info",
    "close_cached_consumers",
    "commit_offset_ranges",
    "ensure_spark_env",
    "group_offset_ranges",
    "kafka_arrow_schema",
    "kafka_schema",
    "local_session",
    "parse_options",
    "plan_offset_ranges",
    "range_rows",
    "ranges_dataframe",
    "read_kafka",
    "read_offset_range",
    "read_offset_ranges",
    "register",
    "split_offset_ranges",
]
