"""ConsumerCoordinator: the consumer's side of group membership and offset storage (mechanisms §6).

On top of AbstractCoordinator it supplies the "consumer" embedded protocol: members advertise
every configured assignor with their subscription (kclient.group.consumer_protocol), the leader runs
the assignor the broker picked, and each member applies its assignment to the
SubscriptionState, calling the rebalance listener on the application thread:

* eager protocols: everything is revoked before each join, the new assignment is added after;
* cooperative-sticky: only partitions that move are revoked (after the SyncGroup), followed by
  another rebalance so their new owners get them.

A member that was evicted (generation reset) gets ``on_partitions_lost`` instead of
``on_partitions_revoked`` and a WARNING names it and the cause. Commits are allowed inside the
listener callbacks (the generation is still current when they run).

Metadata rules: pattern subscriptions re-match the topics on every metadata update; the
partition count of every subscribed topic is snapshotted when a member joins (the leader:
every topic of the group, before it assigns) and a different count later requests a rejoin.

Offsets: OffsetCommit/OffsetFetch, sync (retrying retriable errors every retry.backoff.ms
until the timeout) and async (callbacks delivered on the application thread by the next
poll()/commit call); auto-commit every auto.commit.interval.ms as a delayed task of the
network client, and before revocation and on close. CommitFailedError is raised when the
group moved on (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, or the
generation was reset before the commit).
"""
from __future__ import annotations

import collections
import logging
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from kclient import errors as Errors
from kclient.settings import ConsumerSettings
from kclient.group.assignors import RebalanceProtocol, build_assignors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.group.consumer_protocol import (
    PROTOCOL_TYPE, deserialize_assignment, deserialize_subscription, serialize_assignment,
    serialize_subscription,
)
from kclient.group.coordinator import (
    NO_GENERATION, AbstractCoordinator, Generation, MemberState, _error_for, _Handler, _Timer,
)
from kclient.network.future import RequestFuture
from kclient.consumer.interceptors import ConsumerInterceptors
from kclient.consumer.listener import invoke_partitions_lost
from kclient.structs import OffsetAndMetadata, TopicPartition
from kclient.consumer.subscription_state import FetchPosition
from kclient.protocol import ApiKey

__all__ = ["ConsumerCoordinator", "ConsumerGroupMetadata"]

log = logging.getLogger(__name__)

OFFSET_COMMIT, OFFSET_FETCH = int(ApiKey.OFFSET_COMMIT), int(ApiKey.OFFSET_FETCH)

CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], BaseException | None], Any]


class ConsumerGroupMetadata(NamedTuple):
    group_id: str | None
    generation_id: int
    member_id: str
    group_instance_id: str | None


class _AutoCommitTask:
    """The periodic auto-commit, run by ConsumerNetworkClient's delayed-task queue."""

    __slots__ = ("coordinator",)

    def __init__(self, coordinator: "ConsumerCoordinator"):
        self.coordinator = coordinator

    def run(self, now_ms: int) -> None:
        self.coordinator._maybe_auto_commit_offsets_async(now_ms)

    def __repr__(self) -> str:
        return f"<AutoCommitTask group={self.coordinator.group_id}>"


def _topic_ids_or_v9(cluster, topics) -> tuple[dict, int | None]:
    """Topic ids for OffsetFetch/OffsetCommit and the version cap they imply.

    v10+ of both name topics by id only. A committed() or commit() call may name a topic this
    consumer never fetched metadata for; then the request stays at v9, which names topics.
    """
    ids = {t: cluster.topic_id(t) for t in topics}
    return ids, (None if all(tid is not None for tid in ids.values()) else 9)


class ConsumerCoordinator(AbstractCoordinator):
    def __init__(self, client, subscriptions, metadata, config, *, clock: Clock = SYSTEM_CLOCK,
                 interceptors: ConsumerInterceptors | None = None, start_heartbeat_thread: bool = True):
        # One checked config, then the typed parts this class and its base read (mechanisms §5-§6).
        settings = config if isinstance(config, ConsumerSettings) else ConsumerSettings.of(config)
        super().__init__(client, settings.rebalance, clock=clock, start_heartbeat_thread=start_heartbeat_thread)
        cc = self.coordinator_config = settings.coordinator
        self.subscriptions = subscriptions
        self._metadata = metadata
        self.config = settings.config
        self.assignors = build_assignors(list(cc.assignment_strategy))
        self.protocol = self._rebalance_protocol(self.assignors)
        self.exclude_internal_topics = cc.exclude_internal_topics
        self.rack_id = cc.client_rack
        self.default_api_timeout_ms = cc.default_api_timeout_ms
        self.interceptors = (interceptors if interceptors is not None
                             else ConsumerInterceptors.from_config(settings.config))
        self.auto_commit_enabled = cc.enable_auto_commit
        self.auto_commit_interval_ms = cc.auto_commit_interval_ms
        self._auto_commit_task = _AutoCommitTask(self)
        self._next_auto_commit_deadline = clock.now_ms() + self.auto_commit_interval_ms
        self._scheduled_auto_commit: int | None = None
        self._join_prepare_commit: RequestFuture | None = None
        self._join_prepare_deadline: int | None = None
        self._completed_offset_commits: collections.deque = collections.deque()
        self._pending_async_commits = 0
        self._pending_committed_fetch: tuple[frozenset, RequestFuture] | None = None
        self.is_leader = False
        self._joined_subscription: frozenset[str] | None = None
        self._metadata_snapshot_version = -1
        self._assignment_snapshot: dict[str, int | None] | None = None
        self._assignment_snapshot_checked = -1
        if self.auto_commit_enabled:
            self._schedule_auto_commit()

    @staticmethod
    def _rebalance_protocol(assignors) -> RebalanceProtocol:
        common = set(assignors[0].supported_protocols)
        for a in assignors[1:]:
            common &= set(a.supported_protocols)
        if not common:
            raise Errors.ConfigurationError(
                "partition.assignment.strategy: the assignors "
                f"{[a.name for a in assignors]} share no rebalance protocol (eager or cooperative)")
        return max(common)

    # ------------------------------------------------------------------ protocol
    def protocol_type(self) -> str:
        return PROTOCOL_TYPE

    def metadata(self) -> list[tuple[str, bytes]]:
        topics = self.subscriptions.subscription
        self._joined_subscription = frozenset(topics)
        owned = self.subscriptions.assigned_partitions_list()
        generation = self._generation.generation_id
        out = []
        for assignor in self.assignors:
            sub = assignor.metadata(topics, owned, generation, rack_id=self.rack_id)
            out.append((assignor.name, serialize_subscription(sub, assignor.version)))
        return out

    def _lookup_assignor(self, name: str | None):
        for a in self.assignors:
            if a.name == name:
                return a
        return None

    # ------------------------------------------------------------------ poll (application thread)
    def poll(self, timeout_ms: int | None) -> bool:
        """Coordinator work of one consumer poll; False if it could not finish in time."""
        if self.group_id is None:
            return True
        # Only group management waits on the timer: no clock read for user assignments.
        timer = _Timer(self._clock, timeout_ms) if self.subscriptions.has_auto_assigned_partitions() else None
        self._invoke_completed_offset_commit_callbacks()
        self._maybe_update_subscription_metadata()
        if self.subscriptions.has_auto_assigned_partitions():
            if timer is None:  # a commit callback subscribed
                timer = _Timer(self._clock, timeout_ms)
            self.check_heartbeat_failure()
            with self._lock:
                self.heartbeat.poll(self._clock.now_ms())
            if self.coordinator_unknown() and not self.ensure_coordinator_ready(timer.remaining_ms()):
                return False
            if self.rejoin_needed_or_pending():
                if (self.subscriptions.has_pattern_subscription() and self.needs_join_prepare
                        and self._join_future is None and self._sync_future is None):
                    # Join with the topics the pattern matches now, not at the last update.
                    if not self._client.await_metadata_update(timer.remaining_ms()):
                        return False
                    self._maybe_update_subscription_metadata()
                if not self.ensure_active_group(timer.remaining_ms()):
                    return False
            elif self.state is MemberState.STABLE:
                self.start_heartbeat_thread_if_needed()
        if self.auto_commit_enabled:  # no clock read on the (frequent) path without it
            self._maybe_auto_commit_offsets_async(self._clock.now_ms())
        return True

    def record_poll(self, now_ms: int) -> None:
        """The application called poll(): restart the max.poll.interval.ms clock."""
        with self._lock:
            self.heartbeat.poll(now_ms)

    def time_to_next_poll(self, now_ms: int) -> int:
        """ms until poll() must run again for the coordinator (auto-commit, heartbeat)."""
        if self.group_id is None:
            return 2**31 - 1
        with self._lock:
            if self.state in (MemberState.UNJOINED, MemberState.PREPARING_REBALANCE):
                wait = 2**31 - 1
            else:
                # The heartbeat thread sends it; an overdue heartbeat must not make the
                # application spin with zero timeouts.
                wait = self.heartbeat.time_to_next_heartbeat(now_ms) or self.retry_backoff_ms
        if self.auto_commit_enabled:
            wait = min(wait, max(self._next_auto_commit_deadline - now_ms, 0))
        return wait

    def rejoin_needed_or_pending(self) -> bool:
        if not self.subscriptions.has_auto_assigned_partitions():
            return False
        if self._assignment_snapshot is not None and self._assignment_snapshot_checked != \
                self._metadata.update_version:
            self._assignment_snapshot_checked = self._metadata.update_version
            current = self._partition_counts(self._assignment_snapshot)
            if current != self._assignment_snapshot:
                self.request_rejoin(f"partition counts changed from {self._assignment_snapshot} to "
                                    f"{current} since the last assignment")
                self._assignment_snapshot = None
                return True
        joined = self._joined_subscription
        if joined is not None and joined != self.subscriptions.subscription:
            self.request_rejoin(f"the subscription changed from {sorted(joined)} to "
                                f"{sorted(self.subscriptions.subscription)} since the last join")
            self._joined_subscription = None
            return True
        return super().rejoin_needed_or_pending()

    # ------------------------------------------------------------------ metadata rules
    def _partition_counts(self, topics: Iterable[str]) -> dict[str, int | None]:
        cluster = self._metadata.cluster
        return {t: cluster.partition_count(t) for t in topics}

    def _maybe_update_subscription_metadata(self) -> None:
        """Pattern re-match and metadata topics, once per metadata update."""
        version = self._metadata.update_version
        subs = self.subscriptions
        if subs.has_pattern_subscription():
            if not self._metadata.need_all_topics:
                self._metadata.set_need_all_topics(True)
            if version != self._metadata_snapshot_version and version > 0:
                cluster = self._metadata.cluster
                matched = subs.topics_matching_pattern(cluster.topics(), cluster.internal_topics)
                if subs.subscribe_from_pattern(matched):
                    log.info("group %s: the pattern subscription now matches %s", self.group_id, sorted(matched))
        if subs.has_auto_assigned_partitions():
            missing = subs.metadata_topics() - self._metadata.topics
            if missing:
                self._metadata.add_topics(*missing)
        self._metadata_snapshot_version = version

    # ------------------------------------------------------------------ rebalance hooks
    def on_join_prepare(self, timeout_ms: int | None, generation_id: int, member_id: str) -> bool:
        # 1. commit what was consumed before giving partitions up (bounded by the rebalance timeout)
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
        self._invoke_completed_offset_commit_callbacks()

        # 2. revoke (or declare lost) partitions
        subs = self.subscriptions
        assigned = subs.assigned_partitions()
        error = None
        if generation_id == NO_GENERATION.generation_id or not member_id:
            if assigned:
                log.warning(
                    "member %r of group %s lost partitions %s without revoking them (%s): another "
                    "member may already consume them, and records processed since the last commit "
                    "may be delivered again", member_id or self.last_reset_member_id, self.group_id,
                    sorted(assigned), self.last_reset_reason or "generation reset")
                error = self._invoke_listener("lost", assigned)
                subs.assign_from_subscribed([])
        elif self.protocol is RebalanceProtocol.EAGER:
            if assigned:
                error = self._invoke_listener("revoked", assigned)
            subs.assign_from_subscribed([])
        else:
            revoked = {tp for tp in assigned if not subs.matches_subscription(tp.topic)}
            if revoked:
                error = self._invoke_listener("revoked", revoked)
                subs.assign_from_subscribed(assigned - revoked)
        self.is_leader = False
        subs.reset_group_subscription()
        if error is not None:
            raise error
        return True

    def on_leader_elected(self, leader_id: str, protocol_name: str, members: list[dict],
                          skip_assignment: bool) -> dict[str, bytes]:
        assignor = self._lookup_assignor(protocol_name)
        if assignor is None:
            raise Errors.IllegalStateError(f"group {self.group_id}: the coordinator chose assignor "
                                           f"{protocol_name!r}, which this member did not advertise")
        subscriptions = {}
        for m in members:
            subscriptions[m["member_id"]] = deserialize_subscription(
                m["metadata"], group_instance_id=m.get("group_instance_id"))
        all_topics: set[str] = set()
        for s in subscriptions.values():
            all_topics.update(s.topics)
        self.is_leader = True
        if self.subscriptions.group_subscribe(all_topics):
            # Other members want topics this member does not: fetch their metadata first.
            self._metadata.add_topics(*(all_topics - self._metadata.topics))
            self._client.await_metadata_update(self.request_timeout_ms)
        # mechanisms §6 assignment snapshot: what the assignment is computed from.
        self._assignment_snapshot = self._partition_counts(sorted(all_topics))
        self._assignment_snapshot_checked = self._metadata.update_version
        if skip_assignment:
            # KIP-814: a static leader rejoining with unchanged metadata keeps the assignment.
            log.info("group %s: skipping assignment (static leader rejoin)", self.group_id)
            return {}
        counts = {t: n for t, n in self._assignment_snapshot.items() if n is not None}
        log.debug("group %s: performing %s assignment for %s over %s", self.group_id, assignor.name,
                  sorted(subscriptions), counts)
        assignment = assignor.assign(counts, subscriptions)
        result = {}
        for member_id in subscriptions:
            a = assignment.get(member_id)
            if a is None:
                log.warning("assignor %s gave member %s no assignment; it gets none", assignor.name, member_id)
                from kclient.group.consumer_protocol import Assignment
                a = Assignment()
            result[member_id] = serialize_assignment(a)
        log.info("group %s generation %d: assignment %s", self.group_id, self._generation.generation_id,
                 {m: sorted(a.partitions) for m, a in assignment.items()})
        return result

    def on_join_complete(self, generation_id: int, member_id: str, protocol_name: str | None,
                         assignment_bytes: bytes) -> None:
        subs = self.subscriptions
        if not self.is_leader:
            # Followers watch the partition counts of their own topics (mechanisms §6).
            self._assignment_snapshot = self._partition_counts(sorted(subs.subscription))
            self._assignment_snapshot_checked = self._metadata.update_version
        assignor = self._lookup_assignor(protocol_name)
        if assignor is None:
            raise Errors.IllegalStateError(f"group {self.group_id}: unknown assignor {protocol_name!r}")
        try:
            assignment = deserialize_assignment(assignment_bytes)
        except Errors.ProtocolError as exc:
            log.error("group %s: unreadable assignment from the leader (%s); rejoining", self.group_id, exc)
            self.request_rejoin("unreadable assignment")
            return
        owned = subs.assigned_partitions()
        assigned = set(assignment.partitions)
        if not subs.check_assignment_matched_subscription(assigned):
            log.info("group %s: the assignment %s does not match the subscription %s (it changed "
                     "during the rebalance); rejoining", self.group_id, sorted(assigned),
                     sorted(subs.subscription))
            self.request_rejoin("the assignment does not match the subscription")
            return
        error = None
        if self.protocol is RebalanceProtocol.COOPERATIVE:
            added = assigned - owned
            revoked = owned - assigned
            if revoked:
                subs.mark_pending_revocation(revoked)
                error = self._invoke_listener("revoked", revoked)
                self.request_rejoin(f"revoked {sorted(revoked)}: rejoin so their new owners get them")
        else:
            added = assigned
        assignor.on_assignment(assignment, generation_id)
        if self.auto_commit_enabled:
            self._next_auto_commit_deadline = self._clock.now_ms() + self.auto_commit_interval_ms
            self._schedule_auto_commit()
        subs.assign_from_subscribed(assigned)
        log.info("member %s of group %s (generation %d) is assigned %s", member_id, self.group_id,
                 generation_id, sorted(assigned))
        error2 = self._invoke_listener("assigned", added)
        if error is None:
            error = error2
        if error is not None:
            raise error

    def on_leave_prepare(self) -> None:
        subs = self.subscriptions
        if not subs.has_auto_assigned_partitions():
            return
        assigned = subs.assigned_partitions()
        if not assigned:
            return
        generation = self._generation
        if generation.generation_id == NO_GENERATION.generation_id or not generation.member_id:
            error = self._invoke_listener("lost", assigned)
        else:
            error = self._invoke_listener("revoked", assigned)
        subs.assign_from_subscribed([])
        if error is not None:
            raise error

    def _invoke_listener(self, what: str, partitions: set) -> BaseException | None:
        """Call the rebalance listener; its exception is logged and returned (raised later)."""
        listener = self.subscriptions.rebalance_listener
        if listener is None:
            return None
        parts = set(partitions)
        try:
            if what == "revoked":
                listener.on_partitions_revoked(parts)
            elif what == "assigned":
                listener.on_partitions_assigned(parts)
            else:
                invoke_partitions_lost(listener, parts)
        except Exception as exc:
            log.error("group %s: the rebalance listener failed in on_partitions_%s(%s): %r",
                      self.group_id, what, sorted(parts), exc, exc_info=True)
            return exc
        return None

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
        timer = _Timer(self._clock, timeout_ms)
        while True:
            if not self.ensure_coordinator_ready(timer.remaining_ms()):
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
            self._backoff(timer)
            if timer.expired():
                raise Errors.KafkaTimeoutError(
                    f"group {self.group_id}: committed offsets not fetched within {timeout_ms} ms "
                    f"(last error: {exc!r})")

    def _send_offset_fetch_request(self, partitions: frozenset) -> RequestFuture:
        node = self.coordinator()
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
            _OffsetFetchHandler(self, None, node))

    # ------------------------------------------------------------------ commits
    def commit_offsets_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                            timeout_ms: int | None) -> None:
        """Commit and wait; retriable errors are retried until ``timeout_ms``.
        Raises CommitFailedError, KafkaTimeoutError, authorization errors..."""
        self._require_group()
        self._invoke_completed_offset_commit_callbacks()
        offsets = self._check_offsets(offsets)
        if not offsets:
            return
        timer = _Timer(self._clock, timeout_ms)
        last_error: BaseException | None = None
        while True:
            if not self.ensure_coordinator_ready(timer.remaining_ms()):
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
            self._backoff(timer)
            if timer.expired():
                break
        raise Errors.KafkaTimeoutError(
            f"group {self.group_id}: offsets {self._describe(offsets)} not committed within "
            f"{timeout_ms} ms" + (f" (last error: {last_error!r})" if last_error else ""))

    def commit_offsets_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                             callback: CommitCallback | None = None) -> RequestFuture:
        """Send a commit without waiting. ``callback(offsets, exc_or_None)`` runs on the
        application thread in a later poll()/commit call. Not retried (order matters)."""
        self._require_group()
        self._invoke_completed_offset_commit_callbacks()
        offsets = self._check_offsets(offsets)
        result: RequestFuture = RequestFuture()
        if self.coordinator() is not None:
            self._do_commit_async(offsets, callback, result)
        else:
            # Commit once the coordinator is found; close() waits for these.
            self._count_async_commit(+1)
            lookup = self.lookup_coordinator()

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

    def _invoke_completed_offset_commit_callbacks(self) -> None:
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
                            self._describe(offsets), exc)

    def _send_offset_commit_request(self, offsets: dict) -> RequestFuture:
        if not offsets:
            return RequestFuture.void_success()
        node = self.coordinator()
        if node is None:
            return RequestFuture.coordinator_not_available()
        if self.subscriptions.has_auto_assigned_partitions():
            generation = self.generation_if_stable()
            if generation is None:
                with self._lock:
                    rebalancing = self.state in (MemberState.PREPARING_REBALANCE,
                                                 MemberState.COMPLETING_REBALANCE) or (
                        self._generation.generation_id >= 0 and self.rejoin_needed_or_pending())
                if rebalancing:
                    return RequestFuture.failure(Errors.CommitFailedError(
                        "the consumer is in the middle of a rebalance; complete it with poll() and "
                        "commit again (the partitions may have moved to another member)"))
                return RequestFuture.failure(Errors.CommitFailedError(
                    "this member is no longer part of an active generation of the group (it was "
                    f"evicted or left: {self.last_reset_reason or 'not joined'}); its partitions "
                    "may have moved to another member"))
        else:
            generation = NO_GENERATION
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

        log.debug("group %s: committing %s (generation %d)", group_id, self._describe(offsets),
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
    def _describe(offsets: Mapping) -> str:
        return ", ".join(f"{tp.topic}-{tp.partition}@{oam.offset}" for tp, oam in sorted(offsets.items()))

    def _require_group(self) -> None:
        if self.group_id is None:
            raise Errors.InvalidGroupIdError(
                "offset commit and group management need a group.id; set group_id=...")

    # ------------------------------------------------------------------ auto-commit
    def _schedule_auto_commit(self) -> None:
        deadline = self._next_auto_commit_deadline
        if self._scheduled_auto_commit != deadline:
            self._scheduled_auto_commit = deadline
            self._client.schedule(self._auto_commit_task, deadline)

    def _maybe_auto_commit_offsets_async(self, now_ms: int) -> None:
        if not self.auto_commit_enabled or self._closed:
            return
        if now_ms < self._next_auto_commit_deadline:
            self._schedule_auto_commit()
            return
        subs = self.subscriptions
        if subs.has_auto_assigned_partitions() and (
                self.generation_if_stable() is None or self.rejoin_needed_or_pending()):
            # Mid-rebalance: on_join_prepare commits; try again shortly.
            self._next_auto_commit_deadline = now_ms + self.retry_backoff_ms
        else:
            self._next_auto_commit_deadline = now_ms + self.auto_commit_interval_ms
            offsets = subs.all_consumed()
            if offsets:
                self.commit_offsets_async(offsets, self._on_auto_commit)
        self._schedule_auto_commit()

    def _on_auto_commit(self, offsets, exc) -> None:
        if exc is None:
            log.debug("group %s: auto-committed %s", self.group_id, self._describe(offsets))
        elif isinstance(exc, Errors.RetriableCommitFailedError):
            log.debug("group %s: auto-commit failed (%r); retrying in %d ms", self.group_id, exc,
                      self.retry_backoff_ms)
            self._next_auto_commit_deadline = min(self._next_auto_commit_deadline,
                                                  self._clock.now_ms() + self.retry_backoff_ms)
            self._schedule_auto_commit()
        else:
            log.warning("group %s: auto-commit of %s failed: %r", self.group_id, self._describe(offsets), exc)

    def _commit_consumed_for_rebalance(self) -> RequestFuture | None:
        """Before revoking: commit what was consumed, if the generation still allows it."""
        subs = self.subscriptions
        if subs.has_auto_assigned_partitions() and self.generation_if_stable() is None:
            return None
        offsets = subs.all_consumed()
        if not offsets:
            return None
        future = self._send_offset_commit_request(offsets)
        future.on_success(lambda _v: self._completed_offset_commits.append((None, offsets, None)))
        return future

    def _maybe_auto_commit_offsets_sync(self, timeout_ms: int | None) -> None:
        if not self.auto_commit_enabled:
            return
        offsets = self.subscriptions.all_consumed()
        if not offsets:
            return
        try:
            self.commit_offsets_sync(offsets, timeout_ms)
        except Errors.KafkaError as exc:
            # Closing or rebalancing: report it, the caller's operation goes on.
            log.warning("group %s: auto-commit of %s failed: %r", self.group_id, self._describe(offsets), exc)

    # ------------------------------------------------------------------ misc
    def group_metadata(self) -> ConsumerGroupMetadata:
        g = self._generation
        return ConsumerGroupMetadata(self.group_id, g.generation_id, g.member_id, self.group_instance_id)

    def close(self, timeout_ms: int | None = None, autocommit: bool = True) -> None:
        """Final auto-commit, wait for async commits, leave the group, stop the heartbeat thread."""
        if self._closed:
            return
        timer = _Timer(self._clock, timeout_ms)
        self._client.unschedule(self._auto_commit_task)
        try:
            if self.group_id is not None:
                if autocommit:
                    self._maybe_auto_commit_offsets_sync(timer.remaining_ms())
                while self._pending_async_commits > 0 and not timer.expired():
                    if not self.ensure_coordinator_ready(timer.remaining_ms()):
                        break
                    self._client.poll(min(timer.remaining_ms() or 100, 100))
                self._invoke_completed_offset_commit_callbacks()
        finally:
            if self.group_id is not None:
                super().close(timer.remaining_ms())
            else:
                self._closed = True
            self.auto_commit_enabled = False


# ---------------------------------------------------------------------- response handlers
class _OffsetCommitHandler(_Handler):
    c: ConsumerCoordinator
    generation: Generation  # always given: a commit is tied to the generation it was made in

    def __init__(self, coordinator: ConsumerCoordinator, offsets: dict, generation: Generation, node):
        super().__init__(coordinator, generation, node)
        self.offsets = offsets

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
                err = _error_for(code)
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
                    c.request_rejoin("offset commit answered REBALANCE_IN_PROGRESS")
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
                        unchanged = self.generation_unchanged()
                    if unchanged and self.generation.generation_id >= 0:
                        c.reset_generation_on_response_error("OffsetCommit", err)
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


class _OffsetFetchHandler(_Handler):
    c: ConsumerCoordinator

    def on_success(self, response: dict, future: RequestFuture) -> None:
        c = self.c
        groups = response.get("groups")
        if groups:
            group = next((g for g in groups if g.get("group_id") == c.group_id), groups[0])
            code, topics = group.get("error_code", 0), group.get("topics") or []
        else:
            code, topics = response.get("error_code", 0) or 0, response.get("topics") or []
        if code:
            err = _error_for(code)
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
                    err = _error_for(pcode)
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
