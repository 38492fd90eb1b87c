"""Cluster metadata: an immutable ``Cluster`` snapshot and the mutable ``Metadata`` holder.

``Metadata`` decides *when* to refresh (on demand, after errors, by age, with backoff) and
turns decoded Metadata responses (dicts with the snake_case field names of
MetadataResponse.json) into ``Cluster`` snapshots. The network client sends the requests;
the coordinator and fetcher read snapshots and register listeners.

Leader epochs protect against stale answers: a broker that has not yet seen a leader
change may answer with an older epoch than the client already knows; that partition then
keeps its newer cached state instead of moving back to the old leader.
"""
from __future__ import annotations

import logging
import re
import threading
import uuid
from typing import Any, Callable, Iterable, NamedTuple, Pattern

from kclient import errors as Errors

__all__ = ["Node", "PartitionInfo", "Cluster", "Metadata"]

log = logging.getLogger(__name__)

NO_NODE = -1


class Node(NamedTuple):
    """A broker address. Bootstrap placeholders have negative ids (-1, -2, ...)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class PartitionInfo(NamedTuple):
    topic: str
    partition: int
    leader: int                 # node id, -1 if unknown
    leader_epoch: int           # -1 if the broker did not say (Metadata < v7)
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


class Cluster:
    """An immutable view of the cluster at one metadata update."""

    __slots__ = ("cluster_id", "controller_id", "_nodes", "_partitions", "_by_tp",
                 "internal_topics", "unauthorized_topics", "invalid_topics", "topic_errors",
                 "_topic_ids", "_topic_names", "is_bootstrap", "_by_node")

    def __init__(self, nodes: Iterable[Node] = (), partitions: Iterable[PartitionInfo] = (),
                 cluster_id: str | None = None, controller_id: int = NO_NODE,
                 internal_topics: Iterable[str] = (), unauthorized_topics: Iterable[str] = (),
                 invalid_topics: Iterable[str] = (), topic_errors: dict[str, int] | None = None,
                 topic_ids: dict[str, object] | None = None, is_bootstrap: bool = False):
        self.cluster_id = cluster_id
        self.controller_id = controller_id
        self._nodes = {n.node_id: n for n in nodes}
        by_topic: dict[str, list[PartitionInfo]] = {}
        self._by_tp: dict[tuple[str, int], PartitionInfo] = {}
        self._by_node: dict[int, list[PartitionInfo]] = {}
        for p in partitions:
            by_topic.setdefault(p.topic, []).append(p)
            self._by_tp[(p.topic, p.partition)] = p
            if p.leader >= 0:
                self._by_node.setdefault(p.leader, []).append(p)
        self._partitions = {t: tuple(sorted(ps, key=lambda p: p.partition)) for t, ps in by_topic.items()}
        self.internal_topics = frozenset(internal_topics)
        self.unauthorized_topics = frozenset(unauthorized_topics)
        self.invalid_topics = frozenset(invalid_topics)
        self.topic_errors = dict(topic_errors or {})
        self._topic_ids = dict(topic_ids or {})
        self._topic_names = {v: k for k, v in self._topic_ids.items()}
        self.is_bootstrap = is_bootstrap

    def replaced(self, *, nodes: Iterable[Node], partitions: Iterable[PartitionInfo]) -> "Cluster":
        """A copy with other brokers and partitions, everything else kept."""
        return Cluster(nodes, partitions, self.cluster_id, self.controller_id, self.internal_topics,
                       self.unauthorized_topics, self.invalid_topics, self.topic_errors, self._topic_ids,
                       self.is_bootstrap)

    @classmethod
    def empty(cls) -> "Cluster":
        return cls()

    @classmethod
    def bootstrap(cls, addresses: Iterable[tuple[str, int]]) -> "Cluster":
        nodes = [Node(-(i + 1), host, port) for i, (host, port) in enumerate(addresses)]
        return cls(nodes, is_bootstrap=True)

    # ------------------------------------------------------------------ brokers
    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    def node_by_id(self, node_id: int) -> Node | None:
        return self._nodes.get(node_id)

    broker = node_by_id

    @property
    def controller(self) -> Node | None:
        return self._nodes.get(self.controller_id)

    # ------------------------------------------------------------------ topics
    def topics(self) -> frozenset[str]:
        """Topics with partition metadata in this snapshot."""
        return frozenset(self._partitions)

    def partitions_for_topic(self, topic: str) -> tuple[PartitionInfo, ...] | None:
        return self._partitions.get(topic)

    def partition_count(self, topic: str) -> int | None:
        ps = self._partitions.get(topic)
        return None if ps is None else len(ps)

    def available_partitions_for_topic(self, topic: str) -> list[PartitionInfo]:
        return [p for p in self._partitions.get(topic, ()) if p.leader >= 0]

    def partitions_for_node(self, node_id: int) -> list[PartitionInfo]:
        return list(self._by_node.get(node_id, ()))

    def partition(self, tp: tuple[str, int]) -> PartitionInfo | None:
        return self._by_tp.get((tp[0], tp[1]))

    def leader_for(self, tp: tuple[str, int]) -> Node | None:
        p = self._by_tp.get((tp[0], tp[1]))
        if p is None or p.leader < 0:
            return None
        return self._nodes.get(p.leader)

    def leader_epoch(self, tp: tuple[str, int]) -> int | None:
        p = self._by_tp.get((tp[0], tp[1]))
        return None if p is None or p.leader_epoch < 0 else p.leader_epoch

    def topic_id(self, topic: str):
        return self._topic_ids.get(topic)

    def topic_name(self, topic_id) -> str | None:
        return self._topic_names.get(topic_id)

    def is_internal(self, topic: str) -> bool:
        return topic in self.internal_topics

    def topics_matching(self, pattern: str | Pattern[str], exclude_internal: bool = True) -> set[str]:
        """Topics whose whole name matches ``pattern`` (Java ``Matcher.matches`` semantics)."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        return {t for t in self._partitions
                if rx.fullmatch(t) and not (exclude_internal and t in self.internal_topics)}

    def __repr__(self) -> str:
        return (f"Cluster(id={self.cluster_id!r}, nodes={sorted(self._nodes)}, "
                f"controller={self.controller_id}, topics={sorted(self._partitions)})")


def _valid_topic_id(tid) -> bool:
    """Brokers send the all-zero UUID when a topic has no id (or the version has none)."""
    if tid is None:
        return False
    if isinstance(tid, (bytes, bytearray, memoryview)):
        return any(bytes(tid))
    if isinstance(tid, uuid.UUID):
        return tid.int != 0
    if isinstance(tid, str):
        return tid.strip("0-") != ""
    return bool(tid)


def _exponential(base_ms: int, max_ms: int, attempts: int) -> int:
    if attempts <= 0 or base_ms <= 0:
        return max(base_ms, 0)
    return int(min(max_ms, base_ms * (2 ** min(attempts - 1, 30))))


class _RefreshTiming:
    """A Metadata setting the next refresh's due time depends on: kept in ``_<name>``, and
    setting it (under the metadata's lock) clears the due time worked out from it."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = "_" + name

    def __get__(self, obj: Any, owner: Any = None) -> int:
        return getattr(obj, self._attr)

    def __set__(self, obj: Any, value: int) -> None:
        with obj._lock:
            setattr(obj, self._attr, value)
            obj._due_ms = None


class Metadata:
    """What the client knows about the cluster, and when it should ask again.

    Thread-safe: the network thread updates it while the coordinator and fetcher read
    snapshots (``cluster``) from other threads.
    """

    def __init__(self, retry_backoff_ms: int = 100, metadata_max_age_ms: int = 300_000,
                 retry_backoff_max_ms: int = 1000, allow_auto_topic_creation: bool = True):
        self._lock = threading.RLock()
        # When the next refresh becomes due (client clock, ms), worked out from the fields
        # below when asked after any of them changed (None): every network poll and every
        # readiness check asks, and most find nothing changed since the last time.
        self._due_ms: int | None = None
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_max_ms, retry_backoff_ms)
        self.metadata_max_age_ms = metadata_max_age_ms
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self._cluster = Cluster.empty()
        self._bootstrap_addresses: list[tuple[str, int]] = []
        self._need_update = True
        self._need_all_topics = False
        self._topics: set[str] = set()
        self._last_refresh_ms = 0            # last attempt completed (success or failure)
        self._last_successful_refresh_ms = 0
        self._failed_attempts = 0            # consecutive; grows the refresh backoff
        self._update_version = 0
        self._request_version = 0            # bumped by every request_update
        self._last_seen_epochs: dict[tuple[str, int], int] = {}
        # The topic id each topic had when its epochs were seen: a recreated topic (or the same
        # name on another cluster after a rebootstrap) starts its leader epochs again from 0.
        self._last_seen_topic_ids: dict[str, object] = {}
        self._listeners: list[Callable[[Cluster], None]] = []
        self._fatal: Errors.KafkaError | None = None
        self._reported_unauthorized: frozenset[str] = frozenset()
        self.last_error: BaseException | None = None

    # Refresh timing settings: setting one makes the next refresh's due time be worked out again.
    retry_backoff_ms = _RefreshTiming()
    retry_backoff_max_ms = _RefreshTiming()
    metadata_max_age_ms = _RefreshTiming()

    # ------------------------------------------------------------------ state
    @property
    def cluster(self) -> Cluster:
        return self._cluster

    fetch = cluster

    @property
    def update_version(self) -> int:
        """Increases by one with every successful update."""
        return self._update_version

    @property
    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        return list(self._bootstrap_addresses)

    @property
    def last_successful_refresh_ms(self) -> int:
        return self._last_successful_refresh_ms

    def bootstrap(self, addresses: Iterable[tuple[str, int]]) -> None:
        """Start from the bootstrap servers (placeholder nodes with ids -1, -2, ...)."""
        with self._lock:
            self._bootstrap_addresses = list(addresses)
            self._cluster = Cluster.bootstrap(self._bootstrap_addresses)
            self._need_update = True
            self._due_ms = None

    def rebootstrap(self) -> Cluster:
        """Forget the brokers learnt from metadata and start again from the bootstrap servers
        (KIP-899): the cluster becomes the bootstrap placeholders and a refresh is due now.
        Topics tracked and leader epochs seen are kept. Returns the new (bootstrap) snapshot."""
        with self._lock:
            self._cluster = Cluster.bootstrap(self._bootstrap_addresses)
            self._need_update = True
            self._last_refresh_ms = 0
            self._failed_attempts = 0
            self._due_ms = None
            return self._cluster

    # ------------------------------------------------------------------ topics tracked
    @property
    def topics(self) -> frozenset[str]:
        return frozenset(self._topics)

    @property
    def need_all_topics(self) -> bool:
        return self._need_all_topics

    def set_need_all_topics(self, value: bool) -> None:
        """Pattern subscriptions need every topic's metadata."""
        with self._lock:
            if value and not self._need_all_topics:
                self._request_update_for_new_topics()
            self._need_all_topics = value

    def _request_update_for_new_topics(self) -> None:
        """A topic the client did not track before has no metadata to route by, so its refresh
        is not held back by retry.backoff.ms after the last one (the Java client's
        requestUpdateForNewTopics). Without this every consumer waited a backoff (100 ms by
        default) between bootstrap and its first fetch. Failed and incomplete answers still back
        off: they set the last refresh time again."""
        self._need_update = True
        self._last_refresh_ms = 0
        self._due_ms = None

    def set_topics(self, topics: Iterable[str]) -> None:
        with self._lock:
            new = set(topics)
            if not new <= self._topics:
                self._request_update_for_new_topics()
            self._topics = new
            self._last_seen_epochs = {tp: e for tp, e in self._last_seen_epochs.items()
                                      if tp[0] in new or self._need_all_topics}

    def add_topics(self, *topics: str) -> None:
        with self._lock:
            new = set(topics) - self._topics
            if new:
                self._topics |= new
                self._request_update_for_new_topics()

    def build_request_body(self) -> dict:
        """The body of the next Metadata request (the wire layer picks the version)."""
        with self._lock:
            topics = None if self._need_all_topics else [{"name": t} for t in sorted(self._topics)]
            return {"topics": topics, "allow_auto_topic_creation": self.allow_auto_topic_creation,
                    "include_topic_authorized_operations": False}

    # ------------------------------------------------------------------ refresh policy
    def request_update(self) -> int:
        """Ask for a refresh as soon as the backoff allows. Returns the current update version."""
        with self._lock:
            self._need_update = True
            self._due_ms = None
            self._request_version += 1
            return self._update_version

    def request_immediate_update(self) -> int:
        """request_update(), not held back by retry.backoff.ms after a successful refresh: for
        a caller that needs the cluster's current answer now and asks a few times per
        operation (the Spark stream planner, once per planning call, where Spark makes several
        such calls within 100 ms). After a failed attempt the backoff still applies. Returns the
        current update version."""
        with self._lock:
            if self._failed_attempts == 0:
                self._last_refresh_ms = 0
                self._due_ms = None
        return self.request_update()

    def request_update_for_error(self, error: int | BaseException | type) -> bool:
        """Request a refresh if ``error`` (an error code, exception or exception class) means
        the client's routing is stale (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
        LEADER_NOT_AVAILABLE, a lost connection...). Returns True if it did."""
        cls: type[BaseException] | None
        if isinstance(error, int):
            cls = Errors.for_code(error)
        elif isinstance(error, type):
            cls = error
        else:
            cls = type(error)
        if cls is not None and getattr(cls, "invalid_metadata", False):
            self.request_update()
            return True
        return False

    def update_requested(self) -> bool:
        return self._need_update

    def refresh_backoff_ms(self) -> int:
        return _exponential(self.retry_backoff_ms, self.retry_backoff_max_ms, self._failed_attempts)

    def time_to_allow_update(self, now_ms: int) -> int:
        if self._last_refresh_ms == 0:
            return 0
        return max(self._last_refresh_ms + self.refresh_backoff_ms() - now_ms, 0)

    def time_to_next_update(self, now_ms: int) -> int:
        """Milliseconds until a refresh is due (0: now)."""
        due = self._due_ms
        if due is None:
            due = self.next_update_ms()
        return max(due - now_ms, 0)

    def next_update_ms(self) -> int:
        """When a refresh becomes due (client clock, ms; 0 or a past time: now): the later of
        the metadata's expiry (now, if a refresh was requested) and the end of the backoff
        after the last attempt."""
        due = self._due_ms
        if due is not None:
            return due
        with self._lock:
            if self._need_update or self._last_successful_refresh_ms == 0:
                expire = 0
            else:
                expire = self._last_successful_refresh_ms + self.metadata_max_age_ms
            allow = 0 if self._last_refresh_ms == 0 else self._last_refresh_ms + self.refresh_backoff_ms()
            due = self._due_ms = max(expire, allow)
        return due

    def failed_update(self, now_ms: int, exc: BaseException | None = None) -> None:
        """A refresh attempt failed (no answer, disconnect, top-level error)."""
        with self._lock:
            self._last_refresh_ms = now_ms
            self._failed_attempts += 1
            self._due_ms = None
            self.last_error = exc
        log.debug("metadata refresh failed (%s); next attempt in %d ms", exc, self.refresh_backoff_ms())

    # ------------------------------------------------------------------ leader hints (KIP-951)
    def update_partition_leaders(self, leaders: dict[tuple[str, int], tuple[int, int]],
                                 endpoints: Iterable[Node] = ()) -> set[tuple[str, int]]:
        """Apply the new leaders a broker named when it answered NOT_LEADER_OR_FOLLOWER or
        FENCED_LEADER_EPOCH (KIP-951: CurrentLeader per partition, NodeEndpoints for brokers the
        client may not know), so the next request goes to the new leader without waiting for a
        metadata round. ``leaders``: {(topic, partition): (leader id, leader epoch)}. A hint is
        taken only with a known leader, an epoch newer than every one seen for the partition,
        and an address for the leader; the rest wait for metadata. Returns the partitions updated.

        The snapshot is replaced without counting as a metadata update (update_version and the
        listeners are for answers to Metadata requests)."""
        updated: set[tuple[str, int]] = set()
        with self._lock:
            old = self._cluster
            if old.is_bootstrap:
                return updated
            nodes = {n.node_id: n for n in old.nodes()}
            for n in endpoints:
                nodes.setdefault(n.node_id, n)
            changed: dict[tuple[str, int], PartitionInfo] = {}
            for key, (leader, epoch) in leaders.items():
                info = old.partition(key)
                seen = self._last_seen_epochs.get(key, -1)
                if info is None or leader < 0 or epoch <= max(seen, info.leader_epoch) or leader not in nodes:
                    continue
                changed[key] = info._replace(leader=leader, leader_epoch=epoch)
                self._last_seen_epochs[key] = epoch
                updated.add(key)
            if not changed:
                return updated
            partitions = [changed.get((p.topic, p.partition), p)
                          for t in old.topics() for p in (old.partitions_for_topic(t) or ())]
            self._cluster = old.replaced(nodes=nodes.values(), partitions=partitions)
        for key in sorted(updated):
            info = changed[key]
            log.debug("leader of %s-%d is now node %d (epoch %d), as a broker's answer said",
                      key[0], key[1], info.leader, info.leader_epoch)
        return updated

    # ------------------------------------------------------------------ epochs
    def last_seen_leader_epoch(self, tp: tuple[str, int]) -> int | None:
        return self._last_seen_epochs.get((tp[0], tp[1]))

    def update_last_seen_epoch_if_newer(self, tp: tuple[str, int], epoch: int) -> bool:
        """Record a leader epoch seen elsewhere (e.g. a Fetch response); a newer one requests
        a refresh. Returns True if it was newer."""
        if epoch < 0:
            return False
        key = (tp[0], tp[1])
        with self._lock:
            old = self._last_seen_epochs.get(key)
            if old is None or epoch > old:
                self._last_seen_epochs[key] = epoch
                self._need_update = True
                self._due_ms = None
                return True
            return False

    # ------------------------------------------------------------------ updates
    def update(self, response: dict, now_ms: int) -> Cluster:
        """Apply a decoded Metadata response. Raises nothing for per-topic errors (they are
        recorded in the snapshot); a response without brokers or with a top-level error
        counts as a failed refresh."""
        top_error = response.get("error_code", 0) or 0
        brokers = response.get("brokers") or []
        if top_error:
            exc = Errors.error_class(top_error)()
            self.failed_update(now_ms, exc)
            raise exc
        if not brokers:
            self.failed_update(now_ms, Errors.KafkaError("empty metadata response (no brokers)"))
            return self._cluster
        with self._lock:
            cluster, incomplete = self._build_cluster(response, brokers)
            self._cluster = cluster
            self._last_refresh_ms = now_ms
            self._last_successful_refresh_ms = now_ms
            self._update_version += 1
            self._need_update = incomplete
            self._failed_attempts = self._failed_attempts + 1 if incomplete else 0
            self._due_ms = None
            self.last_error = None
            self._note_fatal(cluster)
            listeners = list(self._listeners)
        log.debug("metadata updated (version %d): %r", self._update_version, cluster)
        for fn in listeners:
            try:
                fn(cluster)
            except Exception:
                log.exception("metadata listener %r raised", fn)
        return cluster

    def _build_cluster(self, response: dict, brokers: list) -> tuple[Cluster, bool]:
        nodes = [Node(b["node_id"], b["host"], b["port"], b.get("rack")) for b in brokers]
        old = self._cluster
        incomplete = False
        partitions: list[PartitionInfo] = []
        internal, unauthorized, invalid = set(), set(), set()
        topic_errors: dict[str, int] = {}
        topic_ids: dict[str, object] = {}
        for t in response.get("topics") or []:
            name = t.get("name")
            err = t.get("error_code", 0) or 0
            if name is None:
                continue  # topic-id-only answers are not used by this client
            tid = t.get("topic_id")
            if _valid_topic_id(tid):
                topic_ids[name] = tid
                self._forget_epochs_if_recreated(name, tid)
            if t.get("is_internal"):
                internal.add(name)
            if err:
                topic_errors[name] = err
                cls = Errors.for_code(err)
                if cls is Errors.TopicAuthorizationFailedError:
                    unauthorized.add(name)
                elif cls is Errors.InvalidTopicError:
                    invalid.add(name)
                elif getattr(cls, "invalid_metadata", False) or getattr(cls, "retriable", False):
                    # e.g. LEADER_NOT_AVAILABLE while a new topic is created: ask again
                    if self._need_all_topics or name in self._topics:
                        incomplete = True
                if err != Errors.LeaderNotAvailableError.errno or not t.get("partitions"):
                    continue
            for p in t.get("partitions") or []:
                epoch = p.get("leader_epoch")
                info = PartitionInfo(
                    name, p["partition_index"], p.get("leader_id", NO_NODE),
                    -1 if epoch is None else epoch,
                    tuple(p.get("replica_nodes") or ()), tuple(p.get("isr_nodes") or ()),
                    tuple(p.get("offline_replicas") or ()), p.get("error_code", 0) or 0)
                info, stale = self._apply_epoch(info, old)
                if stale:
                    incomplete = True
                if info.leader < 0 and (self._need_all_topics or name in self._topics):
                    incomplete = True
                partitions.append(info)
        controller = response.get("controller_id")
        cluster = Cluster(nodes, partitions, response.get("cluster_id"),
                          NO_NODE if controller is None else controller, internal, unauthorized, invalid, topic_errors, topic_ids)
        return cluster, incomplete

    def _forget_epochs_if_recreated(self, topic: str, topic_id: object) -> None:
        """Leader epochs count per topic id: a topic deleted and created again, or one of the
        same name on the cluster a rebootstrap found, starts again from epoch 0, and the epochs
        seen for the old one would make every answer about the new one look stale."""
        known = self._last_seen_topic_ids.get(topic)
        self._last_seen_topic_ids[topic] = topic_id
        if known is not None and known != topic_id:
            log.info("topic %s has a new topic id; forgetting the leader epochs seen for the old one", topic)
            self._last_seen_epochs = {tp: e for tp, e in self._last_seen_epochs.items() if tp[0] != topic}

    def _apply_epoch(self, info: PartitionInfo, old: Cluster) -> tuple[PartitionInfo, bool]:
        """Keep newer cached state when ``info`` carries an older leader epoch."""
        if info.leader_epoch < 0:
            return info, False
        key = (info.topic, info.partition)
        seen = self._last_seen_epochs.get(key)
        if seen is None or info.leader_epoch >= seen:
            self._last_seen_epochs[key] = info.leader_epoch
            return info, False
        cached = old.partition(key)
        log.debug("ignoring stale metadata for %s-%d: epoch %d < %d", info.topic, info.partition,
                  info.leader_epoch, seen)
        if cached is not None and cached.leader_epoch >= info.leader_epoch:
            return cached, True
        # No newer cached state (the newer epoch came from a Fetch response): keep the
        # partition (its count matters to the coordinator) but its leader is unknown.
        return info._replace(leader=NO_NODE, leader_epoch=seen), True

    def _note_fatal(self, cluster: Cluster) -> None:
        wanted = self._topics if not self._need_all_topics else set(cluster.topic_errors)
        unauthorized = frozenset(t for t in cluster.unauthorized_topics if t in wanted)
        invalid = [t for t in cluster.invalid_topics if t in wanted]
        if unauthorized and unauthorized != self._reported_unauthorized:
            self._fatal = Errors.TopicAuthorizationFailedError(
                f"not authorized to access topics: {sorted(unauthorized)}")
        elif invalid:
            self._fatal = Errors.InvalidTopicError(f"invalid topics: {sorted(invalid)}")
        self._reported_unauthorized = unauthorized

    def maybe_raise_exception(self) -> None:
        """Raise (once) a non-retriable error found by the last update (authorization,
        invalid topic names) so that the consumer can surface it to the application."""
        if self._fatal is None:
            return      # every poll asks: no lock for the usual answer
        with self._lock:
            exc, self._fatal = self._fatal, None
        if exc is not None:
            raise exc

    # ------------------------------------------------------------------ listeners
    def add_listener(self, fn: Callable[[Cluster], None]) -> None:
        """``fn(cluster)`` runs after every successful update, in the updating thread."""
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[Cluster], None]) -> None:
        with self._lock:
            try:
                self._listeners.remove(fn)
            except ValueError:
                pass
