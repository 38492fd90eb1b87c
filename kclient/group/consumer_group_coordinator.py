"""The consumer's coordinator for ``group.protocol=consumer`` (KIP-848): heartbeats, reconciliation, leave.

Membership decisions live in kclient.group.consumer_membership (a state machine without I/O).
This class does the I/O around it and everything that must run on the application thread:

- heartbeats: ``_send_heartbeat`` is the only place a ConsumerGroupHeartbeat leaves from Python
  and its answer is digested (``_on_heartbeat``); a heartbeat driver (kclient.group.heartbeat_driver:
  the ``ConsumerHeartbeatLoop`` thread, carried by the pacemaker link where it works) calls
  ``heartbeat_tick`` so the member stays in the group between polls. One heartbeat is in flight
  at a time (the protocol's rule); an acknowledgement waiting behind one leaves when it returns.
  While the member is in the group with nothing new to say (STABLE, or RECONCILING at the
  application's pace), the GIL-free pacemaker heartbeats instead
  (kclient.group.consumer_pacemaker); every other heartbeat is Python's, sent after the
  pacemaker is disengaged and has handed over the epoch it reached.
- reconciliation (in ``poll``): target topic ids are resolved through metadata; what is no
  longer assigned is committed (auto-commit) and revoked (``on_partitions_revoked``), what is
  new is assigned (``on_partitions_assigned``), and the owned set is acknowledged at once.
- fencing (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID): ``on_partitions_lost``, then rejoin at epoch 0.
- commits carry the member epoch as the generation (OffsetCommit v9+; the broker checks it).
- leaving (close, unsubscribe): revoke callbacks, then a heartbeat with epoch -1 (or -2 for a
  static member, whose partitions wait for it until the session times out).

It shares no JoinGroup/SyncGroup machinery with the classic coordinator: what both need is
composed in, the coordinator's discovery and connection (``CoordinatorChannel``) and the
offsets (``OffsetCommitter``: commits, auto-commit, the committed-offset lookup), whose
``CommitMember`` this class is, with the member epoch as the generation.
"""
from __future__ import annotations

import logging
from typing import Any

from kcore.timers import Heartbeat

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.group.commit_manager import (
    CommitGeneration, CommitObserver, OffsetCommitter,
)
from kclient.group.consumer_heartbeat_loop import NETWORK_WAIT_MAX_MS, ConsumerHeartbeatLoop
from kclient.group.consumer_membership import HEARTBEATING, ConsumerMembership, MemberState as CState
from kclient.group.consumer_pacemaker import create_consumer_link
from kclient.group.coordinator_channel import CoordinatorChannel
from kclient.group.group_config import ConsumerCoordinatorConfig, GroupRebalanceConfig
from kclient.group.heartbeat_driver import HeartbeatDriver
from kclient.group.subscription_metadata import SubscriptionMetadata
from kclient.group.timer import Timer
from kclient.network.future import RequestFuture
from kclient.network.metadata import Node
from kclient.protocol import ApiKey
from kclient.structs import TopicPartition
from kclient.subscription.listener import call_rebalance_listener
from kclient.subscription.state import SubscriptionState

__all__ = ["ConsumerGroupCoordinator"]

log = logging.getLogger(__name__)

CONSUMER_GROUP_HEARTBEAT = int(ApiKey.CONSUMER_GROUP_HEARTBEAT)
_COORDINATOR_ERRORS = (Errors.NotCoordinatorError, Errors.CoordinatorNotAvailableError)


class ConsumerGroupCoordinator:
    def __init__(self, client, subscriptions: SubscriptionState, metadata, rebalance_config: GroupRebalanceConfig,
                 coordinator_config: ConsumerCoordinatorConfig, *, clock: Clock = SYSTEM_CLOCK,
                 interceptors: CommitObserver | None = None, start_heartbeat_thread: bool = True):
        if not isinstance(rebalance_config, GroupRebalanceConfig):
            raise TypeError(f"rebalance_config must be a GroupRebalanceConfig, got {type(rebalance_config).__name__}")
        if not isinstance(coordinator_config, ConsumerCoordinatorConfig):
            raise TypeError("coordinator_config must be a ConsumerCoordinatorConfig, got "
                            f"{type(coordinator_config).__name__}")
        rc = self.rebalance_config = rebalance_config
        cc = self.coordinator_config = coordinator_config
        self._client = client
        self._clock = clock
        self.group_id = rc.group_id
        self.group_instance_id = rc.group_instance_id
        self.session_timeout_ms = rc.session_timeout_ms
        self.rebalance_timeout_ms = rc.rebalance_timeout_ms
        self.retry_backoff_ms = rc.retry_backoff_ms
        self.request_timeout_ms = rc.request_timeout_ms
        self.leave_group_on_close = rc.leave_group_on_close
        self.subscriptions = subscriptions
        self._metadata = metadata
        self.channel = CoordinatorChannel(client, rc.group_id, retry_backoff_ms=rc.retry_backoff_ms,
                                          request_timeout_ms=rc.request_timeout_ms, clock=clock,
                                          on_change=self._on_coordinator_change)
        self._lock = self.channel.lock
        self._cond = self.channel.cond
        # Timing shared with the pacemaker (its session and max.poll.interval.ms clocks).
        self.heartbeat = Heartbeat(rc.session_timeout_ms, rc.heartbeat_interval_ms, rc.rebalance_timeout_ms,
                                   rc.retry_backoff_ms, clock.now_ms())
        self.membership = ConsumerMembership(
            group_id=self.group_id or "", instance_id=self.group_instance_id, rack_id=cc.client_rack,
            rebalance_timeout_ms=self.rebalance_timeout_ms, server_assignor=cc.remote_assignor)
        self._subscription_metadata = SubscriptionMetadata(subscriptions, metadata, self.group_id)
        self.committer = OffsetCommitter(self.channel, self, subscriptions, metadata, cc,
                                         rebalance_timeout_ms=self.rebalance_timeout_ms, clock=clock,
                                         interceptors=interceptors)
        self._hb_in_flight: RequestFuture | None = None
        self._next_heartbeat_ms = 0
        self._last_poll_ms = self._clock.now_ms()
        self._run_driver = start_heartbeat_thread
        #: The heartbeat driver (kclient.group.heartbeat_driver), chosen at the first poll in a
        #: group: the pacemaker link, or the Python loop alone; None: heartbeats from poll() only.
        self._driver: HeartbeatDriver | None = None
        self._leave_future: RequestFuture | None = None
        self._closed = False

    # ------------------------------------------------------------------ state
    @property
    def lock(self) -> Any:
        return self._lock

    @property
    def cond(self) -> Any:
        return self._cond

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def heartbeat_driver(self) -> HeartbeatDriver | None:
        return self._driver

    @property
    def auto_commit_enabled(self) -> bool:
        return self.committer.auto_commit_enabled

    @property
    def last_reset_reason(self) -> str | None:
        """KIP-848 members have no generation to reset (fencing is reported as lost partitions)."""
        return None

    def now_ms(self) -> int:
        return self._clock.now_ms()

    @property
    def member_id(self) -> str:
        return self.membership.member_id

    def generation(self) -> CommitGeneration:
        """The member epoch and member id (what commits carry as the generation)."""
        return self.commit_generation()

    def commit_generation(self) -> CommitGeneration:
        m = self.membership
        return CommitGeneration(m.member_epoch, m.member_id)

    def stable_commit_generation(self) -> CommitGeneration | None:
        with self._lock:
            m = self.membership
            return CommitGeneration(m.member_epoch, m.member_id) if m.in_group() else None

    def is_stable(self) -> bool:
        return self.membership.state is CState.STABLE

    def is_rebalancing(self) -> bool:
        with self._lock:
            return self.membership.member_epoch >= 0 and self.rejoin_needed_or_pending()

    def rejoin_needed_or_pending(self) -> bool:
        if not self.subscriptions.has_auto_assigned_partitions():
            return False
        return self.membership.state in (CState.UNSUBSCRIBED, CState.JOINING, CState.RECONCILING,
                                         CState.FENCED)

    def request_rejoin(self, reason: str) -> None:
        """The broker drives KIP-848 rebalances: heartbeats bring the next assignment."""

    def heartbeat_in_flight(self) -> bool:
        return self._hb_in_flight is not None

    def api_version(self, node: Node, api: int) -> int | None:
        return self._client.api_version(node, api)

    def record_poll(self, now_ms: int) -> None:
        with self._lock:
            self._last_poll_ms = now_ms
            self.heartbeat.poll(now_ms)

    def time_to_next_poll(self, now_ms: int) -> int:
        if self.group_id is None:
            return 2**31 - 1
        with self._lock:
            state = self.membership.state
            driver = self._driver
            if state in (CState.RECONCILING, CState.FENCED):
                wait = 0
            elif driver is not None and driver.engaged:
                # The pacemaker heartbeats; its events wake the network client when they matter.
                wait = self.membership.heartbeat_interval_ms
            else:
                wait = max(self._next_heartbeat_ms - now_ms, 0) or self.retry_backoff_ms
        auto_commit = self.committer.time_to_next_auto_commit(now_ms)
        if auto_commit is not None:
            wait = min(wait, auto_commit)
        return wait

    def reset_generation_on_response_error(self, api: str, error: BaseException) -> None:
        """A commit found the member unknown or fenced: the next poll reports its partitions lost
        and rejoins at epoch 0."""
        with self._lock:
            if self.membership.state in HEARTBEATING:
                log.warning("member %s of group %s: %s answered %s; its partitions are lost, it rejoins",
                            self.membership.member_id, self.group_id, api, type(error).__name__)
                self.membership.fenced(f"{type(error).__name__} from {api}")

    # ------------------------------------------------------------------ coordinator (kclient.group.coordinator_channel)
    def _on_coordinator_change(self, found: bool) -> None:
        if found:
            # A new coordinator has not seen us yet: give the session a fresh start.
            self.heartbeat.reset_session_timeout(self._clock.now_ms())

    def coordinator(self) -> Node | None:
        return self.channel.coordinator()

    def coordinator_unknown(self) -> bool:
        return self.channel.coordinator_unknown()

    def mark_coordinator_unknown(self, reason: str, disconnected: bool = False, node: Node | None = None) -> None:
        self.channel.mark_coordinator_unknown(reason, disconnected, node)

    def lookup_coordinator(self) -> RequestFuture:
        return self.channel.lookup_coordinator()

    def ensure_coordinator_ready(self, timeout_ms: int | None) -> bool:
        return self.channel.ensure_coordinator_ready(timeout_ms)

    def has_pending_coordinator_requests(self) -> bool:
        return self.channel.has_pending_requests()

    def poll_network_nowait(self, timeout_ms: int) -> bool:
        return self.channel.poll_network_nowait(timeout_ms)

    def wake_network(self) -> None:
        self.channel.wake_network()

    # ------------------------------------------------------------------ poll (application thread)
    def poll(self, timeout_ms: int | None) -> bool:
        if self.group_id is None:
            return True
        self.committer.invoke_completed_offset_commit_callbacks()
        subs = self.subscriptions
        if subs.has_auto_assigned_partitions():
            timer = Timer(self._clock, timeout_ms)
            m = self.membership
            if m.fatal_error is not None:
                raise m.fatal_error
            if subs.has_pattern_subscription() and not self._metadata.need_all_topics:
                # The broker matches the regex; the full topic list names the ids it assigns.
                self._metadata.set_need_all_topics(True)
            self._subscription_metadata.update()
            with self._lock:
                if m.state is CState.UNSUBSCRIBED:
                    m.subscribe()
                    self._next_heartbeat_ms = 0
            driver = self._driver
            if driver is not None:
                driver.drain()
            if self.coordinator_unknown() and not self.ensure_coordinator_ready(timer.remaining_ms()):
                return False
            self._start_driver_if_needed()
            if m.state is CState.FENCED:
                self._on_fenced()
            if m.state is CState.RECONCILING:
                self._reconcile(timer)
            self.heartbeat_tick(self._clock.now_ms())
        if self.committer.auto_commit_enabled:
            self.committer.maybe_auto_commit_offsets_async(self._clock.now_ms())
        return True

    def _on_fenced(self) -> None:
        subs = self.subscriptions
        lost = subs.assigned_partitions()
        log.warning("member %s of group %s was fenced (epoch %d): %s lost; rejoining", self.membership.member_id,
                    self.group_id, self.membership.member_epoch, sorted(lost))
        error = self._call_listener("lost", lost) if lost else None
        subs.assign_from_subscribed([])
        with self._lock:
            self.membership.rejoin()
            self._next_heartbeat_ms = 0
        if error is not None:
            raise error

    def _reconcile(self, timer: Timer) -> None:
        m = self.membership
        with self._lock:
            target = dict(m.target or {})
            epoch = m.member_epoch
        cluster = self._metadata.cluster
        names = {tid: cluster.topic_name(tid) for tid in target}
        if any(n is None for n in names.values()):
            # Topic ids this member has no metadata for yet (e.g. a topic a regex just matched).
            unknown = sorted(str(t) for t, n in names.items() if n is None)
            log.debug("group %s: resolving assigned topic ids %s through metadata", self.group_id, unknown)
            self._metadata.set_need_all_topics(True)
            self._client.await_metadata_update(min(timer.remaining_ms() or 0, self.retry_backoff_ms))
            cluster = self._metadata.cluster
            names = {tid: cluster.topic_name(tid) for tid in target}
            if any(n is None for n in names.values()):
                return   # next poll
        subs = self.subscriptions
        wanted = {TopicPartition(names[tid], p) for tid, ps in target.items() for p in ps}
        if subs.has_pattern_subscription():
            subs.subscribe_from_pattern(set(subs.subscription) | {tp.topic for tp in wanted})
        owned = subs.assigned_partitions()
        revoked, added = owned - wanted, wanted - owned
        error = None
        if revoked:
            if self.committer.auto_commit_enabled:
                self.committer.commit_before_revoke(revoked, timer)
            subs.mark_pending_revocation(revoked)
            error = self._call_listener("revoked", revoked)
        subs.assign_from_subscribed(wanted)
        log.info("member %s of group %s (epoch %d) is assigned %s", m.member_id, self.group_id, epoch,
                 sorted(wanted))
        error2 = self._call_listener("assigned", added)
        with self._lock:
            if m.state is CState.RECONCILING and m.target == target:
                m.reconciled(target)
                self._next_heartbeat_ms = 0   # acknowledge now
            # else: a newer target arrived meanwhile; the next poll reconciles again
        self.heartbeat_tick(self._clock.now_ms())
        if error is None:
            error = error2
        if error is not None:
            raise error

    def _call_listener(self, what: str, partitions: set) -> BaseException | None:
        """Call the rebalance listener; its exception is logged and returned (raised later)."""
        return call_rebalance_listener(self.subscriptions.rebalance_listener, what, partitions, self.group_id)

    # ------------------------------------------------------------------ heartbeats
    def _start_driver_if_needed(self) -> None:
        """Choose the heartbeat driver (once) and start it."""
        with self._lock:
            if self._run_driver and self._driver is None and not self._closed:
                link = create_consumer_link(self, self._client)
                self._driver = link if link is not None else ConsumerHeartbeatLoop(self)
                self._driver.start()

    def on_heartbeat_loop_failure(self, exc: BaseException) -> None:
        self.membership.fatal_error = exc if isinstance(exc, Exception) else Errors.KafkaError(repr(exc))

    def heartbeat_tick(self, now_ms: int) -> int:
        """Send a heartbeat if one is due; ms until the next one is (any thread)."""
        with self._lock:
            m = self.membership
            if m.state not in HEARTBEATING and m.state is not CState.LEAVING:
                return self.retry_backoff_ms
            if self._hb_in_flight is not None:
                return NETWORK_WAIT_MAX_MS
            driver = self._driver
            if driver is not None:
                driver.membership_changed()
                if driver.engaged:
                    return m.heartbeat_interval_ms   # the pacemaker heartbeats (and enforces max.poll.interval.ms)
            if m.state in HEARTBEATING and now_ms - self._last_poll_ms > self.rebalance_timeout_ms:
                self.on_poll_timeout(now_ms)
                return 0
            if now_ms < self._next_heartbeat_ms:
                return self._next_heartbeat_ms - now_ms
            node = self.coordinator()
            if node is None:
                self.lookup_coordinator()
                return self.retry_backoff_ms
            self._send_heartbeat(node, leaving=False)
            return NETWORK_WAIT_MAX_MS

    def _send_heartbeat(self, node, leaving: bool) -> RequestFuture:
        """The one place a ConsumerGroupHeartbeat leaves (holding ``_lock``)."""
        m = self.membership
        if self._driver is not None:
            self._driver.disengage()   # hands over the epoch it reached
        subs = self.subscriptions
        pattern = subs.subscribed_pattern
        body = m.heartbeat_body(sorted(subs.subscription), pattern.pattern if pattern is not None else None,
                                leaving=leaving)
        epoch = body["member_epoch"]
        future = self._client.send(node, CONSUMER_GROUP_HEARTBEAT, body)
        m.sent()
        self._hb_in_flight = future
        self._next_heartbeat_ms = self._clock.now_ms() + m.heartbeat_interval_ms
        future.add_both(self._on_heartbeat, future, node, epoch)
        return future

    def _on_heartbeat(self, future: RequestFuture, node, sent_epoch: int, outcome: Any) -> None:
        """The one place a ConsumerGroupHeartbeat answer is digested (any thread)."""
        with self._lock:
            if self._hb_in_flight is future:
                self._hb_in_flight = None
            now = self._clock.now_ms()
            m = self.membership
            if sent_epoch < 0:
                return   # the answer to a leave: nothing to act on
            if future.failed():
                exc = future.exception
                log.debug("group %s: heartbeat failed: %r", self.group_id, exc)
                if isinstance(exc, (Errors.KafkaConnectionError, Errors.KafkaTimeoutError)):
                    self.mark_coordinator_unknown(f"heartbeat failed: {exc!r}", node=node)
                self._next_heartbeat_ms = now + self.retry_backoff_ms
                self._cond.notify_all()
                return
            err = m.on_response(outcome)
            if err is not None:
                self.on_heartbeat_error(err, node)
            elif m.state is CState.ACKNOWLEDGING:
                self._next_heartbeat_ms = now   # an acknowledgement waited behind this heartbeat
            if self._driver is not None:
                self._driver.membership_changed()
            self._cond.notify_all()
        self.wake_network()

    def on_heartbeat_error(self, err: BaseException, node) -> None:
        """React to an error a heartbeat answered (Python's or the pacemaker's; holding ``_lock``)."""
        m = self.membership
        now = self._clock.now_ms()
        if isinstance(err, _COORDINATOR_ERRORS):
            self.mark_coordinator_unknown(repr(err), node=node)
            self._next_heartbeat_ms = now + self.retry_backoff_ms
        elif m.state is CState.FENCED:
            self._next_heartbeat_ms = now
        elif m.state is CState.FATAL:
            log.error("member %s of group %s: %r; the next poll raises it", m.member_id, self.group_id, err)
        else:
            log.info("group %s: heartbeat answered %r; retrying in %d ms", self.group_id, err,
                     self.retry_backoff_ms)
            self._next_heartbeat_ms = now + self.retry_backoff_ms

    def on_poll_timeout(self, now_ms: int) -> None:
        """Heartbeat thread: poll() not called within max.poll.interval.ms: leave, so the
        partitions move on; the next poll() reports them lost and rejoins."""
        m = self.membership
        log.warning("member %s of group %s: poll() was not called for %d ms, more than max.poll.interval.ms "
                    "(%d ms): leaving the group so its partitions are reassigned; the next poll() rejoins.",
                    m.member_id, self.group_id, now_ms - self._last_poll_ms, self.rebalance_timeout_ms)
        node = self.coordinator()
        if node is not None:
            self._send_heartbeat(node, leaving=True)
        m.fenced("poll timeout")

    # ------------------------------------------------------------------ leaving
    def on_leave_prepare(self) -> None:
        subs = self.subscriptions
        if not subs.has_auto_assigned_partitions():
            return
        assigned = subs.assigned_partitions()
        with self._lock:
            in_group = self.membership.in_group()
            self.membership.prepare_leaving()
        if not assigned:
            return
        error = self._call_listener("revoked" if in_group else "lost", assigned)
        subs.assign_from_subscribed([])
        if error is not None:
            raise error

    def maybe_leave_group(self, reason: str) -> RequestFuture | None:
        with self._lock:
            m = self.membership
            if m.state in (CState.UNSUBSCRIBED, CState.FATAL) or m.member_epoch <= 0:
                m.state = CState.UNSUBSCRIBED
                return None
            node = self.coordinator()
            if node is None:
                m.state = CState.UNSUBSCRIBED
                return None
            log.info("member %s leaving group %s (epoch %d): %s", m.member_id, self.group_id, m.leave_epoch(), reason)
            m.state = CState.LEAVING
            future = self._send_heartbeat(node, leaving=True)
            m.member_epoch = 0
            m.owned = {}
            self._leave_future = future
        self.channel.poll_network_nowait(0)
        return future

    # ------------------------------------------------------------------ close
    def close(self, timeout_ms: int | None = None, autocommit: bool = True) -> None:
        """Final auto-commit, wait for async commits, leave the group (revoke callbacks, then a
        leave heartbeat), then stop the heartbeat driver."""
        if self._closed:
            return
        timer = Timer(self._clock, timeout_ms)
        try:
            try:
                self.committer.close(timer, autocommit)
            finally:
                if self.group_id is not None:
                    self._leave_on_close(timer)
                else:
                    self._closed = True
                self.committer.stop()
        finally:
            with self._lock:
                driver, self._driver = self._driver, None
            if driver is not None:
                driver.close(1.0)

    def _leave_on_close(self, timer: Timer) -> None:
        try:
            if self.leave_group_on_close:
                try:
                    self.on_leave_prepare()
                finally:
                    self.maybe_leave_group("the consumer is being closed")
            if not self.channel.await_pending_requests(timer.remaining_ms()):
                log.warning("group %s: coordinator requests still pending at close", self.group_id)
        finally:
            with self._lock:
                self._closed = True
