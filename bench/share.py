"""``python -m bench share [--records N] [--members 1,4] [--drivers ...] [--bootstrap host:port]``:
share-group consumers (KIP-932) in one run, on one topic.

``--repeat N`` runs every client N times (rounds, in the same order, on the same topic) and adds
each one's median records/s and the targets' ratios of the medians, with the ratios round by
round: on 2 shared cores one run's ratio moves by a third from one run to the next.

One topic of 8 partitions holds N records of 100 B, written once in producer batches of
4,000 records each (about 440 KB; a partition's last batch may hold fewer), whatever the
producer's timing. A share fetch acquires whole batches, and the broker holds at most
``share.partition.max.record.locks`` (2,000 by default) records in flight per partition, so
the batch shape sets the records each fetch brings and the requests a client makes per record:
written with a linger (as bench/runner.py writes its topics), one write gave 4 members fetch
answers of about 4,200 records and the next of about 8,400, and runs did not compare. Every
client of a run reads the same topic; ``--batch-records`` writes another shape. Each client
then reads all of it in a share group of its own (a fresh group id,
``share.auto.offset.reset=earliest``), with 1 and with 4 members, each member a process of its
own (bench/share_members.py; the Java peer is a JVM, bench/java/JavaShareConsumerBench.java):

- kclient per record: ``KafkaShareConsumer.poll()``;
- kclient columnar: ``KafkaShareConsumer.poll_columnar()`` (when this kclient has it);
- Java: ``KafkaShareConsumer`` of kafka-clients (the broker's version);
- confluent-kafka: ``ShareConsumer`` (when the installed confluent-kafka has one);
- raw ShareFetch: ShareFetch over plain sockets, no record decoded (the ceiling).

Every member polls up to 10,000 records and acknowledges implicitly (each poll accepts the
previous one's records). The window opens when the members are told to start (they build their
consumers then) and closes when the members together reported N records. Reported: records/s
after the first poll's records arrived (joining the group excluded), the seconds to the first record,
and CPU per record (user + system time of every member process, all threads, JVM included).
Before the measured reads the raw ShareFetch loop reads the topic, unmeasured, with the largest
member count, as many times as make 5,000,000 records (1,000,000 with ``--broker-profile test``;
``--warmup-records`` sets it, ``--no-warmup`` leaves it out): a fresh broker loads its
coordinators and compiles its share-fetch path during its first reads (the full JIT over its
first few million records), which the first clients measured paid for.
Without ``--bootstrap`` a one-node Apache Kafka broker is started on this machine, with the
``throughput`` profile of kclient.testing.KafkaCluster (full JIT, 1 GB heap: as the consumer
benchmark's broker and a production one run) unless ``--broker-profile test`` (C1 only, the test
suite's) says otherwise, and shares its cores with the members: figures compare within a run.
The C1-only broker spends more CPU per record, which on 2 cores caps the clients that need the
least CPU of their own first. The broker's CPU per record (its
process's user + system time over the same window) is reported too when the broker's process is
known (started here, or ``--broker-pid``); ``--stats`` adds each client's requests: ShareFetch and
ShareAcknowledge per second and per 1,000 records (confluent-kafka's from librdkafka's
statistics), and for kclient records per fetch answer and acknowledgement batches per request;
and the client's and the broker's CPU per record from the moment every member had records on
(the joins left out, which a short run's per-record figures otherwise carry).
"""
from __future__ import annotations

import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

DRIVERS = ("raw-sharefetch", "kclient-records", "kclient-columnar", "java", "confluent")
LABELS = {"raw-sharefetch": "raw ShareFetch (ceiling)", "kclient-records": "kclient per record",
          "kclient-columnar": "kclient columnar", "java": "Java KafkaShareConsumer",
          "confluent": "confluent-kafka ShareConsumer"}
PARTITIONS = 8
RECORD_SIZE = 100
#: Records per producer batch of the share topic (about 440 KB of 100 B records): a batch a
#: producer at load makes (librdkafka's batch.size is 1 MB), and the smaller of the two shapes
#: the benchmark's lingering producer used to write (each fetch then acquires one batch of a
#: partition: above the broker's default 2,000 record locks per partition).
BATCH_RECORDS = 4000
#: Records the unmeasured warm-up reads at least (whole reads of the topic): the throughput
#: profile's broker compiles its share path over its first few million; the C1-only one sooner.
WARMUP_RECORDS = 5_000_000
WARMUP_RECORDS_TEST = 1_000_000
JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "JavaShareConsumerBench.java"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def unavailable(driver: str) -> str | None:
    """Why ``driver`` cannot run here, or None."""
    if driver == "kclient-columnar":
        from kclient.share.consumer import KafkaShareConsumer
        if not hasattr(KafkaShareConsumer, "poll_columnar"):
            return "this kclient's KafkaShareConsumer has no poll_columnar()"
    if driver == "confluent":
        try:
            import confluent_kafka
        except ImportError:
            return "confluent-kafka is not installed"
        if not hasattr(confluent_kafka, "ShareConsumer"):
            return f"confluent-kafka {confluent_kafka.version()[0]} has no ShareConsumer"
    if driver == "java":
        from kclient.testing import MavenError
        try:
            _java_command()
        except MavenError as exc:
            return str(exc)
    return None


def _java_command() -> list[str]:
    from bench.drivers.java_consumer import JVM_OPTIONS, classpath
    from kclient.testing.maven import find_java
    return [find_java(), *JVM_OPTIONS, "-cp", classpath(JAVA_SOURCE), "JavaShareConsumerBench"]


def produce_fixed_batches(bootstrap: str, topic: str, records: int, batch_records: int = BATCH_RECORDS) -> None:
    """Write ``records`` records of RECORD_SIZE B round-robin over the PARTITIONS partitions, in
    producer batches of ``batch_records`` records each (a partition's last one may hold fewer),
    whatever the timing: librdkafka sends a partition's batch once it holds
    ``batch.num.messages`` records and waits for that (linger.ms far longer than the write)
    unless flushing; each value starts with its sequence number (offset * PARTITIONS + partition),
    as bench/runner.py's produce writes it."""
    from confluent_kafka import Producer

    from bench.drivers._common import write_sequenced
    errors: list = []

    def on_error(err: Any, msg: Any) -> None:  # delivery.report.only.error: failures only
        if err is not None:
            errors.append(err)

    per_batch = batch_records * (RECORD_SIZE + 64)
    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "none",
        "batch.num.messages": batch_records, "batch.size": max(per_batch, 1_000_000),
        "linger.ms": 60_000, "message.max.bytes": max(2 * per_batch, 10_000_000),
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_097_151,
        "delivery.report.only.error": True, "on_delivery": on_error,
    })
    write_sequenced(producer, topic, records, PARTITIONS, RECORD_SIZE, errors)


def _member_command(driver: str, bootstrap: str, topic: str, group: str) -> list[str]:
    if driver == "java":
        return [*_java_command(), bootstrap, topic, str(PARTITIONS), group, "max.poll.records=10000"]
    return [sys.executable, "-m", "bench.share_members", driver, bootstrap, topic, str(PARTITIONS), group]


class _Member:
    def __init__(self, cmd: list[str]):
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.buf = b""
        self.count = 0

    def lines(self) -> list[str]:
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            raise RuntimeError(f"a member exited (status {self.proc.wait()}) before the run finished")
        self.buf += chunk
        *done, self.buf = self.buf.split(b"\n")
        return [line.decode("utf-8", "replace").strip() for line in done]

    def tell(self, word: str) -> None:
        try:
            self.proc.stdin.write(word.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def cpu(self) -> float:
        try:
            t = psutil.Process(self.proc.pid).cpu_times()
            return t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            return 0.0


def _process_cpu(pid: int | None) -> float | None:
    """User + system seconds of process ``pid`` (all threads), or None."""
    if pid is None:
        return None
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return t.user + t.system


def _member_stats(where: str, driver: str) -> dict[str, int]:
    """The request counts the members of ``driver`` wrote into ``where`` (summed), then removed."""
    total: dict[str, int] = {}
    for path in Path(where).glob(f"{driver}-*.json"):
        for k, v in json.loads(path.read_text()).items():
            total[k] = total.get(k, 0) + v
        path.unlink()
    return total


def run_one(driver: str, members: int, bootstrap: str, topic: str, records: int, timeout_s: float,
            broker_pid: int | None = None, stats_dir: str | None = None) -> dict:
    from kclient.admin import KafkaAdminClient
    group = f"bench-share-{driver}-{members}-{uuid.uuid4().hex[:8]}"
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.alter_group_configs(group, {"share.auto.offset.reset": "earliest"})
        deadline = time.monotonic() + 30
        while admin.describe_group_configs(group)["share.auto.offset.reset"].value != "earliest":
            if time.monotonic() > deadline:
                raise RuntimeError(f"group config of {group} did not apply")
            time.sleep(0.05)   # a check interval, not a wait for the condition
    if stats_dir:
        _member_stats(stats_dir, driver)     # leftovers of a failed run
    procs = [_Member(_member_command(driver, bootstrap, topic, group)) for _ in range(members)]
    sel = selectors.DefaultSelector()
    for m in procs:
        sel.register(m.proc.stdout, selectors.EVENT_READ, m)
    try:
        ready, deadline = 0, time.monotonic() + 120
        while ready < members:
            if time.monotonic() > deadline:
                raise RuntimeError("the members did not start within 120 s")
            for key, _ in sel.select(1.0):
                for line in key.data.lines():
                    if line == "READY":
                        ready += 1
        cpu0 = sum(m.cpu() for m in procs)
        broker0 = _process_cpu(broker_pid)
        start = time.perf_counter()
        for m in procs:
            m.tell("GO")
        total, first, first_batch = 0, None, 0
        # when every member has had records: the CPU from then on is the per-record cost
        # without the joins' (under --stats)
        started = 0
        mark: tuple[int, float, float | None] | None = None
        while total < records:
            if time.perf_counter() - start > timeout_s:
                raise RuntimeError(f"{total:,} of {records:,} records within {timeout_s:.0f} s")
            for key, _ in sel.select(1.0):
                m = key.data
                for line in m.lines():
                    kind, _, rest = line.partition(" ")
                    if kind == "B":
                        started += not m.count
                        m.count += int(rest)
                        total += int(rest)
                        if first is None:
                            first, first_batch = time.perf_counter(), int(rest)
                        if stats_dir and mark is None and started == members:
                            mark = (total, sum(p.cpu() for p in procs), _process_cpu(broker_pid))
                    elif kind in ("X", "E"):
                        raise RuntimeError(f"a member failed: {rest}")
        end = time.perf_counter()
        cpu = sum(m.cpu() for m in procs) - cpu0
        broker1 = _process_cpu(broker_pid)
    finally:
        for m in procs:
            m.tell("STOP")
        for m in procs:
            try:
                m.proc.wait(30)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait()
        sel.close()
    assert first is not None
    out = {"driver": driver, "members": members, "records": total, "wall_s": end - start,
           "first_record_s": first - start, "steady_s": end - first, "first_batch": first_batch, "cpu_s": cpu,
           "per_member": [m.count for m in procs]}
    if broker0 is not None and broker1 is not None:
        out["broker_cpu_s"] = broker1 - broker0
    if stats_dir:
        out["requests"] = _member_stats(stats_dir, driver)
        if mark is not None and total > mark[0]:
            steady: dict[str, float] = {"records": total - mark[0], "cpu_s": cpu + cpu0 - mark[1]}
            if mark[2] is not None and broker1 is not None:
                steady["broker_cpu_s"] = broker1 - mark[2]
            out["steady"] = steady
    return out


def _describe_requests(r: dict) -> str:
    """Requests per second and what they carried, from the members' counts (whole run, close
    included; confluent-kafka's from its statistics: its requests only)."""
    q = r["requests"]
    secs = r["wall_s"]
    fetches, acks = q.get("share_fetch", 0), q.get("share_acknowledge", 0)
    per_k = 1000 / max(r["records"], 1)
    parts = [f"ShareFetch {fetches / secs:,.0f}/s, ShareAcknowledge {acks / secs:,.0f}/s "
             f"({fetches * per_k:.3f} and {acks * per_k:.3f} per 1,000 records)"]
    answers = q.get("fetch_answers", 0)
    if answers:
        ahead = q.get("share_fetch_ahead", 0)
        parts += [f"{ahead:,} of {fetches:,} fetches sent ahead ({q.get('ahead_answers_empty', 0):,} empty, "
                  f"{q.get('ahead_records', 0) / max(ahead, 1):,.0f} records per answer)",
                  f"{q.get('acquired_records', 0) / answers:,.0f} records per fetch answer "
                  f"({q.get('fetch_answers_empty', 0):,} of {answers:,} empty; "
                  f"{q.get('acquired_ranges', 0) / answers:.1f} ranges)",
                  f"{q.get('ack_batches', 0) / max(fetches + acks, 1):.1f} acknowledgement batches per request "
                  f"({q.get('ack_batches', 0) / max(q.get('ack_partitions', 0), 1):.2f} per partition)"]
    if q.get("polls"):
        parts.append(f"{q['polls']:,} polls ({q.get('polls_empty', 0):,} empty)")
    steady = r.get("steady")
    if steady:
        n = steady["records"]
        broker = f", broker {steady['broker_cpu_s'] / n * 1e6:.2f}" if "broker_cpu_s" in steady else ""
        parts.append(f"once every member had records ({n:,} records): CPU µs/record client "
                     f"{steady['cpu_s'] / n * 1e6:.2f}{broker}")
    return "; ".join(parts)


def steady_rate(r: dict) -> float:
    """Records after the first poll's, over the time after they arrived (joining excluded)."""
    return (r["records"] - r["first_batch"]) / r["steady_s"] if r["steady_s"] > 0 else float("inf")


#: (driver, peer, least ratio of records/s): the benchmark's targets, per member count.
TARGETS = (("kclient-records", "confluent", 3.0), ("kclient-records", "java", 2.0),
           ("kclient-columnar", "raw-sharefetch", 0.8))


def summarise(results: list[dict]) -> list[str]:
    """Over the rounds: each client's median records/s per member count, and each target's
    ratio of the medians with its ratios round by round (the same round's runs paired)."""
    rates: dict[tuple[str, int], dict[int, float]] = {}
    for r in results:
        if "error" not in r:
            rates.setdefault((r["driver"], r["members"]), {})[r.get("round", 1)] = steady_rate(r)
    lines = [f"{'client':<32} {'members':>7} {'rounds':>6} {'median records/s':>17}"]
    for (driver, members), by_round in rates.items():
        lines.append(f"{LABELS[driver]:<32} {members:>7} {len(by_round):>6} {statistics.median(list(by_round.values())):>17,.0f}")
    for members in sorted({m for _, m in rates}):
        for driver, peer, least in TARGETS:
            mine, theirs = rates.get((driver, members)), rates.get((peer, members))
            if not mine or not theirs:
                continue
            ratio = statistics.median(list(mine.values())) / statistics.median(list(theirs.values()))
            paired = sorted(mine[k] / theirs[k] for k in mine.keys() & theirs.keys())
            rounds = ", ".join(f"{x:.2f}" for x in paired)
            lines.append(f"{members} member(s): {LABELS[driver]} >= {least:g}x {LABELS[peer]}: {ratio:.2f}x "
                         f"(rounds: {rounds}) - {'met' if ratio >= least else 'NOT met'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench share", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--members", default="1,4", help="member counts to run (default 1,4)")
    parser.add_argument("--drivers", default=",".join(DRIVERS), help=f"comma list of {DRIVERS}")
    parser.add_argument("--bootstrap", default=None, help="an existing cluster with share groups (default: "
                                                         "start Apache Kafka)")
    parser.add_argument("--broker-profile", default="throughput", choices=("throughput", "test"),
                        help="JVM settings of the broker started here (kclient.testing.KafkaCluster's profiles; "
                             "default throughput: full JIT and a 1 GB heap, as the consumer benchmark's broker, whose "
                             "compiling the warm-up covers; test: C1 only, starts fast, costs more CPU per record)")
    parser.add_argument("--broker-pid", type=int, default=None,
                        help="with --bootstrap: the process id of a broker on this machine, to report its CPU")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run (default 600)")
    parser.add_argument("--out", default=None, help="also write the results as JSON to this file")
    parser.add_argument("--no-warmup", action="store_true",
                        help="measure from the broker's first read on (by default the raw ShareFetch loop reads "
                             "the topic, unmeasured, first: 1,000,000 records or more)")
    parser.add_argument("--warmup-records", type=int, default=None,
                        help="records the unmeasured warm-up reads at least (default 5,000,000, 1,000,000 with "
                             "--broker-profile test: the full JIT compiles the share path over a few million)")
    parser.add_argument("--topic", default=None,
                        help="with --bootstrap: read this topic, written by an earlier run (8 partitions, --records "
                             "records), instead of writing a new one")
    parser.add_argument("--batch-records", type=int, default=BATCH_RECORDS,
                        help=f"records per producer batch of the topic written (default {BATCH_RECORDS:,}: "
                             "the same shape every run, whatever the producer's timing)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds: every client and member count once per round, in the same order, on the "
                             "same topic; more than one adds the medians and the targets' ratios (default 1)")
    parser.add_argument("--stats", action="store_true",
                        help="also count each member's share requests (ShareFetch, ShareAcknowledge, records "
                             "per fetch answer, acknowledgement batches) and print them per run")
    args = parser.parse_args(argv)
    drivers = [d for d in args.drivers.split(",") if d]
    unknown = set(drivers) - set(DRIVERS)
    try:
        member_counts = [int(n) for n in args.members.split(",") if n]
    except ValueError:
        parser.error(f"--members takes numbers, as in 1,4; got {args.members!r}")
    if args.topic and not args.bootstrap:
        parser.error("--topic needs --bootstrap (a broker started here holds no topic yet)")
    if unknown or args.records < 1 or not member_counts or min(member_counts) < 1 or args.repeat < 1 \
            or args.batch_records < 1:
        parser.error(f"--drivers from {DRIVERS} (got {sorted(unknown)}), --records, --members, --repeat and --batch-records >= 1")
    skipped = {d: why for d in drivers if (why := unavailable(d))}
    for d, why in skipped.items():
        log(f"skipping {d}: {why}")

    stats_dir = tempfile.mkdtemp(prefix="bench-share-stats-") if args.stats else None
    if stats_dir:
        from bench.share_members import STATS_DIR_ENV
        os.environ[STATS_DIR_ENV] = stats_dir      # the members inherit it
    broker_pid: int | None = args.broker_pid

    def run_all(bootstrap: str) -> list[dict]:
        from kclient.admin import KafkaAdminClient, NewTopic
        if args.topic:
            topic = args.topic
        else:
            topic = f"bench-share-{uuid.uuid4().hex[:8]}"
            with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
                admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
            log(f"producing {args.records:,} records to {topic} in batches of {args.batch_records:,}")
            produce_fixed_batches(bootstrap, topic, args.records, args.batch_records)
        if not args.no_warmup:
            # A fresh broker loads its group and share coordinators and compiles its share-fetch
            # path during the first read: without this, the first client measured pays for it.
            members = max(member_counts)
            warmup = args.warmup_records if args.warmup_records is not None else (
                WARMUP_RECORDS_TEST if args.broker_profile == "test" else WARMUP_RECORDS)
            rounds = -(-warmup // args.records)
            log(f"warm-up (not measured): raw-sharefetch, {members} member(s), {rounds} read(s)")
            try:
                for _ in range(rounds):
                    run_one("raw-sharefetch", members, bootstrap, topic, args.records, args.timeout)
            except RuntimeError as exc:
                log(f"  the warm-up failed: {exc}")
        results = []
        for round_no in range(1, args.repeat + 1):
            for members in member_counts:
                for d in drivers:
                    if d in skipped:
                        continue
                    log(f"{d}, {members} member(s)" + (f", round {round_no} of {args.repeat}" if args.repeat > 1 else ""))
                    try:
                        result = run_one(d, members, bootstrap, topic, args.records, args.timeout,
                                         broker_pid, stats_dir)
                    except RuntimeError as exc:
                        log(f"  {d} failed: {exc}")
                        result = {"driver": d, "members": members, "error": str(exc)}
                    if args.repeat > 1:
                        result["round"] = round_no
                    results.append(result)
        return results

    if args.bootstrap:
        where = args.bootstrap
        results = run_all(args.bootstrap)
    else:
        from kclient.testing import KafkaCluster
        with KafkaCluster(profile=args.broker_profile) as kafka:
            where = f"Apache Kafka {kafka.version}, one node on this machine (profile {args.broker_profile})"
            broker_pid = kafka.pid
            results = run_all(kafka.bootstrap)
    load = os.getloadavg()
    shape = (f"topic {args.topic} (written earlier)" if args.topic
             else f"producer batches of {args.batch_records:,} records")
    print(f"python -m bench share: {args.records:,} records x {RECORD_SIZE} B, {PARTITIONS} partitions, {shape}, "
          f"implicit acknowledgement, max.poll.records 10000; broker: {where}"
          + ("" if args.no_warmup else "; after an unmeasured warm-up read (raw ShareFetch)"))
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
          "(1 / 5 / 15 min) at the end")
    head = f"{'round':>5} " if args.repeat > 1 else ""
    print(f"{head}{'client':<32} {'members':>7} {'records/s':>11} {'CPU µs/record':>14} {'first record s':>15} "
          f"{'broker CPU µs/record':>21}")
    for r in results:
        label = LABELS[r["driver"]]
        head = f"{r.get('round', 1):>5} " if args.repeat > 1 else ""
        if "error" in r:
            print(f"{head}{label:<32} {r['members']:>7} {'failed: ' + r['error']}")
            continue
        broker = f"{r['broker_cpu_s'] / r['records'] * 1e6:.2f}" if "broker_cpu_s" in r else "-"
        print(f"{head}{label:<32} {r['members']:>7} {steady_rate(r):>11,.0f} {r['cpu_s'] / r['records'] * 1e6:>14.2f} "
              f"{r['first_record_s']:>15.2f} {broker:>21}")
    if args.repeat > 1:
        print(f"over the {args.repeat} rounds:")
        for line in summarise(results):
            print(line)
    for d, why in skipped.items():
        print(f"{LABELS[d]:<32} skipped: {why}")
    for r in results:
        if r.get("requests"):
            print(f"{LABELS[r['driver']]}, {r['members']} member(s): " + _describe_requests(r))
    if args.out:
        Path(args.out).write_text(json.dumps({"records": args.records, "broker": where, "results": results,
                                              "skipped": skipped}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
