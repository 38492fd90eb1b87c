"""Records fetched by the worker and not yet handed to the application (event loop side).

Each partition has runs of records in offset order, one per fetch that returned some, each
with the position its partition has once the run is delivered to its end (past control
records that follow it). Taking records from a run gives the position to report back to the
worker, which moves the partition's position only then.

Columnar runs (``ColumnarRecords``) are taken whole. Runs of records are lists, or
``LazyRecords`` whose records are made as they are taken.
"""
from __future__ import annotations

import collections
from typing import Any, Container, Iterator

from kclient.aio._core import FetchPosition
from kclient.structs import TopicPartition

__all__ = ["RecordBuffer"]

#: Records made at once for getone() from a run whose records are made as they are taken.
_GETONE_WINDOW = 500


class _Run:
    __slots__ = ("records", "start", "end")

    def __init__(self, records: Any, end: FetchPosition | None):
        self.records = records
        self.start = 0
        self.end = end


def _after(run: _Run, stop: int, last: Any = None) -> FetchPosition:
    """The position after the run's records up to ``stop`` (exclusive); ``last`` is the
    record at stop - 1 when the caller has it."""
    if stop >= len(run.records) and run.end is not None:
        return run.end
    if last is None:
        last = run.records[stop - 1]
    epoch = last.leader_epoch
    return FetchPosition(last.offset + 1, epoch if epoch >= 0 else None, None)


def _after_columns(run: _Run) -> FetchPosition:
    if run.end is not None:
        return run.end
    return FetchPosition(run.records.last_offset + 1, None, None)


class RecordBuffer:
    def __init__(self, columnar: bool):
        self.columnar = columnar
        self._parts: dict[TopicPartition, collections.deque[_Run]] = {}
        #: Records buffered, all partitions together (what the next fetch may wait for).
        self.count = 0

    def __bool__(self) -> bool:
        return bool(self._parts)

    def partitions(self) -> list[TopicPartition]:
        return list(self._parts)

    def has(self, tp: TopicPartition) -> bool:
        return tp in self._parts

    def add(self, tp: TopicPartition, records: Any, end: FetchPosition | None) -> None:
        n = len(records)
        if n:
            self._parts.setdefault(tp, collections.deque()).append(_Run(records, end))
            self.count += n

    def extend_end(self, tp: TopicPartition, end: FetchPosition) -> bool:
        """A fetch returned no records for tp but moved past control records: the position
        after tp's last buffered run is that far. False if nothing is buffered for tp."""
        runs = self._parts.get(tp)
        if not runs:
            return False
        last = runs[-1]
        if last.end is None or end.offset > last.end.offset:
            last.end = end
        return True

    def drop(self, partitions: Container[TopicPartition] | None = None) -> list[TopicPartition]:
        """Forget the buffered records of these partitions (all if None); returns those that had some."""
        if partitions is None:
            dropped = list(self._parts)
            self._parts.clear()
            self.count = 0
            return dropped
        dropped = [tp for tp in self._parts if tp in partitions]
        for tp in dropped:
            self.count -= sum(len(run.records) - run.start for run in self._parts.pop(tp))
        return dropped

    def _eligible(self, wanted: Container[TopicPartition] | None,
                  paused: Container[TopicPartition]) -> Iterator[tuple[TopicPartition, collections.deque]]:
        for tp, runs in list(self._parts.items()):
            if (wanted is None or tp in wanted) and tp not in paused:
                yield tp, runs

    def take(self, wanted: Container[TopicPartition] | None, paused: Container[TopicPartition],
             max_records: int) -> tuple[dict[TopicPartition, Any], dict[TopicPartition, FetchPosition]]:
        """Up to max_records records ({tp: list}, or {tp: ColumnarRecords} whole) and the
        position after them per partition."""
        out: dict[TopicPartition, Any] = {}
        positions: dict[TopicPartition, FetchPosition] = {}
        left = max_records
        for tp, runs in self._eligible(wanted, paused):
            if left <= 0:
                break
            if self.columnar:
                run = runs[0]
                if out and len(run.records) > left:
                    break
                runs.popleft()
                out[tp] = run.records
                positions[tp] = _after_columns(run)
                left -= len(run.records)
            else:
                got: list | None = None
                while runs and left > 0:
                    run = runs[0]
                    stop = min(len(run.records), run.start + left)
                    # A list taken whole is handed out as is (no copy); it leaves the buffer.
                    whole = run.start == 0 and stop == len(run.records) and type(run.records) is list
                    part = run.records if whole else run.records[run.start:stop]
                    if got is None:
                        got = part
                    else:
                        got.extend(part)
                    left -= stop - run.start
                    positions[tp] = _after(run, stop, part[-1])
                    run.start = stop
                    if stop >= len(run.records):
                        runs.popleft()
                out[tp] = got
            if not runs:
                del self._parts[tp]
        self.count -= max_records - left
        return out, positions

    def take_one(self, wanted: Container[TopicPartition] | None, paused: Container[TopicPartition],
                 ) -> tuple[Any, TopicPartition, _Run, int] | None:
        """The next record, its partition, and (run, index after it) for ``position_after``
        (worked out only when the position is needed: this is getone()'s per-record path)."""
        for tp, runs in self._parts.items():
            if (wanted is None or tp in wanted) and tp not in paused:
                run = runs[0]
                if type(run.records) is not list:
                    run = self._window(runs, run)
                stop = run.start + 1
                run.start = stop
                self.count -= 1
                if stop >= len(run.records):
                    runs.popleft()
                    if not runs:
                        del self._parts[tp]   # the loop ends here: safe while iterating
                return run.records[stop - 1], tp, run, stop
        return None

    @staticmethod
    def _window(runs: collections.deque, run: _Run) -> _Run:
        """getone() takes records one by one: a run whose records are made as they are taken
        (LazyRecords) gets its next _GETONE_WINDOW made at once, as a list run of their own in
        front of it (the whole rest of it if that is all)."""
        records = run.records
        ahead = min(run.start + _GETONE_WINDOW, len(records))
        window = records[run.start:ahead]
        if ahead >= len(records):
            run.records = window
            run.start = 0
            return run
        run.start = ahead
        first = _Run(window, None)
        runs.appendleft(first)
        return first


def position_after(run: _Run, stop: int) -> FetchPosition:
    """The position after a run's records up to ``stop`` (from take_one)."""
    return _after(run, stop)

