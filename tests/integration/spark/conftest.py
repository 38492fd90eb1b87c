"""One local SparkSession for the Spark test files of a worker (the scheduler runs them on one
worker: tests/support/scheduling.py): starting Spark's JVM and its Python workers is most of what
a session costs."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark_session():
    pytest.importorskip("pyspark")
    from kclient.spark import local_session
    session = local_session("local[2]", "kclient-tests")
    yield session
    session.stop()
