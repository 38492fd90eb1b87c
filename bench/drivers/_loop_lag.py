"""The event loop's lag during an asyncio driver's run: a task that sleeps 1 ms over and over
and records how much later than asked it woke up. The largest delay is reported as
``max_loop_lag_ms`` (how long the loop was kept from other work, e.g. a web request)."""
from __future__ import annotations

import asyncio
import time


class LoopLag:
    def __init__(self) -> None:
        self.max_s = 0.0
        self._running = False
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._running = True
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def _sample(self) -> None:
        perf, sleep = time.perf_counter, asyncio.sleep
        while self._running:
            t0 = perf()
            await sleep(0.001)
            late = perf() - t0 - 0.001
            if late > self.max_s:
                self.max_s = late

    async def stop(self, tally) -> None:
        """End sampling; the result goes into the driver's report line."""
        self._running = False
        if self._task is not None:
            await self._task
        tally.extra_results["max_loop_lag_ms"] = round(self.max_s * 1000, 2)
