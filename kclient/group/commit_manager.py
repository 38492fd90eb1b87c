"""Offsets of a consumer group: commits, committed-offset lookups and auto-commit (mechanisms §6).

Shared by both group protocols (as the Java client's CommitRequestManager is): the classic
coordinator and the KIP-848 one each own an ``OffsetCommitter`` and hand it what it needs of
them through ``CommitMember``: the generation (classic) or member epoch (KIP-848) a commit
is made in, and what to do when the broker says the group moved on.

OffsetCommit/OffsetFetch, sync (retrying retriable errors every retry.backoff.ms until the
timeout) and async (callbacks delivered on the application thread by the next poll()/commit
call); auto-commit every auto.commit.interval.ms as a delayed task of the network client,
before revocation and on close. CommitFailedError is raised when the group moved on
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, FENCED_MEMBER_EPOCH, or the
generation was reset before the commit).
"""
from __future__ import annotations

import collections
import logging
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Protocol

from kclient import errors as Errors
from kclient.clock import Clock
from kclient.group.coordinator_channel import CoordinatorChannel, CoordinatorResponseHandler, error_for
from kclient.group.group_config import ConsumerCoordinatorConfig
from kclient.group.timer import Timer
from kclient.network.future import RequestFuture
from kclient.protocol import ApiKey
from kclient.structs import OffsetAndMetadata, TopicPartition
from kclient.subscription.state import FetchPosition, SubscriptionState

__all__ = ["OffsetCommitter", "CommitMember", "CommitObserver", "CommitGeneration", "NO_COMMIT_GENERATION",
           "ConsumerGroupMetadata", "CommitCallback"]

log = logging.getLogger(__name__)

OFFSET_COMMIT, OFFSET_FETCH = int(ApiKey.OFFSET_COMMIT), int(ApiKey.OFFSET_FETCH)

CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], BaseException | None], Any]


class CommitGeneration(NamedTuple):
    """What an OffsetCommit carries to prove membership: the generation id (classic) or the
    member epoch (KIP-848), and the member id."""

    generation_id: int
    member_id: str


NO_COMMIT_GENERATION = CommitGeneration(-1, "")


class ConsumerGroupMetadata(NamedTuple):
    group_id: str | None
    generation_id: int
    member_id: str
    group_instance_id: str | None


class CommitMember(Protocol):
    """The group member an ``OffsetCommitter`` commits for (its coordinator)."""

    group_id: str | None
    group_instance_id: str | None

    @property
    def closed(self) -> bool: ...

    @property
    def last_reset_reason(self) -> str | None:
        """Why the member last lost its generation (for the error a refused commit raises)."""

    def commit_generation(self) -> CommitGeneration:
        """The member's current generation or epoch (holding the channel's lock)."""

    def stable_commit_generation(self) -> CommitGeneration | None:
        """The generation or epoch a commit may be made in now; None: not in one."""

    def is_rebalancing(self) -> bool:
        """A rebalance of this member is under way (a commit now is refused as such)."""

    def rejoin_needed_or_pending(self) -> bool: ...

    def request_rejoin(self, reason: str) -> None: ...

    def reset_generation_on_response_error(self, api: str, error: BaseException) -> None:
        """The broker no longer knows the member or its generation/epoch."""


class CommitObserver(Protocol):
    """Told of offsets committed (the consumer's interceptors)."""

    def on_commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None: ...


class _NoObserver:
    def on_commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        pass


class _AutoCommitTask:
    """The periodic auto-commit, run by ConsumerNetworkClient's delayed-task queue."""

    __slots__ = ("committer",)

    def __init__(self, committer: "OffsetCommitter"):
        self.committer = committer

    def run(self, now_ms: int) -> None:
        self.committer.maybe_auto_commit_offsets_async(now_ms)

    def __repr__(self) -> str:
        return f"<AutoCommitTask group={self.committer.group_id}>"


def _topic_ids_or_v9(cluster, topics) -> tuple[dict, int | None]:
    """Topic ids for OffsetFetch/OffsetCommit and the version cap they imply.

    v10+ of both name topics by id only. A committed() or commit() call may name a topic this
    consumer never fetched metadata for; then the request stays at v9, which names topics.
    """
    ids = {t: cluster.topic_id(t) for t in topics}
    return ids, (None if all(tid is not None for tid in ids.values()) else 9)


class OffsetCommitter:
    def __init__(self, channel: CoordinatorChannel, member: CommitMember, subscriptions: SubscriptionState,
                 metadata: Any, config: ConsumerCoordinatorConfig, *, rebalance_timeout_ms: int, clock: Clock,
                 interceptors: CommitObserver | None = None, stats: Any = None):
        self.channel = channel
        self.member = member
        self._client = channel.client
        self._lock = channel.lock
        self.group_id = channel.group_id
        self.group_instance_id = member.group_instance_id
        self.subscriptions = subscriptions
        self._metadata = metadata
        self._clock = clock
        self.retry_backoff_ms = channel.retry_backoff_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.interceptors: CommitObserver = interceptors if interceptors is not None else _NoObserver()
        # Operator metrics (kclient.consumer.metrics.ConsumerMetrics): commit latencies.
        self.stats = stats
        self.auto_commit_enabled = config.enable_auto_commit
        self.auto_commit_interval_ms = config.auto_commit_interval_ms
        self._auto_commit_task = _AutoCommitTask(self)
        self.next_auto_commit_deadline = clock.now_ms() + self.auto_commit_interval_ms
        self._scheduled_auto_commit: int | None = None
        self._join_prepare_commit: RequestFuture | None = None
        self._join_prepare_deadline: int | None = None
        self._completed_offset_commits: collections.deque = collections.deque()
        self._pending_async_commits = 0
        self._pending_committed_fetch: tuple[frozenset, RequestFuture] | None = None
        if self.auto_commit_enabled:
            self._schedule_auto_commit()

    @property
    def has_completed_commits(self) -> bool:
        """Async commit outcomes wait for delivery (the next poll or commit call)."""
        return bool(self._completed_offset_commits)

    def group_metadata(self) -> ConsumerGroupMetadata:
        g = self.member.commit_generation()
        return ConsumerGroupMetadata(self.group_id, g.generation_id, g.member_id, self.group_instance_id)

    # ------------------------------------------------------------------ committed offsets
    def refresh_committed_offsets_if_needed(self, timeout_ms: int | None) -> bool:
        """Positions of INITIALIZING partitions from their committed offsets; partitions
        without one stay INITIALIZING (for auto.offset.reset). False on timeout."""
        if self.group_id is None:
            return True
        initializing = self.subscriptions.initializing_partitions()
        if not initializing:
            return True
        try:
            offsets = self.fetch_committed_offsets(initializing, timeout_ms)
        except Errors.KafkaTimeoutError:
            return False
        still_initializing = self.subscriptions.initializing_partitions()
        for tp, oam in offsets.items():
            if oam is None or tp not in still_initializing:
                continue  # nothing committed, revoked, or seeked by the user meanwhile
            epoch = oam.leader_epoch if oam.leader_epoch is not None and oam.leader_epoch >= 0 else None
            # With the committed record's epoch and the current leader's, the position is first
            # checked for truncation (KIP-320: OffsetsForLeaderEpoch) and then fetched from.
            self.subscriptions.seek_unvalidated(
                tp, FetchPosition(oam.offset, epoch, self._metadata.cluster.leader_epoch(tp)))
            log.debug("group %s: %s starts at committed offset %d", self.group_id, tp, oam.offset)
        return True

    def fetch_committed_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int | None
                                ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """Committed offsets (None: nothing committed). KafkaTimeoutError if not done in time."""
        self._require_group()
        parts = frozenset(TopicPartition(*tp) for tp in partitions)
        if not parts:
            return {}
        timer = Timer(self._clock, timeout_ms)
        while True:
            if not self.channel.ensure_coordinator_ready(timer.remaining_ms()):
                raise Errors.KafkaTimeoutError(
                    f"group {self.group_id}: coordinator not available to fetch committed offsets "
                    f"within {timeout_ms} ms")
            pending = self._pending_committed_fetch
            if pending is not None and pending[0] == parts and not pending[1].failed():
                future = pending[1]     # reuse the request an earlier call left in flight
            else:
                future = self._send_offset_fetch_request(parts)
                self._pending_committed_fetch = (parts, future)
            if not self._client.poll_future(future, timer.remaining_ms()):
                raise Errors.KafkaTimeoutError(
                    f"group {self.group_id}: committed offsets not fetched within {timeout_ms} ms")
            self._pending_committed_fetch = None
            if future.succeeded():
                result = future.value
                return {tp: result.get(tp) for tp in parts}
            exc = future.exception
            if not future.retriable():
                raise exc
            log.debug("group %s: OffsetFetch failed with %r; retrying", self.group_id, exc)
            self.channel.backoff(timer)
            if timer.expired():
                raise Errors.KafkaTimeoutError(
                    f"group {self.group_id}: committed offsets not fetched within {timeout_ms} ms "
                    f"(last error: {exc!r})")

    def _send_offset_fetch_request(self, partitions: frozenset) -> RequestFuture:
        node = self.channel.coordinator()
        if node is None:
            return RequestFuture.coordinator_not_available()
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        group_id = self.group_id
        cluster = self._metadata.cluster
        topic_ids, max_version = _topic_ids_or_v9(cluster, by_topic)

        def body(version: int) -> dict:
            if version >= 8:
                topics = [{"name": t, "partition_indexes": ps} if version < 10 else
                          {"topic_id": topic_ids[t], "partition_indexes": ps}
                          for t, ps in by_topic.items()]
                return {"groups": [{"group_id": group_id, "topics": topics}], "require_stable": True}
            b: dict[str, Any] = {"group_id": group_id,
                 "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}
            if version >= 7:
                b["require_stable"] = True
            return b

        log.debug("group %s: fetching committed offsets of %s", group_id, sorted(partitions))
        return self._client.send(node, OFFSET_FETCH, body, max_version=max_version).compose(
            _OffsetFetchHandler(self, node))

    # ------------------------------------------------------------------ commits
    def commit_offsets_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                            timeout_ms: int | None) -> None:
        """Commit and wait; retriable errors are retried until ``timeout_ms``.
        Raises CommitFailedError, KafkaTimeoutError, authorization errors..."""
        self._require_group()
        self.invoke_completed_offset_commit_callbacks()
        offsets = self._check_offsets(offsets)
        if not offsets:
            return
        timer = Timer(self._clock, timeout_ms)
        last_error: BaseException | None = None
        while True:
            if not self.channel.ensure_coordinator_ready(timer.remaining_ms()):
                break
            future = self._send_offset_commit_request(offsets)
            if not self._client.poll_future(future, timer.remaining_ms()):
                break
            if future.succeeded():
                self.interceptors.on_commit(offsets)
                return
            last_error = future.exception
            if not future.retriable():
                raise last_error
            log.debug("group %s: OffsetCommit failed with %r; retrying", self.group_id, last_error)
            self.channel.backoff(timer)
            if timer.expired():
                break
        raise Errors.KafkaTimeoutError(
            f"group {self.group_id}: offsets {self.describe(offsets)} not committed within "
            f"{timeout_ms} ms" + (f" (last error: {last_error!r})" if last_error else ""))

    def commit_offsets_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                             callback: CommitCallback | None = None) -> RequestFuture:
        """Send a commit without waiting. ``callback(offsets, exc_or_None)`` runs on the
        application thread in a later poll()/commit call. Not retried (order matters)."""
        self._require_group()
        self.invoke_completed_offset_commit_callbacks()
        offsets = self._check_offsets(offsets)
        result: RequestFuture = RequestFuture()
        if self.channel.coordinator() is not None:
            self._do_commit_async(offsets, callback, result)
        else:
            # Commit once the coordinator is found; close() waits for these.
            self._count_async_commit(+1)
            lookup = self.channel.lookup_coordinator()

            def found(_value):
                self._count_async_commit(-1)
                self._do_commit_async(offsets, callback, result)

            def not_found(exc):
                self._count_async_commit(-1)
                err = Errors.RetriableCommitFailedError(f"coordinator unavailable: {exc!r}")
                self._completed_offset_commits.append((callback, offsets, err))
                result.raise_(err)

            lookup.on_success(found)
            lookup.on_failure(not_found)
        # Push the request out now instead of at the next poll (a poll under way in another
        # thread was woken by send() and transmits it).
        self._client.try_poll_no_wakeup(0)
        return result

    def _count_async_commit(self, delta: int) -> None:
        # Completions may run on the heartbeat thread.
        with self._lock:
            self._pending_async_commits += delta

    def _do_commit_async(self, offsets, callback, result: RequestFuture) -> None:
        future = self._send_offset_commit_request(offsets)
        self._count_async_commit(+1)

        def done(outcome):
            self._count_async_commit(-1)
            if isinstance(outcome, BaseException):
                exc = outcome
                if isinstance(exc, Errors.KafkaError) and exc.retriable:
                    exc = Errors.RetriableCommitFailedError(f"offset commit failed: {outcome!r}")
                    exc.__cause__ = outcome
                self._completed_offset_commits.append((callback, offsets, exc))
                result.raise_(exc)
            else:
                self._completed_offset_commits.append((callback, offsets, None))
                result.complete(None)

        future.add_both(done)

    def invoke_completed_offset_commit_callbacks(self) -> None:
        """Deliver async commit outcomes on the application thread (callbacks, interceptors)."""
        q = self._completed_offset_commits
        while q:
            callback, offsets, exc = q.popleft()
            if exc is None:
                self.interceptors.on_commit(offsets)
            if callback is not None:
                try:
                    callback(offsets, exc)
                except Exception:
                    log.exception("offset commit callback %r raised", callback)
            elif exc is not None:
                log.warning("group %s: asynchronous commit of %s failed: %r", self.group_id,
                            self.describe(offsets), exc)

    def _send_offset_commit_request(self, offsets: dict) -> RequestFuture:
        if not offsets:
            return RequestFuture.void_success()
        node = self.channel.coordinator()
        if node is None:
            return RequestFuture.coordinator_not_available()
        if self.subscriptions.has_auto_assigned_partitions():
            generation = self.member.stable_commit_generation()
            if generation is None:
                if self.member.is_rebalancing():
                    return RequestFuture.failure(Errors.CommitFailedError(
                        "the consumer is in the middle of a rebalance; complete it with poll() and "
                        "commit again (the partitions may have moved to another member)"))
                return RequestFuture.failure(Errors.CommitFailedError(
                    "this member is no longer part of an active generation of the group (it was "
                    f"evicted or left: {self.member.last_reset_reason or 'not joined'}); its partitions "
                    "may have moved to another member"))
        else:
            generation = NO_COMMIT_GENERATION
        by_topic: dict[str, list] = {}
        for tp, oam in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": oam.offset,
                "committed_leader_epoch": -1 if oam.leader_epoch is None else oam.leader_epoch,
                "committed_metadata": oam.metadata if oam.metadata is not None else ""})
        group_id, instance_id = self.group_id, self.group_instance_id
        cluster = self._metadata.cluster
        topic_ids, max_version = _topic_ids_or_v9(cluster, by_topic)

        def body(version: int) -> dict:
            topics = []
            for topic, parts in by_topic.items():
                if version >= 10:
                    topics.append({"topic_id": topic_ids[topic], "partitions": parts})
                else:
                    topics.append({"name": topic, "partitions": parts})
            return {"group_id": group_id, "generation_id_or_member_epoch": generation.generation_id,
                    "member_id": generation.member_id, "group_instance_id": instance_id,
                    "topics": topics}

        log.debug("group %s: committing %s (generation %d)", group_id, self.describe(offsets),
                  generation.generation_id)
        future = self._client.send(node, OFFSET_COMMIT, body, max_version=max_version).compose(
            _OffsetCommitHandler(self, offsets, generation, node))
        if self.stats is not None:
            future.add_both(self._commit_answered, self._clock.now_ms())
        return future

    def _commit_answered(self, sent_ms: int, _result) -> None:
        now = self._clock.now_ms()
        self.stats.commit_done(now - sent_ms, now)

    @staticmethod
    def _check_offsets(offsets) -> dict:
        out = {}
        for tp, oam in dict(offsets).items():
            tp = TopicPartition(*tp)
            if isinstance(oam, int) and not isinstance(oam, bool):
                oam = OffsetAndMetadata(oam)
            elif not isinstance(oam, OffsetAndMetadata):
                oam = OffsetAndMetadata(*oam)
            if not isinstance(oam.offset, int) or oam.offset < 0:
                raise Errors.IllegalArgumentError(f"invalid offset {oam.offset!r} to commit for {tp}")
            out[tp] = oam
        return out

    @staticmethod
    def describe(offsets: Mapping) -> str:
        return ", ".join(f"{tp.topic}-{tp.partition}@{oam.offset}" for tp, oam in sorted(offsets.items()))

    def _require_group(self) -> None:
        if self.group_id is None:
            raise Errors.InvalidGroupIdError(
                "offset commit and group management need a group.id; set group_id=...")

    # ------------------------------------------------------------------ auto-commit
    def _schedule_auto_commit(self) -> None:
        deadline = self.next_auto_commit_deadline
        if self._scheduled_auto_commit != deadline:
            self._scheduled_auto_commit = deadline
            self._client.schedule(self._auto_commit_task, deadline)

    def maybe_auto_commit_offsets_async(self, now_ms: int) -> None:
        if not self.auto_commit_enabled or self.member.closed:
            return
        if now_ms < self.next_auto_commit_deadline:
            self._schedule_auto_commit()
            return
        subs = self.subscriptions
        if subs.has_auto_assigned_partitions() and (
                self.member.stable_commit_generation() is None or self.member.rejoin_needed_or_pending()):
            # Mid-rebalance: on_join_prepare commits; try again shortly.
            self.next_auto_commit_deadline = now_ms + self.retry_backoff_ms
        else:
            self.next_auto_commit_deadline = now_ms + self.auto_commit_interval_ms
            offsets = subs.all_consumed()
            if offsets:
                self.commit_offsets_async(offsets, self._on_auto_commit)
        self._schedule_auto_commit()

    def _on_auto_commit(self, offsets, exc) -> None:
        if exc is None:
            log.debug("group %s: auto-committed %s", self.group_id, self.describe(offsets))
        elif isinstance(exc, Errors.RetriableCommitFailedError):
            log.debug("group %s: auto-commit failed (%r); retrying in %d ms", self.group_id, exc,
                      self.retry_backoff_ms)
            self.next_auto_commit_deadline = min(self.next_auto_commit_deadline,
                                                  self._clock.now_ms() + self.retry_backoff_ms)
            self._schedule_auto_commit()
        else:
            log.warning("group %s: auto-commit of %s failed: %r", self.group_id, self.describe(offsets), exc)

    def _commit_consumed_for_rebalance(self) -> RequestFuture | None:
        """Before revoking: commit what was consumed, if the generation still allows it."""
        subs = self.subscriptions
        if subs.has_auto_assigned_partitions() and self.member.stable_commit_generation() is None:
            return None
        offsets = subs.all_consumed()
        if not offsets:
            return None
        future = self._send_offset_commit_request(offsets)
        future.on_success(lambda _v: self._completed_offset_commits.append((None, offsets, None)))
        return future

    def maybe_auto_commit_offsets_sync(self, timeout_ms: int | None) -> None:
        if not self.auto_commit_enabled:
            return
        offsets = self.subscriptions.all_consumed()
        if not offsets:
            return
        try:
            self.commit_offsets_sync(offsets, timeout_ms)
        except Errors.KafkaError as exc:
            # Closing or rebalancing: report it, the caller's operation goes on.
            log.warning("group %s: auto-commit of %s failed: %r", self.group_id, self.describe(offsets), exc)

    # ------------------------------------------------------------------ around rebalances and close
    def commit_before_rebalance(self, timeout_ms: int | None) -> bool:
        """Classic protocol, before (re)joining: commit what was consumed before giving partitions
        up, bounded by the rebalance timeout; False if it is still under way after
        ``timeout_ms`` (called again)."""
        if self.auto_commit_enabled:
            now = self._clock.now_ms()
            if self._join_prepare_commit is None:
                self._join_prepare_commit = self._commit_consumed_for_rebalance()
                self._join_prepare_deadline = now + self.rebalance_timeout_ms
            future = self._join_prepare_commit
            deadline = self._join_prepare_deadline
            if future is not None:
                assert deadline is not None  # set together with _join_prepare_commit
                wait = max(deadline - now, 0)
                if timeout_ms is not None:
                    wait = min(wait, timeout_ms)
                self._client.poll_future(future, wait)
                if not future.is_done:
                    if self._clock.now_ms() < deadline:
                        return False
                    log.warning("group %s: the offset commit before the rebalance did not finish "
                                "within max.poll.interval.ms; rebalancing anyway", self.group_id)
                elif future.failed():
                    log.warning("group %s: the offset commit before the rebalance failed: %r",
                                self.group_id, future.exception)
            self._join_prepare_commit = None
            self._join_prepare_deadline = None
        self.invoke_completed_offset_commit_callbacks()
        return True

    def commit_before_revoke(self, revoked: set, timer: Timer) -> None:
        """KIP-848, before revoking partitions: commit what was consumed of them (auto-commit)."""
        offsets = {tp: oam for tp, oam in self.subscriptions.all_consumed().items() if tp in revoked}
        if not offsets:
            return
        try:
            self.commit_offsets_sync(offsets, min(timer.remaining_ms() or self.rebalance_timeout_ms,
                                                  self.rebalance_timeout_ms))
        except Errors.KafkaError as exc:
            log.warning("group %s: committing %s before revoking them failed: %r", self.group_id,
                        self.describe(offsets), exc)

    def assignment_changed(self) -> None:
        """A new assignment: the next auto-commit is an interval away."""
        if self.auto_commit_enabled:
            self.next_auto_commit_deadline = self._clock.now_ms() + self.auto_commit_interval_ms
            self._schedule_auto_commit()

    def time_to_next_auto_commit(self, now_ms: int) -> int | None:
        """ms until the next auto-commit is due (None: auto-commit is off)."""
        if not self.auto_commit_enabled:
            return None
        return max(self.next_auto_commit_deadline - now_ms, 0)

    def close(self, timer: Timer, autocommit: bool) -> None:
        """Final auto-commit (if ``autocommit``), then wait for async commits and deliver their
        outcomes, within ``timer``."""
        self._client.unschedule(self._auto_commit_task)
        if self.group_id is None:
            return
        if autocommit:
            self.maybe_auto_commit_offsets_sync(timer.remaining_ms())
        while self._pending_async_commits > 0 and not timer.expired():
            if not self.channel.ensure_coordinator_ready(timer.remaining_ms()):
                break
            self._client.poll(min(timer.remaining_ms() or 100, 100))
        self.invoke_completed_offset_commit_callbacks()

    def stop(self) -> None:
        """No auto-commit after close."""
        self.auto_commit_enabled = False


# ---------------------------------------------------------------------- response handlers

class _OffsetCommitHandler(CoordinatorResponseHandler):
    def __init__(self, committer: OffsetCommitter, offsets: dict, generation: CommitGeneration, node):
        super().__init__(committer.channel, node)
        self.c = committer
        self.offsets = offsets
        self.generation = generation   # a commit is tied to the generation it was made in

    def on_success(self, response: dict, future: RequestFuture) -> None:
        c = self.c
        cluster = c._metadata.cluster
        unauthorized: set[str] = set()
        for topic in response.get("topics") or []:
            name = topic.get("name") or cluster.topic_name(topic.get("topic_id"))
            for p in topic.get("partitions") or []:
                code = p["error_code"]
                tp = TopicPartition(name, p["partition_index"])
                if code == 0:
                    continue
                err = error_for(code)
                if isinstance(err, Errors.GroupAuthorizationFailedError):
                    future.raise_(Errors.GroupAuthorizationFailedError(
                        f"not authorized to commit offsets for group {c.group_id!r}"))
                    return
                if isinstance(err, Errors.TopicAuthorizationFailedError):
                    unauthorized.add(name)
                    continue
                if isinstance(err, (Errors.OffsetMetadataTooLargeError, Errors.InvalidCommitOffsetSizeError,
                                    Errors.CoordinatorLoadInProgressError, Errors.UnknownTopicOrPartitionError)):
                    log.debug("group %s: commit of %s failed: %r", c.group_id, tp, err)
                    future.raise_(err)
                    return
                if isinstance(err, (Errors.CoordinatorNotAvailableError, Errors.NotCoordinatorError,
                                    Errors.RequestTimedOutError)):
                    self.mark_coordinator_unknown(repr(err))
                    future.raise_(err)
                    return
                if isinstance(err, Errors.FencedInstanceIdError):
                    log.error("group %s: group.instance.id %r was fenced by another member",
                              c.group_id, c.group_instance_id)
                    future.raise_(err)
                    return
                if isinstance(err, Errors.RebalanceInProgressError):
                    c.member.request_rejoin("offset commit answered REBALANCE_IN_PROGRESS")
                    future.raise_(Errors.CommitFailedError(
                        "the group is rebalancing: poll() to complete the rebalance, then commit "
                        "again (the partitions may have moved to another member)"))
                    return
                if isinstance(err, Errors.StaleMemberEpochError):
                    # group.protocol=consumer: the commit carried an older member epoch than the
                    # broker's; the next heartbeat brings the current one, then it is retried.
                    future.raise_(Errors.RetriableCommitFailedError(
                        f"the member epoch of the commit is stale ({err}); retry with the current one"))
                    return
                if isinstance(err, (Errors.UnknownMemberIdError, Errors.IllegalGenerationError,
                                    Errors.FencedMemberEpochError)):
                    with c._lock:
                        unchanged = c.member.commit_generation() == self.generation
                    if unchanged and self.generation.generation_id >= 0:
                        c.member.reset_generation_on_response_error("OffsetCommit", err)
                    future.raise_(Errors.CommitFailedError(
                        f"the group has moved on ({type(err).__name__}): this member was evicted or "
                        "its generation ended, so its partitions may belong to another member"))
                    return
                future.raise_(Errors.KafkaError(f"unexpected error committing {tp}: {err}"))
                return
        if unauthorized:
            future.raise_(Errors.TopicAuthorizationFailedError(
                f"not authorized to commit offsets of topics {sorted(unauthorized)}"))
        else:
            future.complete(None)


class _OffsetFetchHandler(CoordinatorResponseHandler):
    def __init__(self, committer: OffsetCommitter, node):
        super().__init__(committer.channel, node)
        self.c = committer

    def on_success(self, response: dict, future: RequestFuture) -> None:
        c = self.c
        groups = response.get("groups")
        if groups:
            group = next((g for g in groups if g.get("group_id") == c.group_id), groups[0])
            code, topics = group.get("error_code", 0), group.get("topics") or []
        else:
            code, topics = response.get("error_code", 0) or 0, response.get("topics") or []
        if code:
            err = error_for(code)
            if isinstance(err, (Errors.CoordinatorNotAvailableError, Errors.NotCoordinatorError)):
                self.mark_coordinator_unknown(repr(err))
            elif isinstance(err, Errors.GroupAuthorizationFailedError):
                err = Errors.GroupAuthorizationFailedError(
                    f"not authorized to read committed offsets of group {c.group_id!r}")
            future.raise_(err)
            return
        cluster = c._metadata.cluster
        offsets: dict[TopicPartition, OffsetAndMetadata | None] = {}
        unauthorized: set[str] = set()
        unstable = False
        for topic in topics:
            name = topic.get("name") or cluster.topic_name(topic.get("topic_id"))
            for p in topic.get("partitions") or []:
                tp = TopicPartition(name, p["partition_index"])
                pcode = p.get("error_code", 0)
                if pcode:
                    err = error_for(pcode)
                    if isinstance(err, Errors.UnstableOffsetCommitError):
                        unstable = True
                    elif isinstance(err, Errors.TopicAuthorizationFailedError):
                        unauthorized.add(name)
                    elif isinstance(err, Errors.UnknownTopicOrPartitionError):
                        log.debug("group %s: no committed offset for unknown partition %s", c.group_id, tp)
                        offsets[tp] = None
                    else:
                        future.raise_(err)
                        return
                    continue
                offset = p["committed_offset"]
                if offset is None or offset < 0:
                    offsets[tp] = None
                else:
                    epoch = p.get("committed_leader_epoch", -1)
                    offsets[tp] = OffsetAndMetadata(offset, p.get("metadata") or "",
                                                    -1 if epoch is None else epoch)
        if unauthorized:
            future.raise_(Errors.TopicAuthorizationFailedError(
                f"not authorized to read committed offsets of topics {sorted(unauthorized)}"))
        elif unstable:
            future.raise_(Errors.UnstableOffsetCommitError(
                "some partitions have pending transactional offsets; retrying"))
        else:
            future.complete(offsets)
