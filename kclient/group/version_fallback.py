"""One version lower for a group API on a coordinator that hangs up on it, instead of retrying forever.

Why this exists: librdkafka's mock cluster (2.16, the one in the confluent-kafka wheel)
advertises JoinGroup v0-6, SyncGroup v0-4 and LeaveGroup v0-4, but its handlers read every
version in the pre-flexible layout. kclient's JoinGroup v6 (flexible since v6 per Kafka's
JoinGroupRequest.json) carries the protocols array as a compact array: for one protocol
"range" the bytes after ProtocolType are ``02 06 72 61 ...`` (count 1 as varint N+1, then the
compact name). The mock reads them as an int32 count, 0x02067261 = 33,976,929, rejects it
(> 1000) and closes the connection without an answer. Apache Kafka accepts the same bytes
(tests/test_broker_deviations.py), so the request is right and the broker is wrong; but a
client that keeps sending the same request to a broker that keeps hanging up never joins.

So: when the coordinator closes the connection (or sends an answer that does not decode at
the version sent) ``STRIKES`` times in a row on one version of a group API, kclient caps that API at one version lower for that
coordinator (never below the broker's advertised minimum) and logs a warning naming the
broker and the versions. Any answer at a version clears its strikes. A real broker that drops
connections for unrelated reasons costs at most a step down to an older, still supported
version, which changes nothing a consumer relies on (only the optional ``reason`` fields).
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from kclient import errors as Errors
from kclient.network.future import RequestFuture
from kclient.network.metadata import Node
from kclient.protocol import ApiKey

__all__ = ["GroupVersionFallback", "STRIKES"]

log = logging.getLogger(__name__)

#: Connection closes in a row, without an answer, on one (coordinator, api, version) before stepping down.
STRIKES = 2


class GroupVersionFallback:
    """Sends group requests through ``client`` with a per-coordinator version cap that drops
    by one after ``STRIKES`` unanswered connection closes on the same version."""

    def __init__(self, client: Any, group_id: str) -> None:
        self._client = client
        self._group_id = group_id
        self._lock = threading.Lock()
        self._caps: dict[tuple[int, int], int] = {}
        self._strikes: dict[tuple[int, int, int], int] = {}

    def cap(self, node: Node, api_key: int) -> int | None:
        with self._lock:
            return self._caps.get((node.node_id, int(api_key)))

    def send(self, node: Node, api_key: int, body: Any, **kwargs: Any) -> RequestFuture:
        future = self._client.send(node, api_key, body, max_version=self.cap(node, api_key), **kwargs)
        future.add_both(self._record, future, node, int(api_key))
        return future

    def _record(self, future: Any, node: Node, api_key: int, _outcome: Any) -> None:
        version = getattr(future, "api_version", None)
        if version is None:
            return
        key = (node.node_id, api_key, version)
        if future.succeeded():
            with self._lock:
                self._strikes.pop(key, None)
            return
        exc = future.exception
        request = getattr(future, "request", None)
        sent = request is not None and getattr(request, "send_ms", -1) >= 0
        # A close without an answer, or an answer that does not decode at the version sent
        # (the mock answers LeaveGroup v4 in the v0-2 layout); not timeouts or error codes.
        hung_up = isinstance(exc, Errors.KafkaConnectionError) or not isinstance(exc, Errors.KafkaError)
        if not sent or not hung_up:
            return
        with self._lock:
            strikes = self._strikes[key] = self._strikes.get(key, 0) + 1
            if strikes < STRIKES or self._caps.get((node.node_id, api_key), version) < version:
                return
            floor = self._broker_min(node, api_key)
            if version - 1 < floor:
                return
            self._caps[(node.node_id, api_key)] = version - 1
        log.warning("group %s: coordinator %s:%s hung up on (or answered unreadably) %d %s v%d requests "
                    "in a row; using v%d with it from now on (a broker that advertises a "
                    "version it cannot parse, e.g. librdkafka's mock cluster with flexible group requests)",
                    self._group_id, node.host, node.port, strikes, ApiKey(api_key).name, version, version - 1)

    def _broker_min(self, node: Node, api_key: int) -> int:
        inner = getattr(self._client, "client", self._client)
        try:
            ranges = inner.broker_api_ranges(node)
        except Exception:   # an unknown node: stay at the lowest version any broker speaks
            ranges = {}
        rng = ranges.get(api_key)
        return rng[0] if rng else 0
