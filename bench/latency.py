"""End-to-end latency, producer to consumer: ``python -m bench latency``.

One Apache Kafka broker (started for the run, as the throughput suite's). For each rate and
each client, a fresh topic; the client's consumer starts in a process of its own, assigned
every partition at its end, and says READY; then this process produces at a fixed rate
(confluent-kafka's producer, linger.ms=1, acks=1: the same producer for every client) for
``--seconds``. Each value carries the producer's wall clock at send (8 bytes, big-endian ns);
the consumer takes the wall clock when the record is handed to the application, as users
write it (kclient: ``for record in consumer``; confluent-kafka: ``poll()`` per message; Java:
``poll()`` and its records), with each client's default settings. The first ``--warmup-s``
of arrivals are left out. The table gives p50 / p99 / p99.9 / max in milliseconds.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import select
import shlex
import statistics
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLIENTS = ("kclient", "confluent", "java")
LABELS = {"kclient": "kclient (for record in consumer, defaults)",
          "confluent": "confluent-kafka (poll() per message, defaults)",
          "java": "Java KafkaConsumer (poll(), defaults)"}
VALUE_SIZE = 100
STAMP = struct.Struct(">qq")  # send time (ns since the epoch), sequence number


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- consumers
def _kclient_child(bootstrap: str, topic: str, partitions: int, records: int, ready) -> list[int]:
    from kclient import KafkaConsumer, TopicPartition
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: list[int] = []
    with KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=30_000) as c:
        c.assign(tps)
        c.seek_to_end(*tps)
        for tp in tps:
            c.position(tp)
        ready()
        now = time.time_ns
        for r in c:
            out.append((now() - int.from_bytes(r.value[:8], "big")) // 1000)
            if len(out) >= records:
                break
    return out


def _confluent_child(bootstrap: str, topic: str, partitions: int, records: int, ready) -> list[int]:
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False})
    out: list[int] = []
    try:
        ends = [c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
        c.assign([ck.TopicPartition(topic, p, ends[p]) for p in range(partitions)])
        ready()
        now = time.time_ns
        idle_since = time.monotonic()
        while len(out) < records and time.monotonic() - idle_since < 30:
            m = c.poll(1.0)
            if m is None or m.error():
                continue
            out.append((now() - int.from_bytes(m.value()[:8], "big")) // 1000)
            idle_since = time.monotonic()
    finally:
        c.close()
    return out


def child_main(argv: list[str]) -> int:
    """``python -m bench.latency child CLIENT BOOTSTRAP TOPIC PARTITIONS RECORDS``"""
    client, bootstrap, topic, partitions, records = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])

    def ready() -> None:
        print("READY", flush=True)

    run = {"kclient": _kclient_child, "confluent": _confluent_child}[client]
    latencies = run(bootstrap, topic, partitions, records, ready)
    print("L " + " ".join(map(str, latencies)), flush=True)
    return 0


def _java_command(bootstrap: str, topic: str, partitions: int, records: int) -> list[str]:
    from bench.drivers import java_consumer
    from kclient.testing.maven import find_java
    source = REPO / "bench" / "java" / "JavaLatency.java"
    cp = java_consumer.classpath(source)
    return [find_java(), *java_consumer.JVM_OPTIONS, "-cp", cp, "JavaLatency", bootstrap, topic, str(partitions),
            str(records)]


def _start_consumer(client: str, bootstrap: str, topic: str, partitions: int, records: int) -> subprocess.Popen:
    if client == "java":
        cmd = _java_command(bootstrap, topic, partitions, records)
    else:
        cmd = [sys.executable, "-m", "bench.latency", "child", client, bootstrap, topic, str(partitions), str(records)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.Popen(cmd, cwd=str(REPO), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _read_line(proc: subprocess.Popen, deadline: float) -> str | None:
    fd = proc.stdout.fileno()
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            raise RuntimeError(f"the consumer exited (status {proc.wait()}) early")
        buf += chunk
    return buf.decode().strip()


# ---------------------------------------------------------------------------- producer
def produce_at_rate(bootstrap: str, topic: str, partitions: int, rate: int, seconds: float) -> int:
    import confluent_kafka as ck
    # linger.ms=1: with 0 every record is a request of its own, and at 1,000 msg/s and more the
    # producer's five requests in flight fall behind (its queue, not the consumer, then
    # dominates the latency: seen as seconds for every client, librdkafka's consumer too).
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": 1, "log_level": 3})
    pad = b"." * (VALUE_SIZE - STAMP.size)
    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        ahead = due - time.perf_counter()
        if ahead > 0.0002:
            time.sleep(ahead)
        p.produce(topic, STAMP.pack(time.time_ns(), i) + pad, partition=i % partitions)
        if i % 50 == 0:
            p.poll(0)
    left = p.flush(30)
    if left:
        raise RuntimeError(f"{left} records undelivered")
    return total


# ---------------------------------------------------------------------------- suite
def _percentile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[k]


def run_one(cluster, client: str, rate: int, seconds: float, partitions: int, warmup_s: float) -> dict:
    topic = f"latency-{client}-{rate}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions)
    cluster.wait_for_topic(topic, partitions, timeout=30)
    total = int(rate * seconds)
    proc = _start_consumer(client, cluster.bootstrap, topic, partitions, total)
    try:
        if _read_line(proc, time.monotonic() + 120) != "READY":
            raise RuntimeError(f"{client}: no READY within 120 s")
        produce_at_rate(cluster.bootstrap, topic, partitions, rate, seconds)
        line = _read_line(proc, time.monotonic() + 60)
        if line is None or not line.startswith("L"):
            raise RuntimeError(f"{client}: no latencies within 60 s after producing")
        proc.stdin.close()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        try:
            cluster.delete_topic(topic)
        except Exception:  # the data goes with the broker anyway
            pass
    values = [int(v) for v in line.split()[1:]]
    measured = sorted(values[int(warmup_s * rate):])
    return {"client": client, "label": LABELS[client], "rate": rate, "received": len(values), "sent": total,
            "measured": len(measured),
            "p50_ms": _percentile(measured, 0.50) / 1000, "p99_ms": _percentile(measured, 0.99) / 1000,
            "p999_ms": _percentile(measured, 0.999) / 1000,
            "max_ms": (measured[-1] / 1000) if measured else float("nan"),
            "mean_ms": (statistics.fmean(measured) / 1000) if measured else float("nan")}


def markdown(report: dict) -> str:
    lines = [f"Date: {report['date']}; machine: {report['machine']}; broker: Apache Kafka {report['broker']} "
             "(one KRaft node on loopback).", f"Command: `{report['command']}`", "",
             "| rate (msg/s) | client | p50 ms | p99 ms | p99.9 ms | max ms | records measured / sent |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in report["results"]:
        if "error" in r:
            lines.append(f"| {r['rate']:,} | {LABELS[r['client']]} | failed: {r['error']} | | | | |")
            continue
        lines.append(f"| {r['rate']:,} | {r['label']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p999_ms']:.2f} "
                     f"| {r['max_ms']:.2f} | {r['measured']:,} / {r['sent']:,} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["child"]:
        return child_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,10000", help="messages per second, comma list (default 1000,10000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of producing per run (default 10)")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="seconds of arrivals left out (default 1)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--clients", default=",".join(CLIENTS), help=f"comma list of {', '.join(CLIENTS)}")
    parser.add_argument("--out", type=Path, help="also write the JSON report here")
    args = parser.parse_args(argv)
    rates = [int(x) for x in args.rates.split(",") if x]
    clients = [c for c in args.clients.split(",") if c]
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown or not rates or any(r <= 0 for r in rates):
        parser.error(f"unknown client(s) {unknown}" if unknown else "rates must be positive integers")
    from kclient.testing import KafkaCluster
    cluster = KafkaCluster(profile="throughput")
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "command": "python -m bench latency " + " ".join(shlex.quote(a) for a in argv),
              "broker": cluster.version, "results": []}
    with cluster:
        for rate in rates:
            for client in clients:
                log(f"latency: {client} at {rate:,} msg/s for {args.seconds:g} s")
                try:
                    result = run_one(cluster, client, rate, args.seconds, args.partitions, args.warmup_s)
                except Exception as exc:  # reported in the table; the other runs go on
                    result = {"client": client, "rate": rate, "error": f"{type(exc).__name__}: {exc}"}
                log(f"latency:   {json.dumps(result)}")
                report["results"].append(result)
    print(markdown(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 1 if any("error" in r for r in report["results"]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
