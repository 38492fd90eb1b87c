"""The README's Spark snippet, run as a user runs it after the README's set-up: a script in a
directory outside the checkout, started by the environment's interpreter through its path with
the environment not activated (PYTHONPATH, PYSPARK_PYTHON and VIRTUAL_ENV unset, and the
``python3`` on PATH another program), against a real Apache Kafka broker.

Spark must find the "kclient" source by its own discovery (no ``register()``), from the
installed package, and start its Python workers with the driver's interpreter.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from kclient.producer import KafkaProducer  # noqa: E402
import repo_paths

ROOT = repo_paths.REPO
PARTITIONS = 3
PER_PARTITION = 40


def readme_batch_snippet() -> str:
    """The README's `spark.read.format("kclient")` statement, as written there."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        match = re.search(r'^df = \(spark\.read\.format\("kclient"\).*?\.load\(\)\)$', block, flags=re.S | re.M)
        if match:
            return match.group(0)
    raise AssertionError('README.md has no python block with `df = (spark.read.format("kclient")...load())`')


def user_environment(fake_bin: Path, activated: bool) -> dict[str, str]:
    """The environment of a user's shell. Not activated: the first ``python3`` on PATH is a
    program that fails, so a Spark worker started with it fails. Activated: the environment's
    bin directory comes first, as its ``activate`` script puts it."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONHOME")}
    prefix = os.path.realpath(sys.prefix)
    rest = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and not os.path.realpath(p).startswith(prefix + os.sep)]
    if activated:
        env["VIRTUAL_ENV"] = sys.prefix
        env["PATH"] = os.pathsep.join([os.path.join(sys.prefix, "bin"), str(fake_bin)] + rest)
    else:
        env["PATH"] = os.pathsep.join([str(fake_bin)] + rest)
    return env


SCRIPT = """\
import json
from pyspark.sql import SparkSession

spark = SparkSession.builder.master("local[2]").appName("readme-snippet").getOrCreate()
try:
{snippet}
    rows = df.select("partition", "offset", "key", "value").collect()
    print("ROWS " + json.dumps(sorted([r[0], r[1], bytes(r[2]).decode(), bytes(r[3]).decode()] for r in rows)))
finally:
    spark.stop()
"""


@pytest.mark.parametrize("activated", [False, True], ids=["venv-not-activated", "venv-activated"])
def test_readme_spark_snippet_runs_outside_the_checkout(activated, kafka, create_topic, topic_name, tmp_path):
    create_topic(kafka, topic_name, PARTITIONS)
    with KafkaProducer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5}) as producer:
        for p in range(PARTITIONS):
            for i in range(PER_PARTITION):
                producer.send(topic_name, key=b"k-%d" % i, value=b"v-%d-%d" % (p, i), partition=p)
    expected = sorted([p, i, f"k-{i}", f"v-{p}-{i}"] for p in range(PARTITIONS) for i in range(PER_PARTITION))

    snippet = readme_batch_snippet()
    assert '"localhost:9092"' in snippet and '"orders"' in snippet, snippet
    snippet = snippet.replace('"localhost:9092"', json.dumps(kafka.bootstrap)).replace('"orders"', json.dumps(topic_name))
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "job.py").write_text(SCRIPT.format(snippet="\n".join("    " + line for line in snippet.splitlines())))
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python3").write_text("#!/bin/sh\necho \"python3 from PATH is not this environment's\" >&2\nexit 3\n")
    (fake_bin / "python3").chmod(0o755)
    assert not str(work).startswith(str(ROOT))

    proc = subprocess.run([sys.executable, "job.py"], cwd=work, env=user_environment(fake_bin, activated),
                          capture_output=True, text=True, timeout=280)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ROWS ")]
    assert proc.returncode == 0 and lines, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr (JVM stack frames left out):\n"
        + "\n".join(line for line in proc.stderr.splitlines() if not line.lstrip().startswith("at "))[-6000:])
    assert json.loads(lines[0][5:]) == expected
