"""AbstractCoordinator: membership of one group through the classic group protocol (mechanisms §1, §4, §5).

Finds the group coordinator (FindCoordinator), joins the group (JoinGroup, then SyncGroup with
the leader's assignment), keeps the membership alive from a ``HeartbeatThread``, and leaves
(LeaveGroup) on close or when the application stops polling. Subclasses (the consumer's
``ConsumerCoordinator``) supply the embedded protocol: what a member advertises, how the
leader assigns, and what happens before and after a rebalance.

Threads and locks. The application thread drives joins and commits; the heartbeat thread
heartbeats. ``_lock`` (re-entrant, with condition ``_cond``) guards the membership state:
coordinator, generation, member state, rejoin flags and the ``Heartbeat`` timing object.
It is held only for short state changes, never while waiting on the network, and response
handlers take it when they run. The heartbeat thread never waits for the network client's
lock (see kclient.group.heartbeat_thread), so the two locks cannot deadlock.

Member states: UNJOINED -> PREPARING_REBALANCE (JoinGroup sent) -> COMPLETING_REBALANCE
(JoinGroup answered, SyncGroup pending) -> STABLE (assignment received). Any generation reset
(eviction, leaving) goes back to UNJOINED. Responses to requests sent for an older generation
are discarded.
"""
from __future__ import annotations

import abc
import enum
import logging
import threading
from typing import Any, NamedTuple

from kcore.timers import Heartbeat

from kclient import errors as Errors
from kclient.settings import GroupRebalanceConfig
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.network.future import RequestFuture, RequestFutureAdapter
from kclient.group.heartbeat_thread import HeartbeatThread
from kclient.group.pacemaker import PacemakerLink, create_link
from kclient.group.version_fallback import GroupVersionFallback
from kclient.network.metadata import Node
from kclient.protocol import ApiKey

__all__ = ["AbstractCoordinator", "Generation", "NO_GENERATION", "MemberState", "UnjoinedGroupError",
           "coordinator_node_id"]

log = logging.getLogger(__name__)

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = (
    int(k) for k in (ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
                     ApiKey.SYNC_GROUP))

#: JoinGroup may legitimately wait up to the rebalance timeout on the broker; allow this much more.
JOIN_GROUP_TIMEOUT_LAPSE_MS = 5000

_INT32_MAX = 2**31 - 1


def coordinator_node_id(broker_id: int) -> int:
    """Id under which the coordinator gets its own connection (as the Java client does), so
    group requests never queue behind long-polling fetches on the broker's main connection."""
    return _INT32_MAX - broker_id


class MemberState(enum.Enum):
    UNJOINED = "UNJOINED"                          # not part of a group, or evicted / left
    PREPARING_REBALANCE = "PREPARING_REBALANCE"    # JoinGroup sent, waiting for the answer
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"  # JoinGroup answered, SyncGroup pending
    STABLE = "STABLE"                              # assignment received; heartbeating


class Generation(NamedTuple):
    generation_id: int
    member_id: str
    protocol_name: str | None

    def has_member_id(self) -> bool:
        return bool(self.member_id)


NO_GENERATION = Generation(-1, "", None)

# Join/sync failures after which the member rejoins at once (no backoff).
UnjoinedGroupError = Errors.UnjoinedGroupError

_REJOIN_AT_ONCE = (Errors.UnknownMemberIdError, Errors.RebalanceInProgressError,
                   Errors.IllegalGenerationError, Errors.MemberIdRequiredError, UnjoinedGroupError)


def _error_for(code: int, message: str | None = None) -> Errors.KafkaError:
    cls = Errors.error_class(code)
    err = cls(message) if message else cls()
    if cls is Errors.UnknownBrokerError:
        err.errno = code
    return err


class _Timer:
    """A deadline on the injected clock; ``timeout_ms=None`` never expires."""

    __slots__ = ("clock", "deadline")

    def __init__(self, clock: Clock, timeout_ms: int | None):
        self.clock = clock
        self.deadline = None if timeout_ms is None else clock.now_ms() + max(int(timeout_ms), 0)

    def remaining_ms(self) -> int | None:
        return None if self.deadline is None else max(self.deadline - self.clock.now_ms(), 0)

    def expired(self) -> bool:
        return self.deadline is not None and self.clock.now_ms() >= self.deadline


class _Handler(RequestFutureAdapter):
    """Base of the response handlers: connection failures mark the coordinator unknown."""

    def __init__(self, coordinator: "AbstractCoordinator", generation: Generation | None = None,
                 node: Node | None = None):
        self.c = coordinator
        self.generation = generation
        self.node = node            # where the request went: a late failure from an old
                                    # coordinator must not unset a newly discovered one

    def on_failure(self, exc: BaseException, future: RequestFuture) -> None:
        if not isinstance(exc, Errors.BrokerResponseError) and isinstance(
                exc, (Errors.KafkaConnectionError, Errors.KafkaTimeoutError, Errors.RequestCancelledError)):
            self.mark_coordinator_unknown(f"{type(exc).__name__}: {exc}",
                                          disconnected=isinstance(exc, Errors.KafkaConnectionError))
        future.raise_(exc)

    def mark_coordinator_unknown(self, reason: str, disconnected: bool = False) -> None:
        self.c.mark_coordinator_unknown(reason, disconnected, node=self.node)

    def generation_unchanged(self) -> bool:
        return self.generation is None or self.c._generation == self.generation


class AbstractCoordinator(abc.ABC):
    def __init__(self, client, rebalance_config: GroupRebalanceConfig, *,
                 clock: Clock = SYSTEM_CLOCK, start_heartbeat_thread: bool = True):
        rc = self.rebalance_config = rebalance_config
        self._client = client
        # Group requests go through here: a coordinator that hangs up on a version it
        # advertises gets one version lower (see kclient.group.version_fallback).
        self._group_sender = GroupVersionFallback(client, rebalance_config.group_id or "")
        self._clock = clock
        self.group_id = rc.group_id
        self.group_instance_id = rc.group_instance_id
        self.session_timeout_ms = rc.session_timeout_ms
        self.rebalance_timeout_ms = rc.rebalance_timeout_ms
        self.retry_backoff_ms = rc.retry_backoff_ms
        self.request_timeout_ms = rc.request_timeout_ms
        self.leave_group_on_close = rc.leave_group_on_close
        # Operator metrics (kclient.consumer.metrics.ConsumerMetrics), set by the consumer;
        # a rebalance is timed from its first JoinGroup to the member being STABLE again.
        self.stats: Any = None
        self._rebalance_started_ms: int | None = None
        self.heartbeat = Heartbeat(rc.session_timeout_ms, rc.heartbeat_interval_ms, rc.rebalance_timeout_ms,
                                   rc.retry_backoff_ms, clock.now_ms())
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._start_heartbeat_thread = start_heartbeat_thread
        self._heartbeat_thread: HeartbeatThread | None = None
        # The GIL-free heartbeat sender (kclient.group.pacemaker); None: the Python thread heartbeats.
        self._pacemaker: PacemakerLink | None = None
        self._coordinator: Node | None = None
        self._find_coordinator_future: RequestFuture | None = None
        self._generation = NO_GENERATION
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        self.needs_join_prepare = True
        self._join_future: RequestFuture | None = None
        self._sync_future: RequestFuture | None = None
        self._sync_generation: Generation | None = None
        self.last_rejoin_reason = "initial join"
        self.last_reset_reason: str | None = None
        self.last_reset_member_id = ""
        self._closed = False

    # ------------------------------------------------------------------ subclass hooks
    @abc.abstractmethod
    def protocol_type(self) -> str:
        """The embedded protocol's type ("consumer")."""

    @abc.abstractmethod
    def metadata(self) -> list[tuple[str, bytes]]:
        """(protocol name, member metadata) pairs for JoinGroup, in preference order."""

    @abc.abstractmethod
    def on_join_prepare(self, timeout_ms: int | None, generation_id: int, member_id: str) -> bool:
        """Before (re)joining; False if it could not finish within ``timeout_ms`` (called again)."""

    @abc.abstractmethod
    def on_leader_elected(self, leader_id: str, protocol_name: str, members: list[dict],
                          skip_assignment: bool) -> dict[str, bytes]:
        """Leader only: the assignment of every member (member id -> bytes)."""

    @abc.abstractmethod
    def on_join_complete(self, generation_id: int, member_id: str, protocol_name: str | None,
                         assignment: bytes) -> None:
        """After SyncGroup: apply this member's assignment (application thread)."""

    def on_leave_prepare(self) -> None:
        """Before leaving the group on close (application thread)."""

    # ------------------------------------------------------------------ state
    def generation(self) -> Generation:
        return self._generation

    @property
    def member_id(self) -> str:
        return self._generation.member_id

    def generation_if_stable(self) -> Generation | None:
        """The generation if the member is STABLE in one, else None (commits need it)."""
        with self._lock:
            return self._generation if self.state is MemberState.STABLE else None

    def is_stable(self) -> bool:
        return self.state is MemberState.STABLE

    def rejoin_needed_or_pending(self) -> bool:
        return self.rejoin_needed or self._join_future is not None or self._sync_future is not None

    def request_rejoin(self, reason: str) -> None:
        with self._lock:
            if not self.rejoin_needed:
                log.info("member %s of group %s requests a rejoin: %s", self._generation.member_id,
                         self.group_id, reason)
            self.rejoin_needed = True
            self.last_rejoin_reason = reason

    @property
    def heartbeat_thread(self) -> HeartbeatThread | None:
        return self._heartbeat_thread

    def _membership_changed(self) -> None:
        """Tell the pacemaker (if any) the current member, generation, state and coordinator."""
        if self._pacemaker is not None:
            with self._lock:
                self._pacemaker.sync()

    def heartbeats_wanted(self) -> bool:
        """Heartbeat while STABLE and while the leader computes the assignment
        (COMPLETING_REBALANCE, between JoinGroup and SyncGroup), as the Java client does."""
        return self.state in (MemberState.STABLE, MemberState.COMPLETING_REBALANCE)

    # ------------------------------------------------------------------ network helpers
    def _poll_network_nowait(self, timeout_ms: int) -> bool:
        """Poll without honouring wakeups if no other thread is polling; False if one is
        (the heartbeat thread must not wait behind an application poll: that poll does the
        I/O instead)."""
        return self._client.try_poll_no_wakeup(timeout_ms)

    def _wake_network(self) -> None:
        """Make a select() in progress return (not a consumer wakeup: nothing is raised)."""
        self._client.wake_poll()

    def _try_connect(self, node: Node) -> None:
        try:
            self._client.try_connect(node)
        except Errors.KafkaError as exc:  # e.g. the client is closing: the next request will tell
            log.debug("could not start connecting to coordinator %s: %r", node, exc)

    def _has_pending_coordinator_requests(self) -> bool:
        node = self._coordinator
        if node is None:
            fut = self._find_coordinator_future
            return fut is not None and not fut.is_done
        return self._client.has_pending_requests(node)

    def _backoff(self, timer: _Timer) -> None:
        """Wait retry.backoff.ms (bounded by ``timer``) while serving the network."""
        end = self._clock.now_ms() + self.retry_backoff_ms
        remaining = timer.remaining_ms()
        if remaining is not None:
            end = min(end, self._clock.now_ms() + remaining)
        for _ in range(10):  # a poll may return early on unrelated network events
            wait = end - self._clock.now_ms()
            if wait <= 0:
                break
            self._client.poll(wait)

    # ------------------------------------------------------------------ coordinator discovery
    def coordinator(self) -> Node | None:
        """The coordinator if known and reachable, else None (and it is marked unknown)."""
        node = self._coordinator
        if node is not None and self._client.is_unavailable(node):
            self.mark_coordinator_unknown("the coordinator connection failed", disconnected=True)
            return None
        return self._coordinator

    def coordinator_unknown(self) -> bool:
        return self.coordinator() is None

    def mark_coordinator_unknown(self, reason: str, disconnected: bool = False,
                                 node: Node | None = None) -> None:
        """Forget the coordinator (``node``: only if it is still that one)."""
        with self._lock:
            old = self._coordinator
            if old is None or (node is not None and node != old):
                return
            log.info("group coordinator %s:%s (id %s) of group %s is unavailable or invalid (%s); "
                     "rediscovering", old.host, old.port, old.node_id, self.group_id, reason)
            self._coordinator = None
            self._membership_changed()
        if not disconnected:
            # Fail requests still queued for it at once rather than at their timeout.
            self._client.disconnect_async(old)

    def lookup_coordinator(self) -> RequestFuture:
        """Start a FindCoordinator if none is in flight; the future of the one in flight."""
        with self._lock:
            future = self._find_coordinator_future
            if future is not None and not future.is_done:
                return future
        # Outside our lock: choosing a node reads the network client's connection states.
        node = self._client.least_loaded_node()
        if node is None:
            log.debug("no broker available to look up the coordinator of group %s", self.group_id)
            return RequestFuture.no_brokers_available()
        with self._lock:
            future = self._find_coordinator_future
            if future is not None and not future.is_done:
                return future
            future = self._send_find_coordinator_request(node)
            self._find_coordinator_future = future
        future.add_both(self._clear_find_coordinator_future, future)
        return future

    def _clear_find_coordinator_future(self, future: RequestFuture, _outcome: Any) -> None:
        with self._lock:
            if self._find_coordinator_future is future:
                self._find_coordinator_future = None

    def _send_find_coordinator_request(self, node: int) -> RequestFuture:
        group_id = self.group_id
        log.debug("sending FindCoordinator for group %s to node %s", group_id, node)

        def body(version: int) -> dict:
            if version >= 4:
                return {"key_type": 0, "coordinator_keys": [group_id]}
            return {"key": group_id, "key_type": 0}

        return self._client.send(node, FIND_COORDINATOR, body).compose(_FindCoordinatorHandler(self))

    def ensure_coordinator_ready(self, timeout_ms: int | None) -> bool:
        """Find and connect the coordinator within ``timeout_ms``; False if time ran out.
        Raises non-retriable errors (e.g. group authorization)."""
        if not self.coordinator_unknown():
            return True
        timer = _Timer(self._clock, timeout_ms)
        while self.coordinator_unknown():
            future = self.lookup_coordinator()
            self._client.poll_future(future, timer.remaining_ms())
            if not future.is_done:
                return False
            if future.failed():
                exc = future.exception
                if isinstance(exc, Errors.NoBrokersAvailable):
                    # Every known broker is backing off: refreshing metadata connects again.
                    remaining = timer.remaining_ms()
                    self._client.await_metadata_update(
                        self.request_timeout_ms if remaining is None else min(remaining, self.request_timeout_ms))
                elif future.retriable():
                    self._backoff(timer)
                else:
                    raise exc
            else:
                node = self._coordinator
                if node is not None and self._client.is_unavailable(node):
                    self.mark_coordinator_unknown("the coordinator connection failed", disconnected=True)
                    self._backoff(timer)
            if timer.expired():
                break
        return not self.coordinator_unknown()

    # ------------------------------------------------------------------ group activation
    def ensure_active_group(self, timeout_ms: int | None) -> bool:
        """Coordinator ready, heartbeat thread running, joined (mechanisms §1); False on timeout."""
        timer = _Timer(self._clock, timeout_ms)
        if not self.ensure_coordinator_ready(timer.remaining_ms()):
            return False
        self.start_heartbeat_thread_if_needed()
        return self.join_group_if_needed(timer.remaining_ms())

    def start_heartbeat_thread_if_needed(self) -> None:
        with self._lock:
            if self._heartbeat_thread is None and not self._closed:
                if self._pacemaker is None and self._start_heartbeat_thread:
                    self._pacemaker = create_link(self)
                self._heartbeat_thread = HeartbeatThread(self)
                if self._start_heartbeat_thread:
                    self._heartbeat_thread.start()
                if self.heartbeats_wanted():
                    self._heartbeat_thread.enable()
                self._membership_changed()

    def check_heartbeat_failure(self) -> None:
        """Raise (once) the error that ended the heartbeat thread; a new thread starts later."""
        if self._pacemaker is not None:
            self._pacemaker.drain()
        with self._lock:
            thread = self._heartbeat_thread
            if thread is None or thread.failure is None:
                return
            self._heartbeat_thread = None
            exc = thread.failure
        raise exc

    def join_group_if_needed(self, timeout_ms: int | None) -> bool:
        """(Re)join until the member is STABLE; False if ``timeout_ms`` ran out first (the
        join continues at the next call)."""
        timer = _Timer(self._clock, timeout_ms)
        while self.rejoin_needed_or_pending():
            if not self.ensure_coordinator_ready(timer.remaining_ms()):
                return False
            if self.needs_join_prepare:
                # Cleared first: if a listener raises, it is not called again for this rebalance.
                self.needs_join_prepare = False
                generation = self._generation
                if not self.on_join_prepare(timer.remaining_ms(), generation.generation_id,
                                            generation.member_id):
                    self.needs_join_prepare = True
                    return False
            if self._sync_future is None:
                if self._join_future is None:
                    if self._rebalance_started_ms is None:
                        self._rebalance_started_ms = self._clock.now_ms()
                    self._join_future = self._send_join_group_request()
                join = self._join_future
                if not self._client.poll_future(join, timer.remaining_ms()):
                    return False
                self._join_future = None
                if join.failed():
                    if not self._on_join_failure(join.exception, timer):
                        return False
                    continue
                self._sync_generation = self._generation
                self._sync_future = self._send_sync_group_request(join.value)
            sync = self._sync_future
            if not self._client.poll_future(sync, timer.remaining_ms()):
                return False
            self._sync_future = None
            if sync.failed():
                # The JoinGroup succeeded (rejoin_needed was cleared): any SyncGroup failure,
                # including a lost connection or an assignor error, means joining again.
                self.request_rejoin(f"SyncGroup failed: {sync.exception!r}")
                if not self._on_join_failure(sync.exception, timer):
                    return False
                continue
            with self._lock:
                generation = self._generation
                current = self.state is MemberState.STABLE and generation == self._sync_generation
            if not current:
                self.request_rejoin("the generation changed while completing the join")
                continue
            started, self._rebalance_started_ms = self._rebalance_started_ms, None
            if started is not None and self.stats is not None:
                now = self._clock.now_ms()
                self.stats.rebalance_done(now - started, now)
            try:
                self.on_join_complete(generation.generation_id, generation.member_id,
                                      generation.protocol_name, sync.value)
            finally:
                self.needs_join_prepare = True
        return True

    def _on_join_failure(self, exc: BaseException, timer: _Timer) -> bool:
        """Decide after a failed JoinGroup/SyncGroup: True to retry now, False if time ran
        out during the backoff; raises non-retriable errors."""
        if isinstance(exc, _REJOIN_AT_ONCE):
            log.debug("group %s: rejoining after %r", self.group_id, exc)
            return True
        if not (isinstance(exc, Errors.KafkaError) and exc.retriable):
            raise exc
        log.info("group %s: join failed with %r; retrying in %d ms", self.group_id, exc, self.retry_backoff_ms)
        self._backoff(timer)
        return not timer.expired()

    def _send_join_group_request(self) -> RequestFuture:
        node = self.coordinator()
        if node is None:
            return RequestFuture.coordinator_not_available()
        with self._lock:
            self.state = MemberState.PREPARING_REBALANCE
            self._membership_changed()
            generation = self._generation
            protocols = [{"name": name, "metadata": data} for name, data in self.metadata()]
            reason = self.last_rejoin_reason
        log.info("member %r of group %s (re)joining: %s", generation.member_id, self.group_id, reason)
        group_id, instance_id = self.group_id, self.group_instance_id
        session_timeout, rebalance_timeout = self.session_timeout_ms, self.rebalance_timeout_ms
        protocol_type = self.protocol_type()

        def body(version: int) -> dict:
            b = {"group_id": group_id, "session_timeout_ms": session_timeout,
                 "member_id": generation.member_id, "group_instance_id": instance_id,
                 "protocol_type": protocol_type, "protocols": protocols}
            if version >= 1:
                b["rebalance_timeout_ms"] = rebalance_timeout
            if version >= 8:
                b["reason"] = reason[:255] if reason else None
            return b

        # The broker holds JoinGroup until every member joined (up to the rebalance timeout).
        timeout = max(self.request_timeout_ms, rebalance_timeout + JOIN_GROUP_TIMEOUT_LAPSE_MS)
        return self._group_sender.send(node, JOIN_GROUP, body, timeout_ms=timeout).compose(
            _JoinGroupHandler(self, generation, node))

    def _send_sync_group_request(self, join_response: dict) -> RequestFuture:
        generation = self._generation
        try:
            if join_response["leader"] == join_response["member_id"]:
                log.info("member %s is the leader of group %s (generation %d, protocol %s)",
                         generation.member_id, self.group_id, generation.generation_id,
                         generation.protocol_name)
                assignments = self.on_leader_elected(
                    join_response["leader"], join_response["protocol_name"],
                    join_response["members"] or [], bool(join_response.get("skip_assignment")))
            else:
                assignments = {}
        except Exception as exc:
            return RequestFuture.failure(exc)
        node = self.coordinator()
        if node is None:
            return RequestFuture.coordinator_not_available()
        with self._lock:
            if self._generation != generation or self.state is not MemberState.COMPLETING_REBALANCE:
                return RequestFuture.failure(UnjoinedGroupError(
                    "the member left the rebalance before sending its SyncGroup"))
        group_id, instance_id, protocol_type = self.group_id, self.group_instance_id, self.protocol_type()
        entries = [{"member_id": m, "assignment": bytes(a)} for m, a in assignments.items()]

        def body(version: int) -> dict:
            b = {"group_id": group_id, "generation_id": generation.generation_id,
                 "member_id": generation.member_id, "group_instance_id": instance_id,
                 "assignments": entries}
            if version >= 5:
                b["protocol_type"] = protocol_type
                b["protocol_name"] = generation.protocol_name
            return b

        return self._group_sender.send(node, SYNC_GROUP, body).compose(_SyncGroupHandler(self, generation, node))

    # ------------------------------------------------------------------ generation resets
    def reset_state_and_generation(self, reason: str, reset_member_id: bool) -> None:
        with self._lock:
            log.debug("group %s: resetting generation (%s)", self.group_id, reason)
            if self._generation.member_id:
                self.last_reset_member_id = self._generation.member_id
            self.state = MemberState.UNJOINED
            if reset_member_id:
                self._generation = NO_GENERATION
            else:
                self._generation = Generation(NO_GENERATION.generation_id, self._generation.member_id, None)
            self.last_reset_reason = reason
            self.rejoin_needed = True
            self.last_rejoin_reason = reason
            self._membership_changed()

    def reset_generation_on_response_error(self, api: str, error: BaseException) -> None:
        """The coordinator no longer knows this member/generation: it was evicted (mechanisms §4)."""
        with self._lock:
            member = self._generation.member_id
            generation = self._generation.generation_id
        log.warning(
            "member %s of group %s (generation %d) was removed from the group: %s answered %s. "
            "It rejoins at the next poll(); its partitions may already belong to another member, "
            "so records processed since the last commit may be delivered again. Usual causes: no "
            "heartbeat within session.timeout.ms (%d ms) or no poll() within max.poll.interval.ms (%d ms).",
            member, self.group_id, generation, api, type(error).__name__,
            self.session_timeout_ms, self.rebalance_timeout_ms)
        self.reset_state_and_generation(f"{type(error).__name__} from {api}",
                                        reset_member_id=not isinstance(error, Errors.IllegalGenerationError))

    # ------------------------------------------------------------------ heartbeats
    def send_heartbeat_request(self) -> RequestFuture:
        node = self._coordinator
        if node is None:
            return RequestFuture.coordinator_not_available()
        generation = self._generation
        log.debug("sending heartbeat for group %s generation %d to %s", self.group_id,
                  generation.generation_id, node.node_id)
        body = {"group_id": self.group_id, "generation_id": generation.generation_id,
                "member_id": generation.member_id, "group_instance_id": self.group_instance_id}
        return self._group_sender.send(node, HEARTBEAT, body).compose(_HeartbeatHandler(self, generation, node))

    def _on_poll_timeout(self, now_ms: int) -> None:
        """Heartbeat thread: the application stalled between polls (mechanisms §2 step 5)."""
        hb = self.heartbeat
        log.warning(
            "member %s of group %s: poll() was not called for %d ms, more than max.poll.interval.ms "
            "(%d ms): leaving the group so its partitions are reassigned; the next poll() rejoins. "
            "Process records faster, lower max.poll.records, or raise max.poll.interval.ms.",
            self._generation.member_id, self.group_id, now_ms - hb.last_poll_time_ms,
            hb.max_poll_interval_ms)
        self.maybe_leave_group("poll() not called within max.poll.interval.ms")

    # ------------------------------------------------------------------ leaving
    def maybe_leave_group(self, reason: str) -> RequestFuture | None:
        """Send LeaveGroup (dynamic members with a member id and a known coordinator) and
        reset the generation; the next poll() rejoins."""
        future = None
        with self._lock:
            generation = self._generation
            node = self.coordinator()
            if (self.group_instance_id is None and node is not None
                    and self.state is not MemberState.UNJOINED and generation.has_member_id()):
                log.info("member %s leaving group %s: %s", generation.member_id, self.group_id, reason)
                group_id, short = self.group_id, reason[:255]

                def body(version: int) -> dict:
                    if version >= 3:
                        member = {"member_id": generation.member_id, "group_instance_id": None}
                        if version >= 5:
                            member["reason"] = short
                        return {"group_id": group_id, "members": [member]}
                    return {"group_id": group_id, "member_id": generation.member_id}

                future = self._group_sender.send(self._leave_route(node), LEAVE_GROUP, body).compose(
                    _LeaveGroupHandler(self, None, node))
            self.reset_state_and_generation(f"left the group: {reason}", reset_member_id=True)
        if future is not None:
            # Push it out now: the heartbeat thread parks itself next, the application may be slow.
            self._poll_network_nowait(0)
        return future

    def _leave_route(self, coordinator: Node) -> Node:
        """Where LeaveGroup goes: the coordinator's connection, unless a JoinGroup or SyncGroup
        is held there. A broker holds those until the rebalance completes and reads nothing
        else from that connection meanwhile, so a LeaveGroup behind one would wait as long
        (up to the other members' rebalance timeout). The broker's main connection carries it
        at once, and the broker then answers the held request."""
        if self._join_future is None and self._sync_future is None:
            return coordinator
        broker = self._client.metadata.cluster.node_by_id(_INT32_MAX - coordinator.node_id)
        return broker if broker is not None else coordinator

    def close(self, timeout_ms: int | None = None) -> None:
        """Stop the heartbeat thread, leave the group, wait for pending coordinator requests."""
        timer = _Timer(self._clock, timeout_ms)
        with self._lock:
            if self._closed:
                return
            thread = self._heartbeat_thread
            pacemaker, self._pacemaker = self._pacemaker, None
        if pacemaker is not None:   # before LeaveGroup: no heartbeat may follow it
            remaining = timer.remaining_ms()
            pacemaker.close(None if remaining is None else remaining / 1000.0)
        if thread is not None:
            thread.close()
            if thread.is_alive() and thread is not threading.current_thread():
                remaining = timer.remaining_ms()
                thread.join(None if remaining is None else remaining / 1000.0)
        leave = None
        held = [f for f in (self._join_future, self._sync_future) if f is not None]
        try:
            if self.leave_group_on_close:
                try:
                    self.on_leave_prepare()
                finally:
                    leave = self.maybe_leave_group("the consumer is being closed")
            if leave is not None:   # it may have gone over another connection than the coordinator's
                self._client.poll_future(leave, timer.remaining_ms(), disable_wakeup=True)
            # Once the member has left, the answer to a JoinGroup/SyncGroup the broker still
            # holds is moot: waiting for it would only wait out the rebalance.
            moot = held if leave is not None and leave.succeeded() else []
            node = self._coordinator
            if node is not None:
                while self._client.pending_request_count(node) > sum(1 for f in moot if not f.is_done):
                    remaining = timer.remaining_ms()
                    if remaining is not None and remaining <= 0:
                        log.warning("group %s: coordinator requests still pending at close", self.group_id)
                        break
                    self._client.poll(100 if remaining is None else min(remaining, 100),
                                      execute_delayed_tasks=False, disable_wakeup=True)
        finally:
            with self._lock:
                self._closed = True
                self._heartbeat_thread = None


# ---------------------------------------------------------------------- response handlers
class _FindCoordinatorHandler(_Handler):
    def on_success(self, response: dict, future: RequestFuture) -> None:
        c = self.c
        entries = response.get("coordinators")
        if entries:
            entry = next((e for e in entries if e.get("key") == c.group_id), entries[0])
        else:
            entry = response
        code = entry.get("error_code", 0)
        if code == 0:
            node = Node(coordinator_node_id(entry["node_id"]), entry["host"], entry["port"])
            with c._lock:
                c._coordinator = node
                # A new coordinator has not seen us yet: give the session a fresh start.
                c.heartbeat.reset_session_timeout(c._clock.now_ms())
                c._membership_changed()
            log.info("discovered coordinator %s:%s (broker %d) for group %s", node.host, node.port,
                     entry["node_id"], c.group_id)
            # As the Java client does: start connecting now, so the connection is on its way
            # before the first group request is queued for it.
            c._try_connect(node)
            future.complete(None)
            return
        err = _error_for(code, entry.get("error_message"))
        if isinstance(err, Errors.GroupAuthorizationFailedError):
            err = Errors.GroupAuthorizationFailedError(f"not authorized to use group {c.group_id!r}")
        log.debug("FindCoordinator for group %s failed: %r", c.group_id, err)
        self.mark_coordinator_unknown(repr(err))
        future.raise_(err)

    def on_failure(self, exc: BaseException, future: RequestFuture) -> None:
        log.debug("FindCoordinator for group %s failed: %r", self.c.group_id, exc)
        future.raise_(exc)


class _JoinGroupHandler(_Handler):
    def on_success(self, response: dict, future: RequestFuture) -> None:
        c = self.c
        code = response["error_code"]
        with c._lock:
            if code == 0:
                if c.state is not MemberState.PREPARING_REBALANCE:
                    # The member left (close, poll timeout) while the join was in flight.
                    err: BaseException | None = UnjoinedGroupError("JoinGroup answered after the member left")
                else:
                    c._generation = Generation(response["generation_id"], response["member_id"],
                                               response["protocol_name"])
                    c.state = MemberState.COMPLETING_REBALANCE
                    c.rejoin_needed = False     # mechanisms §5: a good JoinGroup response
                    # Keep heartbeating while the leader assigns (the Java client does too).
                    if c._heartbeat_thread is not None:
                        c._heartbeat_thread.enable()
                    else:
                        c.heartbeat.reset_timeouts(c._clock.now_ms())
                    c._membership_changed()
                    log.info("member %s joined group %s in generation %d (protocol %s)",
                             response["member_id"], c.group_id, response["generation_id"],
                             response["protocol_name"])
                    err = None
            else:
                err = self._error(code, response)
        if err is None:
            future.complete(response)
        else:
            future.raise_(err)

    def _error(self, code: int, response: dict) -> BaseException:
        c = self.c
        err = _error_for(code)
        if isinstance(err, Errors.MemberIdRequiredError):
            # KIP-394: the broker hands out the member id; join again with it at once.
            c._generation = Generation(NO_GENERATION.generation_id, response["member_id"], None)
            c.rejoin_needed = True
        elif isinstance(err, Errors.UnknownMemberIdError):
            if self.generation_unchanged():
                c.reset_state_and_generation("UnknownMemberIdError from JoinGroup", reset_member_id=True)
        elif isinstance(err, Errors.IllegalGenerationError):
            if self.generation_unchanged():
                c.reset_state_and_generation("IllegalGenerationError from JoinGroup", reset_member_id=False)
        elif isinstance(err, (Errors.CoordinatorNotAvailableError, Errors.NotCoordinatorError)):
            self.mark_coordinator_unknown(repr(err))
        elif isinstance(err, Errors.FencedInstanceIdError):
            log.error("group %s: group.instance.id %r is used by another member (FENCED_INSTANCE_ID)",
                      c.group_id, c.group_instance_id)
        elif isinstance(err, Errors.GroupMaxSizeReachedError):
            c.reset_state_and_generation("GroupMaxSizeReachedError from JoinGroup", reset_member_id=True)
            log.error("group %s is full (group.max.size); this member cannot join", c.group_id)
        elif isinstance(err, (Errors.InconsistentGroupProtocolError, Errors.InvalidSessionTimeoutError,
                              Errors.InvalidGroupIdError, Errors.GroupAuthorizationFailedError)):
            log.error("group %s: JoinGroup failed: %s", c.group_id, err)
        elif not isinstance(err, (Errors.RebalanceInProgressError, Errors.CoordinatorLoadInProgressError)):
            log.error("group %s: unexpected JoinGroup error %r", c.group_id, err)
        return err


class _SyncGroupHandler(_Handler):
    def on_success(self, response: dict, future: RequestFuture) -> None:
        c = self.c
        code = response["error_code"]
        with c._lock:
            if code == 0:
                if c.state is not MemberState.COMPLETING_REBALANCE or not self.generation_unchanged():
                    err: BaseException | None = UnjoinedGroupError(
                        "SyncGroup answered for a rebalance this member no longer takes part in")
                else:
                    c.state = MemberState.STABLE
                    err = None
                    if c._heartbeat_thread is not None:
                        c._heartbeat_thread.enable()
                    else:
                        c.heartbeat.reset_timeouts(c._clock.now_ms())
                    c._membership_changed()
            else:
                err = _error_for(code)
                c.request_rejoin(f"SyncGroup failed: {type(err).__name__}")   # mechanisms §5
                if isinstance(err, (Errors.UnknownMemberIdError, Errors.IllegalGenerationError)):
                    if self.generation_unchanged():
                        c.reset_state_and_generation(
                            f"{type(err).__name__} from SyncGroup",
                            reset_member_id=isinstance(err, Errors.UnknownMemberIdError))
                elif isinstance(err, (Errors.CoordinatorNotAvailableError, Errors.NotCoordinatorError)):
                    self.mark_coordinator_unknown(repr(err))
                elif isinstance(err, Errors.FencedInstanceIdError):
                    log.error("group %s: group.instance.id %r is used by another member", c.group_id,
                              c.group_instance_id)
        if err is None:
            assignment = response.get("assignment")
            future.complete(b"" if assignment is None else bytes(assignment))
        else:
            future.raise_(err)


class _HeartbeatHandler(_Handler):
    def on_success(self, response: dict, future: RequestFuture) -> None:
        c = self.c
        code = response["error_code"]
        if code == 0:
            future.complete(None)
            return
        err = _error_for(code)
        if isinstance(err, (Errors.CoordinatorNotAvailableError, Errors.NotCoordinatorError)):
            self.mark_coordinator_unknown(repr(err))
        elif isinstance(err, Errors.RebalanceInProgressError):
            with c._lock:
                if c.state is MemberState.STABLE:
                    c.request_rejoin("the group is rebalancing (heartbeat answered REBALANCE_IN_PROGRESS)")
        elif isinstance(err, (Errors.IllegalGenerationError, Errors.UnknownMemberIdError,
                              Errors.FencedInstanceIdError)):
            with c._lock:
                unchanged = self.generation_unchanged()
            if not unchanged:
                # Sent for a generation we have already left: not about the current one.
                log.debug("ignoring %r to a heartbeat of an older generation", err)
                future.complete(None)
                return
            c.reset_generation_on_response_error("Heartbeat", err)
        elif isinstance(err, Errors.GroupAuthorizationFailedError):
            err = Errors.GroupAuthorizationFailedError(f"not authorized to use group {c.group_id!r}")
        else:
            log.debug("heartbeat of group %s failed: %r", c.group_id, err)
        future.raise_(err)


class _LeaveGroupHandler(_Handler):
    def on_success(self, response: dict, future: RequestFuture) -> None:
        code = response.get("error_code", 0)
        if code == 0:
            for member in response.get("members") or []:
                if member.get("error_code"):
                    code = member["error_code"]
                    break
        if code == 0:
            log.debug("LeaveGroup of group %s succeeded", self.c.group_id)
            future.complete(None)
        else:
            err = _error_for(code)
            log.info("LeaveGroup of group %s failed: %r", self.c.group_id, err)
            future.raise_(err)
