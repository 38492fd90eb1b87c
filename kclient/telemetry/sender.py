"""KIP-714 client metrics push, driven by the network client's poll (no thread of its own).

States: ask the broker for this client's subscription (GetTelemetrySubscriptions); when it
names metrics, push them (PushTelemetry) every ``push_interval_ms`` (the first push after a
random 0.5-1.5 × interval, as the KIP asks, so that clients started together spread out);
when it names none, ask again after the interval. ``close()`` sends a last push with
``terminating`` set. A broker that lacks the APIs (no telemetry reporter, an older Kafka,
another implementation) disables the sender for the client's life: one check of the
negotiated API versions, no request, nothing logged above DEBUG.
"""
from __future__ import annotations

import logging
import random
import time
import uuid
from typing import Any, Callable

from kclient import errors as Errors
from kclient.network.connection import ConnectionState
from kclient.network.network_client import ClientRequest
from kclient.telemetry.otlp import TEMPORALITY_CUMULATIVE, TEMPORALITY_DELTA, encode_metrics_data
from kclient.telemetry.points import TelemetryPoints

log = logging.getLogger(__name__)

__all__ = ["TelemetrySender"]

GET_TELEMETRY_SUBSCRIPTIONS = 71
PUSH_TELEMETRY = 72
_ZERO_UUID = uuid.UUID(int=0)
_NO_DEADLINE = 1 << 62
_RETRY_MS = 30000           # a failed subscription request: ask again this much later
_NO_NODE_RETRY_MS = 100     # no connection ready yet: look again soon (polls come anyway)
_COMPRESSION_NONE = 0

SUBSCRIPTION_NEEDED = "subscription-needed"
SUBSCRIPTION_IN_PROGRESS = "subscription-in-progress"
PUSH_NEEDED = "push-needed"
PUSH_IN_PROGRESS = "push-in-progress"
TERMINATED = "terminated"
DISABLED = "disabled"


def _as_uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)) and len(value) == 16:
        return uuid.UUID(bytes=bytes(value))
    return _ZERO_UUID


class TelemetrySender:
    """One client's KIP-714 state. ``poll(host, now_ms)`` is called from the network client's
    poll (under its caller's lock) and returns when it next wants to be called."""

    def __init__(self, points: TelemetryPoints, resource: Callable[[], list[tuple[str, str]]],
                 clock_ns: Callable[[], int] = time.time_ns):
        self._points = points
        self._resource = resource
        self._clock_ns = clock_ns
        self.state = SUBSCRIPTION_NEEDED
        self.instance_id = _ZERO_UUID
        self._next_ms = 0
        self._node: int | None = None
        self._subscription_id = 0
        self._requested: list[str] = []
        self._interval_ms = 0
        self._max_bytes = 0
        self._delta = False
        self._first_push = True
        self._terminating = False
        self.pushes = 0                 # push answers (or failures)
        self.subscription_answers = 0   # GetTelemetrySubscriptions answers (or failures)

    # ------------------------------------------------------------------ driving
    def poll(self, host: Any, now_ms: int) -> int:
        state = self.state
        if state in (DISABLED, TERMINATED, SUBSCRIPTION_IN_PROGRESS, PUSH_IN_PROGRESS):
            return _NO_DEADLINE
        if self._terminating and state == SUBSCRIPTION_NEEDED:
            self.state = TERMINATED     # never subscribed: nothing to tell the broker
            return _NO_DEADLINE
        if now_ms < self._next_ms and not (self._terminating and state == PUSH_NEEDED):
            return self._next_ms
        node = self._ready_node(host, now_ms)
        if node is None:
            return _NO_DEADLINE if self.state in (DISABLED, TERMINATED) else now_ms + _NO_NODE_RETRY_MS
        if state == SUBSCRIPTION_NEEDED:
            self._send_subscription_request(host, node, now_ms)
        else:
            self._send_push(host, node, now_ms)
        return _NO_DEADLINE

    def initiate_close(self) -> bool:
        """Ask for the terminating push; True if one is to be sent (and waited for)."""
        self._terminating = True
        if self.state in (DISABLED, TERMINATED, SUBSCRIPTION_NEEDED):
            self.state = TERMINATED if self.state != DISABLED else DISABLED
            return False
        return True

    @property
    def requested_metrics(self) -> list[str]:
        """The metric name prefixes of the current subscription (empty: nothing to push)."""
        return list(self._requested)

    @property
    def finished(self) -> bool:
        return self.state in (DISABLED, TERMINATED)

    def _ready_node(self, host: Any, now_ms: int) -> int | None:
        node = self._node
        if node is None or host.connection_state(node) is not ConnectionState.READY:
            node = host.least_loaded_node(now_ms)
            if node is None:
                if self._terminating:
                    self.state = TERMINATED
                return None
            if host.connection_state(node) is not ConnectionState.READY:
                if self._terminating:
                    # Closing: no new connection just for the last push.
                    log.debug("no broker connection left for the terminating client metrics push")
                    self.state = TERMINATED
                    return None
                host.ready(node, now_ms)   # starts connecting if it is not under way
                return None
            self._node = node
        if not host.send_capacity(node):
            return None
        if host.api_version(node, GET_TELEMETRY_SUBSCRIPTIONS) is None or host.api_version(node, PUSH_TELEMETRY) is None:
            log.debug("node %d does not offer client metrics push (KIP-714): not pushing", node)
            self.state = DISABLED
            return None
        return node

    # ------------------------------------------------------------------ subscription
    def _send_subscription_request(self, host: Any, node: int, now_ms: int) -> None:
        self.state = SUBSCRIPTION_IN_PROGRESS
        host.send(ClientRequest(node, GET_TELEMETRY_SUBSCRIPTIONS, {"client_instance_id": self.instance_id},
                                callback=lambda response, error: self._on_subscription(host, response, error)),
                  now_ms)

    def _on_subscription(self, host: Any, response: dict | None, error: BaseException | None) -> None:
        now_ms = host.clock.now_ms()
        self.state = SUBSCRIPTION_NEEDED
        self.subscription_answers += 1
        if error is not None or response is None:
            log.debug("GetTelemetrySubscriptions failed: %r; asking again in %d ms", error, _RETRY_MS)
            self._node = None
            self._next_ms = now_ms + _RETRY_MS
            return
        code = response.get("error_code", 0)
        if code:
            cls = Errors.error_class(code)
            if cls is Errors.UnsupportedVersionError:
                log.debug("GetTelemetrySubscriptions unsupported: not pushing client metrics")
                self.state = DISABLED
                return
            log.debug("GetTelemetrySubscriptions answered %s; asking again in %d ms", cls.__name__, _RETRY_MS)
            self._next_ms = now_ms + _RETRY_MS
            return
        instance = _as_uuid(response.get("client_instance_id"))
        if instance != _ZERO_UUID:
            self.instance_id = instance
        self._subscription_id = response.get("subscription_id", 0)
        self._requested = list(response.get("requested_metrics") or [])
        self._interval_ms = max(int(response.get("push_interval_ms") or 0), 100)
        self._max_bytes = int(response.get("telemetry_max_bytes") or 0)
        self._delta = bool(response.get("delta_temporality"))
        if self._terminating:
            self.state = PUSH_NEEDED if self._requested else TERMINATED
            self._next_ms = now_ms
            return
        if not self._requested:
            log.debug("no client metrics requested by the broker; asking again in %d ms", self._interval_ms)
            self._next_ms = now_ms + self._interval_ms
            return
        log.debug("client metrics subscription %d: %s every %d ms (instance %s)", self._subscription_id,
                  self._requested, self._interval_ms, self.instance_id)
        self.state = PUSH_NEEDED
        wait = self._interval_ms
        if self._first_push:
            self._first_push = False
            wait = int(wait * (0.5 + random.random()))
        self._next_ms = now_ms + wait

    # ------------------------------------------------------------------ pushes
    def _payload(self) -> bytes:
        points = self._points.points(self._requested, self._delta, self._clock_ns())
        return encode_metrics_data(points, resource=self._resource(),
                                   temporality=TEMPORALITY_DELTA if self._delta else TEMPORALITY_CUMULATIVE)

    def _send_push(self, host: Any, node: int, now_ms: int) -> None:
        terminating = self._terminating
        payload = self._payload()
        if self._max_bytes and len(payload) > self._max_bytes:
            log.debug("client metrics of %d bytes exceed the broker's %d: not pushed", len(payload), self._max_bytes)
            payload = encode_metrics_data([], resource=self._resource())
        self.state = PUSH_IN_PROGRESS
        body = {"client_instance_id": self.instance_id, "subscription_id": self._subscription_id,
                "terminating": terminating, "compression_type": _COMPRESSION_NONE, "metrics": payload}
        host.send(ClientRequest(node, PUSH_TELEMETRY, body,
                                callback=lambda response, error: self._on_push(host, terminating, response, error)),
                  now_ms)

    def _on_push(self, host: Any, terminating: bool, response: dict | None, error: BaseException | None) -> None:
        now_ms = host.clock.now_ms()
        self.pushes += 1
        if terminating:
            self.state = TERMINATED
            if error is not None or (response or {}).get("error_code"):
                log.debug("the terminating client metrics push failed: %r", error or response)
            return
        if error is not None or response is None:
            log.debug("PushTelemetry failed: %r; asking for the subscription again", error)
            self._node = None
            self.state = SUBSCRIPTION_NEEDED
            self._next_ms = now_ms + self._interval_ms
            return
        code = response.get("error_code", 0)
        if not code:
            self.state = PUSH_NEEDED
            self._next_ms = now_ms + self._interval_ms
            return
        cls = Errors.error_class(code)
        if cls in (Errors.UnknownSubscriptionIdError, Errors.UnsupportedCompressionTypeError):
            # The subscription changed on the broker: fetch it again at once.
            log.debug("PushTelemetry answered %s: asking for the subscription again", cls.__name__)
            self.state = SUBSCRIPTION_NEEDED
            self._next_ms = now_ms
        elif cls in (Errors.TelemetryTooLargeError, Errors.ThrottlingQuotaExceededError):
            log.debug("PushTelemetry answered %s: next push at the next interval", cls.__name__)
            self.state = PUSH_NEEDED
            self._next_ms = now_ms + self._interval_ms
        else:
            log.warning("the broker refused this client's metrics (%s): not pushing them any more", cls.__name__)
            self.state = DISABLED

    # ------------------------------------------------------------------ close
    def close(self, host: Any, timeout_ms: int) -> None:
        """Send the terminating push (if subscribed) and wait up to ``timeout_ms`` for its answer."""
        if not self.initiate_close():
            return
        deadline = host.clock.now_ms() + timeout_ms
        while not self.finished:
            remaining = deadline - host.clock.now_ms()
            if remaining <= 0:
                log.debug("no answer to the terminating client metrics push in %d ms", timeout_ms)
                return
            host.poll(min(remaining, 100))
