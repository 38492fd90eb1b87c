"""The Java KafkaConsumer (kafka-clients 4.x) as a peer, in a JVM the driver child starts.

``bench/java/JavaConsumerBench.java`` is compiled with ``javac`` into
``~/.cache/kclient/bench-java/<hash of source and classpath>/`` against kafka-clients (the
broker's version) resolved with Maven into ``~/.cache/kclient/bench-java-deps-<version>/``:
both once, in the runner's ``check()``, so a missing Java, javac or Maven skips this peer
with the reason in the table. The JVM starts and loads the client classes before the window
opens, as the Python drivers import theirs; then this driver points the tally at the JVM's
process (its CPU and peak RSS are the figures: JIT and GC threads included, as librdkafka's
threads are for confluent-kafka) and tells it to go. The Java side counts records per poll,
spot-checks the last record of each partition's batch like the other drivers, and reports
each poll as a line on stdout.

Start-up and steady state are reported apart like for every driver: "first record" includes
building the consumer in a cold JVM; "records/s after the first batch" is the running rate
(still including JIT compilation of the poll loop, which is part of a JVM client's cost).
"""
from __future__ import annotations

import hashlib
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import psutil

from bench.drivers._common import PEER_FETCH_SETTINGS, PEER_MAX_POLL_RECORDS, InvalidRun
from kclient.testing import MavenError
from kclient.testing.kafka import kafka_version
from kclient.testing.maven import cache_root, find_java, resolve_jars

LABEL = "Java KafkaConsumer"
GROUP_MODE = True
PY_SPY = False  # the client runs in a JVM: --profile would sample only this wrapper
SOURCE = Path(__file__).resolve().parent.parent / "java" / "JavaConsumerBench.java"
# The JVM runs with its ergonomic defaults (G1 on this machine class) and a heap cap that the
# largest configuration (10 MiB per partition fetch x 64 partitions) fits in.
JVM_OPTIONS = ["-Xmx1g"]
# Comparable to confluent-kafka "tuned" (bench/drivers/confluent_tuned.py): the same fetch sizes
# and fetch wait; polls of up to 10,000 records (the default 500 would make this peer pay a
# report line per 500 records); the OS's socket buffer, as librdkafka uses, instead of 64 KiB.
SETTINGS = {**{k: str(v) for k, v in PEER_FETCH_SETTINGS.items()},
            "max.poll.records": str(PEER_MAX_POLL_RECORDS)}
SLF4J_BINDING = "org.slf4j:slf4j-nop:1.7.36"  # kafka-clients logs through slf4j 1.7: keep it quiet
_classpath: str | None = None


def version() -> str:
    return f"kafka-clients {kafka_version()}"


def classpath(source: Path = SOURCE) -> str:
    """The compiled driver (``source``, by default this driver's) first, then kafka-clients and
    its dependencies; compiled again only when the source or the classpath changed."""
    java = find_java()
    jars = resolve_jars([f"org.apache.kafka:kafka-clients:{kafka_version()}", SLF4J_BINDING],
                        f"bench-java-deps-{kafka_version()}")
    deps = os.pathsep.join(str(j) for j in jars)
    digest = hashlib.sha256(source.read_bytes() + deps.encode()).hexdigest()[:16]
    out = cache_root() / "bench-java" / digest
    if not (out / f"{source.stem}.class").is_file():
        javac = os.path.join(os.path.dirname(os.path.realpath(java)), "javac")
        if not os.access(javac, os.X_OK):
            javac = shutil.which("javac")
        if not javac:
            raise MavenError("javac is not installed (the Java consumer benchmark compiles its "
                             "driver): install a JDK, e.g. `apt-get install openjdk-17-jdk-headless`")
        tmp = out.with_name(f"{digest}.tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([javac, "-d", str(tmp), "-cp", deps, str(source)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise MavenError(f"javac failed on {source.name}:\n{done.stderr[-2000:]}")
        try:
            tmp.rename(out)  # whole or not at all, should two runners compile at once
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return f"{out}{os.pathsep}{deps}"


def check() -> None:
    """Runner-side: Java, Maven (first time) and javac are there; compiles the driver once."""
    classpath()


def prepare() -> None:
    global _classpath
    _classpath = classpath()  # cached by check(): only lists the jar directory


def consume(job, tally) -> dict:
    settings = dict(SETTINGS, **{k: str(v) for k, v in job.extra.get("java", {}).items()})
    cmd = [find_java(), *JVM_OPTIONS, "-cp", _classpath, "JavaConsumerBench", job.bootstrap, job.topic,
           str(job.partitions), str(job.records), job.mode, job.group_id or "-", str(job.session_timeout_ms),
           *(f"{k}={v}" for k, v in settings.items())]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    lines = _LineReader(proc)
    try:
        if lines.read(time.monotonic() + 120.0) != "READY":
            raise RuntimeError("the JVM did not report READY within 120 s")
        tally.proc = psutil.Process(proc.pid)      # the JVM's CPU is the client's CPU
        tally.rss_before = tally.proc.memory_info().rss
        tally.start()
        proc.stdin.write(b"GO\n")
        proc.stdin.flush()
        while not tally.done and not tally.timed_out():
            line = lines.read(time.monotonic() + 1.0)
            if line is None:
                continue
            kind, _, rest = line.partition(" ")
            if kind == "B":
                n, nbytes = rest.split()
                tally.add(int(n), int(nbytes))
            elif kind == "X":
                raise InvalidRun(rest)
            elif kind == "E":
                raise RuntimeError(f"the Java consumer failed: {rest}")
            else:
                raise RuntimeError(f"unexpected line from the Java driver: {line[:200]!r}")
        if tally.done:
            tally.peak_rss = _peak_rss(proc.pid)
            proc.stdin.write(b"STOP\n")  # closing the consumer (leaving the group) is outside the window
            proc.stdin.flush()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:  # a slow close is not the run's fault: killed below
                pass
    finally:
        if proc.poll() is None:
            proc.kill()  # an unfinished run: no clean close to wait for
            proc.wait()
    if job.mode == "group":
        settings["session.timeout.ms"] = str(job.session_timeout_ms)
    return settings


class _LineReader:
    """Lines from the child's stdout with a deadline. Reads the raw pipe: select() on a
    buffered file object misses lines already pulled into its buffer."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.fd = proc.stdout.fileno()
        self.buf = b""

    def read(self, deadline: float) -> str | None:
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise RuntimeError(f"the Java driver exited (status {self.proc.wait()}) before finishing")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode("utf-8", "replace").strip()


def _peak_rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
