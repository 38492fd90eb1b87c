"""Offsets a share consumer handed out in columnar form, kept as ranges per partition.

A columnar poll hands out whole runs of offsets; tracking them one by one would make a Python
object per record, which the columnar poll exists to avoid. ``RangeSet`` is one partition's
offsets as sorted, disjoint (first, last) ranges, with the operations the consumer's checks
need: is a range wholly inside, does it touch any, take it out.
"""
from __future__ import annotations

import bisect
from typing import Iterator

__all__ = ["RangeSet"]

_AFTER_ANY = 2**63


class RangeSet:
    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: list[list[int]] = []      # sorted, disjoint, not adjacent: [first, last]

    def add(self, first: int, last: int) -> None:
        runs = self._runs
        k = bisect.bisect_left(runs, [first, first])
        # merge with the run before if it touches
        if k > 0 and runs[k - 1][1] + 1 >= first:
            k -= 1
            first = runs[k][0]
            last = max(last, runs[k][1])
            del runs[k]
        while k < len(runs) and runs[k][0] <= last + 1:
            last = max(last, runs[k][1])
            del runs[k]
        runs.insert(k, [first, last])

    def _index(self, offset: int) -> int:
        """Index of the run that could hold ``offset`` (the last starting at or before it), or -1."""
        return bisect.bisect_right(self._runs, [offset, _AFTER_ANY]) - 1

    def covers(self, first: int, last: int) -> bool:
        k = self._index(first)
        return k >= 0 and self._runs[k][1] >= last

    def touches(self, first: int, last: int) -> bool:
        k = self._index(last)
        return k >= 0 and self._runs[k][1] >= first

    def remove(self, first: int, last: int) -> None:
        kept: list[list[int]] = []
        for f, la in self._runs:
            if la < first or f > last:
                kept.append([f, la])
                continue
            if f < first:
                kept.append([f, first - 1])
            if la > last:
                kept.append([last + 1, la])
        self._runs = kept

    def __len__(self) -> int:
        return sum(la - f + 1 for f, la in self._runs)

    def __bool__(self) -> bool:
        return bool(self._runs)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter([(f, la) for f, la in self._runs])
