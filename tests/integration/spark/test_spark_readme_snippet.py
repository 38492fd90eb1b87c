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
import uuid
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

spark = (SparkSession.builder.master("local[2]").appName("readme-snippet")
         .config("spark.ui.enabled", "false")
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
         .getOrCreate())
try:
{snippet}
    rows = df.select("partition", "offset", "key", "value").collect()
    print("ROWS " + json.dumps(sorted([r[0], r[1], bytes(r[2]).decode(), bytes(r[3]).decode()] for r in rows)))
finally:
    spark.stop()
"""


VARIANTS = {"venv-not-activated": False, "venv-activated": True}


@pytest.fixture(scope="module")
def snippet_runs(kafka, tmp_path_factory):
    """The snippet run once per variant, both at the same time (each is a Spark driver of its
    own; run one after the other they doubled this file's time), against one topic."""
    topic = f"readme-snippet-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, PARTITIONS)
    kafka.wait_for_topic(topic, PARTITIONS)
    try:
        with KafkaProducer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5}) as producer:
            for p in range(PARTITIONS):
                for i in range(PER_PARTITION):
                    producer.send(topic, key=b"k-%d" % i, value=b"v-%d-%d" % (p, i), partition=p)
        snippet = readme_batch_snippet()
        assert '"localhost:9092"' in snippet and '"quickstart"' in snippet, snippet
        snippet = snippet.replace('"localhost:9092"', json.dumps(kafka.bootstrap)).replace('"quickstart"', json.dumps(topic))
        procs = {}
        for variant, activated in VARIANTS.items():
            base = tmp_path_factory.mktemp(variant)
            work = base / "elsewhere"
            work.mkdir()
            (work / "job.py").write_text(SCRIPT.format(snippet="\n".join("    " + line for line in snippet.splitlines())))
            fake_bin = base / "bin"
            fake_bin.mkdir()
            (fake_bin / "python3").write_text("#!/bin/sh\necho \"python3 from PATH is not this environment's\" >&2\nexit 3\n")
            (fake_bin / "python3").chmod(0o755)
            assert not str(work).startswith(str(ROOT))
            procs[variant] = subprocess.Popen([sys.executable, "job.py"], cwd=work, env=user_environment(fake_bin, activated),
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        results = {}
        for variant, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=280)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            results[variant] = (proc.returncode, out, err)
        yield results
    finally:
        kafka.delete_topic(topic)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_readme_spark_snippet_runs_outside_the_checkout(variant, snippet_runs):
    returncode, stdout, stderr = snippet_runs[variant]
    expected = sorted([p, i, f"k-{i}", f"v-{p}-{i}"] for p in range(PARTITIONS) for i in range(PER_PARTITION))
    lines = [line for line in stdout.splitlines() if line.startswith("ROWS ")]
    assert returncode == 0 and lines, (
        f"exit {returncode}\nstdout:\n{stdout[-3000:]}\nstderr (JVM stack frames left out):\n"
        + "\n".join(line for line in stderr.splitlines() if not line.lstrip().startswith("at "))[-6000:])
    assert json.loads(lines[0][5:]) == expected
