"""Start-up defaults for Spark's Python processes, run by every interpreter of the environment
kclient is installed in.

The wheel installs this file as the top-level module ``kclient_spark_site`` and a
``kclient-spark-python.pth`` that imports it, so it runs in every Python program of the
environment: it imports only the standard library and does nothing outside Spark's processes
but one ``setdefault``.
"""
from __future__ import annotations

import os
import sys

# Importing typing costs every interpreter of the environment 4-5 ms at start: the names below
# are for type checkers only (which take any TYPE_CHECKING condition as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import MutableMapping, MutableSequence

__all__ = ["apply"]


def apply(path: MutableSequence[str], environ: MutableMapping[str, str], executable: str | None) -> None:
    # Spark starts its Python workers, and the lookup that discovers Python data sources, with
    # PYSPARK_PYTHON, else with `python3` from PATH: an environment used without activating it
    # would hand Spark an interpreter that has no kclient. This interpreter makes itself
    # Spark's default; a PYSPARK_PYTHON the user set wins.
    if executable:
        environ.setdefault("PYSPARK_PYTHON", executable)
    # Spark puts its SPARK_HOME's python/lib/pyspark.zip first on its Python processes'
    # PYTHONPATH. With PySpark installed from PyPI that zip is a copy of the installed package
    # itself, and code imported from a zip keeps no bytecode cache: each worker, data source
    # lookup and streaming query's planner process compiled PySpark again (about 1 s of CPU
    # each, against 0.25 s from the installed package's cache). When the zip sits inside the
    # installed package that the rest of sys.path would import, the zip is left out.
    for i, entry in enumerate(path):
        if os.path.basename(entry) != "pyspark.zip":
            continue
        package = os.path.dirname(os.path.dirname(os.path.dirname(entry)))   # <site>/pyspark
        site = os.path.dirname(package)
        if (os.path.basename(package) == "pyspark" and site in path[i + 1:]
                and os.path.isfile(os.path.join(package, "__init__.py"))):
            del path[i]
        return


if __name__ == "kclient_spark_site":     # imported by the .pth at start-up
    apply(sys.path, os.environ, sys.executable)
