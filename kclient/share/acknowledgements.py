"""Acknowledgement types and their wire form (AcknowledgementBatches of ShareFetch and
ShareAcknowledge).

Each acquired record ends in one acknowledgement: ACCEPT (processed), RELEASE (deliver again,
to this member or another, with its delivery count one higher), REJECT (never deliver again),
or RENEW (keep the lock: the record stays with this member for another lock duration; KIP-1222,
ShareFetch / ShareAcknowledge v2). GAP marks an acquired offset that holds no record (a
compacted one, a transaction marker): the client acknowledges it so the broker can move on.

``PendingAcks`` holds one partition's acknowledgements not sent yet: single offsets (a record
at a time) and ranges of offsets (a columnar batch at a time), so acknowledging a million
records costs one entry, not a million. ``OffsetRanges`` is the set of offsets an answer
covered, kept as ranges for the same reason.
"""
from __future__ import annotations

import bisect
import enum
from collections.abc import Set
from typing import Callable, Iterable, Iterator, Mapping, Sequence

__all__ = ["AcknowledgeType", "GAP", "acknowledgement_batches", "PendingAcks", "OffsetRanges"]

#: An acquired offset without a record.
GAP = 0


class AcknowledgeType(enum.IntEnum):
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


def acknowledgement_batches(acks: Mapping[int, int]) -> list[dict]:
    """``{offset: type}`` -> AcknowledgementBatch dicts: runs of consecutive offsets with one
    type each (one type for a whole range is what the broker reads fastest)."""
    out: list[dict] = []
    first = last = kind = None
    for offset in sorted(acks):
        t = int(acks[offset])
        if first is not None and last is not None and offset == last + 1 and t == kind:
            last = offset
            continue
        if first is not None:
            out.append({"first_offset": first, "last_offset": last, "acknowledge_types": [kind]})
        first = last = offset
        kind = t
    if first is not None:
        out.append({"first_offset": first, "last_offset": last, "acknowledge_types": [kind]})
    return out


def offsets_of(batches: Iterable[Mapping]) -> list[int]:
    """The offsets an AcknowledgementBatch list covers (for reporting results per offset)."""
    return [o for b in batches for o in range(b["first_offset"], b["last_offset"] + 1)]


def _batches_of_runs(runs: Iterable[tuple[int, int, int]]) -> list[dict]:
    """Sorted, disjoint (first, last, type) runs -> AcknowledgementBatch dicts, adjacent runs
    of one type merged."""
    out: list[dict] = []
    for first, last, kind in runs:
        if out and out[-1]["last_offset"] + 1 == first and out[-1]["acknowledge_types"][0] == kind:
            out[-1]["last_offset"] = last
        else:
            out.append({"first_offset": first, "last_offset": last, "acknowledge_types": [kind]})
    return out


class OffsetRanges(Set):
    """A set of offsets kept as sorted, disjoint (first, last) ranges."""

    __slots__ = ("_runs", "_starts", "_n")

    def __init__(self, runs: Iterable[tuple[int, int]] = ()):
        merged: list[tuple[int, int]] = []
        for first, last in sorted(runs):
            if merged and first <= merged[-1][1] + 1:
                if last > merged[-1][1]:
                    merged[-1] = (merged[-1][0], last)
            else:
                merged.append((first, last))
        self._runs = merged
        self._starts = [f for f, _ in merged]
        self._n = sum(last - first + 1 for first, last in merged)

    @property
    def ranges(self) -> list[tuple[int, int]]:
        return list(self._runs)

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int):
            return False
        k = bisect.bisect_right(self._starts, offset) - 1
        return k >= 0 and offset <= self._runs[k][1]

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[int]:
        for first, last in self._runs:
            yield from range(first, last + 1)

    def __repr__(self) -> str:
        return "OffsetRanges(" + ", ".join(f"{f}..{la}" for f, la in self._runs) + ")"


class PendingAcks:
    """One partition's acknowledgements not sent yet. A later acknowledgement of an offset
    replaces an earlier one (a RENEW followed by the ACCEPT of the renewed record)."""

    __slots__ = ("singles", "runs")

    def __init__(self) -> None:
        self.singles: dict[int, int] = {}
        self.runs: list[tuple[int, int, int]] = []

    def put(self, first: int, last: int, kind: int) -> None:
        if self.runs:
            self._cut(first, last)
        if first == last:
            self.singles[first] = kind
            return
        if self.singles:
            for offset in [o for o in self.singles if first <= o <= last]:
                del self.singles[offset]
        self.runs.append((first, last, kind))

    def put_runs(self, runs: Sequence[tuple[int, int]], kind: int) -> None:
        """``put(first, last, kind)`` for each of ``runs``: a whole poll's offsets accepted in
        one call. Nothing waiting yet (the usual case: the previous request took everything)
        and runs in order without overlaps (a poll's) leave nothing to replace, so they go in
        as they are."""
        if not self.runs and not self.singles:
            singles, out = self.singles, self.runs
            prev = -1
            for first, last in runs:
                if first <= prev:       # not a poll's runs: the general way, from scratch
                    singles.clear()
                    out.clear()
                    break
                prev = last
                if first == last:
                    singles[first] = kind
                else:
                    out.append((first, last, kind))
            else:
                return
        for first, last in runs:
            self.put(first, last, kind)

    def _cut(self, first: int, last: int) -> None:
        kept: list[tuple[int, int, int]] = []
        for f, la, k in self.runs:
            if la < first or f > last:
                kept.append((f, la, k))
                continue
            if f < first:
                kept.append((f, first - 1, k))
            if la > last:
                kept.append((last + 1, la, k))
        self.runs = kept

    def __len__(self) -> int:
        return len(self.singles) + sum(la - f + 1 for f, la, _ in self.runs)

    def __bool__(self) -> bool:
        return bool(self.singles) or bool(self.runs)

    def kinds(self) -> set[int]:
        return set(self.singles.values()) | {k for _, _, k in self.runs}

    def split(self, picked: Callable[[int], bool]) -> tuple["PendingAcks", "PendingAcks"]:
        """(the acknowledgements whose type ``picked`` accepts, the others)."""
        yes, no = PendingAcks(), PendingAcks()
        for offset, kind in self.singles.items():
            (yes if picked(kind) else no).singles[offset] = kind
        for run in self.runs:
            (yes if picked(run[2]) else no).runs.append(run)
        return yes, no

    def _sorted_runs(self) -> list[tuple[int, int, int]]:
        if not self.singles:
            return sorted(self.runs)
        return sorted([(o, o, k) for o, k in self.singles.items()] + self.runs)

    def batches(self) -> list[dict]:
        """The AcknowledgementBatch dicts of a request."""
        return _batches_of_runs(self._sorted_runs())

    def offsets(self) -> OffsetRanges:
        """The offsets acknowledged by the application (gaps are the client's own)."""
        return OffsetRanges([(f, la) for f, la, k in self._sorted_runs() if k != GAP])

    def count(self) -> int:
        """How many offsets the application acknowledged (``len(self.offsets())``, without
        making the ranges: the ranges are disjoint)."""
        n = 0
        for f, la, k in self.runs:
            if k != GAP:
                n += la - f + 1
        if self.singles:
            for k in self.singles.values():
                n += k != GAP
        return n
