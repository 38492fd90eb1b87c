"""FetchCollector: drains the buffered answers into records or into columns for ``poll()``.

Decoding is lazy: an answer is decoded (kcore.records) only when the application drains
that partition, into columns (validated, CRCs checked, no object per record) that both
``fetched_records`` and ``fetched_columnar`` drain. An answer that came through a receive
thread was already checked and scanned there as it arrived (kcore.fetchscan): its columns
are then made from that scan, without decoding again. The per-record path builds the
ConsumerRecords of each poll from those columns as it hands them out, so a record is made
just before the application reads it. Answers are drained in arrival order; within one
poll, ``max.poll.records`` is taken from the oldest answer first, then the next.

Errors: an answer that carries an error (queued by FetchRequests) and corrupt data (CRC
mismatch...) raise from ``poll()`` when that partition's turn comes, without moving its
position; a poll that already took records returns them first and raises on the next.
"""
from __future__ import annotations

import collections
from typing import Any

from kcore.records import consumer_records, decode_columnar

from kclient import errors as Errors
from kclient.clock import Clock
from kclient.consumer.columnar import ColumnarChunk, ColumnarRecords, epoch_of_row
from kclient.consumer.deserializers import as_deserializer
from kclient.consumer.fetch_buffer import CompletedAnswer, CompletedFetch, FetchBuffer
from kclient.consumer.fetch_config import FetchConfig
from kclient.subscription.state import FetchPosition, SubscriptionState
from kclient.structs import ConsumerRecord, TopicPartition

__all__ = ["FetchCollector"]

_new_tuple = tuple.__new__


class _LeaderEpochs(dict):
    """{tp: its leader epoch or None} as one metadata snapshot (immutable) has them, looked
    up once per partition: a drain's positions read it with a dict lookup, not a call."""

    __slots__ = ("cluster",)

    def __init__(self, cluster) -> None:
        super().__init__()
        self.cluster = cluster

    def __missing__(self, tp: TopicPartition) -> int | None:
        epoch = self[tp] = self.cluster.leader_epoch(tp)
        return epoch


class FetchCollector:
    """Takes up to ``max.poll.records`` from the FetchBuffer per poll and moves the positions."""

    def __init__(self, buffer: FetchBuffer, subscriptions: SubscriptionState, metadata, config: FetchConfig, *,
                 clock: Clock, metrics: collections.Counter, stats=None):
        self._buffer = buffer
        self._subscriptions = subscriptions
        self._metadata = metadata
        self._clock = clock
        self._max_poll_records = config.max_poll_records
        self._check_crcs = config.check_crcs
        self._views = config.zero_copy_records
        self._key_deserializer = as_deserializer(config.key_deserializer)
        self._value_deserializer = as_deserializer(config.value_deserializer)
        self._metrics = metrics
        self._stats = stats              # kclient.consumer.metrics.ConsumerMetrics, or None
        #: Fetched bytes per record of the last answer drained (its record set's size over
        #: its records), for sizing what one drain takes; 0 until the first.
        self.bytes_per_record = 0
        self._epochs = _LeaderEpochs(None)

    def fetched_records(self, max_records: int | None = None, update_offsets: bool = True,
                        now_ms: int | None = None, poll_gap: tuple[int, int] | None = None,
                        ) -> tuple[dict[TopicPartition, list[ConsumerRecord]], dict[TopicPartition, FetchPosition]]:
        """Up to max_records buffered records as {tp: [ConsumerRecord, ...]}, and the position
        each partition has after them. Positions move only if update_offsets. ``now_ms``: the
        time the caller's poll read (the metrics' timestamp), read here if not given.
        ``poll_gap``: the caller's ConsumerMetrics.poll_gap, recorded with the poll's metrics
        if it returns records (else the caller records it)."""
        buffer = self._buffer
        if not buffer.completed and buffer.next_in_line is None:
            # Nothing buffered (every poll that waits for an answer asks first): nothing to
            # drain. An assignment change is applied by the next drain or send_fetches.
            buffer.per_record = True
            return {}, {}
        remaining = self._max_poll_records if max_records is None else max_records
        sets: list[tuple[str, int, int]] = []     # record sets handed out whole, for metrics
        drained: dict[TopicPartition, list] = {}
        ends: dict[TopicPartition, FetchPosition] = {}
        kd, vd = self._key_deserializer, self._value_deserializer
        views = self._views
        total = consumed_bytes = 0
        starts = None
        try:
            total, consumed_bytes = self._drain_records(remaining, drained, ends, sets, kd, vd, views)
        finally:
            if update_offsets and ends:
                starts = self._subscriptions.advance_positions(ends.items(), log_starts=self._stats is not None)
        if total:
            self._metrics["records-consumed-total"] += total
            self._record_consumed(total, consumed_bytes, sets, ends, starts, now_ms, poll_gap)
        return drained, ends

    def _drain_records(self, remaining: int, drained: dict, ends: dict, sets: list, kd, vd, views,
                       ) -> tuple[int, int]:
        """Fills drained/ends/sets; returns (records taken, bytes of the record sets finished)."""
        buffer = self._buffer
        buffer.per_record = True
        next_fetch = buffer.next_fetch
        leader_epoch = self._leader_epochs()
        taken = consumed_bytes = 0
        if buffer.next_in_line is None and buffer.completed:
            # Small answers first (most rounds): each whole, in one pass.
            remaining, taken, consumed_bytes = self._drain_whole(remaining, drained, ends, sets, kd, vd, views,
                                                                 leader_epoch)
            if not buffer.completed and buffer.next_in_line is None:
                return taken, consumed_bytes    # all taken (the usual poll): nothing for the loop
        while remaining > 0:
            cf = next_fetch()
            if cf is None:
                break
            chunk = cf.columnar
            if chunk is None:
                if not self._initialize(cf, drained):
                    break
                chunk = cf.columnar
                assert chunk is not None  # _initialize() set it or raised
            n_recs = chunk.batch.num_records
            i = cf.pos
            j = min(i + remaining, n_recs)
            if j > i:
                self.bytes_per_record = cf.size // n_recs
                # Only this poll's records are made (in C, from the columns): each is read by
                # the application while still in the CPU's cache, and freed with its list.
                # They and their header lists are not tracked by the cyclic GC: tracked,
                # every collection walked the records the application holds. The one thing
                # never collected is a cycle built through a record's own headers list,
                # e.g. ``rec.headers.append(rec)``.
                tp = cf.tp
                # zero.copy.records: key and value are memoryviews sharing the answer's memory.
                part = consumer_records(chunk.batch, ConsumerRecord, tp.topic, tp.partition, i, j, views=views)
                cf.pos = j
                last = part[-1]
                cf.last_offset = last.offset
                cf.last_epoch = last.leader_epoch
                out = part if kd is None and vd is None else self._deserialize(part, tp.topic, kd, vd)
                lst = drained.get(tp)
                if lst is None:
                    drained[tp] = out
                else:
                    lst.extend(out)
                remaining -= j - i
                taken += j - i
            if j >= n_recs:
                sets.append((cf.tp.topic, n_recs, cf.size))
                consumed_bytes += cf.size
                buffer.release(cf)
            # _advance, inlined (once per answer drained).
            offset = max(cf.next_offset, cf.last_offset + 1) if cf.drained else cf.last_offset + 1
            if offset >= 0:
                epoch = cf.last_epoch
                tp = cf.tp
                ends[tp] = FetchPosition(offset, epoch if epoch >= 0 else None, leader_epoch(tp))
        return taken, consumed_bytes

    def _leader_epochs(self):
        """The leader epoch of a partition in the current metadata: a lookup function."""
        cluster = self._metadata.cluster
        epochs = self._epochs
        if epochs.cluster is not cluster:
            epochs = self._epochs = _LeaderEpochs(cluster)
        return epochs.__getitem__

    def _drain_whole(self, remaining: int, drained: dict, ends: dict, sets: list, kd, vd, views, leader_epoch,
                     ) -> tuple[int, int, int]:
        """What ``_drain_records`` does, for the answers at the head of the buffer that are
        handed out whole (current, fetchable, not yet decoded, no error, no more records
        than ``remaining``): each decoded, made into records and released in one pass, with
        one locked read of which partitions are fetchable. Stops at the first other answer
        (one with more records is left decoded, first in line), which the general loop
        takes. Returns (remaining, records taken, bytes of the record sets finished)."""
        buffer = self._buffer
        buffer.check_assignment()      # as next_fetch does first
        completed, pipes = buffer.completed, buffer.pipes
        subs = self._subscriptions
        aid = subs.assignment_id
        fetchable = subs.fetchable_set()
        check_crcs = self._check_crcs
        taken = consumed_bytes = 0
        while remaining > 0 and completed:
            cf = completed[0]
            if isinstance(cf, CompletedAnswer):
                remaining, n, nbytes, whole = self._drain_answer(cf, remaining, drained, ends, sets, kd, vd, views,
                                                                 leader_epoch, aid, fetchable)
                taken += n
                consumed_bytes += nbytes
                if whole:
                    continue
                # Stopped where a CompletedFetch would have stopped this loop (see
                # _drain_answer): the general loop goes on from there.
                break
            tp = cf.tp
            pipe = pipes.get(tp)
            if (cf.error is not None or cf.columnar is not None or pipe is None or pipe.epoch != cf.epoch
                    or cf.assignment_id != aid or tp not in fetchable):
                break
            try:
                res = decode_columnar(cf.raw, check_crcs=check_crcs, skip_control=True,
                                      fetch_offset=cf.fetch_offset, aborted_transactions=cf.aborted,
                                      scanned=cf.scanned)
            except Errors.KafkaError:
                break       # raised by _initialize, as for any answer, when its turn comes
            completed.popleft()
            buffer.next_in_line = cf    # as next_fetch hands it out: first in line until released
            cf.scanned = None
            if res.next_offset > cf.next_offset:
                cf.next_offset = res.next_offset
            n = res.num_records
            if n > remaining:
                cf.columnar = ColumnarChunk(res)   # taken in part by the general loop
                break
            if n:
                self.bytes_per_record = cf.size // n
                cf.pos = n
                try:
                    part = consumer_records(res, ConsumerRecord, tp.topic, tp.partition, 0, n, views=views)
                    last = part[-1]
                    cf.last_offset = last.offset
                    cf.last_epoch = last.leader_epoch
                    out = part if kd is None and vd is None else self._deserialize(part, tp.topic, kd, vd)
                except BaseException:
                    cf.columnar = ColumnarChunk(res)   # where the general loop would have left it
                    raise
                lst = drained.get(tp)
                if lst is None:
                    drained[tp] = out
                else:
                    lst.extend(out)
                remaining -= n
                taken += n
            size = cf.size
            sets.append((tp.topic, n, size))
            consumed_bytes += size
            buffer.release(cf)
            # _advance, inlined: the answer is drained.
            offset = max(cf.next_offset, cf.last_offset + 1)
            if offset >= 0:
                epoch = cf.last_epoch
                ends[tp] = FetchPosition(offset, epoch if epoch >= 0 else None, leader_epoch(tp))
        return remaining, taken, consumed_bytes

    def _drain_answer(self, answer: CompletedAnswer, remaining: int, drained: dict, ends: dict, sets: list,
                      kd, vd, views, leader_epoch, aid: int, fetchable: frozenset,
                      ) -> tuple[int, int, int, bool]:
        """``_drain_whole`` for an answer buffered as one unit (first in ``completed``): each
        partition as ``_drain_whole`` takes a CompletedFetch, without the object, and the
        frame's share freed once. Where a partition is not taken whole (not current or not
        fetchable, undecodable, more records than remaining, a deserializer's error), the
        answer is split there (FetchBuffer.split_head) and that partition left as the loop
        for a CompletedFetch would; when remaining runs out, the rest stays one answer.
        Returns (remaining, records taken, bytes of the record sets finished, whether the
        answer was taken whole)."""
        buffer = self._buffer
        check_crcs = self._check_crcs
        parts = answer.parts
        stale = answer.assignment_id != aid
        plain = kd is None and vd is None
        taken = consumed_bytes = 0
        for k, (tp, fetch_offset, epoch, raw, size, aborted, scanned, pipe) in enumerate(parts):
            if remaining <= 0:
                answer.parts = parts[k:]     # the rest, still one unit, for the next poll
                return remaining, taken, consumed_bytes, False
            if stale or pipe.epoch != epoch or tp not in fetchable:
                buffer.split_head(parts[k:])
                return remaining, taken, consumed_bytes, False
            try:
                res = decode_columnar(raw, check_crcs=check_crcs, skip_control=True, fetch_offset=fetch_offset,
                                      aborted_transactions=aborted, scanned=scanned)
            except Errors.KafkaError:
                buffer.split_head(parts[k:])   # raised by _initialize when its turn comes
                return remaining, taken, consumed_bytes, False
            next_offset = res.next_offset if res.next_offset > fetch_offset else fetch_offset
            n = res.num_records
            if n > remaining:
                self._left_in_line(buffer.split_head(parts[k:]), res, next_offset, 0, -1, -1)
                return remaining, taken, consumed_bytes, False
            last_offset = last_epoch = -1
            topic = tp[0]
            if n:
                self.bytes_per_record = size // n
                try:
                    part = consumer_records(res, ConsumerRecord, topic, tp[1], 0, n, views=views)
                    last = part[-1]
                    last_offset = last.offset
                    last_epoch = last.leader_epoch
                    out = part if plain else self._deserialize(part, topic, kd, vd)
                except BaseException:
                    # Where the loop for a CompletedFetch would have left it.
                    self._left_in_line(buffer.split_head(parts[k:]), res, next_offset, n, last_offset, last_epoch)
                    raise
                lst = drained.get(tp)
                if lst is None:
                    drained[tp] = out
                else:
                    lst.extend(out)
                remaining -= n
                taken += n
            sets.append((topic, n, size))
            consumed_bytes += size
            if pipe.buffered > 0:       # released, as FetchBuffer.release does
                pipe.buffered -= 1
            offset = next_offset if next_offset > last_offset else last_offset + 1
            if offset >= 0:
                ends[tp] = FetchPosition(offset, last_epoch if last_epoch >= 0 else None, leader_epoch(tp))
        buffer.answer_drained()
        return remaining, taken, consumed_bytes, True

    def _left_in_line(self, cf: CompletedFetch, res, next_offset: int, pos: int, last_offset: int,
                      last_epoch: int) -> None:
        """cf (first in ``completed``) was decoded into ``res`` and ``pos`` rows of it handed
        out: it becomes next_in_line with its columns, as ``_drain_whole`` leaves an answer."""
        buffer = self._buffer
        buffer.completed.popleft()
        buffer.next_in_line = cf
        cf.scanned = None
        cf.next_offset = next_offset
        cf.columnar = ColumnarChunk(res)
        cf.pos = pos
        if pos:
            cf.last_offset = last_offset
            cf.last_epoch = last_epoch

    def fetched_columnar(self, max_records: int | None = None, update_offsets: bool = True,
                         now_ms: int | None = None, poll_gap: tuple[int, int] | None = None,
                         ) -> tuple[dict[TopicPartition, ColumnarRecords], dict[TopicPartition, FetchPosition]]:
        """Like fetched_records, but {tp: ColumnarRecords} (rows of kcore ColumnarBatches)."""
        buffer = self._buffer
        if not buffer.completed and buffer.next_in_line is None:
            buffer.per_record = False   # nothing buffered, as in fetched_records
            return {}, {}
        remaining = self._max_poll_records if max_records is None else max_records
        consumed_bytes = 0
        sets: list[tuple[str, int, int]] = []     # record sets handed out whole, for metrics
        drained: dict[TopicPartition, list] = {}
        ends: dict[TopicPartition, FetchPosition] = {}
        starts = None
        try:
            consumed_bytes = self._drain_columnar(remaining, drained, ends, sets)
        finally:
            if update_offsets and ends:
                starts = self._subscriptions.advance_positions(ends.items(), log_starts=self._stats is not None)
        out = {tp: ColumnarRecords(tp, pieces) for tp, pieces in drained.items()}
        n = sum(len(v) for v in out.values())
        if n:
            self._metrics["records-consumed-total"] += n
            self._record_consumed(n, consumed_bytes, sets, ends, starts, now_ms, poll_gap)
        return out, ends

    def _drain_columnar(self, remaining: int, drained: dict, ends: dict, sets: list) -> int:
        consumed_bytes = 0
        buffer = self._buffer
        buffer.per_record = False
        next_fetch = buffer.next_fetch
        cluster = self._metadata.cluster
        while remaining > 0:
            cf = next_fetch()
            if cf is None:
                break
            batch = cf.columnar
            if batch is None:
                if not self._initialize(cf, drained):
                    break
                batch = cf.columnar
                assert batch is not None  # _initialize() set it or raised
            n = batch.num_records
            i = cf.pos
            j = min(i + remaining, n)
            if j > i:
                cf.pos = j
                cf.last_offset = batch.offsets[j - 1]
                cf.last_epoch = epoch_of_row(batch.batch, j - 1)
                drained.setdefault(cf.tp, []).append((batch, i, j))
                remaining -= j - i
            if j >= n:
                consumed_bytes += cf.size
                sets.append((cf.tp.topic, n, cf.size))
                buffer.release(cf)
            self._advance(cf, ends, cluster)
        return consumed_bytes

    def _initialize(self, cf: CompletedFetch, taken: dict[TopicPartition, Any]) -> bool:
        """Make cf, an answer not yet decoded, ready to drain: decode it, or raise its error
        (the one it carries, or what decoding found). Not while this poll has ``taken``
        records: False then, so that they are returned first; the error is raised when the
        next poll comes back to cf."""
        error = cf.error
        if error is not None:
            if taken:
                return False
            self._buffer.release(cf)
            raise error
        try:
            self._init_columnar(cf)
        except Errors.KafkaError as exc:
            if taken:
                return False
            self._buffer.release(cf)
            self._buffer.pipes[cf.tp].next_fetch_offset = None  # refetch from the position
            raise type(exc)(f"partition {cf.tp} at offset {cf.fetch_offset}: {exc}") from exc
        return True

    def _init_columnar(self, cf: CompletedFetch) -> None:
        start = cf.fetch_offset if cf.last_offset < 0 else cf.last_offset + 1
        scanned, cf.scanned = cf.scanned, None
        res = decode_columnar(cf.raw, check_crcs=self._check_crcs, skip_control=True,
                              fetch_offset=start, aborted_transactions=cf.aborted, scanned=scanned)
        cf.columnar = ColumnarChunk(res)
        cf.pos = 0
        if res.next_offset > cf.next_offset:
            cf.next_offset = res.next_offset

    def _advance(self, cf: CompletedFetch, ends: dict, cluster) -> None:
        """Record where tp's position goes after what was handed out (moved at the end of
        the poll, for every partition under one lock). ``cluster``: the metadata's, read once
        per poll."""
        if cf.drained:
            offset = max(cf.next_offset, cf.last_offset + 1)
        else:
            offset = cf.last_offset + 1
        if offset < 0:
            return
        epoch = cf.last_epoch
        tp = cf.tp
        ends[tp] = FetchPosition(offset, epoch if epoch >= 0 else None, cluster.leader_epoch(tp))

    @staticmethod
    def _deserialize(part: list, topic: str, kd, vd) -> list[ConsumerRecord]:
        """Records with deserialized key/value (serialized sizes stay those of the bytes).
        These are ordinary (GC-tracked) tuples: a deserialized value may be any object."""
        CR = ConsumerRecord
        new = _new_tuple
        return [new(CR, (t, p, e, o, ts, tt, k if kd is None else kd(topic, h, k),
                         v if vd is None else vd(topic, h, v), h, c, ks, vs, hs))
                for t, p, e, o, ts, tt, k, v, h, c, ks, vs, hs in part]

    def _record_consumed(self, records: int, nbytes: int, sets: list[tuple[str, int, int]],
                         ends: dict[TopicPartition, FetchPosition], starts: list[int | None] | None,
                         now_ms: int | None, poll_gap: tuple[int, int] | None = None) -> None:
        """Per poll: its records, the record sets it finished, and where it left each
        partition (lag to the end offset the last answer gave, lead from the log start).
        ``starts``: each partition's log start offset, in ``ends``' order, if the caller read
        them already (with the positions' move)."""
        stats = self._stats
        if stats is None:
            return
        pipes = self._buffer.pipes
        if starts is None:
            starts = self._subscriptions.log_start_offsets(ends)
        positions: list[tuple[str, int, int, int | None]] = []
        append = positions.append
        for (tp, position), start in zip(ends.items(), starts):
            pipe = pipes.get(tp)
            if pipe is None:
                continue
            end = pipe.end_offset
            if end is not None and end >= 0:
                offset = position.offset
                lag = end - offset
                append((tp[0], tp[1], lag if lag > 0 else 0, None if start is None else offset - start))
        stats.polled(records, nbytes, sets, positions, self._clock.now_ms() if now_ms is None else now_ms, poll_gap)
