"""KafkaShareConsumer: a member of a share group (KIP-932), in the Java client's shape with
kafka-python's naming.

Every member of a share group may read every partition; the broker locks each record it hands
out (the acquisition lock) until the member acknowledges it:

* ``poll()`` returns ``{TopicPartition: [ShareConsumerRecord]}``, each record with its
  ``delivery_count``; ``poll_columnar()`` returns ``{TopicPartition: ShareColumnarRecords}``
  (arrays, no Python object per record), acknowledged a batch or a range of offsets at a time
  (``acknowledge_batch``, ``acknowledge_range``);
* implicit mode (``share.acknowledgement.mode=implicit``, the default): the records of a poll
  are accepted by the next ``poll()``, ``commit_sync()``/``commit_async()`` or ``close()``;
* explicit mode: the application calls ``acknowledge(record, type)`` for each record with
  ACCEPT, RELEASE (deliver again), REJECT (never again) or RENEW (keep the lock); a poll while
  records of the previous one are unacknowledged raises ``IllegalStateError``;
* acknowledgements travel with the next ShareFetch, or at once with ``commit_sync()``;
  ``close()`` sends those made and releases every other record the member holds.

One application thread drives it; ``wakeup()`` may come from any thread.
"""
from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from typing import AbstractSet, Any, Callable, Iterable, Iterator, TypeVar, Union

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.config import ConsumerConfig
from kclient.consumer.deserializers import as_deserializer
from kclient.group.heartbeat_driver import HeartbeatDriver
from kclient.group.timer import Timer
from kclient.network.consumer_network_client import ConsumerNetworkClient
from kclient.network.metadata import Node
from kclient.network.network_config import NetworkClientConfig
from kclient.protocol import ApiKey
from kclient.share.acknowledgements import AcknowledgeType
from kclient.share.columnar import ShareColumnarRecords
from kclient.share.coordinator import ShareCoordinator, no_share_groups
from kclient.share.fetcher import RECORD_LIMIT, AckResult, Acquired, ShareFetcher
from kclient.share.held import RangeSet
from kclient.share.pacemaker_link import create_share_driver
from kclient.share.records import ShareConsumerRecord
from kclient.share.share_config import ShareConsumerConfig, split_share_settings
from kclient.structs import TopicPartition

__all__ = ["KafkaShareConsumer", "AcknowledgeType", "ShareConsumerRecord", "ShareColumnarRecords"]

log = logging.getLogger(__name__)

AcknowledgementCommitCallback = Callable[[dict[TopicPartition, AbstractSet[int]], BaseException | None], Any]
#: What the consumer holds for the next poll: records acquired and not decoded yet, or records
#: renewed by the application (as the poll that returned them made them).
_Buffered = Union[Acquired, tuple[TopicPartition, list[ShareConsumerRecord]], ShareColumnarRecords]

_CLOSE_TIMEOUT_MS = 30000
_F = TypeVar("_F", bound=Callable[..., Any])


def _one_thread(method: _F) -> _F:
    """A second thread entering while another is inside gets ConcurrentAccessError."""
    @functools.wraps(method)
    def guarded(self: "KafkaShareConsumer", *args: Any, **kwargs: Any) -> Any:
        me = threading.get_ident()
        with self._guard:
            if self._owner is not None and self._owner != me:
                raise Errors.ConcurrentAccessError(
                    "KafkaShareConsumer is not safe for multi-threaded access: another thread is using "
                    "it right now (only wakeup() may be called from other threads)")
            self._owner = me
            self._depth += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            with self._guard:
                self._depth -= 1
                if not self._depth:
                    self._owner = None
    return guarded  # type: ignore[return-value]
#: Longest single network wait inside poll(), so heartbeat and fetch answers are taken promptly.
_POLL_SLICE_MS = 100
#: The most fetches ahead skipped in a row after fetched-ahead answers that brought (almost) nothing.
_AHEAD_SKIP_MAX = 64
#: Longest wait of subscribe() for a broker's ApiVersions (whether it serves share groups).
_SUBSCRIBE_CHECK_MS = 10000


def _size_of(entry: _Buffered) -> int:
    """Records (at most) in a buffered entry."""
    if isinstance(entry, Acquired):
        return sum(last - first + 1 for first, last, _ in entry.ranges)
    if isinstance(entry, ShareColumnarRecords):
        return len(entry)
    return len(entry[1])


class KafkaShareConsumer:
    def __init__(self, *topics: str, clock: Clock = SYSTEM_CLOCK, **settings: Any):
        self._guard = threading.Lock()
        self._owner: int | None = None
        self._depth = 0
        consumer_settings, own = split_share_settings(settings)
        config = ConsumerConfig(consumer_settings)
        self.config = ShareConsumerConfig.of(config, own)
        self._clock = clock
        self._client = ConsumerNetworkClient(config=NetworkClientConfig.of(config), clock=clock)
        c = self.config
        self._coordinator = ShareCoordinator(self._client, c.group_id, retry_backoff_ms=c.retry_backoff_ms,
                                             request_timeout_ms=c.request_timeout_ms, rack_id=c.client_rack,
                                             clock=clock)
        self._fetcher = ShareFetcher(self._client, c.group_id, lambda: self._coordinator.membership.member_id,
                                     c.fetch, clock=clock)
        self._key_deserializer = as_deserializer(c.key_deserializer)
        self._value_deserializer = as_deserializer(c.value_deserializer)
        self._loop: HeartbeatDriver | None = None
        #: Send the next ShareFetch when a poll takes the last records acquired (if it pays).
        self._fetch_ahead_on = c.fetch.acquire_mode != RECORD_LIMIT
        #: When the current poll began, and when the last poll took its records (clock ms).
        self._poll_started_ms = 0
        self._took_ms: int | None = None
        #: Records in hand when the last fetch ahead left; fetches ahead still to skip, and how
        #: many the next futile one makes skip.
        self._ahead_held = 0
        self._ahead_skip = 0
        self._ahead_backoff = 0
        self._buffer: deque[_Buffered] = deque()
        #: Records of the last poll, by partition and offset, not acknowledged yet.
        self._unacknowledged: dict[TopicPartition, dict[int, ShareConsumerRecord]] = {}
        #: Records of the last poll already acknowledged (a second acknowledgement is an error).
        self._acknowledged: set[tuple[TopicPartition, int]] = set()
        #: The partitions of the last poll's records, each its own key (found by a plain tuple).
        self._polled_partitions: dict[tuple[str, int], TopicPartition] = {}
        #: Implicit mode: the offsets of the last poll's records, as (first, last) runs per
        #: partition, accepted a run at a time by the next poll.
        self._held_runs: dict[TopicPartition, list[tuple[int, int]]] = {}
        #: The same for the last columnar poll, as offset ranges; and what it returned (for RENEW).
        self._held_ranges: dict[TopicPartition, RangeSet] = {}
        self._acked_ranges: dict[TopicPartition, RangeSet] = {}
        self._last_columnar: dict[TopicPartition, ShareColumnarRecords] = {}
        self._renewed: list[_Buffered] = []
        self._callback: AcknowledgementCommitCallback | None = None
        self._subscription: set[str] = set()
        self._closed = False
        self._metrics = {"records-consumed-total": 0, "acknowledgements-sent-total": 0,
                         "acknowledgements-failed-total": 0, "polls-total": 0}
        if topics:
            try:
                self.subscribe(topics)
            except BaseException:
                self.close(0)
                raise

    # ------------------------------------------------------------------ subscription
    @_one_thread
    def subscribe(self, topics: Iterable[str]) -> None:
        self._check_open()
        if isinstance(topics, str):
            raise TypeError("subscribe() takes a list of topic names, not a string")
        names = set(topics)
        if not names:
            self.unsubscribe()
            return
        self._client.metadata.set_topics(sorted(names))
        if self._loop is None:
            self._check_share_groups_served()
        self._subscription = names
        self._coordinator.subscribe(sorted(names))
        if self._loop is None:
            self._loop = create_share_driver(self._coordinator, self._client)
            self._coordinator.set_driver(self._loop)
            self._loop.start()

    def _check_share_groups_served(self) -> None:
        """Fail now, not at the first poll, when the cluster answers without ShareGroupHeartbeat
        (a broker older than Kafka 4.2, or one that does not implement share groups). Bounded:
        a cluster that cannot be reached in time is left to the first poll to report."""
        client = self._client
        timer = Timer(self._clock, min(self.config.request_timeout_ms, _SUBSCRIBE_CHECK_MS))
        try:
            client.ensure_bootstrapped(timer.remaining_ms() or 0)
        except Errors.KafkaError as exc:
            log.debug("share group %s: no broker answered at subscribe (%r); the first poll reports it",
                      self.config.group_id, exc)
            return
        node_id = client.least_loaded_node()
        while node_id is not None and not client.try_connect(node_id):
            if timer.expired():
                return
            client.poll(min(timer.remaining_ms() or 0, _POLL_SLICE_MS))
        if node_id is None:
            return
        ranges = client.client.broker_api_ranges(node_id)
        served = ranges.get(int(ApiKey.SHARE_GROUP_HEARTBEAT))
        if ranges and (served is None or served[1] < 1):
            node = client.metadata.cluster.node_by_id(node_id) or Node(node_id, "?", 0)
            raise no_share_groups(node, Errors.UnsupportedVersionError(
                "not offered by the broker" if served is None else f"only versions {served[0]}-{served[1]}"))

    def subscription(self) -> set[str]:
        return set(self._subscription)

    @_one_thread
    def unsubscribe(self) -> None:
        """Leave the share group: send the acknowledgements made (implicit mode: accept the
        last poll's records), close the share sessions (the broker releases every other record
        this member holds) and stop heartbeating."""
        self._check_open()
        self._subscription = set()
        self._end_sessions(Timer(self._clock, self.config.request_timeout_ms))
        self._buffer.clear()
        self._renewed = []
        self._coordinator.leave("unsubscribed")

    def _end_sessions(self, timer: Timer) -> None:
        if not self.config.explicit_acknowledgement:
            self._accept_last_poll()
        # a session takes one request at a time: let fetches in flight finish first
        while self._fetcher.in_flight() and not timer.expired():
            self._client.poll(min(timer.remaining_ms() or 0, _POLL_SLICE_MS))
        futures = self._fetcher.close_sessions()
        while any(not f.is_done for f in futures) and not timer.expired():
            self._client.poll(min(timer.remaining_ms() or 0, _POLL_SLICE_MS))
        self._forget_last_poll()
        self._deliver_results()

    def _forget_last_poll(self) -> None:
        # (only what holds something is made anew: every poll comes here)
        if self._unacknowledged:
            self._unacknowledged = {}
        if self._acknowledged:
            self._acknowledged = set()
        if self._polled_partitions:
            self._polled_partitions = {}
        if self._held_runs:
            self._held_runs = {}
        if self._held_ranges:
            self._held_ranges = {}
        if self._acked_ranges:
            self._acked_ranges = {}
        if self._last_columnar:
            self._last_columnar = {}

    # ------------------------------------------------------------------ poll
    @_one_thread
    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, list[ShareConsumerRecord]]:
        """Records acquired for this member: ``{TopicPartition: [ShareConsumerRecord]}``,
        waiting up to ``timeout_ms`` for some."""
        timer = self._begin_poll(timeout_ms)
        limit = max_records or self.config.max_poll_records
        while True:
            self._wait_for_records(timer)
            self._fetch_ahead(limit)
            out = self._drain_buffer(limit)
            # acquired offsets that all turned out to hold no record (markers) are no reason to return early
            if out or timer.expired():
                break
        self._deliver_results()
        return out

    @_one_thread
    def poll_columnar(self, timeout_ms: int = 0, max_records: int | None = None
                      ) -> dict[TopicPartition, ShareColumnarRecords]:
        """Like ``poll()``, but each partition's records come as one ``ShareColumnarRecords``
        (the arrays of ``KafkaConsumer.poll_columnar`` plus ``delivery_counts``), without a
        Python object per record. Acknowledge with ``acknowledge_batch(batch, type)`` or
        ``acknowledge_range(topic, partition, first, last, type)`` (explicit mode); in implicit
        mode the next poll accepts them. ``max_records`` (default max.poll.records) is met at
        the broker's batch granularity: a poll returns whole acquired batches."""
        timer = self._begin_poll(timeout_ms)
        limit = max_records or self.config.max_poll_records
        while True:
            self._wait_for_records(timer)
            self._fetch_ahead(limit)
            batches = self._drain_columnar(limit)
            if batches or timer.expired():
                break
        self._deliver_results()
        return batches

    def _begin_poll(self, timeout_ms: int) -> Timer:
        self._check_open()
        if not self._subscription:
            raise Errors.IllegalStateError("the share consumer is not subscribed to any topic")
        self._metrics["polls-total"] += 1
        self._poll_started_ms = self._clock.now_ms()
        self._finish_previous_poll()
        return Timer(self._clock, timeout_ms)

    def _wait_for_records(self, timer: Timer) -> None:
        """Until something was acquired (not decoded yet: it may hold no record) or time is up."""
        while True:
            self._coordinator.drain_driver()
            self._coordinator.raise_if_fatal()
            self._take_fetched()
            if self._buffer:
                break
            self._fetcher.send_fetches(self._coordinator.assignment())
            self._fetcher.send_acknowledgements(only_renew=True)
            remaining = timer.remaining_ms() or 0
            self._client.poll(min(remaining, _POLL_SLICE_MS))
            self._deliver_results()
            if timer.expired():
                self._take_fetched()
                break

    def _fetch_ahead(self, limit: int) -> None:
        """When this poll takes everything acquired so far and the application is slow enough
        for it to pay, ask the brokers for the next records now, before this poll's records
        are made: they arrive while the records are made and the application handles them,
        instead of a round trip after the next poll.

        It pays when the application's time between polls hides a good part of the round trip
        (at least half of what this poll waited for its records). An application faster than
        the broker gains nothing from it, and would lose records per fetch: the records of the
        poll in hand still hold their share of the broker's in-flight limit per partition
        (``share.partition.max.record.locks``) when the fetched-ahead request arrives, since their
        acknowledgements only leave with the next request. The records it brings are acquired
        for this member, locked to it until a poll hands them out or ``close()`` releases them;
        the acknowledgements already made travel with it. Never in the record_limit acquire
        mode, whose point is that the member holds no more than ``max.poll.records``.

        When the records in hand fill the partitions' in-flight limits anyway (several members
        sharing the limits, or a limit below ``max.poll.records``), the broker acquires little
        or nothing for a fetch sent ahead: one request more per poll, at the broker's cost and
        the member's, for no records. So a fetched-ahead answer that brought less than a
        quarter of the records in hand when it left makes the next fetches ahead be skipped:
        1, then 2, 4, ... up to ``_AHEAD_SKIP_MAX`` after each further such answer, and none
        again after one that brought records."""
        got = self._fetcher.take_ahead_yield()
        if got is not None:
            if 4 * got < self._ahead_held:
                self._ahead_backoff = min(2 * self._ahead_backoff or 1, _AHEAD_SKIP_MAX)
                self._ahead_skip = self._ahead_backoff
            else:
                self._ahead_backoff = 0
        buffer = self._buffer
        if not buffer:
            return
        now = self._clock.now_ms()
        work = self._poll_started_ms - self._took_ms if self._took_ms is not None else 0
        waited = now - self._poll_started_ms
        self._took_ms = now
        if not self._fetch_ahead_on or 2 * work < waited:
            return
        held = 0
        for k in range(len(buffer) - 1):    # the poll takes entries while it has fewer than limit
            held += _size_of(buffer[k])
            if held >= limit:
                return
        if self._ahead_skip:
            self._ahead_skip -= 1
            return
        self._ahead_held = held + _size_of(buffer[-1])
        # Not parked at the broker (max wait 0): when the records in hand fill a partition's
        # in-flight limit, nothing can be acquired until their acknowledgements arrive, and
        # those leave only with the next request. The poll's records must reach the
        # application: no wakeup and no delayed task here, and an error is left to the next
        # poll, which fetches again.
        try:
            self._fetcher.send_acknowledgements(only_renew=True)
            if self._fetcher.send_fetches(self._coordinator.assignment(), ahead=True):
                # out onto the wire now; the answer is read by the next poll's network poll
                # (a whole network poll here would cost a poll's worth of bookkeeping more)
                self._client.send_queued()
        except Errors.KafkaError as exc:
            log.debug("share group %s: fetching ahead failed (the next poll fetches again): %r",
                      self.config.group_id, exc)

    def __iter__(self) -> Iterator[ShareConsumerRecord]:
        while not self._closed:
            for records in self.poll(1000).values():
                yield from records

    def _take_fetched(self) -> None:
        acquired = self._fetcher.take_acquired()
        if acquired:
            self._buffer.extend(acquired)

    def _drain_buffer(self, limit: int) -> dict[TopicPartition, list[ShareConsumerRecord]]:
        """Up to ``limit`` records; with batch_optimized acquisition the broker hands out whole
        batches, all of which are this member's until acknowledged, so a batch is returned whole.

        What the poll hands out is remembered for the acknowledgements: in explicit mode by
        offset (``acknowledge(record)`` looks each one up), in implicit mode as runs of offsets
        (the next poll accepts them a run at a time)."""
        out: dict[TopicPartition, list[ShareConsumerRecord]] = {}
        count = 0
        explicit = self.config.explicit_acknowledgement
        deserialize = self._key_deserializer is not None or self._value_deserializer is not None
        while self._buffer and (count < limit or not out):
            entry = self._buffer.popleft()
            runs: list[tuple[int, int]] | None = None
            if isinstance(entry, Acquired):
                if self._voided(entry):
                    continue
                tp = entry.partition
                records, runs = self._fetcher.held_records_of(entry)
            elif isinstance(entry, ShareColumnarRecords):
                tp, records = entry.topic_partition, list(entry)
            else:
                tp, records = entry
            if not records:
                continue
            if deserialize:
                records = [self._deserialize(r) for r in records]
            if tp in out:
                out[tp].extend(records)
            else:
                out[tp] = records
            if explicit:
                self._polled_partitions[tp] = tp
                held = self._unacknowledged.setdefault(tp, {})
                for r in records:
                    held[r.offset] = r
            else:
                held_runs = self._held_runs.get(tp)
                if held_runs is None:
                    held_runs = self._held_runs[tp] = []
                held_runs.extend(runs if runs is not None else [(r.offset, r.offset) for r in records])
            count += len(records)
        self._metrics["records-consumed-total"] += count
        return out

    def _voided(self, entry: Acquired) -> bool:
        """Records acquired through a leader or a session that is gone are not handed out: the
        broker delivers them again, to this member or another (ShareFetcher.voided)."""
        reason = self._fetcher.voided(entry)
        if reason is None:
            return False
        log.info("share group %s: %d acquired offsets of %s not handed out: %s", self.config.group_id,
                 sum(last - first + 1 for first, last, _ in entry.ranges), entry.partition, reason)
        return True

    def _drain_columnar(self, limit: int) -> dict[TopicPartition, ShareColumnarRecords]:
        """As ``_drain_buffer``, in columns (deserializers do not apply: the columns hold bytes)."""
        out: dict[TopicPartition, ShareColumnarRecords] = {}
        count = 0
        while self._buffer and (count < limit or not out):
            entry = self._buffer.popleft()
            if isinstance(entry, Acquired):
                if self._voided(entry):
                    continue
                batch = self._fetcher.columnar_of(entry)
            elif isinstance(entry, ShareColumnarRecords):
                batch = entry
            else:
                self._buffer.appendleft(entry)
                raise Errors.IllegalStateError(
                    "records renewed with acknowledge() come back from poll(), not poll_columnar(); "
                    "renew columnar records with acknowledge_batch() or acknowledge_range()")
            if batch is None:
                continue
            tp = batch.topic_partition
            if tp in out:
                prev = out[tp]
                batch = ShareColumnarRecords(tp, prev._pieces + batch._pieces, prev._counts + batch._counts)
            out[tp] = batch
            count += len(batch)
        for tp, batch in out.items():
            held = self._held_ranges.setdefault(tp, RangeSet())
            for first, last in batch.offset_ranges:
                held.add(first, last)
        self._last_columnar = out
        self._metrics["records-consumed-total"] += count
        return out

    def _deserialize(self, r: ShareConsumerRecord) -> ShareConsumerRecord:
        kd, vd = self._key_deserializer, self._value_deserializer
        if kd is None and vd is None:
            return r
        key = kd(r.topic, r.headers, r.key) if kd is not None else r.key
        value = vd(r.topic, r.headers, r.value) if vd is not None else r.value
        return r._replace(key=key, value=value)

    def _finish_previous_poll(self) -> None:
        """Implicit mode: accept what the previous poll returned. Explicit mode: refuse to go
        on while some of it is unacknowledged."""
        if self.config.explicit_acknowledgement:
            self._refuse_unacknowledged()
        self._accept_last_poll()
        self._forget_last_poll()
        for entry in reversed(self._renewed):   # renewed records come back first
            self._buffer.appendleft(entry)
        self._renewed = []

    def _refuse_unacknowledged(self) -> None:
        """Explicit mode: raise while some record of the previous poll is unacknowledged."""
        pending = [offs for offs in self._unacknowledged.values() if offs]
        ranges = [held for held in self._held_ranges.values() if held]
        if pending or ranges:
            count = sum(len(o) for o in pending) + sum(len(h) for h in ranges)
            raise Errors.IllegalStateError(
                f"{count} record(s) of the previous poll are not acknowledged; in explicit "
                "acknowledgement mode acknowledge every record (acknowledge(record, type), or "
                "acknowledge_batch / acknowledge_range after poll_columnar) before polling again")

    # ------------------------------------------------------------------ acknowledgements
    @_one_thread
    def acknowledge(self, record_or_topic: ShareConsumerRecord | str, partition: int | None = None,
                    offset: int | None = None, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge one record of the last poll (explicit mode): ``acknowledge(record,
        type)`` or ``acknowledge(topic, partition, offset, type)``."""
        self._check_open()
        # (topic, partition) as a plain tuple: equal to, and hashed as, the TopicPartition that
        # keys the poll's records, and cheaper to make once per record
        key: tuple[str, int]
        if isinstance(record_or_topic, str):
            if partition is None or offset is None:
                raise TypeError("acknowledge(topic, partition, offset, type) needs the partition and the offset")
            key, off = (record_or_topic, partition), offset
        else:
            if partition is not None and offset is None and isinstance(partition, AcknowledgeType):
                type = partition       # acknowledge(record, AcknowledgeType.X)
            key, off = (record_or_topic.topic, record_or_topic.partition), record_or_topic.offset
        kind = type if type.__class__ is AcknowledgeType else AcknowledgeType(type)
        if not self.config.explicit_acknowledgement:
            raise Errors.IllegalStateError(
                "acknowledge() needs share.acknowledgement.mode=explicit; in implicit mode the records "
                "of a poll are accepted by the next poll or commit")
        held = self._unacknowledged.get(key)        # type: ignore[call-overload]
        record = held.pop(off, None) if held is not None else None
        if record is None:
            tp = TopicPartition(*key)
            if (tp, off) in self._acknowledged:
                raise Errors.IllegalStateError(f"record {tp.topic}-{tp.partition}@{off} is already acknowledged")
            if tp in self._held_ranges:
                self._acknowledge_ranges(tp, [(off, off)], kind)
                return
            raise Errors.IllegalStateError(
                f"record {tp.topic}-{tp.partition}@{off} was not returned by this consumer's last poll")
        tp = self._polled_partitions[key]
        self._acknowledged.add((tp, off))
        self._fetcher.acknowledge(tp, off, kind)
        if kind is AcknowledgeType.RENEW:
            self._renewed.append((tp, [record]))

    @_one_thread
    def acknowledge_batch(self, batch: ShareColumnarRecords, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge every row of a ``ShareColumnarRecords`` the last ``poll_columnar()``
        returned (explicit mode): one acknowledgement per run of offsets, not per record."""
        self._check_open()
        if not isinstance(batch, ShareColumnarRecords):
            raise TypeError(f"acknowledge_batch() takes a ShareColumnarRecords, not {batch.__class__.__name__}")
        self._acknowledge_ranges(batch.topic_partition, batch.offset_ranges, AcknowledgeType(type))

    @_one_thread
    def acknowledge_range(self, topic: str, partition: int, first: int, last: int,
                          type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge the records at offsets ``first..last`` (inclusive) that the last
        ``poll_columnar()`` returned (explicit mode); every offset in the range must be one
        of them (``acknowledge_batch`` takes a batch whose offsets have holes)."""
        self._check_open()
        if last < first:
            raise ValueError(f"acknowledge_range: last offset {last} is before first offset {first}")
        self._acknowledge_ranges(TopicPartition(topic, partition), [(first, last)], AcknowledgeType(type))

    def _acknowledge_ranges(self, tp: TopicPartition, ranges: list[tuple[int, int]], kind: AcknowledgeType) -> None:
        if not self.config.explicit_acknowledgement:
            raise Errors.IllegalStateError(
                "acknowledging needs share.acknowledgement.mode=explicit; in implicit mode the records "
                "of a poll are accepted by the next poll or commit")
        held = self._held_ranges.get(tp)
        acked = self._acked_ranges.get(tp)
        for first, last in ranges:      # every range is checked before any is acknowledged
            what = f"{tp.topic}-{tp.partition}@{first}" + ("" if first == last else f"..{last}")
            if acked is not None and acked.touches(first, last):
                raise Errors.IllegalStateError(f"record(s) {what} already acknowledged")
            if held is None or not held.covers(first, last):
                raise Errors.IllegalStateError(f"record(s) {what} were not returned by this consumer's last poll")
        assert held is not None
        acked = self._acked_ranges.setdefault(tp, RangeSet())
        for first, last in ranges:
            held.remove(first, last)
            acked.add(first, last)
            self._fetcher.acknowledge_range(tp, first, last, kind)
            if kind is AcknowledgeType.RENEW:
                batch = self._last_columnar.get(tp)
                renewed = batch.select(first, last) if batch is not None else None
                if renewed is not None:
                    self._renewed.append(renewed)

    @_one_thread
    def commit_sync(self, timeout_ms: int | None = None) -> dict[TopicPartition, BaseException | None]:
        """Send every acknowledgement made (implicit mode: accept the last poll's records) and
        wait for the broker's answers: ``{TopicPartition: None or the error}``."""
        self._check_open()
        if not self.config.explicit_acknowledgement:
            self._accept_last_poll()
        limit_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        timer = Timer(self._clock, limit_ms)
        results: dict[TopicPartition, BaseException | None] = {}
        while True:
            self._fetcher.send_acknowledgements()
            for r in self._deliver_results():
                if r.error is not None or r.partition not in results:
                    results[r.partition] = r.error
            if not self._fetcher.pending_acknowledgements() and not self._fetcher.in_flight():
                break
            if timer.expired():
                # Sent and not answered, the outcome is unknown (the broker may have taken
                # them); not sent yet (the leader's previous request is still unanswered),
                # they leave when it is. Either way the answer, if one comes, goes to the
                # commit callback.
                for tp in self._fetcher.acknowledgements_in_flight():
                    if tp not in results:
                        results[tp] = Errors.KafkaTimeoutError(
                            f"no answer to the acknowledgements of {tp} within {limit_ms} ms")
                for tp in self._fetcher.acknowledgements_waiting():
                    if tp not in results:
                        results[tp] = Errors.KafkaTimeoutError(
                            f"the acknowledgements of {tp} were not sent within {limit_ms} ms (no answer yet to"
                            " its leader's previous request, or no leader known)")
                break
            self._client.poll(min(timer.remaining_ms() or 0, _POLL_SLICE_MS))
        return results

    @_one_thread
    def commit_async(self) -> None:
        """Send every acknowledgement made; the commit callback gets the outcome."""
        self._check_open()
        if not self.config.explicit_acknowledgement:
            self._accept_last_poll()
        self._fetcher.send_acknowledgements()
        self._client.poll(0)

    def _accept_last_poll(self) -> None:
        for tp, offsets in self._unacknowledged.items():
            for offset in offsets:
                self._fetcher.acknowledge(tp, offset, AcknowledgeType.ACCEPT)
                self._acknowledged.add((tp, offset))
        self._unacknowledged = {}
        if self._held_runs:
            self._fetcher.accept_runs(self._held_runs)
            self._held_runs = {}
        # what was acknowledged is remembered only where a second acknowledgement can come:
        # explicit mode (in implicit mode acknowledging is refused whatever was polled)
        explicit = self.config.explicit_acknowledgement
        for tp, held in self._held_ranges.items():
            acked = self._acked_ranges.setdefault(tp, RangeSet()) if explicit else None
            for first, last in held:
                self._fetcher.acknowledge_range(tp, first, last, AcknowledgeType.ACCEPT)
                if acked is not None:
                    acked.add(first, last)
        self._held_ranges = {}

    def set_acknowledgement_commit_callback(self, callback: AcknowledgementCommitCallback | None) -> None:
        """``callback({TopicPartition: offsets}, exception or None)`` after each answer to
        acknowledgements, on the thread that polls; ``offsets`` is a set of ints (kept as
        ranges, so a columnar batch's acknowledgement makes no object per record)."""
        self._callback = callback

    def _deliver_results(self) -> list[AckResult]:
        results = self._fetcher.take_results()
        for r in results:
            self._metrics["acknowledgements-sent-total"] += r.count
            if r.error is not None:
                self._metrics["acknowledgements-failed-total"] += r.count
                log.info("share group %s: acknowledgements of %s failed: %r", self.config.group_id,
                         r.partition, r.error)
            if self._callback is not None:
                try:
                    self._callback({r.partition: r.offsets}, r.error)
                except Exception:
                    log.exception("acknowledgement commit callback failed")
        return results

    # ------------------------------------------------------------------ the rest
    def acquisition_lock_timeout_ms(self) -> int | None:
        """The broker's record lock duration, once a fetch has told it (None before)."""
        return self._fetcher.acquisition_lock_timeout_ms

    def wakeup(self) -> None:
        """Make a poll in progress (or the next one) raise ``WakeupError``; any thread."""
        self._client.wakeup()

    def metrics(self) -> dict[str, Any]:
        """Counters since the consumer was made: records handed out, acknowledgements sent and
        failed, polls; ShareFetch requests (``fetch-total``) and ShareAcknowledge requests
        (``acknowledge-request-total``) sent, and the records a fetch answer acquired on average
        (``records-per-request-avg``); the member epoch and the partitions assigned now."""
        counts = self._fetcher.counts
        answers = counts["fetch-answers-total"]
        return dict(self._metrics, **{
            "fetch-total": counts["fetch-total"], "acknowledge-request-total": counts["acknowledge-request-total"],
            "records-per-request-avg": counts["records-acquired-total"] / answers if answers else 0.0,
            "member-epoch": self._coordinator.membership.member_epoch,
            "assigned-partitions": len(self._coordinator.assignment())})

    def _check_open(self) -> None:
        if self._closed:
            raise Errors.IllegalStateError("the share consumer is closed")

    @_one_thread
    def close(self, timeout_ms: int | None = None) -> None:
        """Send the acknowledgements made (implicit mode: accept the last poll's records),
        close every share session (the broker releases the records this member holds and did
        not acknowledge), leave the group."""
        if self._closed:
            return
        timer = Timer(self._clock, _CLOSE_TIMEOUT_MS if timeout_ms is None else timeout_ms)
        try:
            # a wakeup() not consumed by a poll (say, from a signal handler between two polls)
            # must not cut the close short, as in the Java client: it would leave the sessions open
            with self._client.wakeups_disabled():
                self._end_sessions(timer)
                self._coordinator.close(timer.remaining_ms())
        finally:
            self._closed = True
            self._client.close()

    def __enter__(self) -> "KafkaShareConsumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

