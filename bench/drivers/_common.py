"""What every driver child shares: the job description, the data format, the tally.

Data format. Record ``i`` of a benchmark topic (``i`` in 0..N-1) goes to partition
``i % P`` with a value of ``record_size`` bytes: the first 8 bytes are ``i`` big-endian,
the rest is filler text. With an idempotent producer, partition ``p`` holds records
``p, p+P, p+2P, ...`` at offsets 0, 1, 2, ..., so a record at ``offset`` of partition ``p``
must carry ``seq = offset * P + p``. Drivers check that on the last record of every batch
they get (a per-batch spot check: a per-record check would add the same cost to every
per-record client and hide their differences) and count every record; a run whose count is
not exactly N is invalid and reports no throughput.

Measurement window. ``Tally.start()`` is called just before the client object is built;
the window ends when the N-th record has been counted (closing the client is outside it).
CPU is the OS's account of the whole child process (psutil cpu_times, user + system, all
threads), so library threads (librdkafka's, heartbeat threads) are included.
"""
from __future__ import annotations

import dataclasses
import os
import random
import resource
import struct
import sys
import time

import psutil

#: The fetch settings of the tuned peers (the Java consumer's, in Kafka's names; confluent-kafka
#: tuned sets the same in librdkafka's): 10 MiB per partition, 50 MiB per fetch, a 10 ms fetch
#: wait, the OS's socket buffer instead of 64 KiB. The kclient drivers run with them too, so the
#: clients are compared on equal settings; the -defaults drivers run kclient as installed.
PEER_FETCH_SETTINGS: dict[str, int] = {
    "max.partition.fetch.bytes": 10 * 1024 * 1024,
    "fetch.max.bytes": 50 * 1024 * 1024,
    "fetch.max.wait.ms": 10,
    "receive.buffer.bytes": -1,
}
#: Records per poll of the per-record peers (Java's max.poll.records): the default 500 would
#: make them pay a poll per 500 records.
PEER_MAX_POLL_RECORDS = 10_000

SEQ = struct.Struct(">q")
SEQ_LEN = SEQ.size
MIN_RECORD_SIZE = SEQ_LEN


@dataclasses.dataclass
class Job:
    """One driver run, passed to the child process as JSON."""
    driver: str
    bootstrap: str
    topic: str
    partitions: int
    records: int                     # N, all partitions together
    record_size: int
    mode: str = "assign"             # "assign": everything from offset 0; "group": first record only
    group_id: str | None = None
    # Group mode only. Tansu completes a first join after about half the session timeout,
    # so every client gets the same value (their defaults differ: 10 s to 45 s).
    session_timeout_ms: int = 10_000
    timeout_s: float = 120.0
    broker_pid: int | None = None    # embedded broker: its CPU is sampled over the same window
    progress: bool = True
    extra: dict = dataclasses.field(default_factory=dict)

    def expected_per_partition(self) -> list[int]:
        base, rest = divmod(self.records, self.partitions)
        return [base + (1 if p < rest else 0) for p in range(self.partitions)]


def filler(record_size: int, count: int = 1024, seed: int = 7) -> list[bytes]:
    """``count`` distinct text-like fillers of ``record_size - 8`` bytes (compressible like
    ordinary text, not like a run of one byte)."""
    words = [b"alpha", b"beta", b"gamma", b"delta", b"kafka", b"record", b"value", b"stream",
             b"offset", b"batch", b"12345", b"67890", b"topic", b"consumer"]
    rng = random.Random(seed)
    size = record_size - SEQ_LEN
    out = []
    for _ in range(count):
        chunks, n = [], 0
        while n < size:
            w = rng.choice(words)
            chunks.append(w)
            n += len(w) + 1
        out.append(b" ".join(chunks)[:size].ljust(size, b"."))
    return out


def write_sequenced(producer, topic: str, records: int, partitions: int, record_size: int, errors: list) -> None:
    """Produce ``records`` values of ``record_size`` B round-robin over ``partitions`` with a
    confluent-kafka ``producer`` (idempotent: each partition holds its records in sequence
    order), each value starting with its sequence number, and flush. Raises if a record was not
    delivered or ``errors`` (filled by the producer's delivery callback) is not empty."""
    from confluent_kafka import KafkaException

    fill = filler(record_size)
    nfill, pack, send = len(fill), SEQ.pack, producer.produce
    for i in range(records):
        value = pack(i) + fill[i % nfill]
        while True:
            try:
                send(topic, value, partition=i % partitions)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.05)
        if i & 0xFFFF == 0:
            producer.poll(0)
    left = producer.flush(300)
    if left or errors:
        raise KafkaException(f"producing {topic}: {left} records undelivered, {len(errors)} errors "
                             f"(first: {errors[0] if errors else None})")


def peak_rss_bytes() -> int:
    """Peak resident set of this process (Linux VmHWM). Not ru_maxrss: that one carries the
    parent's peak across fork+exec, so every child would report the runner's."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def fetch_figures(consumer) -> dict:
    """kclient's Fetch answers over a run, from its own metrics, read after the measurement
    window: how many there were, their mean size and mean round trip, to set beside the raw
    loop's responses (fewer, larger answers cost the broker less per record)."""
    m = consumer.metrics().get("consumer-fetch-manager-metrics", {})
    return {"fetches": int(m.get("fetch-total", 0)), "fetch_size_avg": int(m.get("fetch-size-avg", 0)),
            "fetch_latency_avg_ms": round(float(m.get("fetch-latency-avg", 0.0)), 2)}


class InvalidRun(Exception):
    """The driver saw wrong data (bad sequence number, too many records, an error)."""


def _busy(t) -> float:
    """CPU seconds the whole machine spent on anything but idling (psutil.cpu_times())."""
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


class Tally:
    """Counts records, spot-checks sequence numbers and owns the measurement window."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.target = job.records if job.mode == "assign" else 1
        self.count = 0
        self.value_bytes = 0
        self.batches = 0
        self.spot_checks = 0
        self.proc = psutil.Process()
        self.broker = None
        if job.broker_pid:
            try:
                self.broker = psutil.Process(job.broker_pid)
            except psutil.Error:
                self.broker = None
        self.t_start = self.t_first = self.t_end = None
        self.cpu_start = self.cpu_end = None
        self.broker_cpu_start = self.broker_cpu_end = None
        self.sys_cpu_start = self.sys_cpu_end = None
        self.rss_before = self.proc.memory_info().rss
        self.done = False
        self.peak_rss = None
        self.first_batch = 0
        # Checks that need not be timed (nor profiled): run by the child after consume().
        self.after_window: list = []
        # Figures a driver adds to its result (e.g. max_loop_lag_ms of the asyncio drivers).
        self.extra_results: dict = {}
        self._next_progress = 0.0
        self._partitions = job.partitions

    # -------------------------------------------------------------- window
    def start(self) -> None:
        self.sys_cpu_start = psutil.cpu_times()
        self.broker_cpu_start = self._broker_cpu()
        self.cpu_start = self.proc.cpu_times()
        self.t_start = time.perf_counter()
        self._next_progress = self.t_start + 1.0

    def _broker_cpu(self):
        if self.broker is None:
            return None
        try:
            t = self.broker.cpu_times()
            return t.user + t.system
        except psutil.Error:
            return None

    def _finish(self, now: float) -> None:
        self.t_end = now
        self.cpu_end = self.proc.cpu_times()
        self.broker_cpu_end = self._broker_cpu()
        self.sys_cpu_end = psutil.cpu_times()
        # Peak memory of the measured work, before any after-window checks or close.
        self.peak_rss = peak_rss_bytes()
        self.done = True

    # -------------------------------------------------------------- counting
    def add(self, n: int, nbytes: int) -> bool:
        """Count one batch of ``n`` records carrying ``nbytes`` of values; True when done."""
        if n <= 0:
            return self.done
        now = time.perf_counter()
        if self.t_first is None:
            self.t_first = now
            self.first_batch = n
        self.count += n
        self.value_bytes += nbytes
        self.batches += 1
        if self.count > self.target and self.job.mode == "assign":
            raise InvalidRun(f"consumed {self.count} records, more than the {self.target} produced")
        if self.count >= self.target and not self.done:
            self._finish(now)
        elif self.job.progress and now >= self._next_progress:
            self._next_progress = now + 1.0
            rate = self.count / (now - self.t_start)
            print(f"    {self.job.driver}: {self.count:,}/{self.target:,} records, {rate:,.0f}/s",
                  file=sys.stderr, flush=True)
        return self.done

    def check(self, partition: int, offset: int, value) -> None:
        """Spot check: the record at ``offset`` of ``partition`` must carry seq offset*P+partition."""
        if value is None or len(value) < SEQ_LEN:
            raise InvalidRun(f"partition {partition} offset {offset}: value {value!r} carries no sequence number")
        seq = SEQ.unpack_from(value, 0)[0]
        want = offset * self._partitions + partition
        if seq != want:
            raise InvalidRun(f"partition {partition} offset {offset}: sequence {seq}, expected {want}")
        self.spot_checks += 1

    def timed_out(self) -> bool:
        return time.perf_counter() - self.t_start > self.job.timeout_s

    # -------------------------------------------------------------- result
    def result(self) -> dict:
        out = {
            "count": self.count, "target": self.target, "value_bytes": self.value_bytes,
            "batches": self.batches, "spot_checks": self.spot_checks, "complete": self.done,
            "rss_before_bytes": self.rss_before,
            "peak_rss_bytes": self.peak_rss or peak_rss_bytes(),
            "pid": os.getpid(),
        }
        if self.t_first is not None:
            out["first_record_s"] = self.t_first - self.t_start
        if self.done:
            wall = self.t_end - self.t_start
            cpu = (self.cpu_end.user - self.cpu_start.user) + (self.cpu_end.system - self.cpu_start.system)
            out.update(wall_s=wall, cpu_s=cpu,
                       cpu_user_s=self.cpu_end.user - self.cpu_start.user,
                       cpu_system_s=self.cpu_end.system - self.cpu_start.system)
            if self.t_first is not None:
                # Records after the first batch, over the time after it arrived: the rate once
                # the client is running (startup and the first answer excluded).
                out["steady_wall_s"] = self.t_end - self.t_first
                out["first_batch_records"] = self.first_batch
            if self.broker_cpu_start is not None and self.broker_cpu_end is not None:
                out["broker_cpu_s"] = self.broker_cpu_end - self.broker_cpu_start
            s0, s1 = self.sys_cpu_start, self.sys_cpu_end
            out["machine_busy_cpu_s"] = _busy(s1) - _busy(s0)
        return out
