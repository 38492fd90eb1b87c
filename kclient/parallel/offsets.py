"""Per-partition offset tracking: which offset may be committed.

Records of a partition complete in any order (many workers), but a committed offset says
"everything before this was handled": so only the contiguous prefix of completed records
counts. The committable offset is the last record of that prefix plus one. Offsets are the
records' real offsets (compacted topics and transaction markers leave gaps), which is why
the tracker keeps the offsets it was given instead of counting from a base.

Owned by the polling thread (not thread-safe); workers report completions through the
scheduler and the polling thread applies them here.
"""
from __future__ import annotations

import collections

__all__ = ["OffsetTracker"]


class OffsetTracker:
    """Offsets of one partition's received records, in order, and which have completed."""

    __slots__ = ("_committable", "_done", "_first", "_pending", "_received_end")

    def __init__(self) -> None:
        self._pending: collections.deque[int] = collections.deque()   # received, not in the prefix
        self._done: set[int] = set()          # completed but behind an unfinished record
        self._committable: int | None = None  # last prefix record + 1
        self._received_end: int | None = None  # last received offset + 1
        self._first: int | None = None         # first offset received (lag before any commit)

    def add(self, offset: int) -> None:
        """A record was received (offsets must increase)."""
        if self._received_end is not None and offset < self._received_end:
            raise ValueError(f"offset {offset} received after {self._received_end - 1}: offsets must increase")
        if self._first is None:
            self._first = offset
        self._pending.append(offset)
        self._received_end = offset + 1

    def complete(self, offset: int) -> bool:
        """A received record finished (handled or skipped); True if the prefix grew."""
        pending = self._pending
        if pending and pending[0] == offset:
            # The common case (in-order completion) never touches the set.
            pending.popleft()
            last = offset
        else:
            if offset in self._done or not pending or offset < pending[0] or offset > pending[-1]:
                raise ValueError(f"offset {offset} was not received or already completed")
            self._done.add(offset)
            return False
        done = self._done
        while pending and pending[0] in done:
            last = pending.popleft()
            done.discard(last)
        self._committable = last + 1
        return True

    @property
    def committable(self) -> int | None:
        """The offset to commit (next record to consume), or None if no prefix completed yet."""
        return self._committable

    @property
    def received_end(self) -> int | None:
        return self._received_end

    @property
    def uncommittable(self) -> int:
        """Received records not in the completed prefix (running, queued, or done out of order)."""
        return len(self._pending)

    @property
    def first_pending(self) -> int | None:
        """The offset holding the prefix back, if any."""
        return self._pending[0] if self._pending else None

    def lag(self, committed: int | None) -> int:
        """Offsets received beyond ``committed`` (or beyond the first received, if none)."""
        if self._received_end is None or self._first is None:  # both set by the first receive
            return 0
        base = committed if committed is not None else self._first
        return max(self._received_end - base, 0)
