"""The asyncio drivers' loop-lag sampler (bench/drivers/_loop_lag.py): the largest delay and
what the loop thread did meanwhile, on a loop kept busy or blocked here on purpose."""
from __future__ import annotations

import asyncio
import gc
import time
from types import SimpleNamespace

from bench.drivers import _loop_lag as loop_lag


def sample(hold) -> dict:
    """The sampler's figures for a loop that runs hold() once, between two short sleeps."""
    async def main() -> dict:
        lag = loop_lag.LoopLag()
        lag.start()
        await asyncio.sleep(0.005)
        hold()
        await asyncio.sleep(0.005)
        tally = SimpleNamespace(extra_results={})
        await lag.stop(tally)
        assert lag._on_gc not in gc.callbacks
        return tally.extra_results

    return asyncio.run(main())


def test_a_busy_loop_counts_as_running_and_its_collection_is_seen():
    def busy() -> None:
        gc.collect()
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:
            pass

    out = sample(busy)
    assert out["max_loop_lag_ms"] >= 25
    parts = out["max_loop_lag_parts"]
    assert parts["late_ms"] == out["max_loop_lag_ms"] and parts["gc_ms"] > 0
    assert out["loop_lag_over_8ms"]["count"] >= 1
    if "cpu_ms" in parts:     # the kernel reports per-thread scheduling (Linux)
        assert parts["cpu_ms"] + parts["runqueue_ms"] >= 25
        # Mostly running: the window also spans the loop's own short sleeps around the hold,
        # whose wake-ups come late on a loaded machine (10.2 ms blocked seen there), so the
        # bound is the running time, not a fixed number of milliseconds.
        assert parts["blocked_ms"] < parts["cpu_ms"] + parts["runqueue_ms"]


def test_a_loop_blocked_in_a_call_counts_as_blocked():
    out = sample(lambda: time.sleep(0.03))
    assert out["max_loop_lag_ms"] >= 25
    parts = out["max_loop_lag_parts"]
    if "cpu_ms" in parts:
        assert parts["blocked_ms"] >= 25
        assert parts["cpu_ms"] < 10
