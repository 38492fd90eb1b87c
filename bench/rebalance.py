"""``python -m bench rebalance``: how long a group takes to move partitions, per client and group protocol.

Two figures per (client, protocol), medians over ``--repeat`` rounds, in one run against one
Apache Kafka 4.x broker (started by the harness unless ``--bootstrap`` is given):

- join -> first record: member A owns every partition of a 4-partition topic and has read from
  each; member B (built and connected beforehand, its start-up outside the window) is told to
  subscribe; the time until B reports its first record.
- leave -> reassigned: B is told to close (leaving the group); the time until A reports the
  first record of a partition it got back.

Members are child processes (bench/rebalance_member.py for kclient and confluent-kafka,
bench/java/JavaRebalanceMember.java for the Java consumer) speaking one line protocol; the
times are taken here, when their lines arrive. Classic members use a 6 s session and 500 ms
heartbeats; consumer-protocol members get the broker's (the harness sets 6 s and 500 ms).
Each client keeps its default assignors (kclient and Java: range + cooperative-sticky,
librdkafka: range + roundrobin, so eager) and the broker's default server assignor.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import select
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

CLIENTS = ["kclient", "confluent", "java"]
PROTOCOLS = ["classic", "consumer"]
PARTITIONS = 4
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "JavaRebalanceMember.java"


def med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.0f}" if xs else "-"


class Member:
    def __init__(self, cmd: list[str]) -> None:
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._buf = b""
        self.lines: list[tuple[float, str]] = []
        self.owned = 0      # from the last S line
        self.unread = 0     # from the last S or R line

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def wait_for(self, pred, timeout: float, what: str) -> tuple[float, str]:
        """The first line (arrival time, text) matching ``pred`` read from now on."""
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while True:
            while b"\n" in self._buf:
                raw, self._buf = self._buf.split(b"\n", 1)
                line = raw.decode().strip()
                self.lines.append((time.monotonic(), line))
                fields = line.split()
                if fields[0] == "S":
                    self.owned, self.unread = int(fields[1]), int(fields[2])
                elif fields[0] == "R":
                    self.unread = int(fields[2])
                if line.startswith("E "):
                    raise RuntimeError(f"member failed: {line[2:]}")
                if pred(line):
                    return self.lines[-1]
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {what} within {timeout} s")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError(f"member exited ({self.proc.wait()}) before {what}")
                self._buf += chunk

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def java_classpath() -> str:
    """JavaRebalanceMember compiled once against the broker's kafka-clients (cached by hash)."""
    from kclient.testing import MavenError
    from kclient.testing.kafka import kafka_version
    from kclient.testing.maven import cache_root, find_java, resolve_jars
    jars = resolve_jars([f"org.apache.kafka:kafka-clients:{kafka_version()}", "org.slf4j:slf4j-nop:1.7.36"],
                        f"bench-java-deps-{kafka_version()}")
    deps = os.pathsep.join(str(j) for j in jars)
    digest = hashlib.sha256(JAVA_SOURCE.read_bytes() + deps.encode()).hexdigest()[:16]
    out = cache_root() / "bench-java-rebalance" / digest
    if not (out / "JavaRebalanceMember.class").is_file():
        javac = os.path.join(os.path.dirname(os.path.realpath(find_java())), "javac")
        if not os.access(javac, os.X_OK):
            javac = shutil.which("javac") or ""
        if not javac:
            raise MavenError("javac is not installed: install a JDK")
        tmp = out.with_name(f"{digest}.tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([javac, "-d", str(tmp), "-cp", deps, str(JAVA_SOURCE)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise MavenError(f"javac failed:\n{done.stderr[-2000:]}")
        try:
            tmp.rename(out)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return f"{out}{os.pathsep}{deps}"


def member_cmd(client: str, bootstrap: str, topic: str, group: str, protocol: str, java_cp: str | None) -> list[str]:
    if client == "java":
        from kclient.testing.maven import find_java
        settings = [f"group.protocol={protocol}"]
        if protocol == "classic":
            settings += ["session.timeout.ms=6000", "heartbeat.interval.ms=500"]
        return [find_java(), "-Xmx256m", "-cp", java_cp or "", "JavaRebalanceMember", bootstrap, topic, group,
                *settings]
    return [sys.executable, "-m", "bench.rebalance_member", client, bootstrap, topic, group, protocol]


def one_round(client: str, protocol: str, bootstrap: str, topic: str, java_cp: str | None) -> tuple[float, float]:
    group = f"rebalance-{client}-{protocol}-{uuid.uuid4().hex[:8]}"
    a = Member(member_cmd(client, bootstrap, topic, group, protocol, java_cp))
    b = Member(member_cmd(client, bootstrap, topic, group, protocol, java_cp))
    try:
        a.wait_for(lambda s: s == "READY", 120, "READY from A")
        b.wait_for(lambda s: s == "READY", 120, "READY from B")
        a.send("GO")
        seen: set[str] = set()
        a.wait_for(lambda s: s.startswith("R ") and (seen.add(s) or len(seen) == PARTITIONS), 60,
                   "A reading every partition")
        t0 = time.monotonic()
        b.send("GO")
        t_join, _ = b.wait_for(lambda s: s.startswith("R "), 60, "B's first record")
        # Settled: the two own everything and each has read from all it owns (an eager
        # rebalance gives A fresh partitions too), so A's next R line is a reassignment.
        settle = time.monotonic() + 60
        while not (a.owned and b.owned and a.owned + b.owned == PARTITIONS and a.unread == 0 == b.unread):
            if time.monotonic() > settle:
                raise TimeoutError(f"the group did not settle: A {a.owned}/{a.unread}, B {b.owned}/{b.unread}")
            for m in (a, b):
                try:
                    m.wait_for(lambda s: False, 0.05, "")
                except TimeoutError:
                    pass
        t1 = time.monotonic()
        b.send("STOP")
        t_leave, _ = a.wait_for(lambda s: s.startswith("R "), 60, "A's first record of a partition it got back")
        b.wait_for(lambda s: s == "CLOSED", 30, "B closed")
        a.send("STOP")
        a.wait_for(lambda s: s == "CLOSED", 30, "A closed")
        return (t_join - t0) * 1000, (t_leave - t1) * 1000
    finally:
        a.kill()
        b.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench rebalance", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", help="an existing Kafka 4.x cluster (default: start one with the harness)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--clients", default=",".join(CLIENTS))
    p.add_argument("--protocols", default=",".join(PROTOCOLS))
    args = p.parse_args(argv)
    from kclient import KafkaProducer
    cluster = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        from kclient.testing.kafka import KafkaCluster
        cluster = KafkaCluster(1).start()
        bootstrap = cluster.bootstrap
    try:
        topic = f"rebalance-{uuid.uuid4().hex[:8]}"
        from kclient.testing import _wire
        with _wire.RawConnection.to(bootstrap) as conn:
            _wire.create_topics(conn, [(topic, PARTITIONS, 1, {})])
        with KafkaProducer(bootstrap_servers=bootstrap) as producer:
            for i in range(PARTITIONS * 500):
                producer.send(topic, value=b"x" * 100, partition=i % PARTITIONS)
            producer.flush(60)
        clients = args.clients.split(",")
        java_cp = None
        if "java" in clients:
            try:
                java_cp = java_classpath()
            except Exception as exc:
                print(f"java: skipped ({exc})", file=sys.stderr)
                clients.remove("java")
        rows = []
        for client in clients:
            for protocol in args.protocols.split(","):
                joins, leaves, errors = [], [], []
                for _ in range(args.repeat):
                    try:
                        j, lv = one_round(client, protocol, bootstrap, topic, java_cp)
                        joins.append(j)
                        leaves.append(lv)
                    except Exception as exc:
                        errors.append(repr(exc))
                rows.append((client, protocol, joins, leaves, errors))
                print(f"{client:10s} {protocol:9s} join {['%.0f' % x for x in joins]} "
                      f"leave {['%.0f' % x for x in leaves]} {errors[:1]}", file=sys.stderr, flush=True)
        print(f"\nRebalance times, ms (median of {args.repeat}; Apache Kafka, {PARTITIONS} partitions, 2 members)\n")
        print("| client | group.protocol | member joins -> its first record | member leaves -> survivor's first reassigned record | failed rounds |")
        print("|---|---|---:|---:|---:|")
        for client, protocol, joins, leaves, errors in rows:
            print(f"| {client} | {protocol} | {med(joins)} | {med(leaves)} | {len(errors)} |")
            for e in errors[:2]:
                print(f"|   | error: {e[:150]} | | | |")
        return 0
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
