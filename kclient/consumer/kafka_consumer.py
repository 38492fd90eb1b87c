"""KafkaConsumer: a drop-in for kafka-python's consumer, with a columnar fast path.

Settings: kafka-python keywords (``bootstrap_servers=...``), Java-style dotted keys in a dict
(``KafkaConsumer({"bootstrap.servers": ...})``), or both; unknown or ill-typed settings fail
at construction naming the setting. Topics given positionally are subscribed at once
(``KafkaConsumer("my-topic", group_id=...)``).

``poll()`` follows mechanisms §7: honour a pending ``wakeup()``; bring group membership and
positions up to date within the remaining time; return buffered records at once, sending
the next fetches *before* returning them (the network works while the caller processes);
otherwise send fetches and block on the network until one completes, the time runs out, or
the coordinator needs attention; return nothing while a rejoin is pending.

Threads: the consumer is used by one thread at a time. A second thread entering any method
(other than ``wakeup()``) gets ConcurrentAccessError; ``wakeup()`` from any thread makes a
blocking ``poll()`` raise WakeupError.

Differences from kafka-python: ``security_protocol`` may be PLAINTEXT, SSL, SASL_PLAINTEXT or
SASL_SSL, with SASL PLAIN, SCRAM-SHA-256/512 or OAUTHBEARER (GSSAPI is refused); ``api_version``
only makes the constructor skip its bootstrap probe (request versions are negotiated with each
broker); a pattern matches whole topic names (Java's rule), not prefixes.
"""
from __future__ import annotations

import atexit
import collections
import logging
import math
import os
import re
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Literal, Mapping, overload

from kcore.cursor import ListCursor

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.config import ConsumerConfig, IsolationLevel  # noqa: F401 (IsolationLevel: kafka-python name)
from kclient.consumer.consumer_settings import ConsumerSettings
from kclient.network.consumer_network_client import ConsumerNetworkClient
from kclient.consumer.deserializers import DefaultSerializer, JsonSerializer  # noqa: F401 (kafka-python names)
from kclient.consumer.deserializers import close_plugins
from kclient.subscription.listener import ConsumerRebalanceListener  # noqa: F401
from kclient.consumer.metrics import ConsumerMetrics
from kclient.consumer.metric_gauges import collect_consumer_metrics
from kclient.consumer.metrics_push import consumer_telemetry
from kclient.consumer.fetcher import Fetcher
from kclient.consumer.interceptors import ConsumerInterceptors
from kclient.consumer.missing_topics import MissingTopicWarner, requested_topics
from kclient.consumer.offset_fetcher import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, OffsetFetcher
from kclient.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from kclient.consumer.columnar import ColumnarRecords
from kclient.group.consumer_coordinator import ConsumerCoordinator
from kclient.group.consumer_group_coordinator import ConsumerGroupCoordinator
from kclient.group.member_coordinator import MemberCoordinator
from kclient.network.future import RequestFuture
from kclient.subscription.state import FetchPosition, OffsetResetStrategy, SubscriptionState

__all__ = ["KafkaConsumer", "IsolationLevel", "TopicPartition", "OffsetAndMetadata", "JsonSerializer",
           "DefaultSerializer", "ConsumerRebalanceListener"]

log = logging.getLogger(__name__)


# Iteration polls in slices this long so that consumer_timeout_ms=inf stays responsive.
_ITER_POLL_MS = 1000
# Iteration takes records from the buffer in chunks that grow while the application hands
# them out quickly: a chunk handed out within _ITER_FAST_MS doubles the next one, up to
# _ITER_MAX_CHUNK_RECORDS records and about _ITER_MAX_CHUNK_BYTES of fetched data (never
# below max.poll.records); a slower one brings it back to max.poll.records. A fast loop then
# pays the poll's fixed cost once per thousands of records, while a loop that takes its time
# per record still reaches poll() (heartbeat checks, auto-commit, rebalances, wakeup) as
# often as with max.poll.records. The byte bound keeps the records alive at once (their
# values are copies) about what max.poll.records of small values hold.
_ITER_FAST_MS = 20
_ITER_MAX_CHUNK_RECORDS = 8192
_ITER_MAX_CHUNK_BYTES = 1 << 20
# The cursor's partition while it holds the records of several partitions of one poll.
_SEVERAL = TopicPartition("", -1)

# Consumers still open, closed when the interpreter exits (Ctrl-C out of a loop included):
# a member that leaves is replaced at once, one that does not holds its partitions until
# its session times out (45 s by default). Weak references: registering keeps nothing alive.
_open_consumers: "weakref.WeakSet[KafkaConsumer]" = weakref.WeakSet()
# Each one's close() at exit is bounded by this: a normal leave takes one round trip, and a
# broker that does not answer must not hold up the exit.
EXIT_CLOSE_TIMEOUT_MS = 3000


def _close_open_consumers() -> None:
    for consumer in list(_open_consumers):
        if consumer._pid != os.getpid() or consumer._closed:
            continue
        try:
            log.info("closing a consumer left open at interpreter exit (group %s)", consumer.config["group.id"])
            consumer.close(timeout_ms=EXIT_CLOSE_TIMEOUT_MS)
        except Exception as exc:  # another thread still inside it, a failing interceptor...
            log.warning("could not close a consumer left open at interpreter exit: %r", exc)


atexit.register(_close_open_consumers)
# A forked child's copies share the parent's sockets and membership: never close them there.
os.register_at_fork(after_in_child=_open_consumers.clear)


def _as_tp(tp) -> TopicPartition:
    if isinstance(tp, TopicPartition):
        return tp
    try:
        topic, partition = tp
    except (TypeError, ValueError):
        raise TypeError(f"expected a TopicPartition, got {tp!r}") from None
    return TopicPartition(topic, partition)


def _check_timeout(timeout_ms, what: str = "timeout_ms") -> int:
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)):
        raise TypeError(f"{what} must be a number of milliseconds, got {timeout_ms!r}")
    if timeout_ms < 0:
        raise Errors.IllegalArgumentError(f"{what} must not be negative, got {timeout_ms}")
    return int(timeout_ms)


def _refill_of(consumer: "KafkaConsumer"):
    """The iteration cursor's refill, holding the consumer weakly: a consumer dropped without
    close() is then freed (and its connections closed) at once, not when the cyclic GC runs."""
    ref = weakref.ref(consumer)

    def refill():
        owner = ref()
        if owner is None:
            raise StopIteration
        return owner._next_record()
    return refill


class KafkaConsumer:
    """Consume records from Kafka (see the module doc)."""

    def __init__(self, *topics: Any, clock: Clock | None = None, **configs: Any):
        dicts = [t for t in topics if isinstance(t, Mapping)]
        names = [t for t in topics if not isinstance(t, Mapping)]
        merged: dict[str, Any] = {}
        for d in dicts:
            merged.update(d)
        for t in names:
            if not isinstance(t, str):
                raise TypeError(f"topics are given as str, got {t!r}")
        self.config = ConsumerConfig(merged, **configs)
        cfg = self.config
        # Every component's typed settings, built once (cross-setting checks happen here).
        settings = ConsumerSettings.of(cfg)
        self._closed = True  # until construction completes: close()/__del__ do nothing
        self._clock = clock or SYSTEM_CLOCK
        self._guard = threading.Lock()
        self._owner: int | None = None
        self._owner_depth = 0
        self._metrics: collections.Counter[str] = collections.Counter()
        # Iteration (see __iter__): the cursor holds the partition being handed out
        # (``_iter_tp``), ``_iter_queue`` the rest of that poll's partitions; or the records of
        # all of a poll's partitions (``_iter_tp`` is ``_SEVERAL``): ``_iter_parts`` lists
        # each one's partition and the end of its records in the cursor's list, the first
        # ``_iter_parts_done`` of them handed out and accounted.
        self._cursor: ListCursor = ListCursor(_refill_of(self))
        self._iter_tp: TopicPartition | None = None
        self._iter_parts: list[tuple[TopicPartition, int]] = []
        self._iter_parts_done = 0
        self._iter_queue: list[tuple[TopicPartition, list]] = []
        self._iter_poll_ends: dict[TopicPartition, FetchPosition] = {}
        self._iter_poll_epoch = 0
        self._consumer_timeout_ms = cfg["consumer.timeout.ms"]
        self._iter_last: dict[TopicPartition, Any] = {}          # last record handed out
        self._iter_ends: dict[TopicPartition, FetchPosition] = {}
        self._iter_pending: set[TopicPartition] = set()          # records of the poll not all handed out
        self._iter_epoch = 0
        self._max_poll_records = cfg["max.poll.records"]
        self._iter_chunk = self._max_poll_records   # records the next refill takes at most
        self._iter_chunk_ms: int | None = None      # when the last refill's records arrived
        self._local_assignment_version = -1
        self._retry_backoff_ms = cfg["retry.backoff.ms"]
        self._default_api_timeout_ms = cfg["default.api.timeout.ms"]
        self._request_timeout_ms = cfg["request.timeout.ms"]
        self._client = ConsumerNetworkClient(config=settings.network, clock=self._clock,
                                             max_response_bytes=cfg["receive.message.max.bytes"])
        self._metadata = self._client.metadata
        try:
            self._subscriptions = SubscriptionState(cfg["auto.offset.reset"], cfg["exclude.internal.topics"])
            subscriptions = self._subscriptions
            self._metadata.add_listener(MissingTopicWarner(lambda: requested_topics(subscriptions),
                                                           cfg["allow.auto.create.topics"], self._clock))
            self._stats = ConsumerMetrics(cfg["metrics.sample.window.ms"], cfg["metrics.num.samples"])
            self._client.client.stats = self._stats
            if cfg["enable.metrics.push"]:
                self._client.client.telemetry = consumer_telemetry(self, settings.rebalance.group_id)
            self._fetcher = Fetcher(self._client, self._subscriptions, settings.fetch, clock=self._clock,
                                    metrics=self._metrics, stats=self._stats)
            self._offsets = OffsetFetcher(
                self._client, self._subscriptions, isolation_level=cfg["isolation.level"],
                request_timeout_ms=self._request_timeout_ms, retry_backoff_ms=self._retry_backoff_ms,
                clock=self._clock, on_position_reset=self._fetcher.clear_partition)
            self._interceptors = ConsumerInterceptors.from_config(cfg)
            self._coordinator: MemberCoordinator | None = None
            if settings.rebalance.group_id is not None and settings.coordinator.group_protocol == "consumer":
                self._coordinator = ConsumerGroupCoordinator(
                    self._client, self._subscriptions, self._metadata, settings.rebalance, settings.coordinator,
                    clock=self._clock, interceptors=self._interceptors)
            elif settings.rebalance.group_id is not None:
                self._coordinator = ConsumerCoordinator(
                    self._client, self._subscriptions, self._metadata, settings.rebalance, settings.coordinator,
                    clock=self._clock, interceptors=self._interceptors, stats=self._stats)
            if cfg["api.version"] is None:
                # kafka-python probes the cluster here: an unreachable bootstrap fails at once.
                wait = (cfg["bootstrap.timeout.ms"] if cfg.is_set("bootstrap.timeout.ms")
                        and not cfg.is_set("api.version.auto.timeout.ms") else cfg["api.version.auto.timeout.ms"])
                self._client.ensure_bootstrapped(wait)
        except BaseException:
            self._client.close()
            raise
        self._closed = False
        self._pid = os.getpid()
        _open_consumers.add(self)
        if names:
            self.subscribe(names)
        log.debug("consumer created: %r", cfg)

    # ------------------------------------------------------------------ one thread at a time
    def _acquire(self) -> None:
        # The lock is the ownership token (held across the whole call, released at the end);
        # a failed non-blocking acquire is either a re-entrant call (same thread) or a second
        # thread, which is refused instead of waiting.
        if self._guard.acquire(False):
            self._owner = threading.get_ident()
            return
        if self._owner == threading.get_ident():
            self._owner_depth += 1
            return
        raise Errors.ConcurrentAccessError(
            "KafkaConsumer is not safe for multi-threaded access: another thread is using "
            "it right now (only wakeup() may be called from other threads)")

    def _release(self) -> None:
        if self._owner_depth:
            self._owner_depth -= 1
        else:
            self._owner = None
            self._guard.release()

    def _acquire_open(self) -> None:
        self._acquire()
        if self._closed:
            self._release()
            raise Errors.IllegalStateError("This consumer has already been closed.")

    # ------------------------------------------------------------------ subscription
    def subscribe(self, topics: Iterable[str] = (), pattern: str | re.Pattern | None = None, listener=None) -> None:
        """Subscribe to a topic list or a regex pattern: group-managed with group_id; without
        one (as in kafka-python) this consumer takes every partition of those topics."""
        self._acquire_open()
        try:
            self._changed()
            if isinstance(topics, str):
                topics = [topics]
            topics = list(topics or ())
            if topics and pattern is not None:
                raise Errors.IllegalStateError("subscribe() takes topics or a pattern, not both")
            if not topics and pattern is None:
                raise Errors.IllegalStateError("subscribe() needs topics or a pattern (use unsubscribe() to stop)")
            self._local_assignment_version = -1
            if pattern is not None:
                self._subscriptions.subscribe_pattern(pattern, listener)
                self._metadata.set_need_all_topics(True)
                self._metadata.request_update()
            else:
                self._fetcher.clear_all()
                if self._subscriptions.subscribe(topics, listener):
                    self._metadata.set_topics(self._subscriptions.metadata_topics())
                    self._metadata.request_update()
            log.info("subscribed to %s", pattern if pattern is not None else sorted(topics))
        finally:
            self._release()

    def subscription(self) -> set[str] | None:
        """The subscribed topics (None if not subscribed)."""
        self._acquire_open()
        try:
            subs = self._subscriptions.subscription
            return set(subs) if subs or self._subscriptions.has_auto_assigned_partitions() else None
        finally:
            self._release()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Assign partitions by hand (no group management); an empty list unassigns."""
        self._acquire_open()
        try:
            self._changed()
            parts = [_as_tp(tp) for tp in partitions]
            if not parts:
                self._unsubscribe()
                return
            if self._subscriptions.assign_from_user(parts):
                self._metadata.set_topics({tp.topic for tp in parts})
                self._metadata.request_update()
        finally:
            self._release()

    def assignment(self) -> set[TopicPartition]:
        self._acquire_open()
        try:
            return self._subscriptions.assigned_partitions()
        finally:
            self._release()

    def unsubscribe(self) -> None:
        """Stop consuming: leave the group (if any) and drop the assignment."""
        self._acquire_open()
        try:
            self._changed()
            self._unsubscribe()
        finally:
            self._release()

    def _unsubscribe(self) -> None:
        self._fetcher.clear_all()
        coordinator = self._coordinator
        if coordinator is not None and self._subscriptions.has_auto_assigned_partitions():
            for step in ("on_leave_prepare", "maybe_leave_group"):
                fn = getattr(coordinator, step, None)
                if fn is not None:
                    try:
                        fn() if step == "on_leave_prepare" else fn("the consumer unsubscribed from all topics")
                    except Errors.KafkaError as exc:
                        log.warning("leaving the group while unsubscribing failed: %s", exc)
        self._subscriptions.unsubscribe()
        self._metadata.set_need_all_topics(False)
        self._metadata.set_topics(())

    # ------------------------------------------------------------------ poll
    def poll(self, timeout_ms: int = 0, max_records: int | None = None, update_offsets: bool = True,
             ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched since the last poll, {TopicPartition: [ConsumerRecord, ...]}, waiting
        up to timeout_ms for some. At most max_records (default max.poll.records) in all."""
        self._acquire_open()
        try:
            if self._iterating():
                self._abandon_iteration()
            records, _ = self._poll(timeout_ms, max_records, update_offsets, columnar=False)
            return records
        finally:
            self._stats.poll_ended(self._clock.now_ms())
            self._release()

    def poll_columnar(self, timeout_ms: int = 0, max_records: int | None = None,
                      ) -> dict[TopicPartition, ColumnarRecords]:
        """Like poll(), but each partition's records come as one ColumnarRecords (arrays, or
        ``.to_arrow()``), without a Python object per record. Positions advance as with
        poll(); max_records defaults to max.poll.records (pass a large value for throughput).
        Interceptors' on_consume receive this dict."""
        self._acquire_open()
        try:
            if self._iterating():
                self._abandon_iteration()
            records, _ = self._poll(timeout_ms, max_records, True, columnar=True)
            return records
        finally:
            self._stats.poll_ended(self._clock.now_ms())
            self._release()

    def _poll(self, timeout_ms, max_records, update_offsets: bool, columnar: bool, now_ms: int | None = None):
        """``now_ms``: the clock as the caller just read it (None: read it here)."""
        timeout_ms = _check_timeout(timeout_ms)
        if max_records is not None and (isinstance(max_records, bool) or not isinstance(max_records, int)
                                        or max_records < 1):
            raise Errors.IllegalArgumentError(f"max_records must be a positive int, got {max_records!r}")
        if self._subscriptions.has_no_subscription_or_user_assignment():
            raise Errors.IllegalStateError("Consumer is not subscribed to any topics or assigned any partitions")
        self._flush_iteration()
        clock = self._clock
        now = clock.now_ms() if now_ms is None else now_ms
        deadline = now + timeout_ms
        # This poll's time-between-poll goes into its metrics with what it hands out (one
        # event for both), or on its own if the first pass hands out nothing.
        gap = self._stats.poll_gap(now)
        coordinator = self._coordinator
        if coordinator is not None:
            coordinator.record_poll(now)
        started: int | None = now    # the clock as of the first pass (records buffered: the usual poll)
        while True:
            try:
                self._client.maybe_trigger_wakeup()
                self._update_assignment_metadata_if_needed(deadline, started)
                records, ends = self._poll_for_fetches(deadline, max_records, update_offsets, columnar, started, gap)
            except BaseException:
                if gap is not None:
                    self._stats.record_poll_gap(gap)
                raise
            started = None
            if gap is not None:
                if not records:
                    self._stats.record_poll_gap(gap)
                gap = None
            if records:
                # Pipelining: the next fetches leave before the caller processes these records.
                # A fetch held back by its leader (a metadata refresh due first, a connection
                # being made) needs a network poll too, or it waits until the buffer is empty.
                # Otherwise handing the queued requests over is enough: connections write
                # them at once, and the next poll reads the answers (a zero-timeout network
                # poll here was a tenth of the per-record path's time).
                fetcher = self._fetcher
                fetcher.send_fetches()
                if fetcher.sends_blocked:
                    self._client.transmit_sends()
                else:
                    self._client.send_queued()
                if columnar and not fetcher.has_completed_fetches() and self._client.frames_waiting():
                    # The drain emptied the buffer and an answer completed while it decoded:
                    # the answer is taken now and what follows it is asked for before the
                    # application reads these columns, not when it polls again (the broker
                    # would idle meanwhile). Nothing is buffered any more, so that fetch covers
                    # the same partitions as one sent from the next poll.
                    self._client.transmit_sends()
                    fetcher.send_fetches()
                    if fetcher.sends_blocked:
                        self._client.transmit_sends()
                    else:
                        self._client.send_queued()
                if self._interceptors:
                    records = self._interceptors.on_consume(records)
                return records, ends
            if clock.now_ms() >= deadline:
                return {}, {}

    def _update_assignment_metadata_if_needed(self, deadline: int, now_ms: int | None = None) -> bool:
        """``now_ms``: the clock as the caller just read it (None: read it here)."""
        coordinator = self._coordinator
        if coordinator is not None:
            if not coordinator.poll(max(deadline - (self._clock.now_ms() if now_ms is None else now_ms), 0)):
                return False
        elif self._subscriptions.has_auto_assigned_partitions():
            self._assign_all_partitions_locally()
        return self._update_fetch_positions(deadline)

    def _assign_all_partitions_locally(self) -> None:
        """kafka-python's rule for a subscription without group_id: no group, this consumer
        takes every partition of the subscribed (or matching) topics, re-checked on each
        metadata update."""
        version = self._metadata.update_version
        if version == self._local_assignment_version:
            return
        self._local_assignment_version = version
        subs = self._subscriptions
        cluster = self._metadata.cluster
        if subs.has_pattern_subscription():
            subs.subscribe_from_pattern(subs.topics_matching_pattern(cluster.topics(), cluster.internal_topics))
        parts = [TopicPartition(t, p.partition) for t in sorted(subs.subscription)
                 for p in cluster.partitions_for_topic(t) or ()]
        if set(parts) != subs.assigned_partitions():
            log.info("no group_id: assigning every partition of %s to this consumer", sorted(subs.subscription))
            subs.assign_from_subscribed(parts)

    def _update_fetch_positions(self, deadline: int) -> bool:
        subs = self._subscriptions
        if subs.has_all_fetch_positions():
            # Every partition is FETCHING, so none awaits validation: the usual poll.
            return True
        self._offsets.validate_positions_if_needed()
        if subs.has_all_fetch_positions():
            return True
        coordinator = self._coordinator
        if coordinator is not None and subs.initializing_partitions():
            if not coordinator.committer.refresh_committed_offsets_if_needed(max(deadline - self._clock.now_ms(), 0)):
                return False
        subs.reset_initializing_positions()
        self._offsets.reset_positions_if_needed()
        return True

    def _poll_for_fetches(self, deadline: int, max_records, update_offsets: bool, columnar: bool,
                          now_ms: int | None = None, gap: tuple[int, int] | None = None):
        """Buffered records, else what a network poll brings. ``now_ms``: the clock as the
        caller just read it (None: the collector reads it for the metrics); ``gap``: the
        poll's time-between-poll, recorded with the records if there are any."""
        fetched = self._fetcher.fetched_columnar if columnar else self._fetcher.fetched_records
        records, ends = fetched(max_records, update_offsets, now_ms, gap)
        if records:
            return records, ends
        # Timeouts are worked out only when there is nothing buffered to return.
        now = self._clock.now_ms()
        remaining = max(deadline - now, 0)
        coordinator = self._coordinator
        poll_timeout = remaining if coordinator is None else min(coordinator.time_to_next_poll(now), remaining)
        self._fetcher.send_fetches()
        if poll_timeout > self._retry_backoff_ms and not self._subscriptions.has_all_fetch_positions():
            poll_timeout = self._retry_backoff_ms  # positions pending: come back soon to reset them
        fetcher = self._fetcher
        if not fetcher.has_available_fetches():
            self._client.poll(max(poll_timeout, 0))
            # Answers that just arrived: ask for what follows them before decoding them, so
            # the broker works on the next answer while this thread decodes (a poll that
            # drains everything, as poll_columnar's usually does, otherwise leaves the
            # connection idle until the decode is done).
            if fetcher.has_completed_fetches() and fetcher.send_fetches() and not fetcher.sends_blocked:
                self._client.send_queued()
        if coordinator is not None and coordinator.rejoin_needed_or_pending():
            return {}, {}  # let the group stabilise before handing out more records
        return fetched(max_records, update_offsets, None, gap)

    # ------------------------------------------------------------------ iteration
    # kafka-python's iteration: records one by one, each partition's position following the
    # records handed out, so a commit between two records commits exactly what was consumed.
    # ``for record in consumer`` iterates a compiled ListCursor loaded with a poll's records
    # (all its partitions at once; one partition at a time after the application changed
    # something mid-poll): handing out a record runs no Python code, so the loop costs what
    # poll() does. The cursor calls ``_next_record`` (under the consumer's lock) when its
    # list runs out or when the application changed something between two records (a seek, a
    # pause, an assignment: ``_changed`` holds the cursor). Positions are written lazily
    # (``_flush_iteration``) before anything reads them, from the cursor's index.
    def __iter__(self) -> ListCursor[ConsumerRecord]:
        return self._cursor

    def __next__(self) -> ConsumerRecord:
        return self._cursor.__next__()

    def _iterating(self) -> bool:
        return bool(self._iter_queue) or self._iter_tp is not None

    def _next_record(self):
        """The cursor's refill: the next record after the checks the fast path skips, or
        StopIteration (consumer closed, or nothing within consumer_timeout_ms)."""
        self._acquire()
        try:
            if self._closed:
                self._abandon_iteration()
                raise StopIteration("the consumer is closed")  # kafka-python ends iteration
            cursor = self._cursor
            deadline = None
            while True:
                tp = self._iter_tp
                if tp is _SEVERAL:
                    if cursor.held:
                        self._split_several()   # the application changed something
                    elif cursor.remaining:      # just loaded
                        return cursor.__next__()
                    else:
                        self._finish_several()
                    continue
                if tp is not None:
                    if cursor.held:
                        if self._still_in_order(tp):
                            cursor.resume()
                            return cursor.__next__()
                        self._drop_current(tp)
                    elif cursor.remaining:  # just loaded
                        return cursor.__next__()
                    else:
                        self._finish_current(tp)
                        queue = self._iter_queue
                        if queue and self._iter_epoch == self._iter_poll_epoch:
                            # The poll's next partition, nothing changed since: _load_next
                            # without the hold, and its first record.
                            self._iter_tp, recs = queue.pop()
                            cursor.load(recs)
                            return cursor.__next__()
                    continue
                if self._iter_queue:
                    self._load_next()
                    continue
                now = self._clock.now_ms()
                if deadline is None:
                    timeout = self._consumer_timeout_ms
                    deadline = now + timeout if timeout != math.inf else math.inf
                if now >= deadline:
                    raise StopIteration
                wait = deadline - now
                wait = _ITER_POLL_MS if not math.isfinite(wait) else min(int(wait), _ITER_POLL_MS)
                self._size_iteration_chunk(now)
                records, ends = self._poll(wait, self._iter_chunk, False, False, now)
                if records:
                    self._iter_chunk_ms = self._clock.now_ms()
                    self._iter_pending.update(records)
                    self._iter_poll_ends = ends
                    self._iter_poll_epoch = self._iter_epoch
                    if len(records) > 1:
                        self._load_several(records)
                    else:
                        self._iter_queue = list(records.items())
                if self._closed:
                    raise StopIteration("the consumer is closed")
        except StopIteration:
            raise
        except BaseException:
            # WakeupError, a poll error...: the records not handed out are fetched again by
            # the next iteration.
            self._abandon_iteration()
            raise
        finally:
            self._release()

    def _size_iteration_chunk(self, now: int) -> None:
        """Before a refill: the previous chunk's records were all handed out; grow the next
        chunk if that was quick, else go back to max.poll.records."""
        started = self._iter_chunk_ms
        if started is None:
            return
        self._iter_chunk_ms = None
        if now - started <= _ITER_FAST_MS:
            per_record = self._fetcher.collector.bytes_per_record
            cap = min(_ITER_MAX_CHUNK_RECORDS, _ITER_MAX_CHUNK_BYTES // max(per_record, 1))
            self._iter_chunk = max(min(self._iter_chunk * 2, cap), self._max_poll_records)
        else:
            self._iter_chunk = self._max_poll_records

    def _load_several(self, records: dict[TopicPartition, list]) -> None:
        """Put all of a poll's partitions into the cursor, in the poll's order: the cursor
        comes back once for them all, not once per partition."""
        items: list = []
        parts = []
        for tp, recs in records.items():
            items += recs
            parts.append((tp, len(items)))
        self._iter_parts = parts
        self._iter_parts_done = 0
        self._iter_tp = _SEVERAL
        self._cursor.load(items)

    def _account_several(self, items: list, index: int) -> int:
        """With the cursor at ``index`` of the several partitions' ``items``: the partitions
        whose records were all handed out, and a record of a later one too, are finished
        (as ``_finish_current`` does, once each); the one in progress gets its last record
        handed out. Returns where that one's records start (or ``index``)."""
        parts = self._iter_parts
        done = self._iter_parts_done
        start = parts[done - 1][1] if done else 0
        count = len(parts)
        while done < count:
            tp, end = parts[done]
            if end >= index:
                if start < index:
                    self._iter_last[tp] = items[index - 1]
                    return start
                return index
            if end > start:
                self._iter_last[tp] = items[end - 1]
            self._iter_pending.discard(tp)
            position = self._iter_poll_ends.get(tp)
            if position is not None:
                self._iter_ends[tp] = position
            done += 1
            self._iter_parts_done = done
            start = end
        return index

    def _finish_several(self) -> None:
        """Every record of the several partitions in the cursor was handed out."""
        items, index = self._cursor.clear()
        self._iter_tp = None
        self._account_several(items, index + 1)     # the last one finishes too
        self._iter_parts = []

    def _split_several(self) -> None:
        """The application changed something while the cursor held several partitions:
        back to one partition at a time (the one in progress held, the others queued), each
        checked before its next record as in that mode."""
        items, index = self._cursor.clear()
        self._iter_tp = None
        start = self._account_several(items, index)
        parts, done = self._iter_parts, self._iter_parts_done
        self._iter_parts = []
        queue = []
        for tp, end in parts[done:]:
            if start < index:           # in progress (index <= end): held at its place
                self._iter_tp = tp
                self._cursor.load(items[start:end], index - start)
                self._cursor.hold()
            else:
                queue.append((tp, items[start:end]))
            start = end
        queue.reverse()                 # popped from the end, in the poll's order
        self._iter_queue = queue

    def _load_next(self) -> None:
        """Put the next partition of the current poll into the cursor."""
        tp, recs = self._iter_queue.pop()
        self._iter_tp = tp
        self._cursor.load(recs)
        if self._iter_epoch != self._iter_poll_epoch:
            # The application changed something after this poll: check before the first record.
            self._cursor.hold()

    def _still_in_order(self, tp: TopicPartition) -> bool:
        """After a change by the application: does the current partition's next record still
        follow its position (not sought elsewhere, still assigned and not paused)?"""
        subs = self._subscriptions
        items, index = self._cursor.items, self._cursor.index
        position = subs.valid_position(tp) if subs.is_fetchable(tp) else None
        if position is None:
            return False
        if index > 0:
            return position.offset == items[index - 1].offset + 1
        return position.offset <= items[index].offset

    def _finish_current(self, tp: TopicPartition) -> None:
        """The current partition's records were all handed out."""
        items, _ = self._cursor.clear()
        self._iter_tp = None
        if items:
            self._iter_last[tp] = items[-1]
        self._iter_pending.discard(tp)
        end = self._iter_poll_ends.get(tp)
        if end is not None:
            self._iter_ends[tp] = end

    def _drop_current(self, tp: TopicPartition) -> None:
        """The application moved the current partition: its remaining records are fetched
        again from wherever its position now is."""
        items, index = self._cursor.clear()
        self._iter_tp = None
        if index > 0:
            self._iter_last[tp] = items[index - 1]
        self._flush_iteration()
        self._iter_last.pop(tp, None)
        self._iter_pending.discard(tp)
        self._fetcher.clear_partition(tp)

    def _flush_iteration(self) -> None:
        """Write the positions of the records iteration handed out."""
        tp = self._iter_tp
        if tp is _SEVERAL:
            self._account_several(self._cursor.items, self._cursor.index)
        elif tp is not None:
            index = self._cursor.index
            if index > 0:
                self._iter_last[tp] = self._cursor.items[index - 1]
        last, ends = self._iter_last, self._iter_ends
        if not last and not ends:
            return
        subs = self._subscriptions
        if (tp is None and not self._iter_queue and self._iter_epoch == self._iter_poll_epoch
                and last.keys() <= ends.keys()):
            # The usual refill: every record of the last poll went out and the application
            # changed nothing since (no seek: a position past what was handed out can only
            # come from one). Each partition moves to the poll's end, forward only.
            subs.advance_positions(ends.items())
            last.clear()
            ends.clear()
            return
        # One locked read of the positions and one locked write, whatever the partitions.
        tps = list(last)
        tps.extend(tp for tp in ends if tp not in last)
        moves = []
        for tp, position in zip(tps, subs.valid_positions(tps)):
            if position is None:
                continue
            end = ends.get(tp)   # set: the poll's end for tp, all of whose records went out
            r = last.get(tp)
            if r is None:
                if end is not None and end.offset > position.offset:
                    moves.append((tp, end))
                continue
            after = r.offset + 1
            if position.offset > after:
                continue                # sought past what was handed out
            if end is not None and end.offset > after:
                moves.append((tp, end))  # past control records after the last record
            elif position.offset < after:
                moves.append((tp, FetchPosition(after, r.leader_epoch if r.leader_epoch >= 0 else None,
                                                position.current_leader_epoch)))
        if moves:
            subs.set_positions(moves)
        last.clear()
        ends.clear()

    def _changed(self) -> None:
        """The application changed positions/assignment/pause state: iteration re-checks
        before its next record."""
        self._flush_iteration()
        self._iter_epoch += 1
        self._cursor.hold()

    def _stop_iteration(self) -> None:
        """Closing: nothing more is handed out."""
        self._cursor.clear()
        self._iter_tp = None
        self._iter_parts = []
        self._iter_queue = []
        self._iter_pending.clear()

    def _abandon_iteration(self) -> None:
        """poll() while an iteration is suspended: its undelivered records are fetched again."""
        self._flush_iteration()
        self._cursor.clear()
        self._iter_tp = None
        self._iter_parts = []
        self._iter_queue = []
        for tp in self._iter_pending:
            if self._subscriptions.is_assigned(tp):
                self._fetcher.clear_partition(tp)
        self._iter_pending.clear()

    # ------------------------------------------------------------------ positions
    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        """Fetch from ``offset`` next (an int or OffsetAndMetadata)."""
        self._acquire_open()
        try:
            self._changed()
            tp = _as_tp(partition)
            if isinstance(offset, OffsetAndMetadata):
                position = FetchPosition(offset.offset, offset.leader_epoch if offset.leader_epoch >= 0 else None,
                                         self._metadata.cluster.leader_epoch(tp))
            else:
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                    raise Errors.IllegalArgumentError(f"seek offset must be an int >= 0, got {offset!r}")
                position = FetchPosition(offset, None, self._metadata.cluster.leader_epoch(tp))
            if not self._subscriptions.is_assigned(tp):
                raise Errors.IllegalStateError(f"No current assignment for partition {tp}")
            log.info("seeking to offset %d for partition %s", position.offset, tp)
            self._subscriptions.seek_unvalidated(tp, position)
            self._fetcher.clear_partition(tp)
        finally:
            self._release()

    def _assigned(self, partitions) -> list[TopicPartition]:
        """The partitions as TopicPartitions; IllegalStateError if one is not assigned."""
        parts = [_as_tp(tp) for tp in partitions]
        for tp in parts:
            if not self._subscriptions.is_assigned(tp):
                raise Errors.IllegalStateError(f"No current assignment for partition {tp}")
        return parts

    def _partitions_or_all(self, partitions) -> list[TopicPartition]:
        if not partitions:
            return self._subscriptions.assigned_partitions_list()
        return self._assigned(partitions)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Seek to the earliest offset of the partitions (all assigned ones if none given)."""
        self._seek_to(partitions, OffsetResetStrategy.EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Seek to the end of the partitions (all assigned ones if none given)."""
        self._seek_to(partitions, OffsetResetStrategy.LATEST)

    def _seek_to(self, partitions, strategy: OffsetResetStrategy) -> None:
        self._acquire_open()
        try:
            self._changed()
            parts = self._partitions_or_all(partitions)
            self._subscriptions.request_offset_reset(parts, strategy)
            for tp in parts:
                self._fetcher.clear_partition(tp)
        finally:
            self._release()

    def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record that will be fetched (looked up if not known yet:
        committed offset, else auto.offset.reset)."""
        self._acquire_open()
        try:
            self._flush_iteration()
            tp = _as_tp(partition)
            if not self._subscriptions.is_assigned(tp):
                raise Errors.IllegalStateError(f"You can only check the position for partitions assigned to this consumer ({tp})")
            timeout = self._default_api_timeout_ms if timeout_ms is None else _check_timeout(timeout_ms)
            deadline = self._clock.now_ms() + timeout
            while True:
                position = self._subscriptions.valid_position(tp)
                if position is not None:
                    return position.offset
                self._update_fetch_positions(deadline)
                position = self._subscriptions.valid_position(tp)
                if position is not None:
                    return position.offset
                left = deadline - self._clock.now_ms()
                if left <= 0:
                    raise Errors.KafkaTimeoutError(f"timeout of {timeout} ms expired before the position "
                                                   f"for partition {tp} could be determined")
                self._client.poll(min(left, self._retry_backoff_ms))
        finally:
            self._release()

    def highwater(self, partition: TopicPartition) -> int | None:
        """The last known high watermark of an assigned partition (from fetch answers)."""
        self._acquire_open()
        try:
            (tp,) = self._assigned([partition])
            return self._subscriptions.high_watermark(tp)
        finally:
            self._release()

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching these partitions (buffered records are kept for resume)."""
        self._set_paused(partitions, True)

    def resume(self, *partitions: TopicPartition) -> None:
        self._set_paused(partitions, False)

    def _set_paused(self, partitions, paused: bool) -> None:
        self._acquire_open()
        try:
            self._changed()
            change = self._subscriptions.pause if paused else self._subscriptions.resume
            for tp in self._assigned(partitions):
                change(tp)
        finally:
            self._release()

    def paused(self) -> set[TopicPartition]:
        self._acquire_open()
        try:
            return self._subscriptions.paused_partitions()
        finally:
            self._release()

    # ------------------------------------------------------------------ commits
    def _require_group(self, what: str):
        if self._coordinator is None:
            raise Errors.IllegalStateError(f"{what} requires group_id")
        return self._coordinator

    @staticmethod
    def _offsets_arg(offsets) -> dict[TopicPartition, OffsetAndMetadata]:
        out = {}
        for tp, om in offsets.items():
            tp = _as_tp(tp)
            if isinstance(om, int) and not isinstance(om, bool):
                om = OffsetAndMetadata(om, "", -1)
            elif not isinstance(om, OffsetAndMetadata):
                try:
                    om = OffsetAndMetadata(*om)
                except TypeError:
                    raise TypeError(f"offset for {tp} must be an int or OffsetAndMetadata, got {om!r}") from None
            out[tp] = om
        return out

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
               timeout_ms: int | None = None) -> None:
        """Commit offsets (default: the position of every assigned partition), blocking."""
        self._acquire_open()
        try:
            self._flush_iteration()
            coordinator = self._require_group("commit()")
            offsets = self._subscriptions.all_consumed() if offsets is None else self._offsets_arg(offsets)
            timeout = self._default_api_timeout_ms if timeout_ms is None else _check_timeout(timeout_ms)
            started = time.monotonic_ns()
            try:
                coordinator.committer.commit_offsets_sync(offsets, timeout)
            finally:
                self._stats.record("commit-sync-ns", time.monotonic_ns() - started, self._clock.now_ms())
        finally:
            self._release()

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata] | None = None,
                     callback: Callable[[Mapping[TopicPartition, OffsetAndMetadata], BaseException | None], Any]
                     | None = None) -> RequestFuture:
        """Commit without waiting; ``callback(offsets, exception_or_None)`` runs in a later
        poll() or commit call."""
        self._acquire_open()
        try:
            self._flush_iteration()
            coordinator = self._require_group("commit_async()")
            offsets = self._subscriptions.all_consumed() if offsets is None else self._offsets_arg(offsets)
            if callback is None:
                callback = self.config["default.offset.commit.callback"]
            future = coordinator.committer.commit_offsets_async(offsets, callback)
            self._client.transmit_sends()
            return future
        finally:
            self._release()

    @overload
    def committed(self, partition: TopicPartition, metadata: Literal[False] = False,
                  timeout_ms: int | None = None) -> int | None: ...

    @overload
    def committed(self, partition: TopicPartition, metadata: Literal[True],
                  timeout_ms: int | None = None) -> OffsetAndMetadata | None: ...

    @overload
    def committed(self, partition: TopicPartition, metadata: bool,
                  timeout_ms: int | None = None) -> int | OffsetAndMetadata | None: ...

    def committed(self, partition: TopicPartition, metadata: bool = False,
                  timeout_ms: int | None = None) -> int | OffsetAndMetadata | None:
        """The last committed offset of a partition (None if none); with metadata=True the
        OffsetAndMetadata."""
        self._acquire_open()
        try:
            coordinator = self._require_group("committed()")
            tp = _as_tp(partition)
            timeout = self._default_api_timeout_ms if timeout_ms is None else _check_timeout(timeout_ms)
            started = time.monotonic_ns()
            try:
                om = coordinator.committer.fetch_committed_offsets([tp], timeout).get(tp)
            finally:
                self._stats.record("committed-ns", time.monotonic_ns() - started, self._clock.now_ms())
            if om is None:
                return None
            return om if metadata else om.offset
        finally:
            self._release()

    # ------------------------------------------------------------------ offsets by time
    def _lookup_timeout(self, timeout_ms) -> int:
        return self._request_timeout_ms if timeout_ms is None else _check_timeout(timeout_ms)

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None,
                          ) -> dict[TopicPartition, int]:
        """{tp: earliest offset} (does not change positions)."""
        self._acquire_open()
        try:
            return self._offsets.beginning_or_end_offsets([_as_tp(tp) for tp in partitions], EARLIEST_TIMESTAMP,
                                                          self._lookup_timeout(timeout_ms))
        finally:
            self._release()

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None,
                    ) -> dict[TopicPartition, int]:
        """{tp: end offset}: the high watermark (read_uncommitted) or last stable offset
        (read_committed), i.e. the offset the next record will get."""
        self._acquire_open()
        try:
            return self._offsets.beginning_or_end_offsets([_as_tp(tp) for tp in partitions], LATEST_TIMESTAMP,
                                                          self._lookup_timeout(timeout_ms))
        finally:
            self._release()

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None = None,
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """{tp: OffsetAndTimestamp | None}: the earliest offset whose timestamp is >= the
        given one (None if there is none)."""
        self._acquire_open()
        try:
            query = {}
            for tp, ts in timestamps.items():
                if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                    raise Errors.IllegalArgumentError(f"the target time for {tp} must be an int >= 0, got {ts!r}")
                query[_as_tp(tp)] = ts
            return self._offsets.offsets_for_times(query, self._lookup_timeout(timeout_ms))
        finally:
            self._release()

    # ------------------------------------------------------------------ metadata
    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """Partition ids of a topic (None if it does not exist)."""
        self._acquire_open()
        try:
            return self._client.topic_partitions(topic, self._request_timeout_ms)
        finally:
            self._release()

    def topics(self) -> set[str]:
        """All topics the cluster shows this client."""
        self._acquire_open()
        try:
            had_all = self._metadata.need_all_topics
            self._metadata.set_need_all_topics(True)
            try:
                if not self._client.await_metadata_update(self._request_timeout_ms):
                    raise Errors.KafkaTimeoutError("no metadata for the topic list in time")
                return set(self._metadata.cluster.topics())
            finally:
                self._metadata.set_need_all_topics(had_all or self._subscriptions.has_pattern_subscription())
        finally:
            self._release()

    def bootstrap_connected(self) -> bool:
        """True once a connection to the cluster completed its handshake."""
        return not self._closed and self._client.ever_connected()

    # ------------------------------------------------------------------ for adapters
    # A layer that owns the consumer on one thread and hands its records out elsewhere
    # (kclient.aio) moves each position only once the records before it were delivered.
    @property
    def subscription_state(self) -> SubscriptionState:
        """The assignment, positions and watermarks; guarded by its own lock, so it may be
        read (and positions advanced) from another thread while this one polls."""
        return self._subscriptions

    def poll_held(self, timeout_ms: int = 0, max_records: int | None = None, columnar: bool = False,
                  ) -> tuple[dict[TopicPartition, Any], dict[TopicPartition, FetchPosition]]:
        """Like ``poll()`` (or ``poll_columnar()``), but no position moves: returns the records
        and, per partition, the position after them (past control records that follow), for
        ``subscription_state.advance_position()`` once they are delivered."""
        self._acquire_open()
        try:
            if self._iterating():
                self._abandon_iteration()
            return self._poll(timeout_ms, max_records, False, columnar)
        finally:
            self._release()

    def cached_partitions_for_topic(self, topic: str) -> set[int] | None:
        """The topic's partition ids in the metadata this consumer has, without asking the
        cluster (None if it has none for the topic); any thread."""
        parts = self._metadata.cluster.partitions_for_topic(topic)
        return None if parts is None else {p.partition for p in parts}

    def metrics(self, raw: bool = False) -> dict[str, dict[str, Any]]:
        """Operator metrics under the Java client's names, as ``{group: {name: value}}``
        (kclient.consumer.metric_table lists them): rates and latencies over the last
        ``metrics.num.samples`` × ``metrics.sample.window.ms``, lag per assigned partition."""
        return collect_consumer_metrics(self, self._clock.now_ms())

    # ------------------------------------------------------------------ lifecycle
    def wakeup(self) -> None:
        """Make a blocking poll() (now or the next one) raise WakeupError. Any thread."""
        client = getattr(self, "_client", None)
        if client is not None:  # deleted once abandoned
            client.wakeup()

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Commit (if auto-commit is on and autocommit), leave the group, close connections."""
        if self._closed:
            return
        self._acquire()
        try:
            if self._closed:
                return
            timeout = 30000 if timeout_ms is None else _check_timeout(timeout_ms)
            self._flush_iteration()
            self._closed = True
            _open_consumers.discard(self)
            try:
                if self._coordinator is not None:
                    self._coordinator.close(timeout, autocommit)
            except Exception as exc:
                log.warning("closing the group coordinator failed: %s", exc)
            finally:
                self._stop_iteration()
                self._fetcher.close()
                self._interceptors.close()
                self._client.close()
                close_plugins(self.config["key.deserializer"], self.config["value.deserializer"],
                              method="deserialize")
            log.debug("consumer closed")
        finally:
            self._release()

    def abandon(self) -> None:
        """Forget this consumer without closing anything: for a process forked from the
        one that created it (kclient.spark does this in every forked worker).

        The sockets, selector and group membership belong to the parent process too: closing
        them here would unregister the parent's sockets from the epoll set both processes
        share, and leaving the group would end the parent's membership. So nothing is sent,
        closed or joined; the references to the network client, coordinator and fetcher are
        dropped (the heartbeat thread did not survive the fork), this process's copies of the
        file descriptors close when those objects are collected, and every method then
        behaves as after close(). Not for use in the process that created the consumer:
        call close() there."""
        self._closed = True
        _open_consumers.discard(self)
        self._stop_iteration()
        self._coordinator = None
        # Deleted rather than set to None: they are never None while the consumer is usable,
        # and no method of a closed consumer reaches them.
        del self._client, self._fetcher, self._offsets
        log.debug("consumer abandoned (process %d)", os.getpid())

    def __enter__(self) -> "KafkaConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self):
        try:
            if not self._closed:
                # Dropped without close(): no network round trip (the last metrics push) from a finalizer.
                self._client.client.telemetry = None
                self._client.close()
        except Exception:
            pass
