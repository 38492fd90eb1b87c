"""The consumer's coordinator for ``group.protocol=consumer`` (KIP-848): heartbeats, reconciliation, leave.

Membership decisions live in kclient.group.consumer_membership (a state machine without I/O).
This class does the I/O around it and everything that must run on the application thread:

- heartbeats: ``_send_heartbeat`` is the only place a ConsumerGroupHeartbeat leaves from Python
  and its answer is digested (``_on_heartbeat``); a background ``_HeartbeatLoop`` thread calls
  ``_heartbeat_tick`` so the member stays in the group between polls. One heartbeat is in flight
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

Offsets, auto-commit and the committed-offset lookup are the classic coordinator's.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from kclient import errors as Errors
from kclient.group.consumer_coordinator import ConsumerCoordinator
from kclient.group.consumer_membership import ConsumerMembership, MemberState as CState, HEARTBEATING
from kclient.group.consumer_pacemaker import ConsumerPacemakerLink, create_consumer_link
from kclient.group.coordinator import Generation, _Timer
from kclient.network.future import RequestFuture
from kclient.protocol import ApiKey
from kclient.structs import TopicPartition

__all__ = ["ConsumerGroupCoordinator"]

log = logging.getLogger(__name__)

CONSUMER_GROUP_HEARTBEAT = int(ApiKey.CONSUMER_GROUP_HEARTBEAT)
#: Longest single network poll of the heartbeat thread (it must not hold the client's lock long).
_NETWORK_WAIT_MAX_MS = 50
#: Longest wait of the heartbeat thread for pacemaker events (bounds how late it notices its own work).
_PACEMAKER_WAIT_MAX_MS = 500
_COORDINATOR_ERRORS = (Errors.NotCoordinatorError, Errors.CoordinatorNotAvailableError)


class ConsumerGroupCoordinator(ConsumerCoordinator):
    def __init__(self, client, subscriptions, metadata, config, *, remote_assignor: str | None = None,
                 rack_id: str | None = None, clock=None, interceptors=None,
                 start_heartbeat_thread: bool = True):
        kwargs: dict[str, Any] = {"interceptors": interceptors, "start_heartbeat_thread": False}
        if clock is not None:
            kwargs["clock"] = clock
        super().__init__(client, subscriptions, metadata, config, **kwargs)
        self.membership = ConsumerMembership(
            group_id=self.group_id or "", instance_id=self.group_instance_id, rack_id=rack_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms, server_assignor=remote_assignor)
        self._hb_in_flight: RequestFuture | None = None
        self._next_heartbeat_ms = 0
        self._last_poll_ms = self._clock.now_ms()
        self._loop: _HeartbeatLoop | None = None
        self._run_loop = start_heartbeat_thread
        self._leave_future: RequestFuture | None = None
        #: The GIL-free heartbeat sender (None: Python heartbeats; see the module doc).
        self._cg_pacemaker: ConsumerPacemakerLink | None = None

    # ------------------------------------------------------------------ classic hooks, re-pointed
    def generation_if_stable(self) -> Generation | None:
        with self._lock:
            m = self.membership
            return Generation(m.member_epoch, m.member_id, None) if m.in_group() else None

    def _mirror_epoch(self) -> None:
        """Mirror the member epoch into the classic ``_generation`` (holding ``_lock``): the
        shared commit code compares it with the generation a commit was sent in."""
        m = self.membership
        self._generation = Generation(m.member_epoch, m.member_id, None)

    @property
    def member_id(self) -> str:
        return self.membership.member_id

    def is_stable(self) -> bool:
        return self.membership.state is CState.STABLE

    def rejoin_needed_or_pending(self) -> bool:
        if not self.subscriptions.has_auto_assigned_partitions():
            return False
        return self.membership.state in (CState.UNSUBSCRIBED, CState.JOINING, CState.RECONCILING,
                                         CState.FENCED)

    def record_poll(self, now_ms: int) -> None:
        with self._lock:
            self._last_poll_ms = now_ms
            self.heartbeat.poll(now_ms)

    def time_to_next_poll(self, now_ms: int) -> int:
        if self.group_id is None:
            return 2**31 - 1
        with self._lock:
            state = self.membership.state
            link = self._cg_pacemaker
            if state in (CState.RECONCILING, CState.FENCED):
                wait = 0
            elif link is not None and link.engaged:
                # The pacemaker heartbeats; its events wake the network client when they matter.
                wait = self.membership.heartbeat_interval_ms
            else:
                wait = max(self._next_heartbeat_ms - now_ms, 0) or self.retry_backoff_ms
        if self.auto_commit_enabled:
            wait = min(wait, max(self._next_auto_commit_deadline - now_ms, 0))
        return wait

    def reset_generation_on_response_error(self, api: str, error: BaseException) -> None:
        """A commit found the member unknown or fenced: the next poll reports its partitions lost
        and rejoins at epoch 0 (the classic generation reset does not apply here)."""
        with self._lock:
            if self.membership.state in HEARTBEATING:
                log.warning("member %s of group %s: %s answered %s; its partitions are lost, it rejoins",
                            self.membership.member_id, self.group_id, api, type(error).__name__)
                self.membership.fenced(f"{type(error).__name__} from {api}")
                self._mirror_epoch()

    # ------------------------------------------------------------------ poll (application thread)
    def poll(self, timeout_ms: int | None) -> bool:
        if self.group_id is None:
            return True
        self._invoke_completed_offset_commit_callbacks()
        subs = self.subscriptions
        if subs.has_auto_assigned_partitions():
            timer = _Timer(self._clock, timeout_ms)
            m = self.membership
            if m.fatal_error is not None:
                raise m.fatal_error
            if subs.has_pattern_subscription() and not self._metadata.need_all_topics:
                # The broker matches the regex; the full topic list names the ids it assigns.
                self._metadata.set_need_all_topics(True)
            self._maybe_update_subscription_metadata()
            with self._lock:
                if m.state is CState.UNSUBSCRIBED:
                    m.subscribe()
                    self._next_heartbeat_ms = 0
            link = self._cg_pacemaker
            if link is not None:
                link.drain()
            if self.coordinator_unknown() and not self.ensure_coordinator_ready(timer.remaining_ms()):
                return False
            self._start_loop_if_needed()
            if m.state is CState.FENCED:
                self._on_fenced()
            if m.state is CState.RECONCILING:
                self._reconcile(timer)
            self._heartbeat_tick(self._clock.now_ms())
        if self.auto_commit_enabled:
            self._maybe_auto_commit_offsets_async(self._clock.now_ms())
        return True

    def _on_fenced(self) -> None:
        subs = self.subscriptions
        lost = subs.assigned_partitions()
        log.warning("member %s of group %s was fenced (epoch %d): %s lost; rejoining", self.membership.member_id,
                    self.group_id, self.membership.member_epoch, sorted(lost))
        error = self._invoke_listener("lost", lost) if lost else None
        subs.assign_from_subscribed([])
        with self._lock:
            self.membership.rejoin()
            self._mirror_epoch()
            self._next_heartbeat_ms = 0
        if error is not None:
            raise error

    def _reconcile(self, timer: _Timer) -> None:
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
            if self.auto_commit_enabled:
                self._commit_before_revoke(revoked, timer)
            subs.mark_pending_revocation(revoked)
            error = self._invoke_listener("revoked", revoked)
        subs.assign_from_subscribed(wanted)
        log.info("member %s of group %s (epoch %d) is assigned %s", m.member_id, self.group_id, epoch,
                 sorted(wanted))
        error2 = self._invoke_listener("assigned", added)
        with self._lock:
            if m.state is CState.RECONCILING and m.target == target:
                m.reconciled(target)
                self._next_heartbeat_ms = 0   # acknowledge now
            # else: a newer target arrived meanwhile; the next poll reconciles again
        self._heartbeat_tick(self._clock.now_ms())
        if error is None:
            error = error2
        if error is not None:
            raise error

    def _commit_before_revoke(self, revoked: set, timer: _Timer) -> None:
        offsets = {tp: oam for tp, oam in self.subscriptions.all_consumed().items() if tp in revoked}
        if not offsets:
            return
        try:
            self.commit_offsets_sync(offsets, min(timer.remaining_ms() or self.rebalance_timeout_ms,
                                                  self.rebalance_timeout_ms))
        except Errors.KafkaError as exc:
            log.warning("group %s: committing %s before revoking them failed: %r", self.group_id,
                        self._describe(offsets), exc)

    # ------------------------------------------------------------------ heartbeats
    def _start_loop_if_needed(self) -> None:
        with self._lock:
            if self._run_loop and self._loop is None and not self._closed:
                if self._cg_pacemaker is None:
                    self._cg_pacemaker = create_consumer_link(self)
                self._loop = _HeartbeatLoop(self)
                self._loop.start()

    def _heartbeat_tick(self, now_ms: int) -> int:
        """Send a heartbeat if one is due; ms until the next one is (any thread)."""
        with self._lock:
            m = self.membership
            if m.state not in HEARTBEATING and m.state is not CState.LEAVING:
                return self.retry_backoff_ms
            if self._hb_in_flight is not None:
                return _NETWORK_WAIT_MAX_MS
            link = self._cg_pacemaker
            if link is not None:
                link.sync()
                if link.engaged:
                    return m.heartbeat_interval_ms   # the pacemaker heartbeats (and enforces max.poll.interval.ms)
            if m.state in HEARTBEATING and now_ms - self._last_poll_ms > self.rebalance_timeout_ms:
                self._on_poll_timeout(now_ms)
                return 0
            if now_ms < self._next_heartbeat_ms:
                return self._next_heartbeat_ms - now_ms
            node = self.coordinator()
            if node is None:
                self.lookup_coordinator()
                return self.retry_backoff_ms
            self._send_heartbeat(node, leaving=False)
            return _NETWORK_WAIT_MAX_MS

    def _send_heartbeat(self, node, leaving: bool) -> RequestFuture:
        """The one place a ConsumerGroupHeartbeat leaves (holding ``_lock``)."""
        m = self.membership
        if self._cg_pacemaker is not None:
            self._cg_pacemaker.disengage()   # hands over the epoch it reached
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
            self._mirror_epoch()
            if err is not None:
                self._on_heartbeat_error(err, node)
            elif m.state is CState.ACKNOWLEDGING:
                self._next_heartbeat_ms = now   # an acknowledgement waited behind this heartbeat
            if self._cg_pacemaker is not None:
                self._cg_pacemaker.sync()
            self._cond.notify_all()
        self._wake_network()

    def _on_heartbeat_error(self, err: BaseException, node) -> None:
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

    def _on_poll_timeout(self, now_ms: int) -> None:
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
        error = self._invoke_listener("revoked" if in_group else "lost", assigned)
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
            self._mirror_epoch()
            self._leave_future = future
        self._poll_network_nowait(0)
        return future

    def close(self, timeout_ms: int | None = None, autocommit: bool = True) -> None:
        loop = self._loop
        try:
            super().close(timeout_ms, autocommit)
        finally:
            if loop is not None:
                loop.stop()
                if loop is not threading.current_thread():
                    loop.join(1.0)
            link, self._cg_pacemaker = self._cg_pacemaker, None
            if link is not None:
                link.close(1.0)


class _HeartbeatLoop(threading.Thread):
    """Keeps the member's heartbeats going between the application's polls.

    It never waits for the network client's lock: it reads responses with
    ``try_poll_no_wakeup`` (nothing if the application thread is polling; then that poll
    reads them) and otherwise sleeps on the coordinator's condition until the next heartbeat.
    """

    def __init__(self, coordinator: ConsumerGroupCoordinator):
        super().__init__(name=f"kclient-heartbeat-{coordinator.group_id}", daemon=True)
        self._c = coordinator
        self._stopped = False

    def stop(self) -> None:
        with self._c._lock:
            self._stopped = True
            self._c._cond.notify_all()
            link = self._c._cg_pacemaker
        if link is not None:
            link.wake()
        self._c._wake_network()

    def run(self) -> None:
        c = self._c
        try:
            while True:
                with c._lock:
                    if self._stopped or c._closed:
                        return
                    if c.coordinator_unknown() and c.membership.state in HEARTBEATING:
                        c.lookup_coordinator()
                wait = c._heartbeat_tick(c._clock.now_ms())
                with c._lock:
                    pending = c._hb_in_flight is not None or c._has_pending_coordinator_requests()
                    link = c._cg_pacemaker
                    engaged = link is not None and link.engaged
                if engaged and not pending:
                    # Parked without the GIL until the pacemaker has news (or a short while,
                    # to notice this thread's own work).
                    assert link is not None
                    link.wait_and_drain(min(max(wait, 1), _PACEMAKER_WAIT_MAX_MS))
                elif pending:
                    if not c._poll_network_nowait(min(max(wait, 1), _NETWORK_WAIT_MAX_MS)):
                        with c._lock:
                            if not self._stopped:
                                c._cond.wait(_NETWORK_WAIT_MAX_MS / 1000.0)
                else:
                    with c._lock:
                        if not self._stopped:
                            c._cond.wait(max(wait, 1) / 1000.0)
        except BaseException as exc:   # the next poll() raises it
            log.error("heartbeat thread of group %s failed: %r", c.group_id, exc,
                      exc_info=not isinstance(exc, Errors.KafkaError))
            c.membership.fatal_error = exc if isinstance(exc, Exception) else Errors.KafkaError(repr(exc))

