"""Benchmarks for kclient (needs a source checkout: this package is not installed).

- ``python -m bench``: the end-to-end suite; every client consumes the same topic from the
  same broker, each in its own process (see bench/runner.py, drivers in bench/drivers/).
- ``python -m bench liveness``: group membership while the application stalls (bench/liveness.py).
- ``python bench/bench_spark.py``: Spark reads into a DataFrame: kclient's read_kafka, Spark's own
  Kafka source (JVM) and kafka-python in mapPartitions, in one Spark session.
- bench_wire.py, bench_records.py, bench_queues.py, bench_heartbeat.py: pytest-benchmark
  micro-benchmarks of the compiled core.
"""
