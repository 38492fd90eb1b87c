"""Spark's automatic discovery of Python data sources: its lookup imports every top-level
module named ``pyspark_*`` and registers the ``DefaultSource`` it defines, so that
``spark.read.format("kclient")`` works without ``kclient.spark.register(spark)``."""
from kclient.spark.datasource import KafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
