"""Time for every timing decision, injected so that tests use a fake clock.

All times are integer milliseconds on a monotonic clock (never wall time: a wall-clock jump
must not expire a session). ``FakeClock`` lets unit tests move time by hand.
"""
from __future__ import annotations

import threading
import time


class Clock:
    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


SYSTEM_CLOCK = Clock()


class FakeClock(Clock):
    """A clock that only moves when told to. Thread-safe."""

    def __init__(self, start_ms: int = 1_000_000, wall_offset_ms: int = 1_700_000_000_000):
        self._now = start_ms
        self._wall_offset = wall_offset_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def wall_ms(self) -> int:
        with self._lock:
            return self._now + self._wall_offset

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError("a clock does not go backwards")
        with self._lock:
            self._now += ms
            return self._now
