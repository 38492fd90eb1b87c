"""Chaos on a 3-broker Apache Kafka cluster, checked with Jepsen's Kafka criteria.

``Chaos(cluster, ChaosConfig(duration_s=60, seed=1)).run()`` -> ``ChaosResult``. The cluster is
a ``KafkaCluster(3, client_proxies=True)``: every client (the producer and the members) reaches
the brokers only through one ``FaultProxy`` per broker, which is also what Metadata advertises.

* A topic with replication 3 and ``min.insync.replicas=2``.
* A producer thread writes numbered records (the value is the sequence number) with
  ``acks=all``, round-robin over the partitions at a bounded rate, and records every
  acknowledgement (partition, offset, number).
* ``members`` consumer group members, each a child process (``kclient.testing.chaos_member``:
  classic protocol, a synchronous commit after every poll), whose JSON-lines output (deliveries
  with their generation, commits) is collected by a reader thread each.
* A fault scheduler (seeded RNG, bounded by ``duration_s``; one fault at a time, never more
  than one broker down): a rolling restart of one broker (SIGTERM, controlled shutdown, then
  start), SIGKILL of the leader of a consumed partition and of the group coordinator (then
  start), proxy faults (latency, connection resets, a blackhole, slow reads, each for a few
  seconds), SIGKILL of a member and a new one in its place. A broker fault waits (with a
  deadline) until every partition of the topic and of ``__consumer_offsets`` is fully
  replicated again, so that a second broker fault never meets an under-replicated cluster.
* A quiet period: proxies healed, every broker and member running, the producer flushed and
  stopped, then a wait (bounded by ``quiet_timeout_s``) until every acknowledged record was
  delivered; members are stopped cleanly (SIGTERM) and the checker runs.

The checker (kclient.testing.checker) gets the acknowledged records, every delivery in time
order with its member incarnation and generation, the successful commits, and as "crashed"
the incarnations that were SIGKILLed or that the group fenced (a failed commit or lost
partitions): those may have their uncommitted records delivered again, nobody else may. On
top of Jepsen's criteria the harness counts ``mismatched`` (a delivered value that is not the
number acknowledged at that offset), ``member_exits`` (a member that exited without being told
to), ``stuck_on_close`` (a member that did not stop within 30 s of SIGTERM).

Resources of each member incarnation (RSS, open fds, threads) are sampled every second with
psutil; ``resource_violations`` lists those over the bounds documented at ``RESOURCE_BOUNDS``.
"""
from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable

from kclient.testing.checker import Commit, Delivery, Report, check
from kclient.testing.kafka import KafkaCluster

__all__ = ["Chaos", "ChaosConfig", "ChaosResult", "FAULT_KINDS", "RESOURCE_BOUNDS", "ResourceSample",
           "group_coordinator_partition", "java_string_hash", "resource_violations"]

log = logging.getLogger(__name__)

FAULT_KINDS = ("broker_restart", "leader_kill", "coordinator_kill", "proxy_latency", "proxy_reset",
               "proxy_blackhole", "proxy_slow_reads", "member_kill")
BROKER_FAULTS = frozenset({"broker_restart", "leader_kill", "coordinator_kill"})

#: A member incarnation's resources are bounded when (1) every sample stays under the absolute
#: caps and (2) for an incarnation sampled over at least ``growth_window_s``, the maximum over the
#: last quarter of its samples is within the growth allowance of the maximum over the second
#: quarter (the first quarter is warm-up): RSS at most x1.25 + 32 MB, fds +16, threads +4. A leak
#: that grows steadily over a soak fails (2); a spike or a leak that explodes fails (1).
RESOURCE_BOUNDS = {
    "rss_mb_max": 400.0, "fds_max": 256, "threads_max": 32,
    "growth_window_s": 120.0, "rss_growth_factor": 1.25, "rss_growth_mb": 32.0,
    "fds_growth": 16, "threads_growth": 4,
}


@dataclass
class ChaosConfig:
    duration_s: float = 60.0          # how long faults are injected (the quiet period comes after)
    members: int = 3
    partitions: int = 6
    rate: float = 200.0               # records per second, all partitions together
    seed: int = 0
    kinds: tuple[str, ...] = FAULT_KINDS
    gap_s: tuple[float, float] = (0.5, 2.0)     # pause between two faults
    # Faults go on past duration_s until this many were injected (a broker fault with its
    # restart may take most of a short window on a busy machine), for at most min_faults_grace_s.
    min_faults: int = 0
    min_faults_grace_s: float = 60.0
    quiet_timeout_s: float = 120.0    # deadline for every acknowledged record to be delivered
    replicated_timeout_s: float = 90.0
    session_timeout_ms: int = 6000
    topic: str | None = None
    group: str | None = None
    workdir: Path | None = None       # member logs; a temporary directory by default
    sample_interval_s: float = 1.0
    security: str = "PLAINTEXT"       # the clients' listener: PLAINTEXT, or SASL_SSL (TLS + SCRAM-SHA-512)


@dataclass
class ResourceSample:
    t: float
    rss_mb: float
    fds: int
    threads: int


@dataclass
class ChaosResult:
    seed: int
    duration_s: float = 0.0
    produced: int = 0
    acknowledged: int = 0
    send_failures: int = 0
    deliveries: int = 0
    faults: Counter = field(default_factory=Counter)
    skipped_faults: Counter = field(default_factory=Counter)
    report: Report = field(default_factory=Report)
    mismatched: int = 0
    member_exits: list[str] = field(default_factory=list)
    stuck_on_close: list[str] = field(default_factory=list)
    commit_failures: int = 0
    poll_errors: int = 0
    fenced: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    resources: dict[str, list[ResourceSample]] = field(default_factory=dict)
    resource_violations: list[str] = field(default_factory=list)
    undelivered_at_deadline: dict[int, int] = field(default_factory=dict)
    workdir: str = ""
    explain: list[str] = field(default_factory=list)   # the deliveries and commits of flagged records

    def criteria(self) -> dict[str, int]:
        s = self.report.summary()
        return {"lost": s["lost"], "duplicated": s["duplicated"], "nonmonotonic": s["nonmonotonic"],
                "skipped": s["skipped"], "split_brain": s["split_brain"], "mismatched": self.mismatched,
                "member_exits": len(self.member_exits), "stuck_on_close": len(self.stuck_on_close)}

    @property
    def ok(self) -> bool:
        return not any(self.criteria().values()) and not self.resource_violations

    def resource_ranges(self) -> dict[str, dict[str, tuple[float, float]]]:
        """Per member slot (all its incarnations): (min, max) of RSS MB, fds and threads."""
        by_slot: dict[str, list[ResourceSample]] = defaultdict(list)
        for name, samples in self.resources.items():
            by_slot[name.split(".")[0]].extend(samples)
        out = {}
        for slot, samples in sorted(by_slot.items()):
            if samples:
                out[slot] = {k: (min(getattr(s, k) for s in samples), max(getattr(s, k) for s in samples))
                             for k in ("rss_mb", "fds", "threads")}
        return out


def java_string_hash(s: str) -> int:
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def group_coordinator_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's ``Utils.abs(groupId.hashCode())
    % partitions`` (whose abs maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# ---------------------------------------------------------------------------- producer
class _Producer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float,
                 settings: dict[str, str] | None = None):
        super().__init__(name="chaos-producer", daemon=True)
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.settings = dict(settings or {})
        self.stop_event = threading.Event()
        self.acked: dict[tuple[int, int], int] = {}      # (partition, offset) -> sequence number
        self.produced = 0
        self.failures = 0
        self.error: BaseException | None = None

    def _ok(self, seq: int, md) -> None:
        self.acked[(md.partition, md.offset)] = seq

    def _failed(self, seq: int, exc: BaseException) -> None:
        self.failures += 1
        log.debug("record %d not acknowledged: %r", seq, exc)

    def run(self) -> None:
        from kclient import errors as Errors
        from kclient.producer import KafkaProducer
        producer = KafkaProducer(self.settings, bootstrap_servers=self.bootstrap, acks="all", linger_ms=5,
                                 request_timeout_ms=15000, delivery_timeout_ms=120000,
                                 retry_backoff_ms=100, reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000,
                                 metadata_max_age_ms=5000, max_block_ms=30000)
        try:
            period = 1.0 / self.rate
            next_send = time.monotonic()
            while not self.stop_event.is_set():
                now = time.monotonic()
                if now < next_send:      # pacing: drive the network until the next record is due
                    producer.poll(max(1, int((next_send - now) * 1000)))
                    continue
                seq = self.produced
                try:
                    fut = producer.send(self.topic, b"%d" % seq, partition=seq % self.partitions)
                except Errors.KafkaError as exc:
                    self._failed(seq, exc)
                else:
                    fut.add_callback(self._ok, seq).add_errback(self._failed, seq)
                self.produced += 1
                next_send = max(next_send + period, now - 1.0)   # no burst after a stall
        except BaseException as exc:  # reported by the harness
            self.error = exc
            log.exception("chaos producer failed")
        finally:
            producer.close(timeout=120)


# ---------------------------------------------------------------------------- members
class _Member:
    """One incarnation of a member slot: its process and what it printed."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, sink: "_History"):
        self.name = name
        self.log_path = log_path
        self.events_path = log_path.with_suffix(".events")
        self.stop_requested = False
        self.killed = False
        self._stderr = open(log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._stderr, start_new_session=True)
        self.closed = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout, sink),
                                        name=f"chaos-{name}", daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes], sink: "_History") -> None:
        with open(self.events_path, "ab") as events:   # the raw history, for a post-mortem
            for line in stream:
                events.write(line)
                self._event(line, sink)

    def _event(self, line: bytes, sink: "_History") -> None:
        try:
            event = json.loads(line)
        except ValueError:
            log.warning("member %s printed %r", self.name, line[:200])
            return
        sink.add(self.name, event)
        if event.get("e") == "closed":
            self.closed.set()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.killed = True
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.finish()

    def terminate(self, timeout: float) -> bool:
        """SIGTERM, wait up to ``timeout`` s; False (and SIGKILL) if it did not exit."""
        self.stop_requested = True
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
            clean = True
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            clean = False
        self.finish()
        return clean

    def finish(self) -> None:
        self._reader.join(10)
        self._stderr.close()


class _History:
    """Everything the members reported, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deliveries: list[tuple[float, str, int, int, int, int]] = []  # t, member, gen, p, offset, value
        self.commits: list[tuple[str, int, int, int, float]] = []          # member, gen, p, offset, t
        self.delivered: set[tuple[int, int]] = set()
        self.commit_failures = 0
        self.poll_errors = 0
        self.fenced: set[str] = set()
        self.owner: dict[int, str] = {}

    def add(self, member: str, event: dict[str, Any]) -> None:
        kind = event.get("e")
        with self.lock:
            if kind == "poll":
                t, gen = event["t"], event["g"]
                for p, recs in event["r"]:
                    for offset, value in recs:
                        self.deliveries.append((t, member, gen, p, offset, value))
                        self.delivered.add((p, offset))
            elif kind == "commit":
                if event["ok"]:
                    self.commits.extend((member, event["g"], p, o, event["t"]) for p, o in event["o"])
                else:
                    self.commit_failures += 1
                    self.fenced.add(member)
                    log.info("member %s: commit failed: %s", member, event["err"])
            elif kind == "lost":
                self.fenced.add(member)
            elif kind == "assigned":
                for p in event["p"]:
                    self.owner[p] = member
            elif kind == "error":
                self.poll_errors += 1
                log.info("member %s: poll raised %s", member, event["err"])


# ---------------------------------------------------------------------------- the run
class Chaos:
    def __init__(self, cluster: KafkaCluster, config: ChaosConfig | None = None):
        self.config = config or ChaosConfig()
        cfg = self.config
        if not cluster.proxies or len(cluster.nodes) < 3:
            raise ValueError("chaos needs a KafkaCluster(3, client_proxies=True)")
        self.cluster = cluster
        # The clients' way in: the fault proxies of the proxied listener of cfg.security.
        self.proxies = cluster.proxies_for(cfg.security)
        self.bootstrap = cluster.proxied_bootstrap_for(cfg.security)
        self.client_settings = cluster.proxied_client_settings(cfg.security)
        suffix = f"{cfg.seed}-{os.getpid()}-{int(time.time())}"
        self.topic = cfg.topic or f"chaos-{suffix}"
        self.group = cfg.group or f"chaos-group-{suffix}"
        self.rng = random.Random(cfg.seed)
        self.workdir = Path(cfg.workdir or tempfile.mkdtemp(prefix="kclient-chaos-"))
        self.history = _History()
        self.members: dict[int, _Member] = {}       # slot -> current incarnation
        self.all_members: list[_Member] = []
        self.incarnations: Counter = Counter()
        self.result = ChaosResult(seed=cfg.seed, workdir=str(self.workdir))
        self._stop_sampling = threading.Event()
        self._stop = threading.Event()

    # ------------------------------------------------------------------ helpers
    def _member_cmd(self, name: str) -> list[str]:
        cfg = self.config
        settings = {"session.timeout.ms": cfg.session_timeout_ms, "heartbeat.interval.ms": 500,
                    "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 1000, "retry.backoff.ms": 100,
                    "metadata.max.age.ms": 5000, "client.id": f"chaos-{name}", **self.client_settings}
        cmd = [sys.executable, "-m", "kclient.testing.chaos_member", "--bootstrap", self.bootstrap,
               "--topic", self.topic, "--group", self.group]
        for k, v in settings.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd

    def _start_member(self, slot: int) -> _Member:
        n = self.incarnations[slot]
        self.incarnations[slot] += 1
        name = f"m{slot}.{n}"
        member = _Member(name, self._member_cmd(name), self.workdir / f"{name}.log", self.history)
        self.members[slot] = member
        self.all_members.append(member)
        log.info("chaos: started member %s (pid %d)", name, member.proc.pid)
        return member

    def _hold(self, seconds: float) -> None:
        """A fault's own duration (not a wait for a condition)."""
        self._stop.wait(seconds)

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if predicate():
                    return True
            except Exception as exc:  # a broker going away mid-request: ask again
                log.debug("chaos: waiting for %s: %r", what, exc)
            if time.monotonic() >= deadline:
                log.warning("chaos: %s not reached within %.0f s", what, timeout)
                return False
            time.sleep(interval)   # the poll interval of a wait with a deadline

    def _fully_replicated(self) -> bool:
        if not all(n.running for n in self.cluster.nodes):
            return False
        want = len(self.cluster.nodes)
        topics = self.cluster.metadata([self.topic, "__consumer_offsets"])["topics"]
        for name in (self.topic, "__consumer_offsets"):
            topic = topics.get(name)
            if not topic or topic["error_code"] != 0 or not topic["partitions"]:
                return False
            for part in topic["partitions"].values():
                if part["leader_id"] < 0 or len(part["isr_nodes"]) < want:
                    return False
        return True

    def _coordinator(self) -> int:
        parts = self.cluster.metadata(["__consumer_offsets"])["topics"]["__consumer_offsets"]["partitions"]
        return self.cluster.leader_of("__consumer_offsets", group_coordinator_partition(self.group, len(parts)))

    def _sample(self) -> None:
        import psutil
        while not self._stop_sampling.wait(self.config.sample_interval_s):
            for member in list(self.members.values()):
                if not member.alive:
                    continue
                try:
                    proc = psutil.Process(member.proc.pid)
                    with proc.oneshot():
                        sample = ResourceSample(time.monotonic(), proc.memory_info().rss / 2**20,
                                                proc.num_fds(), proc.num_threads())
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                self.result.resources.setdefault(member.name, []).append(sample)

    # ------------------------------------------------------------------ faults
    def _fault(self, kind: str) -> bool:
        """Inject one fault; False if its precondition was not met (then nothing was done)."""
        cluster, rng = self.cluster, self.rng
        if kind in BROKER_FAULTS:
            if not self._wait(self._fully_replicated, self.config.replicated_timeout_s,
                              "every partition fully replicated before a broker fault"):
                return False
            if kind == "broker_restart":
                node = rng.choice([n.node_id for n in cluster.nodes])
                log.info("chaos: rolling restart of broker %d", node)
                cluster.stop_broker(node, timeout=30)
                cluster.start_broker(node)
            else:
                if kind == "leader_kill":
                    partition = rng.randrange(self.config.partitions)
                    node = cluster.leader_of(self.topic, partition)
                    log.info("chaos: SIGKILL of broker %d, leader of partition %d", node, partition)
                else:
                    node = self._coordinator()
                    log.info("chaos: SIGKILL of broker %d, coordinator of %s", node, self.group)
                cluster.kill_broker(node)
                self._hold(rng.uniform(1.0, 4.0))
                cluster.start_broker(node)
            return True
        if kind == "member_kill":
            slot = rng.choice(sorted(self.members))
            victim = self.members[slot]
            log.info("chaos: SIGKILL of member %s", victim.name)
            victim.kill()
            self._hold(rng.uniform(0.0, 2.0))
            self._start_member(slot)
            return True
        node = rng.choice(sorted(self.proxies))
        proxy = self.proxies[node]
        if kind == "proxy_reset":
            log.info("chaos: connection resets on the proxy of broker %d", node)
            proxy.reset()
            return True
        if kind == "proxy_latency":
            proxy.latency_ms = rng.randint(50, 500)
            log.info("chaos: %d ms latency on the proxy of broker %d", proxy.latency_ms, node)
        elif kind == "proxy_blackhole":
            log.info("chaos: blackhole on the proxy of broker %d", node)
            proxy.blackhole()
        elif kind == "proxy_slow_reads":
            proxy.bandwidth = rng.randint(10, 100) * 1024
            log.info("chaos: slow reads (%d B/s) on the proxy of broker %d", proxy.bandwidth, node)
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        try:
            # Up to 9 s: past the 6 s session of a member whose coordinator is behind this proxy,
            # so that fenced members (zombies) are part of the history too.
            self._hold(rng.uniform(2.0, 9.0) if kind == "proxy_blackhole" else rng.uniform(2.0, 5.0))
        finally:
            proxy.heal()
        return True

    def _inject(self, until: float) -> None:
        kinds = list(self.config.kinds)
        plan: list[str] = []
        cap = until + self.config.min_faults_grace_s

        def more() -> bool:
            now = time.monotonic()
            return now < until or (now < cap and sum(self.result.faults.values()) < self.config.min_faults)

        while more() and not self._stop.is_set():
            if not plan:          # every kind once per round, in a seeded order
                plan = kinds[:]
                self.rng.shuffle(plan)
            kind = plan.pop()
            if self._fault(kind):
                self.result.faults[kind] += 1
            else:
                self.result.skipped_faults[kind] += 1
            self._hold(self.rng.uniform(*self.config.gap_s))

    def _formed(self) -> bool:
        """Faults start once every partition has an owner and records flow (the group formed)."""
        return len(self.history.owner) == self.config.partitions and bool(self.history.deliveries)

    def _caught_up(self, producer: _Producer) -> bool:
        """Every acknowledged record was delivered."""
        with self.history.lock:
            delivered = self.history.delivered
            return all(key in delivered for key in list(producer.acked))

    def _behind(self, producer: _Producer) -> Counter:
        with self.history.lock:
            return Counter(p for p, o in producer.acked if (p, o) not in self.history.delivered)

    # ------------------------------------------------------------------ the run
    def run(self) -> ChaosResult:
        cfg, cluster, result = self.config, self.cluster, self.result
        started = time.monotonic()
        cluster.create_topic(self.topic, cfg.partitions, 3, configs={"min.insync.replicas": "2"})
        cluster.wait_for_topic(self.topic, cfg.partitions, timeout=60)
        producer = _Producer(self.bootstrap, self.topic, cfg.partitions, cfg.rate, self.client_settings)
        sampler = threading.Thread(target=self._sample, name="chaos-sampler", daemon=True)
        try:
            for slot in range(cfg.members):
                self._start_member(slot)
            producer.start()
            sampler.start()
            self._wait(self._formed, 60, "the group to form and deliver")
            self._inject(time.monotonic() + cfg.duration_s)
            self._quiet(producer)
        finally:
            self._stop.set()
            producer.stop_event.set()
            producer.join(150)
            for member in self.members.values():
                if member.alive:
                    member.kill()
            self._stop_sampling.set()
            if sampler.is_alive():
                sampler.join(10)
            for proxy in self.proxies.values():
                proxy.heal()
            for node in cluster.nodes:
                if not node.running:
                    cluster.start_broker(node.node_id)
            try:
                cluster.delete_topic(self.topic)
            except Exception as exc:
                log.debug("chaos: could not delete %s: %r", self.topic, exc)
        result.duration_s = time.monotonic() - started
        self._check(producer)
        return result

    def _quiet(self, producer: _Producer) -> None:
        cluster, result = self.cluster, self.result
        log.info("chaos: quiet period")
        for proxy in self.proxies.values():
            proxy.heal()
        for node in cluster.nodes:
            if not node.running:
                cluster.start_broker(node.node_id)
        for slot, member in sorted(self.members.items()):
            if not member.alive and not member.killed:
                result.member_exits.append(f"{member.name} (exit {member.proc.returncode})")
                log.error("chaos: member %s exited by itself (code %s); log %s", member.name,
                          member.proc.returncode, member.log_path)
                self._start_member(slot)
        producer.stop_event.set()
        producer.join(150)
        if producer.is_alive():
            log.error("chaos: the producer did not stop within 150 s")

        if not self._settle(producer):
            result.undelivered_at_deadline = dict(sorted(self._behind(producer).items()))
            log.error("chaos: undelivered records by partition %s; owners %s", result.undelivered_at_deadline,
                      dict(sorted(self.history.owner.items())))
        for member in list(self.members.values()):
            if member.alive and not member.terminate(30):
                result.stuck_on_close.append(member.name)
                log.error("chaos: member %s did not stop within 30 s of SIGTERM; log %s", member.name,
                          member.log_path)
        for member in self.all_members:
            if not member.killed and not member.stop_requested and member.proc.poll() is not None:
                entry = f"{member.name} (exit {member.proc.returncode})"
                if entry not in result.member_exits:
                    result.member_exits.append(entry)

    def _settle(self, producer: _Producer) -> bool:
        """The quiet period's wait: every acknowledged record delivered (or, for share groups,
        in a final state) within ``quiet_timeout_s``."""
        return self._wait(lambda: self._caught_up(producer), self.config.quiet_timeout_s,
                          "every acknowledged record delivered", 0.5)

    def _check(self, producer: _Producer) -> None:
        result, history, topic = self.result, self.history, self.topic
        acked = dict(producer.acked)
        result.produced, result.acknowledged, result.send_failures = producer.produced, len(acked), producer.failures
        with history.lock:
            rows = sorted(history.deliveries)
            commits = list(history.commits)
            result.fenced = sorted(history.fenced)
            result.commit_failures, result.poll_errors = history.commit_failures, history.poll_errors
        result.killed = sorted(m.name for m in self.all_members if m.killed)
        result.deliveries = len(rows)
        result.mismatched = sum(1 for _, _, _, p, o, v in rows if (p, o) in acked and acked[(p, o)] != v)
        result.report = check(
            ((topic, p, o) for p, o in acked),
            (Delivery(m, g, topic, p, o, t) for t, m, g, p, o, _ in rows),
            (Commit(m, g, topic, p, o, t) for m, g, p, o, t in commits),
            crashed=set(result.killed) | set(result.fenced))
        result.resource_violations = resource_violations(result.resources)
        flagged = sorted({(p, o) for _, p, o in result.report.lost + result.report.duplicated}
                         | {(p, o) for _, p, o, _ in result.report.split_brain})[:10]
        for p, o in flagged:
            seen = [f"{m} gen {g} at {t:.3f}" for t, m, g, rp, ro, _ in rows if (rp, ro) == (p, o)]
            members = {m for t, m, g, rp, ro, _ in rows if (rp, ro) == (p, o)}
            done = [f"{m} gen {g} -> {co} at {t:.3f}" for m, g, cp, co, t in commits
                    if cp == p and m in members and co > o - 50]
            result.explain.append(f"partition {p} offset {o}: delivered to {seen or 'nobody'}; "
                                  f"nearby commits of those members {done[:12]}")
        log.info("chaos: %s", {**result.criteria(), "acknowledged": result.acknowledged,
                               "deliveries": result.deliveries, "faults": dict(result.faults)})


def resource_violations(resources: dict[str, list[ResourceSample]],
                        bounds: dict[str, float] = RESOURCE_BOUNDS) -> list[str]:
    out = []
    for name, samples in sorted(resources.items()):
        if not samples:
            continue
        peak = ResourceSample(0, max(s.rss_mb for s in samples), max(s.fds for s in samples),
                              max(s.threads for s in samples))
        if peak.rss_mb > bounds["rss_mb_max"]:
            out.append(f"{name}: RSS {peak.rss_mb:.0f} MB > {bounds['rss_mb_max']:.0f} MB")
        if peak.fds > bounds["fds_max"]:
            out.append(f"{name}: {peak.fds} open fds > {bounds['fds_max']:.0f}")
        if peak.threads > bounds["threads_max"]:
            out.append(f"{name}: {peak.threads} threads > {bounds['threads_max']:.0f}")
        if samples[-1].t - samples[0].t < bounds["growth_window_s"] or len(samples) < 8:
            continue
        q = len(samples) // 4
        second, last = samples[q:2 * q], samples[-q:]

        def peak_of(part: list[ResourceSample], key: str) -> float:
            return max(getattr(s, key) for s in part)

        if peak_of(last, "rss_mb") > peak_of(second, "rss_mb") * bounds["rss_growth_factor"] + bounds["rss_growth_mb"]:
            out.append(f"{name}: RSS grew from {peak_of(second, 'rss_mb'):.0f} to {peak_of(last, 'rss_mb'):.0f} MB")
        if peak_of(last, "fds") > peak_of(second, "fds") + bounds["fds_growth"]:
            out.append(f"{name}: open fds grew from {peak_of(second, 'fds'):.0f} to {peak_of(last, 'fds'):.0f}")
        if peak_of(last, "threads") > peak_of(second, "threads") + bounds["threads_growth"]:
            out.append(f"{name}: threads grew from {peak_of(second, 'threads'):.0f} "
                       f"to {peak_of(last, 'threads'):.0f}")
    return out
