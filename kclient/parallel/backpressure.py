"""Backpressure: which partitions to pause so memory stays bounded whatever the handlers' speed.

Two bounds, each with hysteresis (pause at the bound, resume once below ``low_water`` of it,
so fetching does not flap on every record):

- queued records / bytes, over all partitions: every assigned partition is paused;
- records of one partition held back from the commit (queued, running, or completed behind a
  slower record): that partition alone is paused. Without this a single stuck record lets its
  partition's finished offsets pile up in the offset tracker without limit.

``poll_limit`` caps each poll at the records still allowed, so a poll cannot overshoot the
record bound (the byte bound can be exceeded by one poll's records: sizes are known only
after fetching).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["Backpressure"]


class Backpressure:
    """Pause decisions from the current numbers (state: which bounds are tripped)."""

    def __init__(self, max_queued_records: int, max_queued_bytes: int, max_uncommitted_records: int,
                 low_water: float):
        self.max_records = max_queued_records
        self.max_bytes = max_queued_bytes
        self.max_uncommitted = max_uncommitted_records
        self.low_water = low_water
        self.global_paused = False
        self._held: set = set()   # partitions paused for their own backlog

    def update(self, queued: int, queued_bytes: int, uncommitted: Mapping) -> None:
        """Re-evaluate the bounds: ``uncommitted`` maps partition -> records held back."""
        if self.global_paused:
            if queued <= self.max_records * self.low_water and queued_bytes <= self.max_bytes * self.low_water:
                self.global_paused = False
        elif queued >= self.max_records or queued_bytes >= self.max_bytes:
            self.global_paused = True
        low = self.max_uncommitted * self.low_water
        for tp, n in uncommitted.items():
            if tp in self._held:
                if n <= low:
                    self._held.discard(tp)
            elif n >= self.max_uncommitted:
                self._held.add(tp)
        self._held &= set(uncommitted)

    def paused(self, assigned: Iterable) -> set:
        """The partitions that should not be fetched now."""
        assigned = set(assigned)
        return assigned if self.global_paused else self._held & assigned

    def forget(self, tps: Iterable) -> None:
        self._held.difference_update(tps)

    def poll_limit(self, queued: int, max_poll_records: int) -> int:
        """How many records the next poll may return (at least 1: poll() needs a positive
        max_records; every partition is paused when no room is left)."""
        return max(1, min(max_poll_records, self.max_records - queued))
