"""The way to one group's coordinator: discovery (FindCoordinator), its connection, its requests.

Both group protocols use it: the classic coordinator (JoinGroup/SyncGroup/Heartbeat), the
KIP-848 one (ConsumerGroupHeartbeat) and the offset committer they share. It owns the lock
(re-entrant, with condition ``cond``) that guards the membership state of the coordinator
using it: the coordinator node lives under it, and so do the generation and member state of
the coordinator that owns the channel. The lock is held only for short state changes, never
while waiting on the network.

The coordinator gets a connection of its own (``coordinator_node_id``, as the Java client
does), so group requests never queue behind long-polling fetches on the broker's main one.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from kclient import errors as Errors
from kclient.clock import Clock
from kclient.group.timer import Timer
from kclient.group.version_fallback import GroupVersionFallback
from kclient.network.future import RequestFuture, RequestFutureAdapter
from kclient.network.metadata import Node
from kclient.protocol import ApiKey

__all__ = ["CoordinatorChannel", "CoordinatorResponseHandler", "coordinator_node_id", "error_for"]

log = logging.getLogger(__name__)

FIND_COORDINATOR = int(ApiKey.FIND_COORDINATOR)

_INT32_MAX = 2**31 - 1


def coordinator_node_id(broker_id: int) -> int:
    """Id under which the coordinator gets its own connection (as the Java client does), so
    group requests never queue behind long-polling fetches on the broker's main connection."""
    return _INT32_MAX - broker_id


def error_for(code: int, message: str | None = None) -> Errors.KafkaError:
    """The exception of a Kafka error code (with the broker's message if it sent one)."""
    cls = Errors.error_class(code)
    err = cls(message) if message else cls()
    if cls is Errors.UnknownBrokerError:
        err.errno = code
    return err


class CoordinatorChannel:
    """Finds, connects and forgets the coordinator of ``group_id``; sends requests to it.

    ``on_change(found)`` runs holding the lock whenever a coordinator is found (True) or
    forgotten (False), so the owner can restart its session or tell its heartbeat driver.
    """

    def __init__(self, client: Any, group_id: str | None, *, retry_backoff_ms: int, request_timeout_ms: int,
                 clock: Clock, on_change: Callable[[bool], None] | None = None):
        self.client = client
        self.group_id = group_id
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.clock = clock
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.on_change = on_change
        # Group requests go through here: a coordinator that hangs up on a version it
        # advertises gets one version lower (see kclient.group.version_fallback).
        self.group_sender = GroupVersionFallback(client, group_id or "")
        self._node: Node | None = None
        self._find_future: RequestFuture | None = None

    # ------------------------------------------------------------------ state
    @property
    def known_node(self) -> Node | None:
        """The coordinator last found, without checking its connection."""
        return self._node

    def coordinator(self) -> Node | None:
        """The coordinator if known and reachable, else None (and it is marked unknown)."""
        node = self._node
        if node is not None and self.client.is_unavailable(node):
            self.mark_coordinator_unknown("the coordinator connection failed", disconnected=True)
            return None
        return self._node

    def coordinator_unknown(self) -> bool:
        return self.coordinator() is None

    def lookup_in_flight(self) -> bool:
        """A FindCoordinator is under way."""
        future = self._find_future
        return future is not None and not future.is_done

    def has_pending_requests(self) -> bool:
        """A request to the coordinator (or the lookup of one) awaits its answer."""
        node = self._node
        if node is None:
            return self.lookup_in_flight()
        return self.client.has_pending_requests(node)

    def mark_coordinator_unknown(self, reason: str, disconnected: bool = False,
                                 node: Node | None = None) -> None:
        """Forget the coordinator (``node``: only if it is still that one)."""
        with self.lock:
            old = self._node
            if old is None or (node is not None and node != old):
                return
            log.info("group coordinator %s:%s (id %s) of group %s is unavailable or invalid (%s); "
                     "rediscovering", old.host, old.port, old.node_id, self.group_id, reason)
            self._node = None
            if self.on_change is not None:
                self.on_change(False)
        if not disconnected:
            # Fail requests still queued for it at once rather than at their timeout.
            self.client.disconnect_async(old)

    # ------------------------------------------------------------------ network helpers
    def poll_network_nowait(self, timeout_ms: int) -> bool:
        """Poll without honouring wakeups if no other thread is polling; False if one is
        (a heartbeat thread must not wait behind an application poll: that poll does the
        I/O instead)."""
        return self.client.try_poll_no_wakeup(timeout_ms)

    def wake_network(self) -> None:
        """Make a select() in progress return (not a consumer wakeup: nothing is raised)."""
        self.client.wake_poll()

    def backoff(self, timer: Timer) -> None:
        """Wait retry.backoff.ms (bounded by ``timer``) while serving the network."""
        clock = self.clock
        end = clock.now_ms() + self.retry_backoff_ms
        remaining = timer.remaining_ms()
        if remaining is not None:
            end = min(end, clock.now_ms() + remaining)
        for _ in range(10):  # a poll may return early on unrelated network events
            wait = end - clock.now_ms()
            if wait <= 0:
                break
            self.client.poll(wait)

    def send_group_request(self, node: Node, api: int, body: Any, timeout_ms: int | None = None) -> RequestFuture:
        """A membership request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) through the
        version step-down."""
        if timeout_ms is None:
            return self.group_sender.send(node, api, body)
        return self.group_sender.send(node, api, body, timeout_ms=timeout_ms)

    def await_pending_requests(self, timeout_ms: int | None) -> bool:
        """Wait for the coordinator's requests to be answered (close); True if none is left."""
        node = self._node
        if node is None:
            return True
        return self.client.await_pending_requests(node, timeout_ms)

    # ------------------------------------------------------------------ discovery
    def lookup_coordinator(self) -> RequestFuture:
        """Start a FindCoordinator if none is in flight; the future of the one in flight."""
        with self.lock:
            future = self._find_future
            if future is not None and not future.is_done:
                return future
        # Outside the lock: choosing a node reads the network client's connection states.
        node = self.client.least_loaded_node()
        if node is None:
            log.debug("no broker available to look up the coordinator of group %s", self.group_id)
            return RequestFuture.no_brokers_available()
        with self.lock:
            future = self._find_future
            if future is not None and not future.is_done:
                return future
            future = self._send_find_coordinator_request(node)
            self._find_future = future
        future.add_both(self._clear_find_future, future)
        return future

    def _clear_find_future(self, future: RequestFuture, _outcome: Any) -> None:
        with self.lock:
            if self._find_future is future:
                self._find_future = None

    def _send_find_coordinator_request(self, node: int) -> RequestFuture:
        group_id = self.group_id
        log.debug("sending FindCoordinator for group %s to node %s", group_id, node)

        def body(version: int) -> dict:
            if version >= 4:
                return {"key_type": 0, "coordinator_keys": [group_id]}
            return {"key": group_id, "key_type": 0}

        return self.client.send(node, FIND_COORDINATOR, body).compose(_FindCoordinatorHandler(self))

    def found(self, node: Node, broker_id: int) -> None:
        """A FindCoordinator answered ``node`` (broker ``broker_id``)."""
        with self.lock:
            self._node = node
            if self.on_change is not None:
                self.on_change(True)
        log.info("discovered coordinator %s:%s (broker %d) for group %s", node.host, node.port,
                 broker_id, self.group_id)
        # As the Java client does: start connecting now, so the connection is on its way
        # before the first group request is queued for it.
        try:
            self.client.try_connect(node)
        except Errors.KafkaError as exc:  # e.g. the client is closing: the next request will tell
            log.debug("could not start connecting to coordinator %s: %r", node, exc)

    def ensure_coordinator_ready(self, timeout_ms: int | None) -> bool:
        """Find and connect the coordinator within ``timeout_ms``; False if time ran out.
        Raises non-retriable errors (e.g. group authorization)."""
        if not self.coordinator_unknown():
            return True
        timer = Timer(self.clock, timeout_ms)
        while self.coordinator_unknown():
            future = self.lookup_coordinator()
            self.client.poll_future(future, timer.remaining_ms())
            if not future.is_done:
                return False
            if future.failed():
                exc = future.exception
                if isinstance(exc, Errors.NoBrokersAvailable):
                    # Every known broker is backing off: refreshing metadata connects again.
                    remaining = timer.remaining_ms()
                    self.client.await_metadata_update(
                        self.request_timeout_ms if remaining is None else min(remaining, self.request_timeout_ms))
                elif future.retriable():
                    self.backoff(timer)
                else:
                    raise exc
            else:
                node = self._node
                if node is not None and self.client.is_unavailable(node):
                    self.mark_coordinator_unknown("the coordinator connection failed", disconnected=True)
                    self.backoff(timer)
            if timer.expired():
                break
        return not self.coordinator_unknown()


class CoordinatorResponseHandler(RequestFutureAdapter):
    """Base of the coordinator's response handlers: connection failures mark it unknown."""

    def __init__(self, channel: CoordinatorChannel, node: Node | None = None):
        self.channel = channel
        self.node = node            # where the request went: a late failure from an old
                                    # coordinator must not unset a newly discovered one

    def on_failure(self, exc: BaseException, future: RequestFuture) -> None:
        if not isinstance(exc, Errors.BrokerResponseError) and isinstance(
                exc, (Errors.KafkaConnectionError, Errors.KafkaTimeoutError, Errors.RequestCancelledError)):
            self.mark_coordinator_unknown(f"{type(exc).__name__}: {exc}",
                                          disconnected=isinstance(exc, Errors.KafkaConnectionError))
        future.raise_(exc)

    def mark_coordinator_unknown(self, reason: str, disconnected: bool = False) -> None:
        self.channel.mark_coordinator_unknown(reason, disconnected, node=self.node)


class _FindCoordinatorHandler(CoordinatorResponseHandler):
    def on_success(self, response: dict, future: RequestFuture) -> None:
        channel = self.channel
        group_id = channel.group_id
        entries = response.get("coordinators")
        if entries:
            entry = next((e for e in entries if e.get("key") == group_id), entries[0])
        else:
            entry = response
        code = entry.get("error_code", 0)
        if code == 0:
            node = Node(coordinator_node_id(entry["node_id"]), entry["host"], entry["port"])
            channel.found(node, entry["node_id"])
            future.complete(None)
            return
        err = error_for(code, entry.get("error_message"))
        if isinstance(err, Errors.GroupAuthorizationFailedError):
            err = Errors.GroupAuthorizationFailedError(f"not authorized to use group {group_id!r}")
        log.debug("FindCoordinator for group %s failed: %r", group_id, err)
        self.mark_coordinator_unknown(repr(err))
        future.raise_(err)

    def on_failure(self, exc: BaseException, future: RequestFuture) -> None:
        log.debug("FindCoordinator for group %s failed: %r", self.channel.group_id, exc)
        future.raise_(exc)
