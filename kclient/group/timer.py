"""A deadline on the injected clock, for the group layer's blocking calls."""
from __future__ import annotations

from kclient.clock import Clock

__all__ = ["Timer"]


class Timer:
    """A deadline on the injected clock; ``timeout_ms=None`` never expires."""

    __slots__ = ("clock", "deadline")

    def __init__(self, clock: Clock, timeout_ms: int | None):
        self.clock = clock
        self.deadline = None if timeout_ms is None else clock.now_ms() + max(int(timeout_ms), 0)

    def remaining_ms(self) -> int | None:
        return None if self.deadline is None else max(self.deadline - self.clock.now_ms(), 0)

    def expired(self) -> bool:
        return self.deadline is not None and self.clock.now_ms() >= self.deadline
