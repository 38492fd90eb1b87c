"""A share member's I/O with its group coordinator: ShareGroupHeartbeats, their answers, leaving.

The decisions are ``ShareMembership``'s; this class sends what it builds, on the interval the
broker gave, from whichever thread calls ``heartbeat_tick`` (the application's poll or the
heartbeat loop, ``kclient.share.heartbeat_loop``), and turns the assignment's topic ids into
``TopicPartition``s through the metadata. The coordinator is found and reached through the
group layer's ``CoordinatorChannel`` (a connection of its own, FindCoordinator key type group).

While the member is in the group its steady heartbeats come from the GIL-free pacemaker
(``kclient.share.pacemaker_link``), when the driver is one: this class then sends only the
heartbeats that say more than "nothing changed" (the join, a new subscription, the leave),
after the driver hands back the epoch it reached (``disengage``).
"""
from __future__ import annotations

import logging
from typing import Any

from kcore.timers import Heartbeat

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.group.coordinator_channel import CoordinatorChannel
from kclient.group.heartbeat_driver import HeartbeatDriver
from kclient.group.timer import Timer
from kclient.network.future import RequestFuture
from kclient.network.metadata import Node
from kclient.protocol import ApiKey
from kclient.share.membership import HEARTBEATING, ShareMembership, ShareMemberState
from kclient.structs import TopicPartition

__all__ = ["ShareCoordinator", "NETWORK_WAIT_MAX_MS", "no_share_groups"]

log = logging.getLogger(__name__)

SHARE_GROUP_HEARTBEAT = int(ApiKey.SHARE_GROUP_HEARTBEAT)
#: How soon to look again while a heartbeat is in flight.
NETWORK_WAIT_MAX_MS = 50

_COORDINATOR_ERRORS = (Errors.NotCoordinatorError, Errors.CoordinatorNotAvailableError)
_CONNECTION_ERRORS = (Errors.KafkaConnectionError, Errors.KafkaTimeoutError)
#: A share member has no poll bound the client enforces (the pacemaker never leaves on its own).
_NO_POLL_BOUND_MS = 2**31 - 1


def no_share_groups(node: Node, cause: BaseException) -> Errors.UnsupportedVersionError:
    """The error of a broker that does not serve share groups."""
    return Errors.UnsupportedVersionError(
        f"broker {node.host}:{node.port} does not serve share groups (ShareGroupHeartbeat: {cause}); "
        "share groups need Apache Kafka 4.2 or later with the feature share.version enabled "
        "(kafka-features.sh upgrade --feature share.version=1)")


class ShareCoordinator:
    def __init__(self, client: Any, group_id: str, *, retry_backoff_ms: int = 100,
                 request_timeout_ms: int = 30000, rack_id: str | None = None, clock: Clock = SYSTEM_CLOCK):
        self._client = client
        self._clock = clock
        self.group_id = group_id
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.channel = CoordinatorChannel(client, group_id, retry_backoff_ms=retry_backoff_ms,
                                          request_timeout_ms=request_timeout_ms, clock=clock)
        self._lock = self.channel.lock
        self._cond = self.channel.cond
        self.membership = ShareMembership(group_id=group_id, rack_id=rack_id)
        #: The last assignment() made, with the assignment version and the metadata it was
        #: made from: every poll asks for it two or three times, and it changes rarely.
        self._assigned: tuple[int, Any, frozenset[TopicPartition]] | None = None
        # The pacemaker's timing. The session bound is the broker's (group.share.session.timeout.ms),
        # unknown here: a silent coordinator is given up after request.timeout.ms.
        self.heartbeat = Heartbeat(max(request_timeout_ms, self.membership.heartbeat_interval_ms + 1),
                                   self.membership.heartbeat_interval_ms, _NO_POLL_BOUND_MS, retry_backoff_ms,
                                   clock.now_ms())
        self._topics: list[str] = []
        #: The broker answered a heartbeat that carried the current subscription.
        self._subscription_acknowledged = False
        self._hb_in_flight: RequestFuture | None = None
        self._next_heartbeat_ms = 0
        self._driver: HeartbeatDriver | None = None
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

    def now_ms(self) -> int:
        return self._clock.now_ms()

    def set_driver(self, driver: HeartbeatDriver | None) -> None:
        with self._lock:
            self._driver = driver

    @property
    def driver(self) -> HeartbeatDriver | None:
        return self._driver

    def subscribe(self, topics: list[str]) -> None:
        with self._lock:
            self._topics = sorted(set(topics))
            self.membership.subscribe()
            self._subscription_acknowledged = False
            self._next_heartbeat_ms = 0     # a new subscription goes out at once
            if self._driver is not None:
                self._driver.membership_changed()     # Python sends it, not the pacemaker
            self._cond.notify_all()
        self.wake_network()

    def subscription_acknowledged(self) -> bool:
        return self._subscription_acknowledged

    def drain_driver(self) -> None:
        """Apply what the heartbeat driver learnt meanwhile (the application's poll)."""
        driver = self._driver
        if driver is not None:
            driver.drain()

    def api_version(self, node: Node, api: int) -> int | None:
        return self._client.api_version(node, api)

    @property
    def topics(self) -> list[str]:
        return list(self._topics)

    def assignment(self) -> frozenset[TopicPartition]:
        """The assigned partitions whose topic ids the metadata can name (the others are
        named after the next metadata update). The same object until the assignment or the
        metadata changes (ShareFetcher.send_fetches goes by that too)."""
        md = self._client.metadata
        cluster = md.cluster
        with self._lock:
            version = self.membership.assignment_version
            made = self._assigned
            if made is not None and made[0] == version and made[1] is cluster:
                return made[2]
            assignment = dict(self.membership.assignment)
        out: set[TopicPartition] = set()
        named = True
        for tid, parts in assignment.items():
            name = cluster.topic_name(tid)
            if name is None:
                md.request_update()
                named = False
                continue
            out.update(TopicPartition(name, p) for p in parts)
        result = frozenset(out)
        if named:       # kept only when complete: a name still missing is asked for again
            with self._lock:
                if self.membership.assignment_version == version:
                    self._assigned = (version, cluster, result)
        return result

    def raise_if_fatal(self) -> None:
        err = self.membership.fatal_error
        if err is not None:
            raise err

    # ------------------------------------------------------------------ coordinator
    def coordinator(self) -> Node | None:
        return self.channel.coordinator()

    def coordinator_unknown(self) -> bool:
        return self.channel.coordinator_unknown()

    def mark_coordinator_unknown(self, reason: str) -> None:
        self.channel.mark_coordinator_unknown(reason)

    def lookup_coordinator(self) -> RequestFuture:
        return self.channel.lookup_coordinator()

    def heartbeat_in_flight(self) -> bool:
        return self._hb_in_flight is not None

    def has_pending_coordinator_requests(self) -> bool:
        return self.channel.has_pending_requests()

    def poll_network_nowait(self, timeout_ms: int) -> bool:
        return self.channel.poll_network_nowait(timeout_ms)

    def wake_network(self) -> None:
        self.channel.wake_network()

    # ------------------------------------------------------------------ heartbeats
    def heartbeat_tick(self, now_ms: int) -> int:
        """Send a heartbeat if one is due; ms until the next one is (any thread)."""
        with self._lock:
            m = self.membership
            if m.state is ShareMemberState.FENCED:
                m.rejoin()
            if m.state not in HEARTBEATING:
                return self.retry_backoff_ms
            if self._hb_in_flight is not None:
                return NETWORK_WAIT_MAX_MS
            driver = self._driver
            if driver is not None:
                driver.membership_changed()
                if driver.engaged:
                    return m.heartbeat_interval_ms    # the pacemaker heartbeats
            if now_ms < self._next_heartbeat_ms:
                return self._next_heartbeat_ms - now_ms
            node = self.coordinator()
            if node is None:
                self.lookup_coordinator()
                return self.retry_backoff_ms
            self._send_heartbeat(node)
            return NETWORK_WAIT_MAX_MS

    def _send_heartbeat(self, node: Node) -> RequestFuture:
        """The one place a ShareGroupHeartbeat leaves (holding ``_lock``)."""
        m = self.membership
        if self._driver is not None:
            self._driver.disengage()     # hands over the epoch it reached
        body = m.heartbeat_body(self._topics)
        epoch = body["member_epoch"]
        future = self._client.send(node, SHARE_GROUP_HEARTBEAT, body)
        m.sent()
        if epoch >= 0:
            self._hb_in_flight = future
        self._next_heartbeat_ms = self._clock.now_ms() + m.heartbeat_interval_ms
        future.add_both(self._on_heartbeat, future, node, epoch, body["subscribed_topic_names"])
        return future

    def _on_heartbeat(self, future: RequestFuture, node: Node, sent_epoch: int, topics: list[str] | None,
                      outcome: Any) -> None:
        """The one place a ShareGroupHeartbeat answer is digested (any thread)."""
        with self._lock:
            if self._hb_in_flight is future:
                self._hb_in_flight = None
            if sent_epoch < 0:
                return   # the answer to a leave: nothing to act on
            now = self._clock.now_ms()
            m = self.membership
            if future.failed():
                exc = future.exception
                log.debug("share group %s: heartbeat failed: %r", self.group_id, exc)
                if isinstance(exc, Errors.UnsupportedVersionError):
                    m.fail(no_share_groups(node, exc))
                elif isinstance(exc, _CONNECTION_ERRORS):
                    self.channel.mark_coordinator_unknown(f"heartbeat failed: {exc!r}", node=node)
                self._next_heartbeat_ms = now + self.retry_backoff_ms
            else:
                err = m.on_response(outcome)
                if isinstance(err, Errors.UnsupportedVersionError):
                    m.fatal_error = no_share_groups(node, err)
                if err is not None:
                    self._on_heartbeat_error(err, node, now)
                else:
                    if topics == self._topics:
                        self._subscription_acknowledged = True
                    # the interval the broker just gave counts from its answer
                    self._next_heartbeat_ms = now + m.heartbeat_interval_ms
            if self._driver is not None:
                self._driver.membership_changed()
            self._cond.notify_all()
        self.wake_network()

    def on_heartbeat_error(self, err: BaseException, node: Node | None) -> None:
        """An error the pacemaker's heartbeat answered (holding ``_lock``)."""
        if isinstance(err, Errors.UnsupportedVersionError) and node is not None:
            self.membership.fatal_error = no_share_groups(node, err)
        self._on_heartbeat_error(err, node, self._clock.now_ms())

    def _on_heartbeat_error(self, err: BaseException, node: Node | None, now: int) -> None:
        m = self.membership
        if isinstance(err, _COORDINATOR_ERRORS):
            self.channel.mark_coordinator_unknown(repr(err), node=node)
            self._next_heartbeat_ms = now + self.retry_backoff_ms
        elif m.state is ShareMemberState.FENCED:
            log.info("share member %s of group %s: %r; rejoining", m.member_id, self.group_id, err)
            self._next_heartbeat_ms = now
        elif m.state is ShareMemberState.FATAL:
            log.error("share member %s of group %s: %r; the next poll raises it", m.member_id,
                      self.group_id, err)
        else:
            log.info("share group %s: heartbeat answered %r; retrying in %d ms", self.group_id, err,
                     self.retry_backoff_ms)
            self._next_heartbeat_ms = now + self.retry_backoff_ms

    def on_heartbeat_loop_failure(self, exc: BaseException) -> None:
        self.membership.fatal_error = exc if isinstance(exc, Exception) else Errors.KafkaError(repr(exc))

    # ------------------------------------------------------------------ leaving
    def leave(self, reason: str) -> RequestFuture | None:
        """Send the leave heartbeat (epoch -1) if the member is in the group."""
        with self._lock:
            m = self.membership
            node = self.coordinator() if m.member_epoch > 0 else None
            if not m.leave() or node is None:
                if m.state is ShareMemberState.LEAVING:
                    m.sent()      # no coordinator to tell: the session times out on its own
                return None
            log.info("share member %s leaving group %s: %s", m.member_id, self.group_id, reason)
            future = self._send_heartbeat(node)
        self.channel.poll_network_nowait(0)
        return future

    def close(self, timeout_ms: int | None = None) -> None:
        """Leave the group (bounded by ``timeout_ms``), then stop the heartbeat driver."""
        if self._closed:
            return
        timer = Timer(self._clock, timeout_ms)
        try:
            self.leave("the share consumer is being closed")
            if not self.channel.await_pending_requests(timer.remaining_ms()):
                log.warning("share group %s: coordinator requests still pending at close", self.group_id)
        finally:
            with self._lock:
                self._closed = True
                driver, self._driver = self._driver, None
                self._cond.notify_all()
            if driver is not None:
                driver.close(1.0)
