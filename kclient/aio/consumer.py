"""AIOKafkaConsumer: aiokafka's consumer over kclient's compiled core.

Each consumer owns one worker thread that owns a synchronous ``kclient.KafkaConsumer``;
coroutines submit calls to it and await their results, so network I/O, decoding and group
membership never run on the event loop. Heartbeats stay on kclient's own heartbeat thread:
a coroutine that keeps the loop busy does not cost the member its partitions (it does count
against ``max_poll_interval_ms`` between two getmany/getone calls, as in aiokafka).

Records reach the loop in batches (one worker poll each) and wait in a buffer on the loop
side; ``getone()`` takes from it without a thread hop. The worker polls decoded columns, and
the loop makes each record as it hands it out (``kclient.aio._lazy``): a worker making a
whole poll's records would hold the GIL, and so the loop, for that long. A partition's
position moves only past records handed to the application (see ``kclient.aio._core``):
records a cancelled ``getmany()``/``getone()`` had fetched stay buffered for the next call,
and commits (manual, automatic, on revocation, on ``stop()``) never cover records the
application has not seen.

Waiting for records polls the worker in slices of at most ``_SLICE_MS``, so commits, seeks
and ``stop()`` issued meanwhile run within one slice. Once less than one poll's worth is
buffered, the worker polls again (without waiting on the network) before it is asked, and
getmany()/getone() let the loop run once before handing out buffered records: the loop is
held for one batch at a time, never for a whole poll's records.
"""
from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any, Iterable, Mapping

from kclient import errors as Errors
from kclient.aio._buffer import RecordBuffer, position_after
from kclient.aio._core import FetchPosition, SyncCore
from kclient.aio._lazy import LazyRecords
from kclient.aio._settings import UNLIMITED_RECORDS, bind_token_provider, consumer_settings
from kclient.aio._worker import Worker
from kclient.aio.listener import LoopListener
from kclient.config import ConsumerConfig
from kclient.subscription.listener import validate_listener
from kclient.structs import OffsetAndMetadata, TopicPartition

__all__ = ["AIOKafkaConsumer"]

log = logging.getLogger(__name__)

#: The longest single poll of the worker while a coroutine waits for records.
_SLICE_MS = 100
#: Records getmany() hands out at most when neither max_records nor max_poll_records caps
#: them (aiokafka: everything prefetched). The application processes a batch without
#: yielding, so its size is the event loop's latency: making and reading 1,000 small records
#: takes about 0.3 ms, and a loop that is held for that long still answers within 10 ms when
#: a busy machine slows the thread tenfold for a moment (a whole prefetch, 10 MiB per
#: partition, kept the loop 300 ms).
_HANDOUT_RECORDS = 1000
#: Records one worker poll brings at most for getone()/getmany() (those beyond the hand-out
#: wait in the loop's buffer, and the next call takes them without a thread switch). They
#: come as columns; where records are made on the worker (deserializers, interceptors),
#: making them is one C call holding the GIL: 10,000 take about 1 ms.
_FETCH_RECORDS = 10000
#: getone() calls between two yields to the event loop (see _yield_now).
_GETONE_YIELD_EVERY = _HANDOUT_RECORDS


class _Fetched:
    __slots__ = ("records", "ends", "assignment_id", "seq")

    def __init__(self, records: dict, ends: dict, assignment_id: int, seq: int):
        self.records = records
        self.ends = ends
        self.assignment_id = assignment_id
        self.seq = seq


async def _yield_now() -> None:
    """Let the event loop run its other callbacks once. A getmany()/getone() served from the
    buffer returns without suspending, so an application reading in a loop would otherwise
    hold the loop until the buffer is empty (every record of a worker poll, not one batch)."""
    await asyncio.sleep(0)


def _as_prefix_pattern(pattern: Any) -> re.Pattern:
    """aiokafka matches a subscription pattern at the start of topic names (``re.match``);
    kclient matches whole names, so the pattern gets ``.*`` appended."""
    if isinstance(pattern, re.Pattern):
        return re.compile(f"(?:{pattern.pattern}).*", pattern.flags)
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str or compiled regex, got {pattern!r}")
    return re.compile(f"(?:{pattern}).*")


def _check_partitions(partitions: Iterable[Any]) -> set[TopicPartition] | None:
    parts = set()
    for tp in partitions:
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"partitions must be TopicPartition instances, got {tp!r}")
        parts.add(tp)
    return parts or None


class AIOKafkaConsumer:
    """aiokafka's AIOKafkaConsumer: same constructor keywords, methods and behaviour (the
    differences are listed in docs/asyncio.md)."""

    def __init__(self, *topics: str, loop: asyncio.AbstractEventLoop | None = None, **configs: Any):
        for topic in topics:
            if not isinstance(topic, str):
                raise TypeError(f"topics are given as str, got {topic!r}")
        self._settings, self._max_poll_records = consumer_settings(configs)
        config = ConsumerConfig(**self._settings)   # unknown or bad settings fail here, not in start()
        self._group_id: str | None = config["group.id"]
        self._auto_commit: bool = config["enable.auto.commit"] and self._group_id is not None
        self._retry_backoff_s = config["retry.backoff.ms"] / 1000
        # getmany()/getone() records are made on the loop from polled columns (see
        # kclient.aio._lazy), unless deserializers or interceptors must see them on the worker
        # as the synchronous poll() makes them.
        self._build_on_loop = (config["key.deserializer"] is None and config["value.deserializer"] is None
                               and not config["interceptor.classes"])
        self._zero_copy: bool = config["zero.copy.records"]
        self._loop = loop
        self._worker: Worker | None = None
        self._core: SyncCore | None = None
        self._closed = False
        # stop() began: no more fetches; other calls (a rebalance listener's commit while the
        # consumer leaves its group) still run until the consumer is closed.
        self._stopping = False
        self._listener: LoopListener | None = None
        # What subscribe()/assign() asked for before start(): applied by start().
        self._pending: tuple | None = ("subscribe", list(topics), None, None) if topics else None
        self._mode: str | None = "subscribe" if topics else None
        # assign()'s partitions, seen by the loop at once (the worker applies them in turn).
        self._user_assignment: set[TopicPartition] = set()
        self._records = RecordBuffer(columnar=False)
        self._columns = RecordBuffer(columnar=True)
        self._assignment_id = -1      # the assignment the buffered records were fetched under
        self._delivered: dict[TopicPartition, tuple[FetchPosition, int]] = {}
        # getone()'s deliveries, turned into positions by _flush_delivered().
        self._delivered_one: dict[TopicPartition, tuple[Any, int, int]] = {}
        self._paused: set[TopicPartition] = set()
        # Fetch results the worker produced before the job with this sequence number ran are
        # stale (a seek or assignment change came after them).
        self._stale_before_all = 0
        self._stale_before: dict[TopicPartition, int] = {}
        self._fetching: asyncio.Future | None = None
        self._error: BaseException | None = None
        self._last_poll: dict[TopicPartition, int] = {}
        self._since_yield = 0   # getone() calls since it last yielded to the loop

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Connect to the cluster (on the worker thread) and apply the subscription or
        assignment given so far. The group is joined by the first getmany()/getone()."""
        if self._closed or self._stopping:
            raise Errors.ConsumerStoppedError("the consumer was stopped; make a new one")
        if self._worker is not None:
            return
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            raise RuntimeError("the consumer was made for another event loop")
        self._loop = loop
        name = f"kclient-aio-consumer-{self._settings.get('client_id', 'kclient')}"
        worker = self._worker = Worker(name, loop)
        try:
            self._core = await worker.call(SyncCore, bind_token_provider(self._settings, loop))
        except BaseException:
            self._worker = None
            await worker.stop()
            raise
        pending, self._pending = self._pending, None
        if pending is not None:
            if pending[0] == "subscribe":
                self._subscribe_now(*pending[1:])
            else:
                self._assign_now(pending[1])

    async def stop(self) -> None:
        """Commit the consumed offsets (with enable_auto_commit), leave the group and close
        the connections; calls waiting for records raise ConsumerStoppedError."""
        if self._closed or self._stopping:
            return
        self._stopping = True
        worker, core = self._worker, self._core
        if worker is None or core is None:
            self._closed = True
            return
        self._flush_delivered()
        if self._listener is not None:
            # aiokafka leaves the group on stop() without calling the listener (kclient's
            # close() would call on_partitions_revoked, on a consumer already closed).
            self._listener.detach()
        try:
            await worker.call(core.consumer.close, self._auto_commit)
        except Exception as exc:
            log.warning("closing the consumer failed: %s", exc)
        finally:
            self._closed = True
            await worker.stop()

    def __del__(self) -> None:
        # Never stopped: close the synchronous consumer on its own thread (no commit, no wait).
        worker, core = getattr(self, "_worker", None), getattr(self, "_core", None)
        if worker is not None and core is not None and not self._closed:
            self._closed = True
            worker.post(core.consumer.close, False)
            worker.stop_nowait()

    async def __aenter__(self) -> "AIOKafkaConsumer":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def __aiter__(self) -> "AIOKafkaConsumer":
        return self

    async def __anext__(self) -> Any:
        """The next record; iteration ends when the consumer is stopped. Retriable errors are
        logged and retried (as aiokafka does); the others are raised."""
        while True:
            try:
                return await self.getone()
            except Errors.ConsumerStoppedError:
                raise StopAsyncIteration from None
            except Errors.KafkaError as exc:
                if not getattr(exc, "retriable", False):
                    raise
                log.warning("consumer iteration: %s; retrying", exc)
                await asyncio.sleep(self._retry_backoff_s)

    # ------------------------------------------------------------------ worker plumbing
    def _check_started(self) -> tuple[Worker, SyncCore]:
        if self._closed:
            raise Errors.ConsumerStoppedError("the consumer was stopped")
        if self._worker is None or self._core is None:
            raise Errors.IllegalStateError("start() the consumer first")
        return self._worker, self._core

    def _flush_delivered(self) -> None:
        """Send the positions after the records handed out to the worker: queued before any
        other job, never cancelled with the call that carries them."""
        if self._delivered_one:
            for tp, (run, stop, aid) in self._delivered_one.items():
                position = position_after(run, stop)
                known = self._delivered.get(tp)
                if known is None or known[1] != aid or known[0].offset < position.offset:
                    self._delivered[tp] = (position, aid)
            self._delivered_one = {}
        delivered = self._delivered
        if delivered and self._worker is not None and self._core is not None:
            self._delivered = {}
            self._worker.post(self._core.advance, delivered)

    async def _call(self, fn: Any, *args: Any) -> Any:
        worker, _ = self._check_started()
        self._flush_delivered()
        return await worker.call(fn, *args)

    def _post(self, fn: Any, *args: Any) -> int:
        """Run fn(*args) on the worker without waiting; a failure is raised by the next
        getone()/getmany(). Returns the job's sequence number."""
        worker, _ = self._check_started()
        self._flush_delivered()

        def run() -> None:
            try:
                fn(*args)
            except Exception as exc:
                log.warning("%s failed: %s", getattr(fn, "__name__", fn), exc)
                self._error = exc

        return worker.post(run).seq

    def _drop(self, partitions: Iterable[TopicPartition] | None, rewind: bool) -> None:
        """Forget buffered records (of these partitions, or all). With rewind, the worker
        fetches them again from the positions (nothing else will)."""
        dropped = self._records.drop(None if partitions is None else set(partitions))
        dropped += self._columns.drop(None if partitions is None else set(partitions))
        if rewind and dropped and self._core is not None:
            seq = self._post(self._core.rewind, dropped)
            for tp in dropped:
                self._stale_before[tp] = seq

    # ------------------------------------------------------------------ subscription
    def subscribe(self, topics: Iterable[str] = (), pattern: str | re.Pattern | None = None,
                  listener: Any = None) -> None:
        """Subscribe to topics or a regex pattern (matched at the start of topic names, as in
        aiokafka); the listener's callbacks may be coroutines."""
        if isinstance(topics, str):
            topics = [topics]
        topics = list(topics or ())
        if bool(topics) == (pattern is not None):
            raise ValueError("You must choose topic or pattern, but not both")
        validate_listener(listener)
        if self._mode == "assign":
            raise Errors.IllegalStateError("subscribe() after assign(): unsubscribe() first")
        compiled = _as_prefix_pattern(pattern) if pattern is not None else None
        self._mode = "subscribe"
        if self._core is None:
            self._check_not_stopped()
            self._pending = ("subscribe", topics, compiled, listener)
            return
        self._subscribe_now(topics, compiled, listener)

    def _subscribe_now(self, topics: list[str], pattern: re.Pattern | None, listener: Any) -> None:
        worker, core = self._check_started()
        bridge = None if listener is None else LoopListener(listener, worker.run_on_loop, self._on_rebalance)
        if self._listener is not None:
            self._listener.detach()
        self._listener = bridge
        self._drop(None, rewind=False)
        self._stale_before_all = self._post(core.consumer.subscribe, topics, pattern, bridge)

    def _on_rebalance(self) -> None:
        # Runs on the loop as a rebalance callback starts. The assignment changes around every
        # callback, and kclient then fetches every partition again from its position.
        self._drop(None, rewind=False)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Assign partitions by hand (no group management)."""
        parts = list(partitions)
        _check_partitions(parts)
        if self._mode == "subscribe":
            raise Errors.IllegalStateError("assign() after subscribe(): unsubscribe() first")
        self._mode = "assign"
        self._user_assignment = set(parts)
        if self._core is None:
            self._check_not_stopped()
            self._pending = ("assign", parts)
            return
        self._assign_now(parts)

    def _assign_now(self, parts: list[TopicPartition]) -> None:
        _, core = self._check_started()
        self._drop(None, rewind=False)
        self._paused &= set(parts)
        self._stale_before_all = self._post(core.consumer.assign, parts)

    def unsubscribe(self) -> None:
        self._mode = None
        self._user_assignment = set()
        if self._core is None:
            self._pending = None
            return
        _, core = self._check_started()
        self._drop(None, rewind=False)
        self._paused.clear()
        self._stale_before_all = self._post(core.consumer.unsubscribe)

    def assignment(self) -> set[TopicPartition]:
        if self._mode == "assign":
            return set(self._user_assignment)
        if self._core is None:
            return set()
        return self._core.assignment()

    def _assigned(self, partitions: Iterable[Any]) -> list[TopicPartition]:
        """The partitions as TopicPartitions; IllegalStateError for one not assigned now."""
        assigned = self.assignment()
        parts = []
        for tp in partitions:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"partitions must be TopicPartition instances, got {tp!r}")
            if tp not in assigned:
                raise Errors.IllegalStateError(f"No current assignment for partition {tp}")
            parts.append(tp)
        return parts

    def subscription(self) -> frozenset[str]:
        if self._core is None:
            pending = self._pending
            return frozenset(pending[1]) if pending is not None and pending[0] == "subscribe" else frozenset()
        return frozenset(self._core.subscription())

    def _check_not_stopped(self) -> None:
        if self._closed or self._stopping:
            raise Errors.ConsumerStoppedError("the consumer was stopped")

    # ------------------------------------------------------------------ records
    async def getone(self, *partitions: TopicPartition) -> Any:
        """The next record (of these partitions, if given), waiting as long as it takes."""
        wanted = _check_partitions(partitions)
        fetch_cap = self._max_poll_records or _FETCH_RECORDS
        self._since_yield += 1
        if self._since_yield >= _GETONE_YIELD_EVERY:
            self._since_yield = 0
            await _yield_now()
        while True:
            self._raise_pending()
            got = self._records.take_one(wanted, self._paused)
            if got is not None:
                record, tp, run, stop = got
                self._delivered_one[tp] = (run, stop, self._assignment_id)
                if self._records.count < fetch_cap:
                    self._prefetch(fetch_cap, self._records)
                return record
            await self._fetch_round(_SLICE_MS, fetch_cap, False)

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list]:
        """Records by partition (of these partitions, if given), at most max_records in all,
        waiting up to timeout_ms for some; {} if none came."""
        return await self._get_batch(partitions, timeout_ms, max_records, self._records)

    async def getmany_columnar(self, *partitions: TopicPartition, timeout_ms: int = 0,
                               max_records: int | None = None) -> dict[TopicPartition, Any]:
        """Like getmany(), but each partition's records come as one ``ColumnarRecords``
        (arrays, or ``.to_arrow()``) without a Python object per record. Each fetched run is
        handed out whole, so a result can pass max_records by less than one run."""
        return await self._get_batch(partitions, timeout_ms, max_records, self._columns)

    async def _get_batch(self, partitions: tuple, timeout_ms: int, max_records: int | None,
                         buffer: RecordBuffer) -> dict[TopicPartition, Any]:
        wanted = _check_partitions(partitions)
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or timeout_ms < 0:
            raise ValueError(f"timeout_ms must be a number >= 0, got {timeout_ms!r}")
        if max_records is not None and (isinstance(max_records, bool) or not isinstance(max_records, int)
                                        or max_records < 1):
            raise ValueError(f"max_records must be a positive integer, got {max_records!r}")
        self._check_started()
        if max_records is not None:
            cap = fetch_cap = max_records
        elif self._max_poll_records is not None:
            cap = fetch_cap = self._max_poll_records
        elif buffer.columnar:
            # Columns cost the loop nothing per record: hand out all there is.
            cap = fetch_cap = UNLIMITED_RECORDS
        else:
            cap, fetch_cap = _HANDOUT_RECORDS, _FETCH_RECORDS
        loop = self._loop
        assert loop is not None   # set by start()
        deadline = loop.time() + timeout_ms / 1000
        first = True
        # Before taking records (a task cancelled here has taken none).
        await _yield_now()
        while True:
            self._raise_pending()
            records, positions = buffer.take(wanted, self._paused, cap)
            if records:
                aid = self._assignment_id
                delivered = self._delivered
                for tp, position in positions.items():
                    delivered[tp] = (position, aid)
                self._prefetch(fetch_cap, buffer)
                return records
            left_ms = (deadline - loop.time()) * 1000
            if left_ms <= 0 and not first:
                return {}
            first = False
            await self._fetch_round(min(max(int(left_ms), 0), _SLICE_MS), fetch_cap, buffer.columnar)

    def _raise_pending(self) -> None:
        self._check_started()
        if self._stopping:
            raise Errors.ConsumerStoppedError("the consumer was stopped")
        exc, self._error = self._error, None
        if exc is not None:
            raise exc

    async def _fetch_round(self, timeout_ms: int, max_records: int, columnar: bool) -> None:
        """One worker poll of up to timeout_ms, or (waiting no longer than that) the one
        already in flight; its records go to the buffers whether or not the caller is still
        waiting."""
        self._check_started()
        if self._stopping:
            raise Errors.ConsumerStoppedError("the consumer was stopped")
        done = self._fetching
        if done is not None:
            # Another call's poll (perhaps a longer one, or a prefetch): wait for it within
            # this call's time.
            await asyncio.wait([done], timeout=timeout_ms / 1000)
            return
        await asyncio.shield(self._start_fetch(timeout_ms, max_records, columnar))

    def _prefetch(self, max_records: int, buffer: RecordBuffer) -> None:
        """Records were just handed out: if less than one poll's worth is left, the worker
        polls for more at once, so they are buffered by the time the application asks (the
        loop never waits for a thread switch and a poll) and the worker does not sit idle
        while the application works."""
        if (self._fetching is None and buffer.count < max_records and not self._stopping
                and self._error is None and not self._closed):
            self._start_fetch(0, max_records, buffer.columnar)

    def _start_fetch(self, timeout_ms: int, max_records: int, columnar: bool) -> asyncio.Future:
        worker, core = self._check_started()
        other = self._columns if not columnar else self._records
        if other:
            # Switching between getmany() and getmany_columnar(): the other kind's
            # buffered records are fetched again in this kind.
            self._drop(other.partitions(), rewind=True)
        self._flush_delivered()
        loop = self._loop
        assert loop is not None
        done = self._fetching = loop.create_future()
        job = worker.post(self._fetch_on_worker, core, timeout_ms, max_records, columnar or self._build_on_loop,
                          fetch=True)

        def finished(future: Any, done: asyncio.Future = done) -> None:
            try:
                loop.call_soon_threadsafe(self._fetched, future, done, columnar)
            except RuntimeError:   # the loop is closed
                pass

        job.future.add_done_callback(finished)
        return done

    def _fetch_on_worker(self, core: SyncCore, timeout_ms: int, max_records: int, columnar: bool) -> _Fetched:
        seq = self._worker.seq_done if self._worker is not None else 0
        records, ends = core.fetch(timeout_ms, max_records, columnar)
        return _Fetched(records, ends, core.assignment_id(), seq)

    def _fetched(self, future: Any, done: asyncio.Future, columnar: bool) -> None:
        """On the loop: a worker poll finished; buffer its records."""
        if self._fetching is done:
            self._fetching = None
        try:
            if future.cancelled():
                return
            exc = future.exception()
            if exc is not None:
                if not self._closed:
                    self._error = exc
                return
            self._absorb(future.result(), columnar)
        finally:
            if not done.done():
                done.set_result(None)

    def _absorb(self, fetched: _Fetched, columnar: bool) -> None:
        if fetched.assignment_id != self._assignment_id:
            # The assignment changed: kclient fetches every partition again from its position.
            self._records.drop()
            self._columns.drop()
            self._assignment_id = fetched.assignment_id
        buffer = self._columns if columnar else self._records
        aid = fetched.assignment_id
        seq = fetched.seq
        stale: list[TopicPartition] = []
        now_ms = int(time.time() * 1000)
        ends = fetched.ends
        lazy = not columnar and self._build_on_loop
        for tp, records in fetched.records.items():
            if seq < self._stale_before_all or seq < self._stale_before.get(tp, 0):
                stale.append(tp)
                continue
            buffer.add(tp, LazyRecords(records, self._zero_copy) if lazy else records, ends.get(tp))
        for tp, end in ends.items():
            self._last_poll[tp] = now_ms
            if tp in fetched.records or seq < self._stale_before_all or seq < self._stale_before.get(tp, 0):
                continue
            if not buffer.extend_end(tp, end):
                # Only control records (transaction markers) were passed: nothing to hand out,
                # the position moves past them.
                self._delivered[tp] = (end, aid)
        if stale and self._core is not None and not self._closed:
            # Fetched before a seek or reassignment the worker has since applied, and
            # skipped by its fetcher: fetch them again from the position.
            rseq = self._post(self._core.rewind, stale)
            for tp in stale:
                self._stale_before[tp] = rseq

    # ------------------------------------------------------------------ positions
    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Fetch from ``offset`` next."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"Offset must be a positive integer, got {offset!r}")
        _, core = self._check_started()
        (tp,) = self._assigned([partition])
        self._drop([tp], rewind=False)
        self._delivered.pop(tp, None)
        self._delivered_one.pop(tp, None)
        self._stale_before[tp] = self._post(core.consumer.seek, tp, offset)

    async def _seek_job(self, partitions: tuple, fn: Any, *extra: Any) -> Any:
        _, core = self._check_started()
        parts = self._assigned(partitions) if partitions else sorted(self.assignment())
        self._drop(parts, rewind=False)
        for tp in parts:
            self._delivered.pop(tp, None)
            self._delivered_one.pop(tp, None)
        worker, _ = self._check_started()
        self._flush_delivered()
        job = worker.post(fn, parts, *extra)
        for tp in parts:
            self._stale_before[tp] = job.seq
        return await asyncio.wrap_future(job.future)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Fetch from the oldest offset next (all assigned partitions if none given)."""
        _, core = self._check_started()
        await self._seek_job(partitions, lambda parts: core.consumer.seek_to_beginning(*parts))

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Fetch from the end next: only records written from now on."""
        _, core = self._check_started()
        await self._seek_job(partitions, lambda parts: core.consumer.seek_to_end(*parts))

    async def seek_to_committed(self, *partitions: TopicPartition) -> dict[TopicPartition, int | None]:
        """Fetch from the committed offsets next; returns them ({tp: offset or None})."""
        self._require_group("seek_to_committed()")
        _, core = self._check_started()

        def seek_committed(parts: list[TopicPartition]) -> dict[TopicPartition, int | None]:
            out: dict[TopicPartition, int | None] = {}
            for tp in parts:
                committed = core.consumer.committed(tp, metadata=True)
                out[tp] = None if committed is None else committed.offset
                if committed is not None:
                    core.consumer.seek(tp, committed)
            return out

        return await self._seek_job(partitions, seek_committed)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record getone()/getmany() returns for the partition."""
        _, core = self._check_started()
        (tp,) = self._assigned([partition])
        return await self._call(core.consumer.position, tp)

    def highwater(self, partition: TopicPartition) -> int | None:
        _, core = self._check_started()
        (tp,) = self._assigned([partition])
        return core.highwater(tp)

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        _, core = self._check_started()
        (tp,) = self._assigned([partition])
        return core.last_stable_offset(tp)

    def last_poll_timestamp(self, partition: TopicPartition) -> int | None:
        """When (ms since the epoch) a fetch last reported on the partition."""
        (tp,) = self._assigned([partition])
        return self._last_poll.get(tp)

    def pause(self, *partitions: TopicPartition) -> None:
        """Hold these partitions' records back (buffered ones too) until resume()."""
        _, core = self._check_started()
        parts = self._assigned(partitions)
        self._paused.update(parts)
        self._post(core.consumer.pause, *parts)

    def resume(self, *partitions: TopicPartition) -> None:
        _, core = self._check_started()
        parts = self._assigned(partitions)
        self._paused.difference_update(parts)
        self._post(core.consumer.resume, *parts)

    def paused(self) -> set[TopicPartition]:
        assigned = self.assignment()
        return {tp for tp in self._paused if tp in assigned}

    # ------------------------------------------------------------------ commits
    def _require_group(self, what: str) -> None:
        if self._group_id is None:
            raise Errors.IllegalOperation(f"{what} requires group_id")

    async def commit(self, offsets: Mapping[TopicPartition, Any] | None = None) -> None:
        """Commit the offsets of the records handed out so far (or the given ones:
        ``{tp: offset}`` or ``{tp: (offset, metadata)}``), waiting for the answer."""
        self._require_group("commit()")
        _, core = self._check_started()
        if offsets is not None:
            converted = {}
            for tp, value in offsets.items():
                if not isinstance(tp, TopicPartition):
                    raise TypeError(f"offsets are keyed by TopicPartition, got {tp!r}")
                if isinstance(value, int) and not isinstance(value, bool):
                    value = OffsetAndMetadata(value, "", -1)
                elif isinstance(value, tuple) and not isinstance(value, OffsetAndMetadata):
                    value = OffsetAndMetadata(*value)
                converted[tp] = value
            await self._call(core.consumer.commit, converted)
        else:
            await self._call(core.consumer.commit)

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset for the partition (None if none)."""
        self._require_group("committed()")
        _, core = self._check_started()
        return await self._call(core.consumer.committed, partition)

    # ------------------------------------------------------------------ offsets and metadata
    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        _, core = self._check_started()
        return await self._call(core.consumer.beginning_offsets, list(partitions))

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        _, core = self._check_started()
        return await self._call(core.consumer.end_offsets, list(partitions))

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict:
        """{tp: OffsetAndTimestamp or None}: the first record at or after each timestamp."""
        for tp, ts in timestamps.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts!r}; it should be an int >= 0")
        _, core = self._check_started()
        return await self._call(core.consumer.offsets_for_times, dict(timestamps))

    async def topics(self) -> set[str]:
        _, core = self._check_started()
        return await self._call(core.consumer.topics)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The topic's partition ids from the metadata this consumer has (None if it has
        none for the topic)."""
        if self._core is None:
            return None
        return self._core.cached_partitions(topic)
