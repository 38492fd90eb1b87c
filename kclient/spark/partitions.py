"""The Spark input partitions of the "kclient" source, shared by its batch and stream readers.

A ``RangePartition`` is one Spark task: offset ranges read one after the other on an executor
by the Arrow range reader (kclient.spark.arrow), in the Arrow schema Spark expects.
"""
from __future__ import annotations

from typing import Iterator, Sequence

from pyspark.sql.datasource import InputPartition

from kclient.spark.arrow import arrow_batches, kafka_schema
from kclient.spark.planning import OffsetRange, SourceOptions

__all__ = ["RangePartition", "read_partition", "spark_arrow_schema"]


class RangePartition(InputPartition):
    """One Spark task: offset ranges read one after the other (pickled to the executor)."""

    def __init__(self, ranges: Sequence[OffsetRange]):
        super().__init__([(r.topic, r.partition, r.from_offset, r.until_offset) for r in ranges])

    @property
    def ranges(self) -> list[OffsetRange]:
        return [OffsetRange(*value) for value in self.value]


def read_partition(partition: InputPartition, opts: SourceOptions, arrow_schema) -> Iterator:
    """RecordBatches of a partition's ranges, in the Arrow schema Spark expects.

    Spark checks every batch against its own rendering of the schema, which names a list's
    item field "element" where pyarrow says "item": the header column is cast (no copy of
    the data) when the two differ."""
    if not isinstance(partition, RangePartition):     # Spark's placeholder for "no partitions"
        return
    for rng in partition.ranges:
        for batch in arrow_batches(rng, opts):
            yield batch if batch.schema.equals(arrow_schema) else batch.cast(arrow_schema)


def spark_arrow_schema(include_headers: bool):
    """kafka_schema() as Spark renders it in Arrow for a Python data source's batches."""
    from pyspark.sql.pandas.types import to_arrow_schema
    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")
