"""The event loop's lag during an asyncio driver's run: a task that sleeps 1 ms over and over
and records how much later than asked it woke up. The largest delay is reported as
``max_loop_lag_ms`` (how long the loop was kept from other work, e.g. a web request).

Where the kernel reports a thread's scheduling (Linux's /proc/<pid>/task/<tid>/schedstat),
the largest delay is also split by what the loop thread did meanwhile, as
``max_loop_lag_parts``: ``runqueue_ms`` (ready to run, waiting for a CPU: the machine's
other work, the broker, the client's own threads), ``cpu_ms`` (running: callbacks, the
application's work, collections it set off), ``blocked_ms`` (neither: asleep in the selector,
or waiting for the GIL another thread holds) and ``gc_ms`` (collections in any thread); the
first three add up to the delay plus the 1 ms asked for.
``loop_lag_over_8ms`` counts the delays above 8 ms and adds up the same parts over them.
"""
from __future__ import annotations

import asyncio
import gc
import os
import threading
import time

SPIKE_S = 0.008


class _Schedstat:
    """The calling thread's time on a CPU and waiting for one (ns), or None where unknown."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
        except (OSError, AttributeError):
            self._fd = None

    def read(self) -> tuple[int, int] | None:
        if self._fd is None:
            return None
        fields = os.pread(self._fd, 64, 0).split()
        return int(fields[0]), int(fields[1])

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class LoopLag:
    def __init__(self) -> None:
        self.max_s = 0.0
        self.max_parts: dict | None = None
        self.spikes = {"count": 0, "runqueue_ms": 0.0, "cpu_ms": 0.0, "blocked_ms": 0.0, "gc_ms": 0.0}
        self._running = False
        self._task: asyncio.Task | None = None
        self._gc_s = 0.0            # time in collections so far, any thread
        self._gc_started = 0.0

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self._gc_s += time.perf_counter() - self._gc_started

    def start(self) -> None:
        self._running = True
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def _sample(self) -> None:
        perf, sleep = time.perf_counter, asyncio.sleep
        sched = _Schedstat()
        try:
            while self._running:
                before = sched.read()
                gc0 = self._gc_s
                t0 = perf()
                await sleep(0.001)
                late = perf() - t0 - 0.001
                if late > self.max_s or late > SPIKE_S:
                    self._account(late, before, sched.read(), self._gc_s - gc0)
        finally:
            sched.close()

    def _account(self, late: float, before: tuple[int, int] | None, after: tuple[int, int] | None,
                 gc_s: float) -> None:
        parts: dict = {"late_ms": round(late * 1000, 2), "gc_ms": round(gc_s * 1000, 2)}
        if before is not None and after is not None:
            cpu_ms = (after[0] - before[0]) / 1e6
            runqueue_ms = (after[1] - before[1]) / 1e6
            parts.update(runqueue_ms=round(runqueue_ms, 2), cpu_ms=round(cpu_ms, 2),
                         blocked_ms=round(max(late * 1000 + 1 - cpu_ms - runqueue_ms, 0.0), 2))
        if late > self.max_s:
            self.max_s = late
            self.max_parts = parts
        if late > SPIKE_S:
            spikes = self.spikes
            spikes["count"] += 1
            for key in ("runqueue_ms", "cpu_ms", "blocked_ms", "gc_ms"):
                spikes[key] = round(spikes[key] + parts.get(key, 0.0), 2)

    async def stop(self, tally) -> None:
        """End sampling; the result goes into the driver's report line."""
        self._running = False
        if self._task is not None:
            await self._task
        try:
            gc.callbacks.remove(self._on_gc)
        except ValueError:
            pass
        tally.extra_results["max_loop_lag_ms"] = round(self.max_s * 1000, 2)
        if self.max_parts is not None:
            tally.extra_results["max_loop_lag_parts"] = self.max_parts
        tally.extra_results["loop_lag_over_8ms"] = self.spikes
