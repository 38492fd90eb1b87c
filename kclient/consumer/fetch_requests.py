"""FetchRequests: builds each broker's Fetch requests, sends them, and buffers their answers.

Pipelining (mechanisms §7). A partition may have one Fetch in flight and up to
``PREFETCH_DEPTH`` answered fetches buffered ahead of what the application consumed; the
next fetch for it starts where the last buffered one ended, so the network works while the
application processes. ``send_fetches()`` runs before ``poll()`` returns records. A broker
may have up to ``fetch.max.in.flight.per.broker`` fetches in flight, each for a round-robin
share of its fetchable partitions, so it works on one while another answer travels. Each
(broker, share) is one fetch stream with its own fetch session (KIP-227, fetch_session.py).
Partitions that returned data move to the end of the next fetch request (fairness: no
partition starves the others of ``fetch.max.bytes``). The answers' blocks come from kcore's
pool, which is asked to keep blocks of the largest answer (``pool_reserve``) so that each
answer does not take fresh pages.

Building each request from what changed. Once a fetch stream's request covered every
fetchable partition of that stream, and the stream's fetch session is incremental, its next
request is built from the partitions whose next fetch offset the answer moved (a
``_StreamPlan``): the cost of a round follows the partitions with data, not the assignment.
Anything else that can change what a full walk of the partitions would send bumps a change
counter (``SubscriptionState.changes``: assignment, pause, resume, seek, reset, validation;
this object's own: a cleared partition, a backoff, a read replica, a partition reaching its
prefetch limit) or shows as a new metadata snapshot, and the next round walks every
partition again.

Errors in an answer: leader/topic errors request a metadata refresh and back the partition
off for ``retry.backoff.ms``; OFFSET_OUT_OF_RANGE at the current position requests a reset
(``auto.offset.reset``) or, with 'none', queues OffsetOutOfRangeError to raise from
``poll()``; a diverging epoch (KIP-320) sends the position to validation. A partition may be
fetched from a follower its leader names (KIP-392) until that fails or expires.
"""
from __future__ import annotations

import collections
import itertools
import logging
from typing import Any

from kcore.fetchscan import next_fetch_offset
from kcore.pool import pool_reserve

from kclient import errors as Errors
from kclient.clock import Clock
from kclient.consumer.fetch_buffer import FetchBuffer, PartitionPipe, ResponseFrame
from kclient.consumer.fetch_config import FetchConfig
from kclient.consumer.fetch_session import SESSION_VERSION, FetchPartition, FetchSessionHandler
from kclient.subscription.state import SubscriptionState
from kclient.network.metadata import Node
from kclient.network.network_client import SCANNED_FETCH, SCANNED_PARTITIONS
from kclient.protocol import ApiKey
from kclient.structs import TopicPartition

__all__ = ["FetchRequests", "PREFETCH_DEPTH", "fetch_stream_node_id"]

log = logging.getLogger(__name__)

FETCH_KEY = int(ApiKey.FETCH)
_TOPIC_ID_VERSION = 13          # Fetch v13+ names topics by id
# Answers after which the partition's CurrentLeader (Fetch v12+, KIP-951) names the new leader.
_LEADER_MOVED = frozenset((Errors.NotLeaderOrFollowerError.errno, Errors.FencedLeaderEpochError.errno))
PREFETCH_DEPTH = 2              # answered fetches buffered per partition before it waits

_new_tuple = tuple.__new__      # a named tuple made without its class's Python-level __new__
_NO_DICTS = itertools.repeat(None)  # an answer read from its scan has no dict per partition


#: Fetch streams after the first get connections under ids of their own, below the group
#: coordinator's (2**31 - 1 - broker id, as in the Java client): 2**31 - 1 - slot * 2**20 -
#: broker id, for broker ids below 2**20.
_STREAM_ID_STRIDE = 1 << 20


def fetch_stream_node_id(broker_id: int, slot: int) -> int:
    """The connection id of fetch stream ``slot`` (>= 1) to ``broker_id``."""
    return 2**31 - 1 - slot * _STREAM_ID_STRIDE - broker_id


class _StreamPlan:
    """A fetch stream whose last request covered all of its fetchable partitions: what its
    next request needs besides the partitions the answer moved (``dirty``, None until the
    answer was handled without error)."""

    __slots__ = ("node_id", "slot", "target", "offered", "version", "handler", "sent", "pipes", "by_id",
                 "topic_ids", "dirty")

    def __init__(self, node_id: int, slot: int, target, offered: int, version: int, handler: FetchSessionHandler,
                 sent: dict, pipes: list, by_id: dict, topic_ids: dict):
        self.node_id = node_id
        self.slot = slot
        self.target = target
        self.offered = offered          # the Fetch version the connection offered
        self.version = version          # the version the request was sent in
        self.handler = handler
        self.sent = sent                # {tp: (fetch offset, pipe epoch)}: reused by each request
        self.pipes = pipes              # the PartitionPipe of each partition of sent
        self.by_id = by_id              # {topic id: name} for the answers (v13+)
        self.topic_ids = topic_ids      # {name: topic id or name} as the request names topics
        self.dirty: list[TopicPartition] | None = None


class FetchRequests:
    """Fetch requests per broker and fetch stream, and what their answers do to each
    partition's pipeline (``FetchBuffer.pipes``) and to the buffer."""

    def __init__(self, client, subscriptions: SubscriptionState, buffer: FetchBuffer, config: FetchConfig, *,
                 clock: Clock, metrics: collections.Counter, stats=None):
        self._client = client
        self._metadata = client.metadata
        self._subscriptions = subscriptions
        self._buffer = buffer
        self._clock = clock
        self._min_bytes = config.min_bytes
        self._max_wait_ms = config.max_wait_ms
        self._partition_max_bytes = config.max_partition_fetch_bytes
        # Fetches in flight per broker, each for a share of its partitions. Each asks for a
        # share of fetch.max.bytes, so what can arrive and be buffered is bounded as with one.
        self._depth = config.max_in_flight_per_broker
        self._request_max_bytes = max(config.max_bytes // self._depth, 1)
        # Answers are received into blocks of kcore's pool, which by default keeps none over
        # 16 MiB: larger answers would each take fresh pages (a page fault per 4 KiB, three
        # times the kernel time per record with 10 MiB per partition). An answer may pass the
        # limit by a batch; blocks come in size classes up to 1/8 larger.
        pool_reserve(min(self._request_max_bytes * 9 // 8 + (1 << 20), 1 << 31))
        # Each (broker, slot) is one fetch stream with its own fetch session (KIP-227); a
        # partition keeps its slot while assigned, so its session does not change under it.
        self._sessions_enabled = config.incremental_fetch_sessions
        self.sessions: dict[tuple[int, int], FetchSessionHandler] = {}
        self._slot_busy: set[tuple[int, int]] = set()
        self._slot_of: dict[TopicPartition, int] = {}
        self._slots_used: dict[int, int] = {}
        self._isolation = config.isolation
        self._read_committed = self._isolation == 1
        # Receive threads parse each answer as it arrives (read_committed answers need their
        # aborted transactions: they are decoded on this thread), and scan its batches there
        # while the application makes records one by one (see send_fetches).
        self._check_crcs = config.check_crcs
        self._scan_fetches = None if self._read_committed else getattr(client, "scan_fetches", None)
        self._scan_batches: bool | None = None
        self._retry_backoff_ms = config.retry_backoff_ms
        self._rack = config.client_rack
        self._read_replica_ttl_ms = config.metadata_max_age_ms
        self._read_replicas = 0          # partitions fetched from a follower (KIP-392)
        self.in_flight_fetches = 0
        self._node_in_flight: dict[int, int] = {}   # fetches in flight per node (at most _depth)
        self._assignment_id = subscriptions.assignment_id
        # send_fetches' fast path: leaders of the assigned partitions, per (cluster, assignment).
        self._leaders: frozenset[int] | None = None
        self._leader_map: dict[TopicPartition, tuple[int, int]] = {}
        self._assigned: frozenset[TopicPartition] = frozenset()
        #: The last send_fetches had fetches to send but a leader was not ready (connecting,
        #: or a metadata refresh is due first): only a network poll moves that on.
        self.sends_blocked = False
        self._leaders_cluster = None
        self._leaders_assignment_id = -1
        self._all_topic_ids = False      # the cluster knows the id of every assigned topic
        self._assigned_by_id: dict[Any, str] = {}   # {topic id: name} of the assigned topics
        self._metrics = metrics
        self._stats = stats              # kclient.consumer.metrics.ConsumerMetrics, or None
        # Building requests from what changed (see the module docstring): bumped by every
        # change here that a full walk of the partitions would see; the plans of the streams
        # made under (SubscriptionState.changes, this counter, metadata snapshot).
        self._changes = 0
        self._plans: dict[tuple[int, int], _StreamPlan] = {}
        self._plans_key: tuple | None = None
        self._plan_streams: tuple[tuple[int, int], ...] = ()   # every stream with fetchable partitions
        # (cluster, assignment id, drain mode) when send_fetches last found every leader with
        # as many fetches in flight as it may have: until an answer comes back (or one of
        # those changes) no call can send, and each returns at once.
        self._saturated: tuple | None = None

    @property
    def changes(self) -> int:
        return self._changes

    def clear_partition(self, tp: TopicPartition) -> None:
        """Forget everything fetched or being fetched for tp (its position changed)."""
        self._changes += 1
        self._saturated = None
        self._buffer.clear_partition(tp)

    def clear_all(self) -> None:
        self._changes += 1
        self._saturated = None
        self._buffer.clear_all()

    def _check_assignment(self) -> None:
        """After any assignment change the buffer restarts every pipeline (FetchBuffer.
        check_assignment, which the drain may have run first), and partitions take their
        fetch streams afresh."""
        aid = self._subscriptions.assignment_id
        if aid != self._assignment_id:
            self._assignment_id = aid
            self._changes += 1
            self._buffer.check_assignment()
            self._slot_of.clear()
            self._slots_used.clear()
            self._read_replicas = sum(1 for pipe in self._buffer.pipes.values() if pipe.read_replica >= 0)

    def close(self) -> None:
        self._changes += 1
        self._saturated = None
        self._read_replicas = 0
        self.sessions.clear()
        self._plans.clear()

    # ------------------------------------------------------------------ sending
    def send_fetches(self) -> int:
        """Send a Fetch to every leader that has fetchable partitions without a fetch in
        flight (and room in the prefetch buffer). Returns the number of requests sent."""
        self.sends_blocked = False
        subs = self._subscriptions
        assignment_id = subs.assignment_id
        saturated = self._saturated
        if saturated is not None:
            if (saturated[0] is self._metadata.cluster and saturated[1] == assignment_id
                    and saturated[2] == self._buffer.per_record):
                return 0    # every leader still busy (the fast path below, as of the last call)
            self._saturated = None
        if assignment_id != self._assignment_id:
            self._check_assignment()
        buffer = self._buffer
        if self._scan_fetches is not None and buffer.per_record != self._scan_batches:
            # Batches are scanned on the receive thread while this thread is busy making
            # records; for columns this thread scans them itself, between answers: scanning
            # on the receive thread during the transfer delayed its reads, and the broker
            # with them (poll_columnar a third slower, measured on loopback).
            self._scan_batches = buffer.per_record
            self._scan_fetches(self._check_crcs, buffer.per_record)
        if buffer.buffered_response_bytes > buffer.limit:
            return 0
        cluster = self._metadata.cluster
        node_busy = self._node_in_flight
        if cluster is not self._leaders_cluster or assignment_id != self._leaders_assignment_id:
            self._leaders_cluster = cluster
            self._leaders_assignment_id = assignment_id
            self._assigned = frozenset(subs.assigned_partitions())
            self._leader_map, self._leaders = self._assigned_leaders(cluster, self._assigned)
            ids = {t: cluster.topic_id(t) for t in {tp.topic for tp in self._assigned}}
            self._all_topic_ids = all(tid is not None for tid in ids.values())
            self._assigned_by_id = {tid: t for t, tid in ids.items() if tid is not None}
            # KIP-320: a partition whose leader epoch moved awaits validation of its position
            # (OffsetFetcher.validate_positions_if_needed) before it is fetched again.
            subs.maybe_validate_for_leader_epochs({tp: e for tp, (_, e) in self._leader_map.items()})
        if node_busy:
            # Fast path: every leader of an assigned partition already has a fetch in
            # flight, so every partition would be skipped below.
            leaders = self._leaders
            if leaders is not None and not self._read_replicas:
                depth = self._depth
                for n in leaders:
                    if node_busy.get(n, 0) < depth:
                        break
                else:
                    self._saturated = (cluster, assignment_id, buffer.per_record)
                    return 0
        now = self._clock.now_ms()
        changes = subs.changes
        plans_key = self._plans_key
        if (plans_key is not None and plans_key[0] == changes and plans_key[1] == self._changes
                and plans_key[2] is cluster):
            planned = self._send_planned(now)
            if planned is not None:
                return planned
        else:
            self._plans.clear()
            self._plan_streams = ()
            self._plans_key = (changes, self._changes, cluster)
        return self._send_walk(now, cluster, assignment_id)

    def _send_walk(self, now: int, cluster, assignment_id: int) -> int:
        """send_fetches' walk of every fetchable partition (see send_fetches)."""
        subs = self._subscriptions
        buffer = self._buffer
        node_busy = self._node_in_flight
        leader_map = self._leader_map
        pipes = buffer.pipes
        # Caught-up partitions wait while records are buffered only if a partition with more
        # to fetch is held back by its full prefetch buffer: a fetch of caught-up partitions
        # alone would wait fetch.max.wait.ms on the broker and keep the connection from that
        # partition's next fetch once the application reads its buffer. Otherwise they are
        # fetched at once, with the others, so the broker answers as soon as records arrive
        # (as the Java consumer's fetcher does) instead of one round trip after the drain.
        hold = buffer.has_completed_fetches() and _backlog_held(buffer.pipes)
        assigned = self._assigned
        pipe: PartitionPipe | None
        if len(pipes) == len(assigned):  # with `tp in assigned` below: a pipe for each
            # Second fast path, without the lock: every partition would be skipped below
            # for its pipe's own state (fetch in flight, buffer full, backoff, or caught up
            # while records are buffered, with a known leader). The loop below re-checks
            # nothing else for such a partition.
            for tp, pipe in pipes.items():
                if tp not in assigned:
                    break
                if (pipe.in_flight_epoch == pipe.epoch or pipe.buffered >= PREFETCH_DEPTH
                        or pipe.backoff_until > now):
                    continue
                if (hold and pipe.next_fetch_offset is not None and pipe.end_offset is not None
                        and pipe.next_fetch_offset >= pipe.end_offset and tp in leader_map):
                    continue
                break
            else:
                return 0
        by_node: dict[int, list] = {}
        need_metadata = False
        slot_of, slot_busy = self._slot_of, self._slot_busy
        # A stream's request may be planned (built from what changed from then on) if it
        # covers every fetchable partition of the stream, none held back for now: no read
        # replicas, every leader known, no partition at its prefetch limit (whether one is
        # decides which caught-up partitions wait).
        plannable = (self._sessions_enabled and not hold and not self._read_replicas
                     and self._leaders is not None and not _backlog_held(pipes))
        streams: set[tuple[int, int]] = set()
        held_back: set[tuple[int, int]] = set()     # streams with a fetchable partition left out
        # One locked snapshot of (tp, position, end offset) instead of three calls per partition.
        for tp, position, end in subs.fetch_candidates(self._read_committed):
            pipe = pipes.get(tp)
            if pipe is None:
                pipe = pipes[tp] = PartitionPipe()
            leader = leader_map.get(tp)
            if leader is None:
                if (pipe.in_flight_epoch != pipe.epoch and pipe.buffered < PREFETCH_DEPTH
                        and pipe.backoff_until <= now):
                    need_metadata = True
                continue
            node_id, epoch = leader
            stream = None
            if plannable:
                known = slot_of.get(tp)
                if known is not None:
                    stream = (node_id, known)
                    streams.add(stream)
                elif (pipe.in_flight_epoch == pipe.epoch or pipe.buffered >= PREFETCH_DEPTH
                        or pipe.backoff_until > now or node_busy.get(node_id, 0) >= self._depth):
                    plannable = False   # its stream is known once it is sent
            if pipe.in_flight_epoch == pipe.epoch or pipe.buffered >= PREFETCH_DEPTH or pipe.backoff_until > now:
                if stream is not None:
                    held_back.add(stream)
                continue
            if pipe.read_replica >= 0:
                node_id = self._read_replica(tp, pipe, node_id, cluster, now)
            if node_busy.get(node_id, 0) >= self._depth:
                continue
            offset = pipe.next_fetch_offset
            if offset is None:
                if position is None:
                    plannable = False
                    continue
                offset = position.offset
                last_epoch = -1 if position.offset_epoch is None else position.offset_epoch
            else:
                last_epoch = pipe.next_fetch_epoch
            if hold and end is not None and offset >= end:
                continue    # caught up, while a partition with data waits for its buffer
            by_node.setdefault(node_id, []).append((tp, offset, epoch, last_epoch))
        if need_metadata:
            self._metadata.request_update()
        sent = 0
        for node_id, parts in by_node.items():
            # One fetch per free slot of this broker, each for the partitions of that slot.
            by_slot: dict[int, list] = {}
            for part in parts:
                slot = slot_of.get(part[0])
                if slot is None:
                    slot = self._slot(node_id, part[0])
                    streams.add((node_id, slot))
                if (node_id, slot) not in slot_busy:
                    by_slot.setdefault(slot, []).append(part)
            for slot, share in by_slot.items():
                target = self._stream_target(node_id, slot, cluster)
                if target is None or self._client.is_unavailable(target):
                    continue  # address unknown (a refresh is due), or in reconnect backoff
                if not self._client.try_connect(target):
                    # Connecting, or the network client sends a due metadata refresh first: a
                    # later poll sends (the connection wakes the selector).
                    self.sends_blocked = True
                    continue
                version = self._client.api_version(target, FETCH_KEY)
                if version is None:
                    log.warning("node %d offers no Fetch version this client implements", node_id)
                    continue
                offered = version
                if (version >= _TOPIC_ID_VERSION and not self._all_topic_ids
                        and any(cluster.topic_id(part[0].topic) is None for part in share)):
                    version = _TOPIC_ID_VERSION - 1
                planned = (plannable and offered == version and version >= SESSION_VERSION
                           and (node_id, slot) not in held_back)
                self._send_fetch(node_id, slot, target, version, share, assignment_id, cluster, now,
                                 offered if planned else None)
                sent += 1
        if plannable:
            self._plan_streams = tuple(streams)
        else:
            self._plans.clear()
            self._plan_streams = ()
        return sent

    def _send_planned(self, now: int) -> int | None:
        """Nothing changed since the last walk of the partitions (send_fetches): each free
        stream's request from its plan. None, with nothing sent, if a free stream has no
        plan or its plan no longer holds: then the partitions are walked."""
        client = self._client
        plans = self._plans
        slot_busy = self._slot_busy
        streams = self._plan_streams
        if not streams:
            return None
        ready = []
        for stream in streams:
            if stream in slot_busy:
                continue
            plan = plans.get(stream)
            if (plan is None or plan.dirty is None or not plan.handler.incremental(plan.version)
                    or client.api_version(plan.target, FETCH_KEY) != plan.offered):
                return None
            ready.append(plan)
        sent = 0
        for plan in ready:
            target = plan.target
            # Ready, the usual case, implies not in reconnect backoff: asked only when not.
            if client.try_connect(target):
                self._send_changes(plan, now)
                sent += 1
            elif not client.is_unavailable(target):
                self.sends_blocked = True
        return sent

    def _send_changes(self, plan: _StreamPlan, now: int) -> None:
        """The stream's next incremental request: the partitions its last answer moved."""
        pipes = self._buffer.pipes
        leader_map = self._leader_map
        max_bytes = self._partition_max_bytes
        changed: dict[TopicPartition, FetchPartition] = {}
        for tp in plan.dirty or ():
            pipe = pipes[tp]
            changed[tp] = _new_tuple(FetchPartition, (pipe.next_fetch_offset, leader_map[tp][1],
                                                      pipe.next_fetch_epoch, max_bytes))
        plan.dirty = None
        handler = plan.handler
        data = handler.build_changes(changed)
        sent = plan.sent
        topics: dict[str, list] = {}
        for tp, fp in data.to_send.items():
            sent[tp] = (fp.fetch_offset, pipes[tp].epoch)
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": fp.current_leader_epoch,
                "fetch_offset": fp.fetch_offset, "last_fetched_epoch": fp.last_fetched_epoch,
                "log_start_offset": -1, "partition_max_bytes": fp.max_bytes})
        for pipe in plan.pipes:
            pipe.in_flight_epoch = pipe.epoch
        version = plan.version
        name_key = "topic_id" if version >= _TOPIC_ID_VERSION else "topic"
        topic_ids = plan.topic_ids
        body = {"replica_id": -1, "max_wait_ms": self._max_wait_ms, "min_bytes": self._min_bytes,
                "max_bytes": self._request_max_bytes, "isolation_level": self._isolation,
                "session_id": data.session_id, "session_epoch": data.session_epoch,
                "topics": [{name_key: topic_ids[topic], "partitions": ps} for topic, ps in topics.items()],
                "forgotten_topics_data": [], "rack_id": self._rack}
        node_id, slot = plan.node_id, plan.slot
        if log.isEnabledFor(logging.DEBUG):
            log.debug("fetching %s from node %d (v%d, session %d epoch %d, %d listed, 0 forgotten)",
                      {tp: o for tp, (o, _) in sent.items()}, node_id, version, data.session_id,
                      data.session_epoch, len(data.to_send))
        fut = self._client.send(plan.target, FETCH_KEY, body, version=version)
        self.in_flight_fetches += 1
        self._node_in_flight[node_id] = self._node_in_flight.get(node_id, 0) + 1
        self._slot_busy.add((node_id, slot))
        self._metrics["fetch-request-total"] += 1
        fut.add_both(self._on_fetch_done, node_id, slot, handler, sent, plan.by_id, self._assignment_id, now, plan)

    def _read_replica(self, tp: TopicPartition, pipe: PartitionPipe, leader: int, cluster, now: int) -> int:
        """The node to fetch tp from: its preferred read replica while that is fresh, known
        and reachable; else (and from then on) its leader."""
        replica = pipe.read_replica
        if (pipe.read_replica_until > now and cluster.node_by_id(replica) is not None
                and not self._client.is_unavailable(replica)):
            return replica
        log.debug("fetching %s from its leader %d again (read replica %d expired or unreachable)",
                  tp, leader, replica)
        self._clear_read_replica(pipe)
        return leader

    def _clear_read_replica(self, pipe: PartitionPipe) -> None:
        if pipe.read_replica >= 0:
            pipe.read_replica = -1
            self._read_replicas -= 1
            self._changes += 1

    def preferred_read_replica(self, tp: TopicPartition) -> int | None:
        """The follower tp is fetched from (KIP-392), or None when it is fetched from its leader."""
        pipe = self._buffer.pipes.get(tp)
        return None if pipe is None or pipe.read_replica < 0 else pipe.read_replica

    def _slot(self, node_id: int, tp: TopicPartition) -> int:
        """tp's fetch stream to its leader: round-robin as partitions first appear, then fixed."""
        slot = self._slot_of.get(tp)
        if slot is None:
            used = self._slots_used.get(node_id, 0)
            slot = self._slot_of[tp] = used % self._depth
            self._slots_used[node_id] = used + 1
        return slot

    def _stream_target(self, node_id: int, slot: int, cluster) -> Node | int | None:
        """Where the fetches of (node_id, slot) go: slot 0 on the broker's main connection,
        every other slot on a connection of its own (a broker serves one request per
        connection at a time, so streams sharing one would only queue). None: the broker's
        address is unknown."""
        if slot == 0:
            return node_id
        node = cluster.node_by_id(node_id)
        if node is None:
            return None
        return Node(fetch_stream_node_id(node_id, slot), node.host, node.port, node.rack)

    def _session(self, node_id: int, slot: int) -> FetchSessionHandler:
        handler = self.sessions.get((node_id, slot))
        if handler is None:
            handler = self.sessions[(node_id, slot)] = FetchSessionHandler(node_id, self._sessions_enabled)
        return handler

    @staticmethod
    def _assigned_leaders(cluster, assigned) -> tuple[dict, frozenset[int] | None]:
        """{tp: (leader node id, leader epoch or -1)} of the assigned partitions with a
        known leader (cluster is immutable: valid until the next metadata update or
        assignment change), and the set of those leaders (None if one has no leader)."""
        leader_map = {}
        leaders: set[int] | None = set()
        for tp in assigned:
            leader = cluster.leader_for(tp)
            if leader is None:
                leaders = None
                continue
            epoch = cluster.leader_epoch(tp)
            leader_map[tp] = (leader.node_id, -1 if epoch is None else epoch)
            if leaders is not None:
                leaders.add(leader.node_id)
        return leader_map, (None if leaders is None else frozenset(leaders))

    def _send_fetch(self, node_id: int, slot: int, target: Node | int, version: int, parts: list,
                    assignment_id: int, cluster, now: int, offered: int | None = None) -> None:
        """Send the fetch of ``parts`` on stream (node_id, slot). ``offered``: the request
        covers every fetchable partition of the stream, and the Fetch version the connection
        offered; its next requests are then built from what changes (a _StreamPlan)."""
        handler = self._session(node_id, slot)
        by_topic = version >= _TOPIC_ID_VERSION
        if handler.version not in (None, version):
            handler.handle_error()      # a session is kept in one version (topic names or ids)
        wanted: dict[TopicPartition, FetchPartition] = {}
        max_bytes = self._partition_max_bytes
        for tp, offset, leader_epoch, last_epoch in parts:
            # last_fetched_epoch (v12+, KIP-320): the leader answers with a diverging epoch
            # instead of records if its log differs from ours before fetch_offset.
            wanted[tp] = _new_tuple(FetchPartition, (offset, leader_epoch, last_epoch, max_bytes))
        data = handler.build(wanted, version)
        if by_topic and data.forgotten and any(cluster.topic_id(tp.topic) is None for tp in data.forgotten):
            handler.handle_error()      # a forgotten topic without an id: start over, full
            data = handler.build(wanted, version)
        handler.version = version
        pipes = self._buffer.pipes
        sent: dict[TopicPartition, tuple[int, int]] = {}
        for tp, fp in data.session.items():
            pipe = pipes[tp]
            pipe.in_flight_epoch = pipe.epoch
            sent[tp] = (fp.fetch_offset, pipe.epoch)
        topics: dict[str, list] = {}
        for tp, fp in data.to_send.items():
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": fp.current_leader_epoch,
                "fetch_offset": fp.fetch_offset, "last_fetched_epoch": fp.last_fetched_epoch,
                "log_start_offset": -1, "partition_max_bytes": fp.max_bytes})
        forgotten: dict[str, list[int]] = {}
        for tp in data.forgotten:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        by_id = {}
        if by_topic:
            if not forgotten and self._all_topic_ids:
                # Every partition fetched is assigned (cluster is the one the leaders came
                # from): the names of the assigned topics' ids, worked out with the leaders.
                # The answer names only topics of this request; this map is only read.
                by_id = self._assigned_by_id
            else:
                for topic in {tp.topic for tp in data.session} | set(forgotten):
                    by_id[cluster.topic_id(topic)] = topic
        body = {"replica_id": -1, "max_wait_ms": self._max_wait_ms, "min_bytes": self._min_bytes,
                "max_bytes": self._request_max_bytes, "isolation_level": self._isolation,
                "session_id": data.session_id, "session_epoch": data.session_epoch,
                "topics": [self._topic_entry(topic, ps, by_topic, cluster) for topic, ps in topics.items()],
                "forgotten_topics_data": [self._topic_entry(topic, ps, by_topic, cluster)
                                          for topic, ps in forgotten.items()],
                "rack_id": self._rack}
        if log.isEnabledFor(logging.DEBUG):
            log.debug("fetching %s from node %d (v%d, session %d epoch %d, %d listed, %d forgotten)",
                      {tp: o for tp, (o, _) in sent.items()}, node_id, version, data.session_id,
                      data.session_epoch, len(data.to_send), len(data.forgotten))
        plan = None
        if offered is not None:
            names = {tp.topic for tp in sent}
            topic_ids = ({t: cluster.topic_id(t) for t in names} if by_topic else {t: t for t in names})
            plan = _StreamPlan(node_id, slot, target, offered, version, handler, sent,
                               [pipes[tp] for tp in sent], by_id, topic_ids)
            self._plans[(node_id, slot)] = plan
        else:
            self._plans.pop((node_id, slot), None)
        fut = self._client.send(target, FETCH_KEY, body, version=version)
        self.in_flight_fetches += 1
        self._node_in_flight[node_id] = self._node_in_flight.get(node_id, 0) + 1
        self._slot_busy.add((node_id, slot))
        self._metrics["fetch-request-total"] += 1
        fut.add_both(self._on_fetch_done, node_id, slot, handler, sent, by_id, assignment_id, now, plan)

    @staticmethod
    def _topic_entry(topic: str, partitions: list, by_id: bool, cluster) -> dict[str, Any]:
        if by_id:
            return {"topic_id": cluster.topic_id(topic), "partitions": partitions}
        return {"topic": topic, "partitions": partitions}

    # ------------------------------------------------------------------ answers
    def _on_fetch_done(self, node_id, slot, handler, sent, by_id, assignment_id, send_ms, plan, result) -> None:
        self._saturated = None
        self.in_flight_fetches -= 1
        self._node_in_flight[node_id] -= 1
        self._slot_busy.discard((node_id, slot))
        now = self._clock.now_ms()
        self._metrics["fetch-latency-ms-total"] += now - send_ms
        stats = self._stats
        buffer = self._buffer
        pipes = buffer.pipes
        if plan is not None:
            # The pipes the request was sent for, in sent's order (its keys never change).
            for pipe, (_, epoch) in zip(plan.pipes, sent.values()):
                if pipe.in_flight_epoch == epoch:
                    pipe.in_flight_epoch = -1
        else:
            for tp, (_, epoch) in sent.items():
                pipe = pipes.get(tp)
                if pipe is not None and pipe.in_flight_epoch == epoch:
                    pipe.in_flight_epoch = -1
        if isinstance(result, BaseException):
            self._changes += 1      # partitions back off
            if stats is not None:
                stats.fetch_answered(now - send_ms, None, None, now)
            handler.handle_error()
            log.debug("fetch from node %d failed: %s", node_id, result)
            for tp in sent:     # a follower that failed: back to the leaders
                pipe = pipes.get(tp)
                if pipe is not None and pipe.read_replica == node_id:
                    self._clear_read_replica(pipe)
            if getattr(result, "invalid_metadata", False) or isinstance(result, Errors.KafkaConnectionError):
                self._metadata.request_update()
            for tp in sent:
                pipe = pipes.get(tp)
                if pipe is not None:
                    pipe.backoff_until = now + self._retry_backoff_ms
            return
        code = result.get("error_code", 0)
        session_kept = handler.handle_response(code, result.get("session_id", 0))
        if not session_kept or code:
            self._changes += 1
            if stats is not None:
                stats.fetch_answered(now - send_ms, result.get("throttle_time_ms") or 0, None, now)
            if not session_kept:
                return      # the session is gone: the next fetch, at once, opens a new one
            cls = Errors.error_class(code)
            log.info("fetch from node %d failed: %s", node_id, cls.__name__)
            if cls.invalid_metadata:
                self._metadata.request_update()
            for tp in sent:
                buffer.pipe(tp).backoff_until = now + self._retry_backoff_ms
            return
        subs = self._subscriptions
        read_committed = self._read_committed
        frame: ResponseFrame | None = None
        # The partitions with records, buffered as one unit (FetchBuffer.add_parts) unless a
        # partition of the answer had an error: then those before it are buffered one by one
        # ahead of the error, and the rest after it, in the answer's order.
        held: list[tuple] = []
        one_unit = True
        returned_data = []
        reported: list[tuple[TopicPartition, int, int, int]] = []   # offsets the answer gave
        leader_hints: dict[TopicPartition, tuple[int, int]] = {}
        fetched_bytes = 0
        # The assignment id changes with every assignment change (never while this runs), and
        # the partitions were assigned when the fetch was sent under it: the same id, still
        # assigned.
        stale = assignment_id != subs.assignment_id
        answer = result.get(SCANNED_PARTITIONS)
        if answer is not None:
            # Read from the receive thread's scan: the fields of every partition, no dicts.
            scanned = None
            array_bytes = answer[3]
            parts = zip(answer[4], _NO_DICTS)
        else:
            scanned = result.pop(SCANNED_FETCH, None)
            array_bytes = 0 if scanned is None else scanned.array_bytes
            parts = _decoded_partitions(result, scanned)
        topic_id = name = None
        try:
            for (topic, index, err, hw, lso, lstart, replica, raw, scanned_records), p in parts:
                if type(topic) is not str:
                    # A topic id (v13+), the same object for each of its partitions: looked up
                    # once (a UUID hashes and compares in Python).
                    if topic is not topic_id:
                        topic_id, name = topic, by_id.get(topic)
                    if name is None:
                        continue
                    topic = name
                tp = _new_tuple(TopicPartition, (topic, index))
                info = sent.get(tp)
                if info is None:
                    continue
                fetch_offset, epoch = info
                pipe = pipes.get(tp)
                if pipe is None or pipe.epoch != epoch or stale:
                    log.debug("ignoring stale fetch answer for %s", tp)
                    continue
                if err:
                    one_unit = False
                    if held:        # ahead of what the error queues
                        assert frame is not None
                        buffer.add_parts(held, assignment_id, frame, False)
                        held = []
                    if pipe.read_replica == node_id:
                        # Whatever a follower answers wrong (not a replica any more, out of
                        # range while it lags...), the leader is asked next (KIP-392).
                        log.debug("fetch of %s from read replica %d failed (error %d): back to the leader",
                                  tp, node_id, err)
                        self._clear_read_replica(pipe)
                        if err == Errors.OffsetOutOfRangeError.errno:
                            continue
                    self._partition_error(tp, pipe, err, fetch_offset, now)
                    if err in _LEADER_MOVED and p is not None:
                        hint = p.get("current_leader")
                        if hint is not None and hint.get("leader_id", -1) >= 0:
                            leader_hints[tp] = (hint["leader_id"], hint.get("leader_epoch", -1))
                    continue
                if replica >= 0 and replica != node_id:
                    self._changes += 1
                    if pipe.read_replica < 0:
                        self._read_replicas += 1
                    log.debug("fetching %s from read replica %d (told by node %d)", tp, replica, node_id)
                    pipe.read_replica = replica
                    pipe.read_replica_until = now + self._read_replica_ttl_ms
                if p is not None:
                    diverging = p.get("diverging_epoch")
                    if diverging is not None and diverging.get("epoch", -1) >= 0:
                        one_unit = False
                        if held:
                            assert frame is not None
                            buffer.add_parts(held, assignment_id, frame, False)
                            held = []
                        self._diverging_epoch(tp, pipe, fetch_offset, diverging["epoch"], diverging.get("end_offset", -1))
                        continue
                if hw >= 0 and not read_committed:
                    pipe.end_offset = hw
                if lso >= 0 and read_committed:
                    pipe.end_offset = lso
                if hw >= 0 or lso >= 0 or lstart >= 0:
                    reported.append((tp, hw, lso, lstart))
                size = 0 if raw is None else len(raw)
                if not size:
                    continue
                if frame is None:
                    whole = raw.obj if isinstance(raw, memoryview) else raw
                    # nbytes: the frame's size whatever buffer type the view is over; the
                    # receive thread's position arrays live as long (memory held, not
                    # response bytes: see FetchBuffer's memory bound)
                    frame = buffer.new_frame(memoryview(whole).nbytes, array_bytes)
                if read_committed:
                    aborted = None if p is None else p.get("aborted_transactions")
                    if aborted is None:
                        aborted = ()
                else:
                    aborted = None
                if scanned is not None:
                    scanned_records = scanned.records_for(raw)
                held.append((tp, fetch_offset, epoch, raw, size, aborted, scanned_records, pipe))
                pipe.buffered += 1
                if pipe.buffered >= PREFETCH_DEPTH:
                    self._changes += 1  # left out of fetches until read; caught-up ones may wait
                # Where the next fetch starts: after the last complete batch (a walk of the
                # batch headers, in kcore).
                nxt, last_epoch = next_fetch_offset(raw, fetch_offset)
                pipe.next_fetch_offset = nxt
                if last_epoch >= 0:
                    pipe.next_fetch_epoch = last_epoch
                if nxt == fetch_offset:
                    self._warn_incomplete(tp, pipe, fetch_offset, size)
                returned_data.append(tp)
                fetched_bytes += size
        finally:
            # What the answer buffered, even if handling a partition failed: each held
            # partition is counted in its pipe already.
            if held:
                assert frame is not None
                buffer.add_parts(held, assignment_id, frame, one_unit)
        if fetched_bytes:
            self._metrics["bytes-fetched-total"] += fetched_bytes
        if reported or returned_data:
            subs.record_fetched_offsets(reported, returned_data)
        if stats is not None:
            stats.fetch_answered(now - send_ms, result.get("throttle_time_ms") or 0, fetched_bytes, now)
        if leader_hints:
            self._apply_leader_hints(leader_hints, result.get("node_endpoints") or (), now)
        if plan is not None:
            # What the stream's next request lists; a partition error above, a read replica,
            # a partition at its prefetch limit have bumped the change counter already.
            plan.dirty = returned_data

    def _apply_leader_hints(self, hints: dict[TopicPartition, tuple[int, int]], endpoints, now: int) -> None:
        """KIP-951: the old leader named the new one; its partitions are fetched from there at
        once (after the position's validation against the new epoch, KIP-320), not after the
        retry backoff and a metadata round."""
        nodes = [Node(e["node_id"], e["host"], e["port"], e.get("rack")) for e in endpoints]
        updated = self._metadata.update_partition_leaders(hints, nodes)
        self._changes += 1
        pipes = self._buffer.pipes
        for tp in updated:
            pipe = pipes.get(tp)
            if pipe is not None and pipe.backoff_until > now:
                pipe.backoff_until = now

    def _warn_incomplete(self, tp: TopicPartition, pipe: PartitionPipe, offset: int, size: int) -> None:
        if not pipe.incomplete_warned:
            pipe.incomplete_warned = True
            log.warning("fetch of %s at offset %d returned only part of a batch (%d bytes); the "
                        "batch is larger than max.partition.fetch.bytes (%d) and will be fetched "
                        "again (Kafka returns it whole once it is the first partition of a fetch)",
                        tp, offset, size, self._partition_max_bytes)

    def _partition_error(self, tp: TopicPartition, pipe: PartitionPipe, code: int, fetch_offset: int,
                         now: int) -> None:
        cls = Errors.error_class(code)
        subs = self._subscriptions
        self._changes += 1
        pipe.backoff_until = now + self._retry_backoff_ms
        if cls is Errors.OffsetOutOfRangeError:
            position = subs.valid_position(tp)
            if position is None or position.offset != fetch_offset or pipe.buffered:
                log.debug("ignoring OFFSET_OUT_OF_RANGE for %s at %d: not the current position", tp, fetch_offset)
                return
            if subs.has_default_offset_reset_policy():
                log.info("fetch offset %d is out of range for partition %s, resetting offset", fetch_offset, tp)
                subs.request_offset_reset(tp)
                self._buffer.clear_partition(tp)
            else:
                exc = Errors.OffsetOutOfRangeError(
                    f"fetch position {fetch_offset} is out of range for partition {tp} and "
                    f"auto.offset.reset is 'none'")
                exc.partitions = {tp: fetch_offset}
                self._buffer.add_error(tp, pipe, exc)
            return
        if cls.invalid_metadata or cls in (Errors.UnknownLeaderEpochError, Errors.OffsetNotAvailableError):
            log.debug("fetch of %s failed with %s; refreshing metadata", tp, cls.__name__)
            self._metadata.request_update()
            return  # retried after the backoff, from the same offset
        if cls is Errors.TopicAuthorizationFailedError:
            denied = Errors.TopicAuthorizationFailedError(f"not authorized to read topic {tp.topic!r}")
            denied.unauthorized_topics = {tp.topic}
            self._buffer.add_error(tp, pipe, denied)
            return
        if cls.retriable:
            log.debug("fetch of %s failed with retriable %s", tp, cls.__name__)
            return
        self._buffer.add_error(tp, pipe, cls(f"fetch of partition {tp} at offset {fetch_offset} failed"))

    def _diverging_epoch(self, tp: TopicPartition, pipe: PartitionPipe, fetch_offset: int,
                         epoch: int, end_offset: int) -> None:
        """The leader's log diverges from what was fetched before ``fetch_offset`` (KIP-320;
        its log for our last epoch ends at ``end_offset``). The position goes to validation:
        OffsetsForLeaderEpoch then moves it to the divergent offset (with a reset policy) or
        raises LogTruncationError from poll(), the one path for both ways of finding out."""
        log.info("fetch of %s at offset %d: the leader's log diverges (epoch %d ends at %d); "
                 "validating the position", tp, fetch_offset, epoch, end_offset)
        self._changes += 1
        position = self._subscriptions.valid_position(tp)
        if position is not None and position.offset == fetch_offset and not pipe.buffered:
            self._subscriptions.request_validation_at(tp, position)
        # Otherwise the fetch was chained after buffered records: drop them and fetch again
        # from the position, whose own epoch the leader then checks.
        self._buffer.clear_partition(tp)


def _decoded_partitions(result: dict, scanned):
    """The partitions of a Fetch answer the protocol decoder read, as the tuples of
    SCANNED_PARTITIONS (the records' scan is taken only for a partition that is buffered),
    each with its dict for the fields those do not carry."""
    for topic_resp in result.get("responses") or []:
        topic = topic_resp.get("topic") or topic_resp.get("topic_id")
        for p in topic_resp.get("partitions") or []:
            yield (topic, p["partition_index"], p.get("error_code", 0), p.get("high_watermark", -1),
                   p.get("last_stable_offset", -1), p.get("log_start_offset", -1),
                   p.get("preferred_read_replica", -1), p.get("records"), None), p


def _backlog_held(pipes: dict[TopicPartition, PartitionPipe]) -> bool:
    """Some partition has more to fetch (or an unknown end) but waits for its buffered
    answers to be read (PREFETCH_DEPTH of them)."""
    for pipe in pipes.values():
        if pipe.buffered >= PREFETCH_DEPTH:
            nxt, end = pipe.next_fetch_offset, pipe.end_offset
            if nxt is None or end is None or nxt < end:
                return True
    return False
