"""FetchBuffer: the answered fetches waiting to be drained, their memory bound, and each
partition's pipeline state.

Memory bound. Buffered answers are accounted by the size of the response frames they keep
alive (a frame is released when every partition in it was drained or discarded). No new
fetch is sent while that total is above ``fetch.max.bytes`` plus a sixteenth (so one full
answer waiting to be read does not stop the next); since each request asks for at most
``fetch.max.bytes`` divided by the per-broker depth, what is in flight adds at most about
``fetch.max.bytes`` per broker, and prefetched frames stay below about twice that. The
receive thread's position arrays for a frame's records (about 45 bytes per record) live as
long as the frame: they count in ``buffered_bytes``, the memory held, but not toward that
bound, which is about the answers' own bytes as ``fetch.max.bytes`` is. (Counted toward it, a
full answer of small records was over the bound alone, and fetch and drain took turns.)

Stale data. Every partition has a pipeline epoch, bumped by ``clear_partition`` (seek, reset,
pause handling, revocation); answers and buffers of an older epoch or an older assignment
are dropped, never returned. Answers are handed out in arrival order; a paused partition's
answers wait, in their place, until it is resumed.

One unit per answer. The partitions with records of a Fetch answer that carried no error are
buffered as one ``CompletedAnswer`` (one share of the frame, one object): the drain hands
such an answer out in one pass (FetchCollector._drain_whole). Whatever needs the answers one
partition at a time (a pause, a seek, a partial drain, columns, an error) first splits it, in
its place, into a ``CompletedFetch`` per partition, which behave as if buffered one by one.
"""
from __future__ import annotations

import collections
from typing import cast

from kclient.consumer.columnar import ColumnarChunk
from kclient.subscription.state import SubscriptionState
from kclient.structs import TopicPartition

__all__ = ["FetchBuffer", "CompletedFetch", "CompletedAnswer", "PartitionPipe", "ResponseFrame"]


class ResponseFrame:
    """One Fetch response frame, alive while any of its partitions is still buffered:
    ``nbytes`` of response, ``array_bytes`` of the receive thread's arrays for its records."""

    __slots__ = ("nbytes", "array_bytes", "pending")

    def __init__(self, nbytes: int, array_bytes: int = 0):
        self.nbytes = nbytes
        self.array_bytes = array_bytes
        self.pending = 0


class CompletedFetch:
    """One partition's answer from one Fetch response, drained over one or more polls."""

    __slots__ = ("tp", "fetch_offset", "epoch", "assignment_id", "raw", "aborted", "frame",
                 "columnar", "error", "pos", "next_offset", "last_offset", "last_epoch",
                 "drained", "size", "scanned")

    def __init__(self, tp: TopicPartition, fetch_offset: int, epoch: int, assignment_id: int,
                 raw, aborted, frame: ResponseFrame, scanned=None):
        self.tp = tp
        self.fetch_offset = fetch_offset
        self.epoch = epoch
        self.assignment_id = assignment_id
        self.raw = raw                  # memoryview into the response frame
        self.aborted = aborted          # aborted transactions (read_committed) or None
        self.frame = frame              # the response frame raw is a view into
        # kcore.fetchscan.ScannedRecords: raw's batches as the receive thread checked and
        # scanned them (decode_columnar makes the columns from it), or None.
        self.scanned = scanned
        self.columnar: ColumnarChunk | None = None  # decoded columns (both paths drain them)
        self.error: BaseException | None = None  # raised from poll() when drained
        self.pos = 0                    # next row to hand out
        self.next_offset = fetch_offset  # offset after the last complete batch
        self.last_offset = -1           # offset of the last row handed out
        self.last_epoch = -1
        self.drained = False
        self.size = len(raw)

    def __repr__(self) -> str:
        return (f"CompletedFetch({self.tp}, fetch_offset={self.fetch_offset}, bytes={self.size}, "
                f"pos={self.pos}, drained={self.drained})")


class CompletedAnswer:
    """The partitions with records of one Fetch answer, buffered as one unit. ``parts``: one
    (tp, fetch offset, pipe epoch, raw, len(raw), aborted, scanned, pipe) each, in the answer's order,
    each counted in its pipe's ``buffered``; the answer holds one share of ``frame``."""

    __slots__ = ("parts", "assignment_id", "frame")

    def __init__(self, parts: list[tuple], assignment_id: int, frame: ResponseFrame):
        self.parts = parts
        self.assignment_id = assignment_id
        self.frame = frame

    def fetches(self) -> list[CompletedFetch]:
        """A CompletedFetch per partition; the frame's share goes to them."""
        frame, aid = self.frame, self.assignment_id
        cfs = [CompletedFetch(tp, offset, epoch, aid, raw, aborted, frame, scanned)
               for tp, offset, epoch, raw, _, aborted, scanned, _ in self.parts]
        frame.pending += len(cfs) - 1
        return cfs

    def __repr__(self) -> str:
        return f"CompletedAnswer({[part[0] for part in self.parts]})"


class PartitionPipe:
    """Per-partition pipeline state: epoch, fetch in flight, buffered answers, next offset."""

    __slots__ = ("epoch", "in_flight_epoch", "buffered", "next_fetch_offset", "next_fetch_epoch",
                 "backoff_until", "incomplete_warned", "end_offset", "read_replica", "read_replica_until")

    def __init__(self) -> None:
        self.epoch = 0
        self.in_flight_epoch = -1        # epoch of the fetch in flight, -1 if none
        self.buffered = 0                # answers buffered (not yet fully drained)
        self.next_fetch_offset: int | None = None   # chain end, valid for `epoch`
        self.next_fetch_epoch = -1       # leader epoch of the batch before the chain end
        # KIP-392: the replica the leader told us to fetch from (-1: the leader), until when.
        self.read_replica = -1
        self.read_replica_until = 0
        self.backoff_until = 0
        self.incomplete_warned = False
        # The end offset (high watermark, or last stable offset when read_committed) the
        # last answer for `epoch` reported: what SubscriptionState holds, for send_fetches'
        # lock-free check. None: unknown, ask SubscriptionState.
        self.end_offset: int | None = None


class FetchBuffer:
    """Answers in arrival order (``completed``), the one being drained (``next_in_line``),
    the bytes of the frames they keep alive (``buffered_response_bytes``, held to ``limit``;
    ``buffered_bytes`` with the frames' arrays), and
    a ``PartitionPipe`` per partition (``pipes``)."""

    def __init__(self, subscriptions: SubscriptionState, max_bytes: int):
        self._subscriptions = subscriptions
        # Fetching stops while the buffered answers hold more than fetch.max.bytes (plus a
        # sixteenth for the frames' own bytes): one full answer waiting to be read still lets
        # the next be fetched, so what is buffered and in flight stays under about twice
        # fetch.max.bytes. (At exactly fetch.max.bytes, a full answer stopped fetching until
        # it was read: with fetch.max.bytes reached by one answer, fetch and decode took turns.)
        self.limit = max(max_bytes + max_bytes // 16, 1)
        #: Response bytes of the frames buffered answers keep alive (held to ``limit``) and,
        #: in ``buffered_bytes``, those plus the frames' arrays: the memory they hold.
        self.buffered_response_bytes = 0
        self.buffered_bytes = 0
        self.pipes: dict[TopicPartition, PartitionPipe] = {}
        self.completed: collections.deque[CompletedFetch | CompletedAnswer] = collections.deque()
        self.answers = 0        # CompletedAnswers in ``completed``
        self.next_in_line: CompletedFetch | None = None
        self._assignment_id = subscriptions.assignment_id
        #: The last drain made records one by one (poll(), iteration), not columns.
        self.per_record = False

    def pipe(self, tp: TopicPartition) -> PartitionPipe:
        pipe = self.pipes.get(tp)
        if pipe is None:
            pipe = self.pipes[tp] = PartitionPipe()
        return pipe

    # ------------------------------------------------------------------ adding
    def new_frame(self, nbytes: int, array_bytes: int = 0) -> ResponseFrame:
        """A response frame whose answers are about to be added: its bytes count from now."""
        frame = ResponseFrame(nbytes, array_bytes)
        self.buffered_response_bytes += nbytes
        self.buffered_bytes += nbytes + array_bytes
        return frame

    def _frame_freed(self, frame: ResponseFrame) -> None:
        self.buffered_response_bytes -= frame.nbytes
        self.buffered_bytes -= frame.nbytes + frame.array_bytes

    def add(self, cf: CompletedFetch, pipe: PartitionPipe) -> None:
        """Buffer cf (an answer for ``pipe``'s partition at its current epoch)."""
        cf.frame.pending += 1
        pipe.buffered += 1
        self.completed.append(cf)

    def add_parts(self, parts: list[tuple], assignment_id: int, frame: ResponseFrame, one_unit: bool) -> None:
        """Buffer the partitions of one answer (as in ``CompletedAnswer.parts``, their pipes'
        ``buffered`` counted already): as one CompletedAnswer, or one CompletedFetch each."""
        if one_unit:
            frame.pending += 1
            self.completed.append(CompletedAnswer(parts, assignment_id, frame))
            self.answers += 1
            return
        frame.pending += len(parts)
        self.completed.extend(CompletedFetch(tp, offset, epoch, assignment_id, raw, aborted, frame, scanned)
                              for tp, offset, epoch, raw, _, aborted, scanned, _ in parts)

    def split_answers(self) -> None:
        """Every buffered CompletedAnswer becomes, in its place, a CompletedFetch per partition."""
        if not self.answers:
            return
        self.answers = 0
        out: collections.deque[CompletedFetch | CompletedAnswer] = collections.deque()
        for item in self.completed:
            if type(item) is CompletedAnswer:
                out.extend(item.fetches())
            else:
                out.append(item)
        self.completed = out

    def _split(self) -> collections.deque[CompletedFetch]:
        """``completed``, every answer in it split: CompletedFetches only."""
        self.split_answers()
        return cast("collections.deque[CompletedFetch]", self.completed)

    def split_head(self, parts: list[tuple]) -> CompletedFetch:
        """The answer first in ``completed`` becomes the CompletedFetches of ``parts`` (what is
        left of it: the drain took the others), in its place. Returns the first of them."""
        answer = self.completed.popleft()
        assert type(answer) is CompletedAnswer
        self.answers -= 1
        answer.parts = parts
        cfs = answer.fetches()
        self.completed.extendleft(reversed(cfs))
        return cfs[0]

    def answer_drained(self) -> None:
        """The answer first in ``completed`` was handed out whole (its pipes' ``buffered``
        counted down by the drain): its share of the frame is freed."""
        answer = self.completed.popleft()
        self.answers -= 1
        frame = answer.frame
        frame.pending -= 1
        if frame.pending == 0:
            self._frame_freed(frame)

    def add_error(self, tp: TopicPartition, pipe: PartitionPipe, exc: BaseException) -> None:
        """An error to raise from poll() when this partition's turn comes."""
        cf = CompletedFetch(tp, -1, pipe.epoch, self._subscriptions.assignment_id, b"", None, ResponseFrame(0))
        cf.error = exc
        self.add(cf, pipe)

    # ------------------------------------------------------------------ discarding
    def release(self, cf: CompletedFetch) -> None:
        """cf is done (drained or discarded): free its share of the response frame."""
        if cf is self.next_in_line:
            self.next_in_line = None
        if cf.drained:
            return
        cf.drained = True
        cf.raw = None
        cf.columnar = None
        cf.scanned = None
        pipe = self.pipes.get(cf.tp)
        if pipe is not None and pipe.epoch == cf.epoch and pipe.buffered > 0:
            pipe.buffered -= 1
        frame = cf.frame
        frame.pending -= 1
        if frame.pending == 0:
            self._frame_freed(frame)

    def clear_partition(self, tp: TopicPartition) -> None:
        """Forget everything fetched or being fetched for tp (its position changed)."""
        pipe = self.pipes.get(tp)
        if pipe is None:
            return
        if pipe.buffered:
            keep: collections.deque[CompletedFetch | CompletedAnswer] = collections.deque()
            for cf in self._split():
                if cf.tp == tp:
                    self.release(cf)
                else:
                    keep.append(cf)
            self.completed = keep
            if self.next_in_line is not None and self.next_in_line.tp == tp:
                self.release(self.next_in_line)
        pipe.epoch += 1           # answers still in flight for tp are now stale
        pipe.buffered = 0
        pipe.next_fetch_offset = None
        pipe.next_fetch_epoch = -1
        pipe.backoff_until = 0
        pipe.end_offset = None

    def clear_all(self) -> None:
        for tp in list(self.pipes):
            self.clear_partition(tp)

    def check_assignment(self) -> bool:
        """After any assignment change, restart every partition's pipeline from its position:
        buffered data of the old assignment is dropped, so chained fetch offsets are too, and
        so are the pipes of partitions no longer assigned. True if the assignment changed."""
        aid = self._subscriptions.assignment_id
        if aid == self._assignment_id:
            return False
        self._assignment_id = aid
        self.clear_all()
        is_assigned = self._subscriptions.is_assigned
        for tp in [tp for tp in self.pipes if not is_assigned(tp)]:
            del self.pipes[tp]
        return True

    def close(self) -> None:
        self.clear_all()
        self.pipes.clear()

    # ------------------------------------------------------------------ handing out
    def is_current(self, cf: CompletedFetch) -> bool:
        pipe = self.pipes.get(cf.tp)
        return (pipe is not None and pipe.epoch == cf.epoch
                and cf.assignment_id == self._subscriptions.assignment_id
                and self._subscriptions.is_assigned(cf.tp))

    def has_completed_fetches(self) -> bool:
        return bool(self.completed) or (self.next_in_line is not None and not self.next_in_line.drained)

    def has_available_fetches(self) -> bool:
        """Some buffered answer belongs to a partition that may be returned now."""
        subs = self._subscriptions
        nil = self.next_in_line
        if nil is not None and not nil.drained and subs.is_fetchable(nil.tp):
            return True
        if not self.completed:
            return False    # the usual answer after a drain: no generator made
        if self.answers:
            fetchable = subs.fetchable_set()
            return any(part[0] in fetchable for item in self.completed
                       for part in (item.parts if isinstance(item, CompletedAnswer) else ((item.tp,),)))
        return any(subs.is_fetchable(cf.tp) for cf in cast("collections.deque[CompletedFetch]", self.completed))

    def next_fetch(self) -> CompletedFetch | None:
        """The answer to drain next: the one in progress, else the oldest current one whose
        partition is fetchable (paused partitions keep theirs for later). It stays
        ``next_in_line`` until released."""
        subs = self._subscriptions
        aid = subs.assignment_id
        if aid != self._assignment_id:
            self.check_assignment()
        nil = self.next_in_line
        pipes = self.pipes
        # An answer is handed out if it is current (its pipe's epoch, the assignment) and its
        # partition fetchable, which implies assigned: one locked call in the usual case.
        if nil is not None and not nil.drained:
            pipe = pipes.get(nil.tp)
            if (pipe is not None and pipe.epoch == nil.epoch and nil.assignment_id == aid
                    and subs.is_fetchable(nil.tp)):
                return nil
            if not self.is_current(nil):
                self.release(nil)
            else:  # paused mid-way: keep it (first in line) for when it is resumed
                self.completed.appendleft(nil)
        self.next_in_line = None
        completed = self._split()
        if not completed:
            return None
        skipped = []
        found = None
        while completed:
            cf = completed.popleft()
            pipe = pipes.get(cf.tp)
            if (pipe is not None and pipe.epoch == cf.epoch and cf.assignment_id == aid
                    and subs.is_fetchable(cf.tp)):
                found = cf
                break
            if not self.is_current(cf):
                self.release(cf)
                continue
            skipped.append(cf)
        if skipped:
            completed.extendleft(reversed(skipped))
        self.next_in_line = found
        return found
