"""The Java KafkaConsumer (kafka-clients 4.x) as a peer, in a JVM the driver child starts.

``bench/java/JavaConsumerBench.java`` is compiled with ``javac`` into
``~/.cache/kclient/bench-java/<source hash>/`` against kafka-clients resolved with Maven (both
once). The JVM starts and loads the client classes before the window opens, as the Python
drivers import theirs; then this driver points the tally at the JVM's process (its CPU and peak
RSS are the figures) and tells it to go. The Java side counts records per poll, spot-checks
the last record of each partition's batch like the other drivers, and reports each poll as a
line on stdout.
"""
from __future__ import annotations

import hashlib
import select
import shutil
import subprocess
from pathlib import Path

import psutil

from bench.drivers._common import InvalidRun
from kclient.testing.kafka import kafka_version
from kclient.testing.maven import MavenError, cache_root, find_java, resolve_jars

LABEL = "Java KafkaConsumer"
GROUP_MODE = True
SOURCE = Path(__file__).resolve().parent.parent / "java" / "JavaConsumerBench.java"
# Comparable to confluent-kafka "tuned": large fetches; polls of up to 10,000 records keep the
# per-poll report line off the measured path.
SETTINGS = {
    "max.partition.fetch.bytes": str(10 * 1024 * 1024),
    "fetch.max.bytes": str(50 * 1024 * 1024),
    "max.poll.records": "10000",
}
_classpath: str | None = None


def version() -> str:
    return f"kafka-clients {kafka_version()}"


def _compile() -> str:
    """Classpath with the compiled driver first; compiled again only when the source changed."""
    jars = resolve_jars([f"org.apache.kafka:kafka-clients:{kafka_version()}",
                         "org.slf4j:slf4j-nop:1.7.36"], f"bench-java-deps-{kafka_version()}")
    deps = ":".join(str(j) for j in jars)
    digest = hashlib.sha256(SOURCE.read_bytes() + deps.encode()).hexdigest()[:16]
    out = cache_root() / "bench-java" / digest
    if not (out / "JavaConsumerBench.class").is_file():
        javac = shutil.which("javac")
        if not javac:
            raise MavenError("javac is not installed (the Java consumer benchmark compiles its "
                             "driver): install it with `apt-get install openjdk-17-jdk-headless`")
        out.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([javac, "-d", str(out), "-cp", deps, str(SOURCE)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise MavenError(f"javac failed on {SOURCE.name}:\n{done.stderr[-2000:]}")
    return f"{out}:{deps}"


def prepare() -> None:
    global _classpath
    _classpath = _compile()


def consume(job, tally) -> dict:
    settings = dict(SETTINGS, **{k: str(v) for k, v in job.extra.get("java", {}).items()})
    cmd = [find_java(), "-Xmx1g", "-cp", _classpath, "JavaConsumerBench", job.bootstrap, job.topic,
           str(job.partitions), str(job.records), job.mode, job.group_id or "", str(job.session_timeout_ms),
           *(f"{k}={v}" for k, v in settings.items())]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        if _read_line(proc, tally, 120.0, before_window=True) != "READY":
            raise RuntimeError("the JVM did not start the benchmark driver")
        tally.proc = psutil.Process(proc.pid)      # the JVM's CPU is the client's CPU
        tally.rss_before = tally.proc.memory_info().rss
        tally.start()
        proc.stdin.write("GO\n")
        proc.stdin.flush()
        while not tally.done and not tally.timed_out():
            line = _read_line(proc, tally, 1.0)
            if line is None:
                continue
            kind, _, rest = line.partition(" ")
            if kind == "B":
                n, nbytes = rest.split()
                tally.add(int(n), int(nbytes))
            elif kind == "X":
                raise InvalidRun(rest)
        if tally.done:
            tally.peak_rss = _peak_rss(proc.pid)
        proc.stdin.write("STOP\n")
        proc.stdin.flush()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return settings


def _read_line(proc, tally, timeout: float, before_window: bool = False) -> str | None:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        if proc.poll() is not None:
            raise RuntimeError(f"the Java driver exited with status {proc.returncode}")
        if before_window:
            raise RuntimeError(f"the JVM did not report READY within {timeout:.0f} s")
        return None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the Java driver closed its output (status {proc.wait()})")
    return line.strip()


def _peak_rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
