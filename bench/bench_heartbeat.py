"""Benchmarks: kcore.timers.Heartbeat vs kafka-python's kafka.coordinator.heartbeat.Heartbeat.

Run:  python bench/bench_heartbeat.py         (pytest-benchmark + an ops/s and ratio table)

kafka-python's methods read time.monotonic() (float seconds) themselves; ours take an int
``now_ms``. Two kcore variants are measured: with a precomputed now (how the heartbeat
loop uses it: one clock read per iteration) and with a clock read per call (like for like).
Each benchmarked call performs a batch of N operations.
"""
from __future__ import annotations

import sys
import time

import pytest

if __name__ == "__main__":     # run as a script: make the in-place kcore importable
    sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.dirname(
        __import__("os").path.abspath(__file__))))
from kafka.coordinator.heartbeat import Heartbeat as KafkaPythonHeartbeat

from kcore.timers import Heartbeat

N = 1000
CFG = dict(session_timeout_ms=45_000, heartbeat_interval_ms=3_000, max_poll_interval_ms=300_000,
           retry_backoff_ms=100)


def now_ms():
    return time.monotonic_ns() // 1_000_000


def ours():
    hb = Heartbeat(CFG["session_timeout_ms"], CFG["heartbeat_interval_ms"],
                   CFG["max_poll_interval_ms"], CFG["retry_backoff_ms"], now_ms())
    hb.sent_heartbeat(now_ms())
    hb.received_heartbeat(now_ms())
    return hb


def theirs():
    hb = KafkaPythonHeartbeat(group_id="bench", **CFG)
    hb.reset_timeouts()
    hb.sent_heartbeat()
    hb.received_heartbeat()
    return hb


def mark(benchmark, impl, ops):
    benchmark.extra_info["impl"] = impl
    benchmark.extra_info["ops_per_call"] = ops


# ----------------------------------------------------------------- should_heartbeat
def _should_ours(hb, now):
    f = hb.should_heartbeat
    for _ in range(N):
        f(now)


def _should_ours_clock(hb):
    f = hb.should_heartbeat
    for _ in range(N):
        f(time.monotonic_ns() // 1_000_000)


def _should_theirs(hb):
    f = hb.should_heartbeat
    for _ in range(N):
        f()


@pytest.mark.benchmark(group="should_heartbeat")
def test_should_heartbeat_kcore(benchmark):
    mark(benchmark, "kcore", N)
    benchmark(_should_ours, ours(), now_ms())


@pytest.mark.benchmark(group="should_heartbeat (+clock read)")
def test_should_heartbeat_kcore_clock(benchmark):
    mark(benchmark, "kcore", N)
    benchmark(_should_ours_clock, ours())


@pytest.mark.benchmark(group="should_heartbeat")
def test_should_heartbeat_kafka_python(benchmark):
    mark(benchmark, "baseline", N)
    benchmark(_should_theirs, theirs())


# ----------------------------------------------------------------- time_to_next_heartbeat
def _ttn_ours(hb, now):
    f = hb.time_to_next_heartbeat
    for _ in range(N):
        f(now)


def _ttn_ours_clock(hb):
    f = hb.time_to_next_heartbeat
    for _ in range(N):
        f(time.monotonic_ns() // 1_000_000)


def _ttn_theirs(hb):
    f = hb.time_to_next_heartbeat
    for _ in range(N):
        f()


@pytest.mark.benchmark(group="time_to_next_heartbeat")
def test_ttn_kcore(benchmark):
    mark(benchmark, "kcore", N)
    benchmark(_ttn_ours, ours(), now_ms())


@pytest.mark.benchmark(group="time_to_next_heartbeat (+clock read)")
def test_ttn_kcore_clock(benchmark):
    mark(benchmark, "kcore", N)
    benchmark(_ttn_ours_clock, ours())


@pytest.mark.benchmark(group="time_to_next_heartbeat")
def test_ttn_kafka_python(benchmark):
    mark(benchmark, "baseline", N)
    benchmark(_ttn_theirs, theirs())


# ----------------------------------------------------------------- one heartbeat-loop tick
def _tick_ours(hb):
    # mechanisms §2 steps 4-6 with one clock read per iteration
    for _ in range(N):
        now = time.monotonic_ns() // 1_000_000
        if hb.session_timeout_expired(now) or hb.poll_timeout_expired(now):
            raise AssertionError
        if not hb.should_heartbeat(now):
            hb.next_wakeup_ms(now)


def _tick_theirs(hb):
    # kafka-python has no next-wakeup query; its loop asks time_to_next_heartbeat
    for _ in range(N):
        if hb.session_timeout_expired() or hb.poll_timeout_expired():
            raise AssertionError
        if not hb.should_heartbeat():
            hb.time_to_next_heartbeat()


@pytest.mark.benchmark(group="heartbeat-loop tick (4 queries + clock)")
def test_tick_kcore(benchmark):
    mark(benchmark, "kcore", N)
    benchmark(_tick_ours, ours())


@pytest.mark.benchmark(group="heartbeat-loop tick (4 queries + clock)")
def test_tick_kafka_python(benchmark):
    mark(benchmark, "baseline", N)
    benchmark(_tick_theirs, theirs())


# ----------------------------------------------------------------- report
def report(json_path):
    import json
    data = json.load(open(json_path))
    rows = {}
    for b in data["benchmarks"]:
        ops = b["extra_info"]["ops_per_call"] / b["stats"]["mean"]
        rows.setdefault(b["group"], {})[b["extra_info"]["impl"]] = ops
    base = {g.split(" (")[0]: r["baseline"] for g, r in rows.items() if "baseline" in r}
    print(f"\n{'group':42} {'kcore ops/s':>14} {'kafka-python ops/s':>19} {'ratio':>7}")
    for g, r in rows.items():
        b = base[g.split(" (")[0]]
        print(f"{g:42} {r['kcore']:14,.0f} {b:19,.0f} {r['kcore'] / b:6.2f}x")


if __name__ == "__main__":
    import os
    import tempfile
    out = os.path.join(tempfile.mkdtemp(), "bench.json")
    rc = pytest.main([__file__, "--benchmark-only", f"--benchmark-json={out}", "-q",
                      "-p", "no:cacheprovider", *sys.argv[1:]])
    if rc == 0:
        report(out)
    sys.exit(rc)
