"""ConsumerCoordinator: the consumer's side of group membership and offset storage (mechanisms §6).

On top of AbstractCoordinator it supplies the "consumer" embedded protocol: members advertise
every configured assignor with their subscription (kclient.group.classic_embedded_protocol), the leader runs
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

Offsets (commits, committed offsets, auto-commit) are the ``OffsetCommitter``'s
(kclient.group.commit_manager), which the KIP-848 coordinator uses too; this class is its
``CommitMember``.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.group.assignors import RebalanceProtocol, build_assignors
from kclient.group.classic_embedded_protocol import (
    PROTOCOL_TYPE, Assignment, deserialize_assignment, deserialize_subscription, serialize_assignment,
    serialize_subscription,
)
from kclient.group.commit_manager import (
    CommitGeneration, CommitObserver, ConsumerGroupMetadata, OffsetCommitter,
)
from kclient.group.coordinator import NO_GENERATION, AbstractCoordinator, MemberState
from kclient.group.group_config import ConsumerCoordinatorConfig, GroupRebalanceConfig
from kclient.group.subscription_metadata import SubscriptionMetadata
from kclient.group.timer import Timer
from kclient.subscription.listener import call_rebalance_listener
from kclient.subscription.state import SubscriptionState

__all__ = ["ConsumerCoordinator", "ConsumerGroupMetadata"]

log = logging.getLogger(__name__)

# In the steady state (a stable member whose heartbeats its driver sends, nothing to
# deliver or to commit) poll()'s checks find nothing to do, and an iterating consumer polls
# about every millisecond. They then run in full at most this often, and at once when
# something they look at changes: the metadata, the subscription or assignment, a rejoin
# request, a commit outcome to deliver, the heartbeat driver's failure, the auto-commit
# deadline. What waits at most this long: the heartbeat driver's other events and a
# coordinator connection found broken (its heartbeats go on meanwhile).
STEADY_POLL_MS = 20


class ConsumerCoordinator(AbstractCoordinator):
    def __init__(self, client, subscriptions: SubscriptionState, metadata, rebalance_config: GroupRebalanceConfig,
                 coordinator_config: ConsumerCoordinatorConfig, *, clock: Clock = SYSTEM_CLOCK,
                 interceptors: CommitObserver | None = None, stats: Any = None,
                 start_heartbeat_thread: bool = True):
        if not isinstance(coordinator_config, ConsumerCoordinatorConfig):
            raise TypeError("coordinator_config must be a ConsumerCoordinatorConfig, got "
                            f"{type(coordinator_config).__name__}")
        super().__init__(client, rebalance_config, clock=clock, start_heartbeat_thread=start_heartbeat_thread)
        cc = self.coordinator_config = coordinator_config
        self.stats = stats
        self.subscriptions = subscriptions
        self._metadata = metadata
        self.assignors = build_assignors(list(cc.assignment_strategy))
        self.protocol = self._rebalance_protocol(self.assignors)
        self.exclude_internal_topics = cc.exclude_internal_topics
        self.rack_id = cc.client_rack
        self.default_api_timeout_ms = cc.default_api_timeout_ms
        self._subscription_metadata = SubscriptionMetadata(subscriptions, metadata, self.group_id)
        self.committer = OffsetCommitter(self.channel, self, subscriptions, metadata, cc,
                                         rebalance_timeout_ms=self.rebalance_timeout_ms, clock=clock,
                                         interceptors=interceptors, stats=stats)
        self.is_leader = False
        self._joined_subscription: frozenset[str] | None = None
        self._assignment_snapshot: dict[str, int | None] | None = None
        self._assignment_snapshot_checked = -1
        self._steady_until = 0      # poll() skips its checks until then, if _steady_key holds
        self._steady_key: tuple = ()

    @property
    def auto_commit_enabled(self) -> bool:
        return self.committer.auto_commit_enabled

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
        if self._steady_until:
            now = self._clock.now_ms()
            if now < self._steady_until and self._still_steady():
                with self._lock:
                    self.heartbeat.poll(now)
                return True
        self._steady_until = 0
        # Only group management waits on the timer: no clock read for user assignments.
        timer = Timer(self._clock, timeout_ms) if self.subscriptions.has_auto_assigned_partitions() else None
        self.committer.invoke_completed_offset_commit_callbacks()
        self._subscription_metadata.update()
        if self.subscriptions.has_auto_assigned_partitions():
            if timer is None:  # a commit callback subscribed
                timer = Timer(self._clock, timeout_ms)
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
                    self._subscription_metadata.update()
                if not self.ensure_active_group(timer.remaining_ms()):
                    return False
            elif self.state is MemberState.STABLE:
                self.start_heartbeat_thread_if_needed()
        if self.committer.auto_commit_enabled:  # no clock read on the (frequent) path without it
            self.committer.maybe_auto_commit_offsets_async(self._clock.now_ms())
        if timer is not None:
            self._mark_steady()
        return True

    def _steady_state(self) -> tuple:
        """What poll()'s checks depend on that changes without a call to this coordinator."""
        subs = self.subscriptions
        return self._metadata.update_version, subs.assignment_id, subs.subscription, self._driver

    def _mark_steady(self) -> None:
        """After poll()'s checks: if the member is stable, skip them for a while (STEADY_POLL_MS)."""
        driver = self._driver
        if (self.state is not MemberState.STABLE or not self._driver_started or driver is None
                or driver.failure is not None or not self.subscriptions.has_auto_assigned_partitions()
                or self.rejoin_needed_or_pending() or self.committer.has_completed_commits):
            return
        now = self._clock.now_ms()
        until = now + STEADY_POLL_MS
        committer = self.committer
        if committer.auto_commit_enabled:
            until = min(until, committer.next_auto_commit_deadline)
        if until > now:
            self._steady_key = self._steady_state()
            self._steady_until = until

    def _still_steady(self) -> bool:
        driver = self._driver
        return (not self.rejoin_needed
                and self._join_future is None and self._sync_future is None
                and self.state is MemberState.STABLE
                and not self.committer.has_completed_commits
                and driver is not None and driver.failure is None
                and self._steady_state() == self._steady_key)

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
        auto_commit = self.committer.time_to_next_auto_commit(now_ms)
        if auto_commit is not None:
            wait = min(wait, auto_commit)
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

    # ------------------------------------------------------------------ rebalance hooks
    def on_join_prepare(self, timeout_ms: int | None, generation_id: int, member_id: str) -> bool:
        # 1. commit what was consumed before giving partitions up (bounded by the rebalance timeout)
        if not self.committer.commit_before_rebalance(timeout_ms):
            return False

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
                error = self._call_listener("lost", assigned)
                subs.assign_from_subscribed([])
        elif self.protocol is RebalanceProtocol.EAGER:
            if assigned:
                error = self._call_listener("revoked", assigned)
            subs.assign_from_subscribed([])
        else:
            revoked = {tp for tp in assigned if not subs.matches_subscription(tp.topic)}
            if revoked:
                error = self._call_listener("revoked", revoked)
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
                error = self._call_listener("revoked", revoked)
                self.request_rejoin(f"revoked {sorted(revoked)}: rejoin so their new owners get them")
        else:
            added = assigned
        assignor.on_assignment(assignment, generation_id)
        self.committer.assignment_changed()
        subs.assign_from_subscribed(assigned)
        log.info("member %s of group %s (generation %d) is assigned %s", member_id, self.group_id,
                 generation_id, sorted(assigned))
        error2 = self._call_listener("assigned", added)
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
            error = self._call_listener("lost", assigned)
        else:
            error = self._call_listener("revoked", assigned)
        subs.assign_from_subscribed([])
        if error is not None:
            raise error

    def _call_listener(self, what: str, partitions: set) -> BaseException | None:
        """Call the rebalance listener; its exception is logged and returned (raised later)."""
        started = self._clock.now_ms()
        try:
            return call_rebalance_listener(self.subscriptions.rebalance_listener, what, partitions, self.group_id)
        finally:
            if self.stats is not None:
                now = self._clock.now_ms()
                self.stats.record(f"partition-{what}", now - started, now)

    # ------------------------------------------------------------------ CommitMember (kclient.group.commit_manager)
    def stable_commit_generation(self) -> CommitGeneration | None:
        generation = self.generation_if_stable()
        return None if generation is None else CommitGeneration(generation.generation_id, generation.member_id)

    def commit_generation(self) -> CommitGeneration:
        g = self._generation
        return CommitGeneration(g.generation_id, g.member_id)

    # ------------------------------------------------------------------ close
    def close(self, timeout_ms: int | None = None, autocommit: bool = True) -> None:
        """Final auto-commit, wait for async commits, leave the group, stop the heartbeat driver."""
        if self._closed:
            return
        timer = Timer(self._clock, timeout_ms)
        try:
            self.committer.close(timer, autocommit)
        finally:
            if self.group_id is not None:
                super().close(timer.remaining_ms())
            else:
                self._closed = True
            self.committer.stop()
