"""End-to-end latency, producer to consumer: ``python -m bench latency``.

One Apache Kafka broker (started for the run, as the throughput suite's). For each rate, a
fresh topic with ``message.timestamp.type=LogAppendTime``, so every record carries the time
the broker appended it. Every client's consumer starts in a process of its own, assigned
every partition at its end, and says READY; then a producer, in a process of its own too
(confluent-kafka's, linger.ms=1, acks=1: the same producer for every client), produces at a
fixed rate for ``--seconds``. Each value starts with the producer's wall clock at send (8
bytes, big-endian ns) and a sequence number. The consumers read the same records at the same
time (``--apart``: one client after the other, each with a topic and a producer run of its
own), so every client sees the same load on a shared machine.

A consumer takes the wall clock when the record is handed to the application, as users write
it (kclient: ``for record in consumer``; confluent-kafka: ``poll()`` per message; Java:
``poll()`` and its records), with each client's default settings. All processes run on one
host and read one clock. Before the first measured run, the same run goes for
``--broker-warmup-s`` unmeasured: a broker just started appended records seconds after they
were sent for its first seconds of traffic (its JIT), whichever client read them. Records sent
in the first ``--warmup-s`` of each run are left out too (connections, the first fetch
sessions, the consumers' JIT). The table gives p50 / p99 / p99.9 / max of the whole
delay in milliseconds, and the split at the broker's append time: producer to broker (the
same producer for every client) and broker to application (the consumer's part), each with
the millisecond resolution of the append time. Each consumer also reports the CPU time its
process used from READY to its last record (all its threads: the JIT and GC of the JVM,
librdkafka's threads): on a machine whose cores are shared, the client that needs more CPU
waits more for it.

``--repeat N`` runs each rate N times, each round on a fresh topic with all the clients at
once, and adds, per client, the median of the rounds' percentiles, the percentiles of all the
rounds' records pooled, and in how many rounds kclient's p99 was at or below each other
client's: one round's p99 moves with the shared machine's moment more than the clients differ.

``--trace`` also records kclient's fetch requests (when each was sent and answered) and
splits kclient's part further: from the append to the answer of the first fetch that could
carry the record (the fetch pipeline), and from that answer to the application (decoding and
the iteration).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import select
import shlex
import struct
import subprocess
import statistics
import sys
import time
import uuid
from bisect import bisect_left
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLIENTS = ("kclient", "confluent", "java")
LABELS = {"kclient": "kclient (for record in consumer, defaults)",
          "confluent": "confluent-kafka (poll() per message, defaults)",
          "java": "Java KafkaConsumer (poll(), defaults)"}
VALUE_SIZE = 100
STAMP = struct.Struct(">qq")  # send time (ns since the epoch), sequence number
IDLE_STOP_S = 30              # a consumer that receives nothing for this long stops


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _sent_us(value: bytes) -> int:
    return int.from_bytes(value[:8], "big") // 1000


# ---------------------------------------------------------------------------- consumers
# Each returns three lists, one entry per record in arrival order: the producer's send time
# (us), the broker's append time (ms) and the arrival time (us), all wall clock.
def _kclient_child(bootstrap: str, topic: str, partitions: int, records: int, ready, trace: list | None):
    from kclient import KafkaConsumer, TopicPartition
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    sent: list[int] = []
    appended: list[int] = []
    arrived: list[int] = []
    with KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                       consumer_timeout_ms=IDLE_STOP_S * 1000) as c:
        if trace is not None:
            _trace_fetches(c, trace)
        c.assign(tps)
        c.seek_to_end(*tps)
        for tp in tps:
            c.position(tp)
        ready()
        now = time.time_ns
        for r in c:
            arrived.append(now() // 1000)
            sent.append(_sent_us(r.value))
            appended.append(r.timestamp)
            if len(arrived) >= records:
                break
    return sent, appended, arrived


def _trace_fetches(consumer, trace: list) -> None:
    """Record (kind, wall clock us) for every Fetch this consumer sends ("S") and every answer
    it gets ("D"), by wrapping its network client's send on the instance (bench only): every
    fetch path (a full walk or a request built from what changed) sends through it."""
    from kclient.protocol import ApiKey
    client = consumer._client
    send, fetch_key = client.send, int(ApiKey.FETCH)
    now = time.time_ns

    def answered(*_):
        trace.append(("D", now() // 1000))

    def traced_send(node, api_key, body, **kwargs):
        future = send(node, api_key, body, **kwargs)
        if api_key == fetch_key:
            trace.append(("S", now() // 1000))
            future.add_both(answered)
        return future

    client.send = traced_send


def _confluent_child(bootstrap: str, topic: str, partitions: int, records: int, ready, trace: list | None):
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False})
    sent: list[int] = []
    appended: list[int] = []
    arrived: list[int] = []
    try:
        ends = [c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
        c.assign([ck.TopicPartition(topic, p, ends[p]) for p in range(partitions)])
        ready()
        now = time.time_ns
        idle_since = time.monotonic()
        while len(arrived) < records and time.monotonic() - idle_since < IDLE_STOP_S:
            m = c.poll(1.0)
            if m is None or m.error():
                continue
            arrived.append(now() // 1000)
            sent.append(_sent_us(m.value()))
            appended.append(m.timestamp()[1])
            idle_since = time.monotonic()
    finally:
        c.close()
    return sent, appended, arrived


def consumer_main(argv: list[str]) -> int:
    """``python -m bench.latency consumer CLIENT BOOTSTRAP TOPIC PARTITIONS RECORDS [--trace]``"""
    client, bootstrap, topic, partitions, records = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    trace: list | None = [] if "--trace" in argv[5:] else None

    cpu_at_ready = [0.0]

    def ready() -> None:
        times = os.times()
        cpu_at_ready[0] = times.user + times.system
        print("READY", flush=True)

    run = {"kclient": _kclient_child, "confluent": _confluent_child}[client]
    sent, appended, arrived = run(bootstrap, topic, partitions, records, ready, trace)
    times = os.times()
    print(f"C {round((times.user + times.system - cpu_at_ready[0]) * 1e6)}", flush=True)
    print("S " + " ".join(map(str, sent)), flush=True)
    print("T " + " ".join(map(str, appended)), flush=True)
    print("A " + " ".join(map(str, arrived)), flush=True)
    if trace is not None:
        print("F " + " ".join(f"{kind}{t}" for kind, t in trace), flush=True)
    print("END", flush=True)
    return 0


def _java_command(bootstrap: str, topic: str, partitions: int, records: int) -> list[str]:
    from bench.drivers import java_consumer
    from kclient.testing.maven import find_java
    source = REPO / "bench" / "java" / "JavaLatency.java"
    cp = java_consumer.classpath(source)
    return [find_java(), *java_consumer.JVM_OPTIONS, "-cp", cp, "JavaLatency", bootstrap, topic, str(partitions),
            str(records)]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _start_consumer(client: str, bootstrap: str, topic: str, partitions: int, records: int,
                    trace: bool) -> subprocess.Popen:
    if client == "java":
        cmd = _java_command(bootstrap, topic, partitions, records)
    else:
        cmd = [sys.executable, "-m", "bench.latency", "consumer", client, bootstrap, topic, str(partitions),
               str(records)] + (["--trace"] if trace and client == "kclient" else [])
    return subprocess.Popen(cmd, cwd=str(REPO), env=_child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)


class _Lines:
    """Lines from a child's stdout, read without blocking past a deadline."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.buf = proc, b""

    def next(self, deadline: float) -> str | None:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise RuntimeError(f"the child exited (status {self.proc.wait()}) early")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode().strip()


def _read_result(lines: _Lines, deadline: float) -> dict[str, list[int] | list[str]]:
    out: dict = {}
    while True:
        line = lines.next(deadline)
        if line is None:
            raise RuntimeError("no latencies in time after producing")
        if line == "END":
            return out
        kind, _, rest = line.partition(" ")
        out[kind] = rest.split() if kind == "F" else [int(v) for v in rest.split()]


# ---------------------------------------------------------------------------- producer
def produce_at_rate(bootstrap: str, topic: str, partitions: int, rate: int, seconds: float) -> int:
    import confluent_kafka as ck
    # linger.ms=1: with 0 every record is a request of its own, and at 1,000 msg/s and more the
    # producer's five requests in flight fall behind (its queue, not the consumer, then
    # dominates the latency: seen as seconds for every client, librdkafka's consumer too).
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": 1, "log_level": 3})
    p.list_topics(topic, timeout=30)            # connected before the clock starts
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
    left = p.flush(60)
    if left:
        raise RuntimeError(f"{left} records undelivered")
    return total


def producer_main(argv: list[str]) -> int:
    """``python -m bench.latency producer BOOTSTRAP TOPIC PARTITIONS RATE SECONDS``"""
    bootstrap, topic, partitions, rate, seconds = argv[0], argv[1], int(argv[2]), int(argv[3]), float(argv[4])
    t = time.perf_counter()
    n = produce_at_rate(bootstrap, topic, partitions, rate, seconds)
    print(f"DONE {n} {time.perf_counter() - t:.3f}", flush=True)
    return 0


def _produce(bootstrap: str, topic: str, partitions: int, rate: int, seconds: float) -> None:
    cmd = [sys.executable, "-m", "bench.latency", "producer", bootstrap, topic, str(partitions), str(rate),
           str(seconds)]
    proc = subprocess.run(cmd, cwd=str(REPO), env=_child_env(), stdout=subprocess.PIPE, text=True,
                          timeout=seconds + 120)
    if proc.returncode != 0 or not proc.stdout.startswith("DONE"):
        raise RuntimeError(f"the producer failed (exit {proc.returncode}): {proc.stdout.strip()[-300:]}")
    took = float(proc.stdout.split()[2])
    if took > seconds * 1.1 + 1:
        log(f"latency:   the producer took {took:.1f} s for {seconds:g} s of records: it fell behind the rate")


# ---------------------------------------------------------------------------- analysis
def _percentile(sorted_values: list, q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[k]


def _summary(values_us: list[int]) -> dict[str, float]:
    s = sorted(values_us)
    return {"p50_ms": _percentile(s, 0.50) / 1000, "p99_ms": _percentile(s, 0.99) / 1000,
            "p999_ms": _percentile(s, 0.999) / 1000, "max_ms": (s[-1] / 1000) if s else float("nan")}


def analyse(data: dict, warmup_s: float, keep_delays: bool = False) -> dict:
    """Percentiles of the records sent after the warm-up: whole delay and its parts.
    ``keep_delays`` also returns the measured delays (us) under ``_delays``, for pooling rounds."""
    sent, appended, arrived = data["S"], data["T"], data["A"]
    if not sent:
        return {"received": 0, "measured": 0}
    cutoff = min(sent) + int(warmup_s * 1e6)
    keep = [i for i, s in enumerate(sent) if s >= cutoff]
    out: dict = {"received": len(sent), "measured": len(keep)}
    if data.get("C"):
        out["cpu_s"] = data["C"][0] / 1e6
    whole = [arrived[i] - sent[i] for i in keep]
    from_broker = [arrived[i] - appended[i] * 1000 for i in keep]
    out.update(_summary(whole))
    out["to_broker"] = _summary([appended[i] * 1000 - sent[i] for i in keep])
    out["from_broker"] = _summary(from_broker)
    if keep_delays:
        out["_delays"] = {"whole": whole, "from_broker": from_broker}
    if "F" in data:
        out["fetches"] = _fetch_phases(data["F"], [appended[i] * 1000 for i in keep], [arrived[i] for i in keep])
    return out


def _fetch_phases(events: list[str], appended_us: list[int], arrived_us: list[int]) -> dict:
    """kclient's part split at the first fetch answer after each record's append (see the
    module doc), and the fetch timeline: answer times and the gaps with no fetch in flight."""
    sends, answers, round_trips, idle = [], [], [], []
    in_flight, last_answer = 0, None
    for e in events:
        t = int(e[1:])
        if e[0] == "S":
            if in_flight == 0 and last_answer is not None:
                idle.append(t - last_answer)
            sends.append(t)
            in_flight += 1
        else:
            answers.append(t)
            in_flight = max(in_flight - 1, 0)
            last_answer = t
            if len(sends) >= len(answers):
                round_trips.append(t - sends[len(answers) - 1])
    answers.sort()
    waits, after = [], []
    for a, t in zip(appended_us, arrived_us):
        k = bisect_left(answers, a)
        if k < len(answers) and answers[k] <= t + 1000:
            waits.append(max(answers[k] - a, 0))
            after.append(max(t - answers[k], 0))
    return {"count": len(sends), "append_to_answer": _summary(waits), "answer_to_app": _summary(after),
            "round_trip": _summary(round_trips), "idle_between": _summary(idle)}


# ---------------------------------------------------------------------------- suite
def run_rate(cluster, clients: list[str], rate: int, seconds: float, partitions: int, warmup_s: float,
             trace: bool, keep_delays: bool = False) -> list[dict]:
    """Every client reads one producer run of one topic at the same time."""
    topic = f"latency-{rate}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions, configs={"message.timestamp.type": "LogAppendTime"})
    cluster.wait_for_topic(topic, partitions, timeout=30)
    total = int(rate * seconds)
    procs = {c: _start_consumer(c, cluster.bootstrap, topic, partitions, total, trace) for c in clients}
    lines = {c: _Lines(p) for c, p in procs.items()}
    results = []
    try:
        for c in clients:
            if lines[c].next(time.monotonic() + 120) != "READY":
                raise RuntimeError(f"{c}: no READY within 120 s")
        _produce(cluster.bootstrap, topic, partitions, rate, seconds)
        for c in clients:
            try:
                data = _read_result(lines[c], time.monotonic() + IDLE_STOP_S + 60)
                procs[c].stdin.close()
                procs[c].wait(30)
                results.append({"client": c, "label": LABELS[c], "rate": rate, "sent": total,
                                **analyse(data, warmup_s, keep_delays)})
            except Exception as exc:  # reported in the table; the other clients go on
                results.append({"client": c, "rate": rate, "error": f"{type(exc).__name__}: {exc}"})
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        try:
            cluster.delete_topic(topic)
        except Exception:  # the data goes with the broker anyway
            pass
    return results


def _median(values: list[float]) -> float:
    """The median of the values that are numbers (a round without a CPU figure has NaN)."""
    known = [v for v in values if v == v]
    return statistics.median(known) if known else float("nan")


def summarise(results: list[dict], pooled: dict) -> list[dict]:
    """Per rate and client, over the rounds: the median of each round's percentiles, the
    percentiles of every measured record of all rounds together (``pooled``: {(rate, client):
    {"whole": [...], "from_broker": [...]}} in us), and in how many rounds kclient's p99 was at
    or below each other client's of the same round."""
    out = []
    keys = list(dict.fromkeys((r["rate"], r["client"]) for r in results))
    by_round: dict = {}
    for r in results:
        if r.get("measured"):
            by_round.setdefault((r["rate"], r.get("round", 1)), {})[r["client"]] = r["p99_ms"]
    for rate, client in keys:
        rows = [r for r in results if r["rate"] == rate and r["client"] == client and r.get("measured")]
        if not rows:
            continue
        delays = pooled.get((rate, client), {})
        whole = _summary(delays.get("whole", []))
        row = {"rate": rate, "client": client, "rounds": len(rows),
               "p50_ms": _median([r["p50_ms"] for r in rows]), "p99_ms": _median([r["p99_ms"] for r in rows]),
               "p999_ms": _median([r["p999_ms"] for r in rows]),
               "from_broker_p99_ms": _median([r["from_broker"]["p99_ms"] for r in rows]),
               "to_broker_p99_ms": _median([r["to_broker"]["p99_ms"] for r in rows]),
               "cpu_s": _median([r.get("cpu_s", float("nan")) for r in rows]),
               "pooled_p99_ms": whole["p99_ms"], "pooled_p999_ms": whole["p999_ms"],
               "pooled_from_broker_p99_ms": _summary(delays.get("from_broker", []))["p99_ms"]}
        if client != "kclient":
            pairs = [(v.get("kclient"), v.get(client)) for (rt, _), v in by_round.items() if rt == rate]
            pairs = [(k, o) for k, o in pairs if k is not None and o is not None]
            if pairs:       # kclient ran in the same rounds
                row["kclient_p99_at_or_below"] = sum(1 for k, o in pairs if k <= o)
                row["paired_rounds"] = len(pairs)
        out.append(row)
    return out


def markdown(report: dict) -> str:
    lines = [f"Date: {report['date']}; machine: {report['machine']}, load average {report['load']}; broker: "
             f"Apache Kafka {report['broker']} (one KRaft node on loopback).", f"Command: `{report['command']}`", "",
             "| rate (msg/s) | client | p50 ms | p99 ms | p99.9 ms | max ms | producer to broker p50 / p99 ms "
             "| broker to application p50 / p99 ms | consumer CPU s | records measured / sent |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rounds = max((r.get("round", 1) for r in report["results"]), default=1)
    if rounds > 1:      # a round column
        lines[-2] = "| round " + lines[-2]
        lines[-1] = "|---:" + lines[-1]
    for r in report["results"]:
        head = f"| {r.get('round', 1)} " if rounds > 1 else ""
        if "error" in r:
            lines.append(f"{head}| {r['rate']:,} | {LABELS[r['client']]} | failed: {r['error']} | | | | | | | |")
            continue
        if not r.get("measured"):
            lines.append(f"{head}| {r['rate']:,} | {r['label']} | no records | | | | | | | 0 / {r['sent']:,} |")
            continue
        tb, fb = r["to_broker"], r["from_broker"]
        lines.append(f"{head}| {r['rate']:,} | {r['label']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p999_ms']:.2f} "
                     f"| {r['max_ms']:.2f} | {tb['p50_ms']:.1f} / {tb['p99_ms']:.1f} "
                     f"| {fb['p50_ms']:.1f} / {fb['p99_ms']:.1f} | {r.get('cpu_s', float('nan')):.2f} "
                     f"| {r['measured']:,} / {r['sent']:,} |")
    if report.get("summary"):
        lines += ["", f"Over the {rounds} rounds: the median of the rounds' percentiles, and the percentiles of "
                  "every measured record of all rounds together (pooled).", "",
                  "| rate (msg/s) | client | rounds | median p50 ms | median p99 ms | median p99.9 ms "
                  "| pooled p99 / p99.9 ms | broker to application p99 ms: median / pooled "
                  "| median consumer CPU s | kclient's p99 at or below this client's |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in report["summary"]:
            paired = (f"{row['kclient_p99_at_or_below']} of {row['paired_rounds']} rounds"
                      if "paired_rounds" in row else "–")
            lines.append(f"| {row['rate']:,} | {LABELS[row['client']]} | {row['rounds']} | {row['p50_ms']:.2f} "
                         f"| {row['p99_ms']:.2f} | {row['p999_ms']:.2f} "
                         f"| {row['pooled_p99_ms']:.2f} / {row['pooled_p999_ms']:.2f} "
                         f"| {row['from_broker_p99_ms']:.1f} / {row['pooled_from_broker_p99_ms']:.1f} "
                         f"| {row['cpu_s']:.2f} | {paired} |")
    traced = [r for r in report["results"] if "fetches" in r]
    if traced:
        lines += ["", "kclient's fetches (--trace): p50 / p99 / max ms", "",
                  "| rate | fetches | append to answer | answer to application | round trip | idle between |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for r in traced:
            f = r["fetches"]
            cells = " | ".join(f"{f[k]['p50_ms']:.2f} / {f[k]['p99_ms']:.2f} / {f[k]['max_ms']:.2f}"
                               for k in ("append_to_answer", "answer_to_app", "round_trip", "idle_between"))
            lines.append(f"| {r['rate']:,} | {f['count']:,} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["consumer"]:
        return consumer_main(argv[1:])
    if argv[:1] == ["producer"]:
        return producer_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m bench latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,10000", help="messages per second, comma list (default 1000,10000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of producing per run (default 10)")
    parser.add_argument("--warmup-s", type=float, default=1.0,
                        help="records sent in the first this many seconds are left out (default 1)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--clients", default=",".join(CLIENTS), help=f"comma list of {', '.join(CLIENTS)}")
    parser.add_argument("--broker-warmup-s", type=float, default=10.0,
                        help="seconds of the same run, at the highest rate and not measured, before the first "
                             "measured one (default 10): a fresh broker appends seconds late at first")
    parser.add_argument("--apart", action="store_true",
                        help="one client at a time, each with its own topic and producer run")
    parser.add_argument("--trace", action="store_true", help="also time kclient's fetch requests")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds per rate, each on a fresh topic (default 1); more than one adds the "
                             "medians over the rounds and the pooled percentiles")
    parser.add_argument("--out", type=Path, help="also write the JSON report here")
    args = parser.parse_args(argv)
    rates = [int(x) for x in args.rates.split(",") if x]
    clients = [c for c in args.clients.split(",") if c]
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown or not rates or any(r <= 0 for r in rates):
        parser.error(f"unknown client(s) {unknown}" if unknown else "rates must be positive integers")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    from kclient.testing import KafkaCluster
    cluster = KafkaCluster(profile="throughput")
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "load": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
              "command": "python -m bench latency " + " ".join(shlex.quote(a) for a in argv),
              "broker": cluster.version, "results": []}
    groups = [[c] for c in clients] if args.apart else [clients]
    pooled: dict = {}
    with cluster:
        if args.broker_warmup_s > 0:
            log(f"latency: warming the broker up at {max(rates):,} msg/s for {args.broker_warmup_s:g} s")
            for result in run_rate(cluster, clients, max(rates), args.broker_warmup_s, args.partitions, 0.0, False):
                log(f"latency:   warm-up, not measured: {json.dumps(result)[:300]}")
        for rate in rates:
            for round_no in range(1, args.repeat + 1):
                for group in groups:
                    log(f"latency: {', '.join(group)} at {rate:,} msg/s for {args.seconds:g} s"
                        + (f", round {round_no} of {args.repeat}" if args.repeat > 1 else ""))
                    try:
                        results = run_rate(cluster, group, rate, args.seconds, args.partitions, args.warmup_s,
                                           args.trace, keep_delays=args.repeat > 1)
                    except Exception as exc:  # reported in the table; the other runs go on
                        results = [{"client": c, "rate": rate, "error": f"{type(exc).__name__}: {exc}"}
                                   for c in group]
                    for result in results:
                        delays = result.pop("_delays", None)
                        if delays:
                            into = pooled.setdefault((rate, result["client"]), {"whole": [], "from_broker": []})
                            into["whole"].extend(delays["whole"])
                            into["from_broker"].extend(delays["from_broker"])
                        if args.repeat > 1:
                            result["round"] = round_no
                        log(f"latency:   {json.dumps(result)}")
                    report["results"].extend(results)
    if args.repeat > 1:
        report["summary"] = summarise(report["results"], pooled)
    print(markdown(report))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 1 if any("error" in r for r in report["results"]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
