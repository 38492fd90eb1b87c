"""Arrow batches in the Spark Kafka source's schema, for ``DataFrame.mapInArrow``.

Columns: key binary, value binary, topic string, partition int, offset long, timestamp
timestamp, timestampType int, and with ``includeHeaders`` headers
array<struct<key: string, value: binary>> (null for a record without headers, as in Spark).

Batches are built from the columnar decoder (``poll_columnar`` -> ColumnarRecords.to_arrow):
offsets and timestamps are the decoder's own buffers, keys and values one gather per batch;
no Python object is made per record.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Iterator, Mapping

from kclient.spark.planning import SourceOptions, parse_options

__all__ = ["kafka_schema", "kafka_arrow_schema", "arrow_batches", "arrow_reader", "to_spark_batch",
           "RANGE_COLUMNS"]

log = logging.getLogger(__name__)

# Columns of the DataFrame of planned ranges that the mapInArrow reader takes as input.
RANGE_COLUMNS = ("topic", "partition", "from_offset", "until_offset")


def kafka_schema(include_headers: bool = False):
    """The Spark Kafka source's schema (a pyspark StructType)."""
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField,
                                   StructType, TimestampType)
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def _header_type(pa):
    return pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def kafka_arrow_schema(include_headers: bool = False):
    """The same schema as a pyarrow.Schema (timestamps in microseconds, UTC)."""
    import pyarrow as pa
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
              pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
              pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", _header_type(pa)))
    return pa.schema(fields)


def _nullable_headers(pa, pc, headers):
    """Spark gives null, not an empty array, for a record without headers."""
    empty = pc.equal(pc.list_value_length(headers), 0)
    if not pc.any(empty).as_py():
        return headers
    # A chunk handed out after the start of its decoded batch is a slice: its offsets do not
    # start at 0, which from_arrays refuses with a mask; rebase them onto its own values.
    offsets = headers.offsets
    start = offsets[0].as_py()
    if start:
        offsets = pc.subtract(offsets, pa.scalar(start, offsets.type))
    return pa.ListArray.from_arrays(offsets, headers.flatten(), mask=empty)


def _binary(pa, column):
    # Spark reads binary (32-bit offsets); a batch over 2 GiB of keys or values would need
    # large_binary, which the decoder only produces for such batches.
    return column.cast(pa.binary()) if column.type != pa.binary() else column


def to_spark_batch(chunk: Any, n: int, include_headers: bool):
    """The first n rows of a ColumnarRecords as a RecordBatch in kafka_arrow_schema()."""
    import pyarrow as pa
    import pyarrow.compute as pc
    base = chunk.to_arrow()
    stamp_types = pa.Array.from_buffers(pa.int8(), len(chunk), [None, pa.py_buffer(chunk.timestamp_types)])
    if n != base.num_rows:
        base = base.slice(0, n)
        stamp_types = stamp_types.slice(0, n)
    timestamps = base.column("timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
    columns = [_binary(pa, base.column("key")), _binary(pa, base.column("value")),
               pa.repeat(pa.scalar(chunk.topic, pa.string()), n),
               pa.repeat(pa.scalar(chunk.partition, pa.int32()), n),
               base.column("offset"), timestamps, stamp_types.cast(pa.int32())]
    if include_headers:
        headers = _nullable_headers(pa, pc, base.column("headers"))
        columns.append(headers.cast(_header_type(pa)))
    return pa.RecordBatch.from_arrays(columns, schema=kafka_arrow_schema(include_headers))


def arrow_batches(offset_range: Any, options: Mapping[str, Any] | SourceOptions) -> Iterator:
    """pyarrow RecordBatches holding one planned range's records, in offset order."""
    # Imported here: the driver-side processes that plan (and import this module through the
    # data source) never read.
    from kclient.spark.reader import _chunks, as_offset_range
    rng = as_offset_range(offset_range)
    opts = parse_options(options)
    for chunk, n in _chunks(rng, opts, columnar=True):
        if n:
            yield to_spark_batch(chunk, n, opts.include_headers)


def _ranges_of(batch) -> Iterable[tuple]:
    cols = [batch.column(name).to_pylist() for name in RANGE_COLUMNS]
    return zip(*cols)


def arrow_reader(options: Mapping[str, Any]) -> Callable[[Iterator], Iterator]:
    """The function for ``ranges_df.mapInArrow(arrow_reader(options), kafka_schema(...))``,
    where ranges_df has the columns topic, partition, from_offset, until_offset."""
    raw = dict(options)
    parse_options(raw)   # fail on the driver, not in every task

    def read_ranges(batches: Iterator) -> Iterator:
        opts = parse_options(raw)
        for batch in batches:
            for value in _ranges_of(batch):
                yield from arrow_batches(value, opts)
    return read_ranges
