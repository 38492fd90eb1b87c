"""Which PySpark and which Spark Kafka connector the Spark benchmark runs with.

Spark's own Kafka source (``org.apache.spark:spark-sql-kafka-0-10_2.13``) must match the Spark
it runs in, and Maven Central does not serve it for every PySpark release on PyPI (none for
4.3.0 when this was written). When the installed PySpark has no connector, the benchmark runs
under ``PINNED_PYSPARK``, the newest release that has one: installed once with
``pip install --no-deps --target`` into ``~/.cache/kclient/bench-pyspark-<version>/`` (never
into the project's environment) and put first on PYTHONPATH of a re-executed benchmark, so
the driver, the JVM (SPARK_HOME) and the Python workers all use it.
"""
from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

from kclient.testing import MavenError
from kclient.testing.maven import cache_root, resolve_jars

log = logging.getLogger(__name__)

#: The newest PySpark whose spark-sql-kafka-0-10_2.13 Maven Central serves (checked 2026-11).
PINNED_PYSPARK = "4.2.0"
#: Set in the re-executed benchmark: the PySpark it runs was chosen by the parent.
ENV_MARK = "KCLIENT_BENCH_PYSPARK"
_STAMP = ".installed"
# artifactId-version[-qualifier].jar, where the version is dotted numbers: the "_2.13" of a
# Scala artifact stops the version, so spark-sql-kafka-0-10_2.13-4.2.0 keeps its "-0-10_2.13".
_JAR_NAME = re.compile(r"^(.+?)(?:-\d+(?:\.\d+)*)+(?:-[A-Za-z][\w.]*)?\.jar$")


class SparkEnvError(Exception):
    """The pinned PySpark could not be installed."""


def connector_jars(version: str) -> list[Path]:
    """The connector ``version`` and its dependencies (resolved with Maven once), minus the
    artifacts PySpark already ships: a second scala-library or slf4j-api next to Spark's own is
    at best dead weight and at worst the copy that gets loaded."""
    jars = resolve_jars([f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"],
                        f"spark-sql-kafka-{version}")
    import pyspark
    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [j for j in jars if _artifact(j.name) not in shipped]


def _artifact(jar_name: str) -> str:
    """``scala-library-2.13.15.jar`` -> ``scala-library``."""
    m = _JAR_NAME.match(jar_name)
    return m.group(1) if m else jar_name  # an unusual name: compared whole, so the jar is kept


def installed_pyspark(version: str) -> Path:
    """A directory holding PySpark ``version`` (installed there with pip on first use)."""
    if not re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+|-preview\d+)?", version):
        raise ValueError(f"not a PySpark version: {version!r}")
    target = cache_root() / f"bench-pyspark-{version}"
    stamp = target / _STAMP
    if stamp.is_file() and stamp.read_text() == version:
        return target
    print(f"bench_spark: installing PySpark {version} into {target} (once; about 450 MB)",
          file=sys.stderr, flush=True)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade",
           "--target", str(target), f"pyspark=={version}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SparkEnvError(f"pip did not install pyspark=={version} within 30 minutes") from None
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-1500:]
        raise SparkEnvError(f"pip could not install pyspark=={version} into {target} "
                            f"(exit {done.returncode}; is PyPI reachable?):\n{tail}")
    stamp.write_text(version)
    return target


def reexec_with(version: str, why: str, argv: list[str], script: str) -> None:
    """Run the benchmark again (this process is replaced) under PySpark ``version``."""
    target = installed_pyspark(version)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(target)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["SPARK_HOME"] = str(target / "pyspark")
    env[ENV_MARK] = version
    env[ENV_MARK + "_WHY"] = why
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, script, *argv], env)


def choose(installed: str, wanted: str, connector: str | None) -> tuple[str | None, str]:
    """(PySpark version to re-execute under, or None to stay; why) for ``--pyspark wanted``."""
    if os.environ.get(ENV_MARK):
        return None, os.environ.get(ENV_MARK + "_WHY") or "pinned"
    if wanted == "installed":
        return None, "installed"
    if wanted != "auto":
        return (None, "installed") if wanted == installed else (wanted, "asked for")
    if connector:  # a connector was named: run it on the installed Spark, as asked
        return None, "installed"
    try:
        connector_jars(installed)
        return None, "installed"
    except MavenError as exc:
        first = str(exc).splitlines()[0]
        log.info("no spark-sql-kafka connector for PySpark %s: %s", installed, first)
        if installed == PINNED_PYSPARK:
            return None, "installed"
        return PINNED_PYSPARK, (f"pinned: Maven Central serves no spark-sql-kafka-0-10_2.13 {installed} "
                                f"for the installed PySpark {installed}")
