"""AbstractCoordinator: membership of one group through the classic group protocol (mechanisms §1, §4, §5).

Finds the group coordinator (through its ``CoordinatorChannel``), joins the group (JoinGroup,
then SyncGroup with the leader's assignment), keeps the membership alive through a heartbeat
driver chosen once (kclient.group.heartbeat_driver: the pacemaker link, or the Python
``HeartbeatThread`` alone), and leaves (LeaveGroup) on close or when the application stops
polling. Subclasses (the consumer's
``ConsumerCoordinator``) supply the embedded protocol: what a member advertises, how the
leader assigns, and what happens before and after a rebalance.

Threads and locks. The application thread drives joins and commits; the heartbeat thread
heartbeats. The channel's lock (``lock``, re-entrant, with condition ``cond``) guards the
membership state: coordinator, generation, member state, rejoin flags and the ``Heartbeat``
timing object.
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
from typing import Any, NamedTuple

from kcore.timers import Heartbeat

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.group.coordinator_channel import (CoordinatorChannel, CoordinatorResponseHandler, coordinator_node_id,
                                               error_for)
from kclient.group.group_config import GroupRebalanceConfig
from kclient.group.heartbeat_driver import HeartbeatDriver
from kclient.group.heartbeat_thread import HeartbeatThread
from kclient.group.pacemaker import PacemakerTarget, create_link
from kclient.group.timer import Timer
from kclient.network.future import RequestFuture
from kclient.network.metadata import Node
from kclient.protocol import ApiKey

__all__ = ["AbstractCoordinator", "Generation", "NO_GENERATION", "MemberState", "UnjoinedGroupError"]

log = logging.getLogger(__name__)

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = (
    int(k) for k in (ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP))

#: Requests a broker holds until the rebalance completes, reading nothing else from their
#: connection meanwhile.
_HELD_APIS = frozenset((JOIN_GROUP, SYNC_GROUP))
#: JoinGroup may legitimately wait up to the rebalance timeout on the broker; allow this much more.
JOIN_GROUP_TIMEOUT_LAPSE_MS = 5000


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


class _Handler(CoordinatorResponseHandler):
    """Base of the membership response handlers: tied to the generation they were sent in."""

    def __init__(self, coordinator: "AbstractCoordinator", generation: Generation | None = None,
                 node: Node | None = None):
        super().__init__(coordinator.channel, node)
        self.c = coordinator
        self.generation = generation

    def generation_unchanged(self) -> bool:
        return self.generation is None or self.c._generation == self.generation


class AbstractCoordinator(abc.ABC):
    def __init__(self, client, rebalance_config: GroupRebalanceConfig, *,
                 clock: Clock = SYSTEM_CLOCK, start_heartbeat_thread: bool = True):
        if not isinstance(rebalance_config, GroupRebalanceConfig):
            raise TypeError(f"rebalance_config must be a GroupRebalanceConfig, got {type(rebalance_config).__name__}")
        rc = self.rebalance_config = rebalance_config
        self._client = client
        self._clock = clock
        self.group_id = rc.group_id
        self.group_instance_id = rc.group_instance_id
        self.session_timeout_ms = rc.session_timeout_ms
        self.rebalance_timeout_ms = rc.rebalance_timeout_ms
        self.retry_backoff_ms = rc.retry_backoff_ms
        self.request_timeout_ms = rc.request_timeout_ms
        self.leave_group_on_close = rc.leave_group_on_close
        # The coordinator's discovery and connection; its lock guards the membership state
        # below: generation, member state, rejoin flags and the ``Heartbeat`` timing object.
        self.channel = CoordinatorChannel(client, rc.group_id, retry_backoff_ms=rc.retry_backoff_ms,
                                          request_timeout_ms=rc.request_timeout_ms, clock=clock,
                                          on_change=self._on_coordinator_change)
        self._lock = self.channel.lock
        self._cond = self.channel.cond
        # Operator metrics (kclient.consumer.metrics.ConsumerMetrics), set by the consumer;
        # a rebalance is timed from its first JoinGroup to the member being STABLE again.
        self.stats: Any = None
        self._rebalance_started_ms: int | None = None
        self.heartbeat = Heartbeat(rc.session_timeout_ms, rc.heartbeat_interval_ms, rc.rebalance_timeout_ms,
                                   rc.retry_backoff_ms, clock.now_ms())
        self._start_heartbeat_thread = start_heartbeat_thread
        # The heartbeat driver, chosen once (kclient.group.heartbeat_driver): the GIL-free
        # pacemaker's link, or the Python thread alone. ``_driver_started``: it has been set
        # going (False again after a failure, until the next poll starts its successor).
        self._driver: HeartbeatDriver | None = None
        self._driver_started = False
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
    @property
    def lock(self) -> Any:
        """The lock guarding the membership state (re-entrant)."""
        return self._lock

    @property
    def cond(self) -> Any:
        """The condition of ``lock``: membership changes notify it."""
        return self._cond

    @property
    def closed(self) -> bool:
        return self._closed

    def now_ms(self) -> int:
        return self._clock.now_ms()

    def generation(self) -> Generation:
        return self._generation

    def generation_id(self) -> int:
        return self._generation.generation_id

    @property
    def member_id(self) -> str:
        return self._generation.member_id

    def generation_if_stable(self) -> Generation | None:
        """The generation if the member is STABLE in one, else None (commits need it)."""
        with self._lock:
            return self._generation if self.state is MemberState.STABLE else None

    def is_stable(self) -> bool:
        return self.state is MemberState.STABLE

    def is_rebalancing(self) -> bool:
        """A JoinGroup or SyncGroup of this member is under way, or a rejoin of a member that
        had a generation is due (a commit now would be refused)."""
        with self._lock:
            return self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE) or (
                self._generation.generation_id >= 0 and self.rejoin_needed_or_pending())

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
    def heartbeat_driver(self) -> HeartbeatDriver | None:
        """What keeps this member's heartbeats going (None until the first join starts it)."""
        return self._driver

    def _membership_changed(self) -> None:
        """Tell the heartbeat driver the current member, generation, state and coordinator."""
        driver = self._driver
        if driver is not None:
            with self._lock:
                driver.membership_changed()

    def _on_coordinator_change(self, found: bool) -> None:
        if found:
            # A new coordinator has not seen us yet: give the session a fresh start.
            self.heartbeat.reset_session_timeout(self._clock.now_ms())
        self._membership_changed()

    def _enable_heartbeats(self) -> None:
        """The member heartbeats from now on, with a fresh session and poll interval."""
        driver = self._driver
        if driver is not None:
            driver.enable()
        else:
            self.heartbeat.reset_timeouts(self._clock.now_ms())

    def heartbeats_wanted(self) -> bool:
        """Heartbeat while STABLE and while the leader computes the assignment
        (COMPLETING_REBALANCE, between JoinGroup and SyncGroup), as the Java client does."""
        return self.state in (MemberState.STABLE, MemberState.COMPLETING_REBALANCE)

    def pacemaker_target(self) -> PacemakerTarget | None:
        """Whom the GIL-free pacemaker heartbeats as and where (holding the lock); None: nobody."""
        node = self.channel.known_node
        gen = self._generation
        if (not self._closed and node is not None and gen.has_member_id() and self.group_id is not None
                and self.heartbeats_wanted()):
            return PacemakerTarget(node, gen.generation_id, gen.member_id)
        return None

    def api_version(self, node: Node, api: int) -> int | None:
        """The version of ``api`` the network client uses with ``node`` (None: not known yet)."""
        return self._client.api_version(node, api)

    # ------------------------------------------------------------------ coordinator (kclient.group.coordinator_channel)
    def poll_network_nowait(self, timeout_ms: int) -> bool:
        return self.channel.poll_network_nowait(timeout_ms)

    def wake_network(self) -> None:
        self.channel.wake_network()

    def has_pending_coordinator_requests(self) -> bool:
        return self.channel.has_pending_requests()

    def lookup_in_flight(self) -> bool:
        return self.channel.lookup_in_flight()

    def coordinator(self) -> Node | None:
        """The coordinator if known and reachable, else None (and it is marked unknown)."""
        return self.channel.coordinator()

    def coordinator_unknown(self) -> bool:
        return self.channel.coordinator_unknown()

    def mark_coordinator_unknown(self, reason: str, disconnected: bool = False,
                                 node: Node | None = None) -> None:
        """Forget the coordinator (``node``: only if it is still that one)."""
        self.channel.mark_coordinator_unknown(reason, disconnected, node)

    def lookup_coordinator(self) -> RequestFuture:
        """Start a FindCoordinator if none is in flight; the future of the one in flight."""
        return self.channel.lookup_coordinator()

    def ensure_coordinator_ready(self, timeout_ms: int | None) -> bool:
        """Find and connect the coordinator within ``timeout_ms``; False if time ran out.
        Raises non-retriable errors (e.g. group authorization)."""
        return self.channel.ensure_coordinator_ready(timeout_ms)

    # ------------------------------------------------------------------ group activation
    def ensure_active_group(self, timeout_ms: int | None) -> bool:
        """Coordinator ready, heartbeat thread running, joined (mechanisms §1); False on timeout."""
        timer = Timer(self._clock, timeout_ms)
        if not self.ensure_coordinator_ready(timer.remaining_ms()):
            return False
        self.start_heartbeat_thread_if_needed()
        return self.join_group_if_needed(timer.remaining_ms())

    def start_heartbeat_thread_if_needed(self) -> None:
        """Choose the heartbeat driver (once) and set it going (again, after a failure)."""
        with self._lock:
            if self._driver_started or self._closed:
                return
            if self._driver is None:
                link = create_link(self, self._client) if self._start_heartbeat_thread else None
                self._driver = link if link is not None else HeartbeatThread(self)
            driver = self._driver
            if self._start_heartbeat_thread:
                driver.start()
            self._driver_started = True
            if self.heartbeats_wanted():
                driver.enable()
            self._membership_changed()

    def check_heartbeat_failure(self) -> None:
        """Raise (once) the error that stopped the heartbeat driver; its successor starts later."""
        driver = self._driver
        if driver is None:
            return
        driver.drain()
        with self._lock:
            exc = driver.failure
            if exc is None or not self._driver_started:
                return
            self._driver = driver.restarted()
            self._driver_started = False
        raise exc

    def join_group_if_needed(self, timeout_ms: int | None) -> bool:
        """(Re)join until the member is STABLE; False if ``timeout_ms`` ran out first (the
        join continues at the next call)."""
        timer = Timer(self._clock, timeout_ms)
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
                    self._count_failed_rebalance()
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
                self._count_failed_rebalance()
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

    def _count_failed_rebalance(self) -> None:
        if self.stats is not None:
            self.stats.record("failed-rebalance", 1, self._clock.now_ms())

    def _on_join_failure(self, exc: BaseException, timer: Timer) -> bool:
        """Decide after a failed JoinGroup/SyncGroup: True to retry now, False if time ran
        out during the backoff; raises non-retriable errors."""
        if isinstance(exc, _REJOIN_AT_ONCE):
            log.debug("group %s: rejoining after %r", self.group_id, exc)
            return True
        if not (isinstance(exc, Errors.KafkaError) and exc.retriable):
            raise exc
        log.info("group %s: join failed with %r; retrying in %d ms", self.group_id, exc, self.retry_backoff_ms)
        self.channel.backoff(timer)
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
        sent = self.channel.send_group_request(node, JOIN_GROUP, body, timeout_ms=timeout)
        return self._timed(sent, "join").compose(_JoinGroupHandler(self, generation, node))

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

        sent = self.channel.send_group_request(node, SYNC_GROUP, body)
        return self._timed(sent, "sync").compose(_SyncGroupHandler(self, generation, node))

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
        node = self.channel.known_node
        if node is None:
            return RequestFuture.coordinator_not_available()
        generation = self._generation
        log.debug("sending heartbeat for group %s generation %d to %s", self.group_id,
                  generation.generation_id, node.node_id)
        body = {"group_id": self.group_id, "generation_id": generation.generation_id,
                "member_id": generation.member_id, "group_instance_id": self.group_instance_id}
        sent = self.channel.send_group_request(node, HEARTBEAT, body)
        return self._timed(sent, "heartbeat").compose(_HeartbeatHandler(self, generation, node))

    def _timed(self, sent: RequestFuture, source: str) -> RequestFuture:
        """Record the time to the answer of a membership request (errors answered included;
        a request that got no answer is not timed)."""
        stats = self.stats
        if stats is not None:
            sent.add_both(self._record_answer, stats, source, self._clock.now_ms())
        return sent

    def _record_answer(self, stats: Any, source: str, sent_ms: int, result: Any) -> None:
        if not isinstance(result, BaseException):
            now = self._clock.now_ms()
            stats.record(source, now - sent_ms, now)

    def on_poll_timeout(self, now_ms: int) -> None:
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

                future = self.channel.send_group_request(self._leave_route(node), LEAVE_GROUP, body).compose(
                    _LeaveGroupHandler(self, None, node))
            self.reset_state_and_generation(f"left the group: {reason}", reset_member_id=True)
        if future is not None:
            # Push it out now: the heartbeat thread parks itself next, the application may be slow.
            self.channel.poll_network_nowait(0)
        return future

    def _held_requests(self, node: Node) -> int:
        """JoinGroup and SyncGroup requests to ``node`` not answered yet (a broker holds
        them until the rebalance completes). Asked of the network client rather than read
        from the futures this member keeps: an interrupt between sending one and storing its
        future loses the future, not the request."""
        return sum(1 for key in self.channel.client.pending_api_keys(node) if key in _HELD_APIS)

    def _leave_route(self, coordinator: Node) -> Node:
        """Where LeaveGroup goes: the coordinator's connection, unless a JoinGroup or SyncGroup
        is held there. A broker holds those until the rebalance completes and reads nothing
        else from that connection meanwhile, so a LeaveGroup behind one would wait as long
        (up to the other members' rebalance timeout). The broker's main connection carries it
        at once, and the broker then answers the held request."""
        if not self._held_requests(coordinator):
            return coordinator
        broker_id = coordinator_node_id(coordinator.node_id)   # the mapping is its own inverse
        broker = self.channel.client.metadata.cluster.node_by_id(broker_id)
        return broker if broker is not None else coordinator

    def close(self, timeout_ms: int | None = None) -> None:
        """Stop the heartbeat driver, leave the group, wait for pending coordinator requests."""
        timer = Timer(self._clock, timeout_ms)
        with self._lock:
            if self._closed:
                return
            driver, self._driver = self._driver, None
            self._driver_started = False
        if driver is not None:   # before LeaveGroup: no heartbeat may follow it
            remaining = timer.remaining_ms()
            driver.close(None if remaining is None else remaining / 1000.0)
        leave = None
        try:
            if self.leave_group_on_close:
                try:
                    self.on_leave_prepare()
                finally:
                    leave = self.maybe_leave_group("the consumer is being closed")
            client = self.channel.client
            if leave is not None:   # it may have gone over another connection than the coordinator's
                client.poll_future(leave, timer.remaining_ms(), disable_wakeup=True)
            # Once the member has left, the answer to a JoinGroup/SyncGroup the broker still
            # holds is moot: waiting for it would only wait out the rebalance.
            left = leave is not None and leave.succeeded()
            node = self.channel.known_node
            if node is not None:
                while client.pending_request_count(node) > (self._held_requests(node) if left else 0):
                    remaining = timer.remaining_ms()
                    if remaining is not None and remaining <= 0:
                        log.warning("group %s: coordinator requests still pending at close", self.group_id)
                        break
                    client.poll(100 if remaining is None else min(remaining, 100),
                                execute_delayed_tasks=False, disable_wakeup=True)
        finally:
            with self._lock:
                self._closed = True


# ---------------------------------------------------------------------- response handlers
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
                    c._enable_heartbeats()
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
        err = error_for(code)
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
                    c._enable_heartbeats()
                    c._membership_changed()
            else:
                err = error_for(code)
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
        err = error_for(code)
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
            err = error_for(code)
            log.info("LeaveGroup of group %s failed: %r", self.c.group_id, err)
            future.raise_(err)
