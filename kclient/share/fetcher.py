"""ShareFetch and ShareAcknowledge over one share session per broker.

``send_fetches`` asks each leader of the assigned partitions for records (one request in
flight per broker, as a session's epochs must arrive in order), piggy-backing the
acknowledgements waiting for that broker. Answers are decoded through kcore's record decoder;
only records inside the answer's acquired ranges are handed out, each with the delivery count
of its range (made in C in one step, kcore.sharerecords: only the acquired rows become records), and
acquired offsets without a record (transaction markers, compacted records) are acknowledged as
gaps, a run of offsets at a time. ``send_acknowledgements`` sends what is waiting in ShareAcknowledge
requests (commit, RENEW), ``close_sessions`` closes every session (epoch -1) with the last
acknowledgements, which releases whatever the member acquired and did not acknowledge.

Answers are applied on whichever thread polls the network, under ``lock``; the owner (the share
consumer) takes what was acquired (``take_acquired``: the answer's bytes and ranges, not decoded)
and acknowledgement results from the application thread, and decodes the bytes into records
(``records_of``) or columns (``columnar_of``) there.
"""
from __future__ import annotations

import logging
import threading
from array import array
from dataclasses import dataclass
from typing import AbstractSet, Any, Callable, NamedTuple

from kcore.records import consumer_records, decode_columnar
from kcore.sharerecords import share_records_of

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.network.future import RequestFuture
from kclient.protocol import ApiKey
from kclient.consumer.columnar import ColumnarChunk
from kclient.share.acknowledgements import GAP, AcknowledgeType, OffsetRanges, PendingAcks
from kclient.share.columnar import ShareColumnarRecords, rows_of_range
from kclient.share.records import ShareConsumerRecord
from kclient.share.session import FINAL_EPOCH, ShareSession
from kclient.structs import ConsumerRecord, TopicPartition

__all__ = ["ShareFetchConfig", "ShareFetcher", "AckResult", "Acquired", "BATCH_OPTIMIZED", "RECORD_LIMIT"]

log = logging.getLogger(__name__)

SHARE_FETCH = int(ApiKey.SHARE_FETCH)
SHARE_ACKNOWLEDGE = int(ApiKey.SHARE_ACKNOWLEDGE)
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1
_SESSION_ERRORS = (Errors.ShareSessionNotFoundError, Errors.InvalidShareSessionEpochError)
_RENEW = int(AcknowledgeType.RENEW)
_ACCEPT = int(AcknowledgeType.ACCEPT)
#: The longest a fetch sent ahead with acknowledgements waits at the broker for the room they
#: free (the broker's state write takes milliseconds; ShareFetcher._max_wait_ms).
_AHEAD_ACK_WAIT_MS = 100


@dataclass(frozen=True)
class ShareFetchConfig:
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 52428800
    max_records: int = 500
    batch_size: int = 500
    acquire_mode: int = BATCH_OPTIMIZED
    check_crcs: bool = True
    #: How long a leader that answered a partition error waits for its next ShareFetch, unless
    #: the metadata changes first (retry.backoff.ms).
    retry_backoff_ms: int = 100


class AckResult:
    """The outcome of acknowledgements sent for one partition: ``error`` None, or the error;
    ``offsets`` the offsets the application acknowledged. Made from the acknowledgements sent
    (``of``), the offsets are worked out when first read: a poll loop that only counts them
    (``count``) makes no set of ranges per answer."""

    __slots__ = ("partition", "error", "_offsets", "_acks", "_count")

    def __init__(self, partition: TopicPartition, offsets: OffsetRanges, error: BaseException | None):
        self.partition = partition
        self.error = error
        self._offsets: OffsetRanges | None = offsets
        self._acks: PendingAcks | None = None
        self._count = len(offsets)

    @classmethod
    def of(cls, partition: TopicPartition, acks: PendingAcks, error: BaseException | None,
           count: int | None = None) -> "AckResult":
        """The outcome of ``acks`` (``count``: ``acks.count()``, when known)."""
        r = cls.__new__(cls)
        r.partition, r.error, r._offsets, r._acks = partition, error, None, acks
        r._count = acks.count() if count is None else count
        return r

    @property
    def offsets(self) -> OffsetRanges:
        if self._offsets is None:
            assert self._acks is not None
            self._offsets = self._acks.offsets()
        return self._offsets

    @property
    def count(self) -> int:
        """``len(self.offsets)``."""
        return self._count

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AckResult):
            return NotImplemented
        return (self.partition, self.offsets, self.error) == (other.partition, other.offsets, other.error)

    __hash__ = None     # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"AckResult(partition={self.partition!r}, offsets={self.offsets!r}, error={self.error!r})"


class Acquired(NamedTuple):
    """Records a ShareFetch answer acquired for this member, not decoded yet: the partition's
    record bytes and the acquired ranges (first offset, last offset, delivery count), and the
    broker and session generation they were acquired through, and when their acquisition lock
    ends at the latest by this client's clock (None: not known). A named tuple: an answer
    makes one per partition, without a dataclass's setattr per field."""
    partition: TopicPartition
    records: Any
    ranges: tuple[tuple[int, int, int], ...]
    source: tuple[int, int] | None = None
    lock_deadline_ms: int | None = None


_new_tuple = tuple.__new__      # a named tuple made without its class's Python-level __new__


def _share_records_unordered(records: list[ConsumerRecord], ranges: tuple[tuple[int, int, int], ...]
                             ) -> tuple[list[ShareConsumerRecord], list[tuple[int, int]], list[tuple[int, int]]]:
    """``share_records`` for records or ranges in any order (overlapping ranges: the last one
    gives an offset's delivery count; a repeated offset: its first record)."""
    delivery: dict[int, int] = {}
    for first, last, count in ranges:
        for offset in range(first, last + 1):
            delivery[offset] = count
    out = [ShareConsumerRecord(*rec, delivery.pop(rec.offset)) for rec in records if rec.offset in delivery]
    held = [(r.offset, r.offset) for r in out]
    return out, held, [(offset, offset) for offset in sorted(delivery)]


def _error(code: int, message: str | None = None) -> Errors.KafkaError:
    cls = Errors.error_class(code)
    return cls(message) if message else cls()


class ShareFetcher:
    def __init__(self, client: Any, group_id: str, member_id: Callable[[], str],
                 config: ShareFetchConfig | None = None, clock: Clock = SYSTEM_CLOCK):
        self._client = client
        self._clock = clock
        self.group_id = group_id
        self._member_id = member_id
        self.config = config or ShareFetchConfig()
        self.lock = threading.RLock()
        self.sessions: dict[int, ShareSession] = {}
        self._in_flight: dict[int, RequestFuture] = {}
        #: The acknowledgements each request in flight carries.
        self._acks_in_flight: dict[int, dict[TopicPartition, PendingAcks]] = {}
        #: Acknowledgements not sent yet.
        self._acks: dict[TopicPartition, PendingAcks] = {}
        #: Which broker each partition's records were acquired from, and through which generation
        #: of that broker's session (their acks go there, and only through that generation).
        self._acquired_from: dict[TopicPartition, tuple[int, int]] = {}
        self._acquired: list[Acquired] = []
        self._results: list[AckResult] = []
        #: False only when no RENEW waits in ``_acks`` (set by every RENEW put, cleared by the
        #: RENEW pass that found none left), so each poll's RENEW pass costs nothing without one.
        self._renew_waiting = False
        self.acquisition_lock_timeout_ms: int | None = None
        #: Offsets the answers to fetches sent ahead (``send_fetches(ahead=True)``) acquired
        #: since ``take_ahead_yield`` last looked, and whether any such answer came.
        self._ahead_yield = 0
        self._ahead_answered = False
        #: The last assignment send_fetches was given, the metadata it read, and the partitions
        #: each leader gets asked for, by session key: made again only when either changes.
        self._plan: tuple[AbstractSet[TopicPartition], Any, dict[int, dict[Any, TopicPartition]]] | None = None
        #: Requests sent and what the fetches acquired, for metrics() (the Java client's names
        #: where it has one).
        self.counts = {"fetch-total": 0, "acknowledge-request-total": 0, "fetch-answers-total": 0,
                       "records-acquired-total": 0}
        #: Leaders whose last answer had a partition error (NOT_LEADER_OR_FOLLOWER after a leader
        #: moved, ...): node -> (until when, the metadata then). Asked again once the metadata
        #: changes or retry.backoff.ms has passed, not at every poll in the meantime (a poll
        #: loop asked a restarted former leader hundreds of times a second).
        self._backoff: dict[int, tuple[int, Any]] = {}

    # ------------------------------------------------------------------ application side
    def acknowledge(self, tp: TopicPartition, offset: int, kind: int) -> None:
        self.acknowledge_range(tp, offset, offset, kind)

    def acknowledge_range(self, tp: TopicPartition, first: int, last: int, kind: int) -> None:
        kind = int(kind)
        with self.lock:
            acks = self._acks.get(tp)
            if acks is None:
                acks = self._acks[tp] = PendingAcks()
            acks.put(first, last, kind)
            if kind == _RENEW:
                self._renew_waiting = True

    def accept_runs(self, held: dict[TopicPartition, list[tuple[int, int]]]) -> None:
        """ACCEPT every offset of ``held``'s (first, last) runs, per partition (the records an
        implicit-mode poll handed out): one call and one lock for the whole poll, one entry per
        run."""
        with self.lock:
            waiting = self._acks
            for tp, runs in held.items():
                acks = waiting.get(tp)
                if acks is None:
                    acks = waiting[tp] = PendingAcks()
                acks.put_runs(runs, _ACCEPT)

    def pending_acknowledgements(self) -> int:
        with self.lock:
            return sum(len(a) for a in self._acks.values())

    def take_acquired(self) -> list[Acquired]:
        if not self._acquired:      # (a list is read whole under the GIL: no lock to see it empty)
            return []
        with self.lock:
            out, self._acquired = self._acquired, []
            return out

    def take_records(self) -> list[tuple[TopicPartition, list[ShareConsumerRecord]]]:
        """What was acquired, decoded into records (partitions without any left out)."""
        out = []
        for acquired in self.take_acquired():
            records = self.records_of(acquired)
            if records:
                out.append((acquired.partition, records))
        return out

    def records_of(self, acquired: Acquired) -> list[ShareConsumerRecord]:
        """The acquired records as ``ShareConsumerRecord``s; acquired offsets without a record
        are acknowledged as gaps."""
        return self.held_records_of(acquired)[0]

    def held_records_of(self, acquired: Acquired) -> tuple[list[ShareConsumerRecord], list[tuple[int, int]]]:
        """``records_of`` and the records' offsets as (first, last) runs (what accepting them
        all acknowledges: one entry per run, not per record)."""
        tp = acquired.partition
        ranges = sorted(acquired.ranges)
        # An answer may hold records other members acquired: only this member's rows are made
        # into records (the columns cost a few bytes a row, a record ~0.2 us), each in one step.
        batch = decode_columnar(acquired.records, check_crcs=self.config.check_crcs, skip_control=True)
        try:
            out, held, gaps = share_records_of(batch, ShareConsumerRecord, tp.topic, tp.partition, ranges)
        except ValueError:      # ranges or records out of order or overlapping: not from a sane broker
            records = consumer_records(batch, ConsumerRecord, tp.topic, tp.partition, 0, batch.num_records)
            out, held, gaps = _share_records_unordered(records, acquired.ranges)
        for first, last in gaps:
            self.acknowledge_range(tp, first, last, GAP)
        return out, held

    def columnar_of(self, acquired: Acquired) -> ShareColumnarRecords | None:
        """The acquired records as columns (None if none holds a record); acquired offsets
        without a record are acknowledged as gaps. One Python object per acquired range, not
        per record."""
        tp = acquired.partition
        chunk = ColumnarChunk(decode_columnar(acquired.records, check_crcs=self.config.check_crcs,
                                              skip_control=True))
        pieces: list[tuple[ColumnarChunk, int, int]] = []
        counts = array("h")
        offsets = chunk.offsets
        lo = 0
        for first, last, count in sorted(acquired.ranges):
            i, j = rows_of_range(chunk, first, last, lo)
            lo = j
            if i < j:
                pieces.append((chunk, i, j))
                counts.extend(array("h", [count]) * (j - i))
            if j - i < last - first + 1:      # offsets without a record: rare (control, compacted)
                present = {offsets[k] for k in range(i, j)}
                for offset in range(first, last + 1):
                    if offset not in present:
                        self.acknowledge(tp, offset, GAP)
        return ShareColumnarRecords(tp, pieces, counts) if pieces else None

    def take_results(self) -> list[AckResult]:
        if not self._results:
            return []
        with self.lock:
            out, self._results = self._results, []
            return out

    def acknowledgements_in_flight(self) -> set[TopicPartition]:
        """The partitions whose acknowledgements (the application's, not only the gaps the
        fetcher acknowledges itself) were sent and await the broker's answer."""
        with self.lock:
            return {tp for node_id, acks in self._acks_in_flight.items()
                    if not self._in_flight[node_id].is_done for tp, a in acks.items() if a.offsets()}

    def acknowledgements_waiting(self) -> set[TopicPartition]:
        """The partitions with acknowledgements of the application's not sent yet (their
        leader's previous request is still unanswered, or no leader is known)."""
        with self.lock:
            return {tp for tp, a in self._acks.items() if a.count()}

    def in_flight(self, node_id: int | None = None) -> bool:
        with self.lock:
            if node_id is None:
                return any(not f.is_done for f in self._in_flight.values())
            f = self._in_flight.get(node_id)
            return f is not None and not f.is_done

    # ------------------------------------------------------------------ requests
    def _session(self, node_id: int) -> ShareSession:
        s = self.sessions.get(node_id)
        if s is None:
            s = self.sessions[node_id] = ShareSession(node_id)
        return s

    def _take_acks_for(self, node_id: int, renew: bool | None = None) -> dict[TopicPartition, PendingAcks]:
        """Pop the waiting acknowledgements that go to ``node_id`` (renew: only RENEW ones /
        none of them; None: all)."""
        out: dict[TopicPartition, PendingAcks] = {}
        if renew is False and not self._renew_waiting:
            renew = None        # no RENEW waits: every acknowledgement is a non-RENEW one
        for tp, acks in list(self._acks.items()):
            source = self._acquired_from.get(tp)
            if source is None or source[0] != node_id:
                continue
            if renew is None:           # all of them: the partition's whole entry
                if acks:
                    out[tp] = acks
                    del self._acks[tp]
                continue
            picked, rest = acks.split(lambda t: (t == AcknowledgeType.RENEW) == renew)
            if not picked:
                continue
            out[tp] = picked
            if rest:
                self._acks[tp] = rest
            else:
                del self._acks[tp]
        return out

    def voided(self, acquired: Acquired) -> Errors.KafkaError | None:
        """Why records acquired but not handed out yet are no longer this member's (None while
        they are): their acquisition lock ran out (the application did not poll in time), the
        partition's leader is another broker now, or the session they came through was reset.
        In each case the broker made them available again (a lock that ran out releases them,
        a new leader loads no acquisition, a closed session releases its own), so they go to a
        member again with their delivery count; handed out here they would be worked on twice."""
        deadline = acquired.lock_deadline_ms
        if deadline is not None and self._clock.now_ms() >= deadline:
            tp = acquired.partition
            return Errors.InvalidRecordStateError(
                f"the acquisition lock of records of {tp.topic}-{tp.partition} ran out before a poll took "
                f"them (acquisition lock {self.acquisition_lock_timeout_ms} ms); they come back to the group")
        if acquired.source is None:
            return None
        node_id, generation = acquired.source
        with self.lock:
            return self._stale(acquired.partition, node_id, generation)

    def _stale(self, tp: TopicPartition, node_id: int, generation: int) -> Errors.KafkaError | None:
        leader = self._client.metadata.cluster.leader_for(tp)
        if leader is not None and leader.node_id != node_id:
            return Errors.NotLeaderOrFollowerError(
                f"the leader of {tp.topic}-{tp.partition} moved from node {node_id} to node {leader.node_id}; "
                "the records acquired from the old leader are delivered again")
        if self._session(node_id).generation != generation:
            return Errors.InvalidShareSessionEpochError(
                f"the share session with node {node_id} was reset since the records of "
                f"{tp.topic}-{tp.partition} were acquired; they come back to the group")
        return None

    def _fail_stale_acks(self) -> None:
        """Fail, without sending them, the waiting acknowledgements that can no longer reach
        the records they are for (the Java client does the same): the partition's leader is now
        another broker (NOT_LEADER_OR_FOLLOWER: the new leader has those records available
        again), or the session they were acquired through was reset (INVALID_SHARE_SESSION_EPOCH:
        a new session's first request may carry none, the broker answers INVALID_REQUEST). Held,
        they would wait for a session that a commit never opens, or reach a broker that has the
        records available again."""
        if not self._acks:
            return
        for tp in list(self._acks):
            source = self._acquired_from.get(tp)
            if source is None:
                continue
            err = self._stale(tp, *source)
            if err is None:
                continue
            log.debug("share group %s: acknowledgements of %s not sent: %s", self.group_id, tp, err)
            self._report(tp, self._acks.pop(tp), err)

    def _topic_id(self, topic: str) -> Any:
        return self._client.metadata.cluster.topic_id(topic)

    def _topics_body(self, parts: dict[TopicPartition, list[dict]]) -> list[dict]:
        by_topic: dict[Any, list[dict]] = {}
        for tp, batches in sorted(parts.items()):
            by_topic.setdefault(self._topic_id(tp.topic), []).append(
                {"partition_index": tp.partition, "acknowledgement_batches": batches})
        return [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()]

    def send_fetches(self, assignment: AbstractSet[TopicPartition], *, ahead: bool = False) -> int:
        """One ShareFetch to every leader of ``assignment`` without a request in flight (and
        to brokers whose session holds partitions no longer assigned, to forget them). A fetch
        sent ahead (``ahead``) asks the broker to answer at once (no fetch.max.wait.ms), and
        what its answer acquires is counted for ``take_ahead_yield``."""
        cluster = self._client.metadata.cluster
        plan = self._plan
        if plan is not None and plan[0] is assignment and plan[1] is cluster:
            by_node = plan[2]
        else:
            by_node = self._leaders_of(assignment, cluster)
        sent = 0
        with self.lock:
            self._fail_stale_acks()
            # the leaders, and the brokers whose sessions hold partitions no leader here has
            nodes: Any = by_node
            for n, s in self.sessions.items():
                if s.partitions and n not in by_node:
                    nodes = set(by_node) | {n for n, s in self.sessions.items() if s.partitions}
                    break
            backoff = self._backoff
            now = self._clock.now_ms() if backoff else 0
            in_flight = self._in_flight
            for node_id in nodes:
                # in reconnect backoff (a leader just killed): asked again once the backoff ends,
                # not in a loop of requests that fail at once until the metadata names another
                f = in_flight.get(node_id)
                if (f is not None and not f.is_done) or self._client.is_unavailable(node_id):
                    continue
                if backoff and node_id in backoff:
                    until, seen = backoff[node_id]
                    if now < until and seen is cluster:
                        continue
                    del backoff[node_id]
                self._send_fetch(node_id, by_node.get(node_id, {}), ahead)
                sent += 1
        return sent

    def _leaders_of(self, assignment: AbstractSet[TopicPartition], cluster: Any
                    ) -> dict[int, dict[Any, TopicPartition]]:
        """The partitions of ``assignment`` by leader, each under its session key (topic id,
        partition); kept for the next calls when every partition has a leader and a topic id
        (an assignment and a metadata that stay the same objects while unchanged: every poll
        fetches, and the lookups cost more than the fetch's other work)."""
        by_node: dict[int, dict[Any, TopicPartition]] = {}
        complete = True
        for tp in assignment:
            leader = cluster.leader_for(tp)
            topic_id = cluster.topic_id(tp.topic)
            if leader is None or topic_id is None:
                self._client.metadata.request_update()
                complete = False
                continue
            by_node.setdefault(leader.node_id, {})[(topic_id, tp.partition)] = tp
        self._plan = (assignment, cluster, by_node) if complete else None
        return by_node

    def _max_wait_ms(self, ahead: bool, acknowledging: bool) -> int:
        """How long the broker may hold a ShareFetch for records. A fetch sent ahead: at once
        without acknowledgements (the records in hand may fill every partition's in-flight
        limit, and nothing frees them before the next request); with some, a moment, since
        the broker frees the acknowledged records' locks only once it has written their state,
        just after it took the request: answered at once, the fetch would find no room yet.
        Not the whole fetch.max.wait.ms: the acknowledgements of the records in hand, and
        close(), wait for its answer."""
        if not ahead:
            return self.config.max_wait_ms
        return min(self.config.max_wait_ms, _AHEAD_ACK_WAIT_MS) if acknowledging else 0

    def take_ahead_yield(self) -> int | None:
        """The offsets acquired by the answers to fetches sent ahead since the last call, or
        None when no such answer came meanwhile."""
        with self.lock:
            if not self._ahead_answered:
                return None
            n, self._ahead_yield, self._ahead_answered = self._ahead_yield, 0, False
            return n

    def _send_fetch(self, node_id: int, keys: dict[Any, TopicPartition], ahead: bool = False) -> None:
        """A ShareFetch to ``node_id`` for the partitions ``keys`` names by session key."""
        session = self._session(node_id)
        epoch, added, forgotten = session.plan(keys)
        acks = self._take_acks_for(node_id, renew=False)
        parts: dict[TopicPartition, list[dict]] = {keys[k]: [] for k in added} if added else {}
        for tp, a in acks.items():
            parts[tp] = a.batches()
        forgotten_by_topic: dict[Any, list[int]] = {}
        if forgotten:
            for tid, p in sorted(forgotten, key=lambda k: (str(k[0]), k[1])):
                forgotten_by_topic.setdefault(tid, []).append(p)
        c = self.config
        body = {"group_id": self.group_id, "member_id": self._member_id(), "share_session_epoch": epoch,
                "max_wait_ms": self._max_wait_ms(ahead, bool(acks)),
                "min_bytes": c.min_bytes, "max_bytes": c.max_bytes,
                "max_records": c.max_records, "batch_size": c.batch_size,
                "share_acquire_mode": c.acquire_mode, "is_renew_ack": False,
                "topics": self._topics_body(parts) if parts else [],
                "forgotten_topics_data": [{"topic_id": t, "partitions": ps} for t, ps in forgotten_by_topic.items()]}
        if log.isEnabledFor(logging.DEBUG):
            log.debug("share group %s: ShareFetch to node %d epoch %d: fetch %s, add %s, forget %s, acks %s",
                      self.group_id, node_id, epoch, sorted(map(tuple, keys.values())), sorted(keys[k] for k in added),
                      sorted(forgotten, key=str), {str(tp): len(a) for tp, a in acks.items()})
        # The broker starts the locks of what it acquires after this: their end by this
        # client's clock is at most the lock's length after the send.
        sent_ms = self._clock.now_ms()
        future = self._client.send(node_id, SHARE_FETCH, body)
        self.counts["fetch-total"] += 1
        self._in_flight[node_id] = future
        if acks:
            self._acks_in_flight[node_id] = acks
        future.add_both(self._on_fetch, future, node_id, acks, sent_ms, ahead)

    def send_acknowledgements(self, *, only_renew: bool = False) -> list[RequestFuture]:
        """ShareAcknowledge to every broker with waiting acknowledgements and no request in
        flight (a broker with one gets them piggy-backed on its next ShareFetch, or here
        once it is answered)."""
        futures: list[RequestFuture] = []
        with self.lock:
            if only_renew and not self._renew_waiting:
                return futures
            self._fail_stale_acks()
            nodes = {source[0] for tp in self._acks if (source := self._acquired_from.get(tp)) is not None}
            for node_id in nodes:
                if node_id is None or self.in_flight(node_id):
                    continue
                session = self._session(node_id)
                if not session.is_open:
                    continue
                acks = self._take_acks_for(node_id, renew=True if only_renew else None)
                if acks:
                    futures.append(self._send_acknowledge(node_id, session.plan_acknowledge(), acks))
            if only_renew:
                self._renew_waiting = any(_RENEW in a.kinds() for a in self._acks.values())
        return futures

    def _send_acknowledge(self, node_id: int, epoch: int, acks: dict[TopicPartition, PendingAcks]
                          ) -> RequestFuture:
        renew = any(AcknowledgeType.RENEW in a.kinds() for a in acks.values())
        body = {"group_id": self.group_id, "member_id": self._member_id(), "share_session_epoch": epoch,
                "is_renew_ack": renew,
                "topics": self._topics_body({tp: a.batches() for tp, a in acks.items()})}
        if log.isEnabledFor(logging.DEBUG):
            log.debug("share group %s: ShareAcknowledge to node %d epoch %d: acks %s", self.group_id, node_id,
                      epoch, {str(tp): len(a) for tp, a in acks.items()})
        future = self._client.send(node_id, SHARE_ACKNOWLEDGE, body)
        self.counts["acknowledge-request-total"] += 1
        self._in_flight[node_id] = future
        self._acks_in_flight[node_id] = acks
        future.add_both(self._on_acknowledge, future, node_id, acks, epoch)
        return future

    def close_sessions(self) -> list[RequestFuture]:
        """Close every open session (epoch -1) with the acknowledgements still waiting; the
        broker releases the records acquired through it and not acknowledged."""
        futures = []
        with self.lock:
            self._fail_stale_acks()
            for node_id, session in self.sessions.items():
                if not session.is_open or self.in_flight(node_id):
                    continue
                acks = self._take_acks_for(node_id)
                futures.append(self._send_acknowledge(node_id, FINAL_EPOCH, acks))
        return futures

    # ------------------------------------------------------------------ answers
    def _report(self, tp: TopicPartition, acks: PendingAcks, err: BaseException | None) -> None:
        """The outcome of the application's acknowledgements (gaps are the fetcher's own)."""
        n = acks.count()
        if n:
            self._results.append(AckResult.of(tp, acks, err, n))

    def _fail_acks(self, acks: dict[TopicPartition, PendingAcks], err: BaseException) -> None:
        for tp, a in acks.items():
            self._report(tp, a, err)

    def _answer(self, future: RequestFuture, node_id: int, acks: dict, outcome: Any, what: str) -> tuple[Any, dict] | None:
        """A ShareFetch or ShareAcknowledge answer, under the lock: the node's session and the
        response, or None when the request failed or the broker answered a top-level error (the
        session is reset and the acknowledgements it carried fail with that error)."""
        if self._in_flight.get(node_id) is future:
            del self._in_flight[node_id]
            self._acks_in_flight.pop(node_id, None)
        session = self._session(node_id)
        if future.failed():
            session.reset(f"{what} failed: {future.exception!r}")
            self._fail_acks(acks, future.exception)
            return None
        resp = outcome
        code = resp.get("error_code", 0)
        if code:
            err = _error(code, resp.get("error_message"))
            session.reset(repr(err))
            self._fail_acks(acks, err)
            if not isinstance(err, _SESSION_ERRORS):
                log.warning("share group %s: %s to node %d answered %r", self.group_id, what, node_id, err)
            return None
        return session, resp

    def _on_fetch(self, future: RequestFuture, node_id: int, acks: dict, sent_ms: int, ahead: bool,
                  outcome: Any) -> None:
        with self.lock:
            answer = self._answer(future, node_id, acks, outcome, "ShareFetch")
            if answer is None:
                return
            session, resp = answer
            session.answered()
            lock_ms = resp.get("acquisition_lock_timeout_ms")
            deadline = None
            if lock_ms and lock_ms > 0:
                self.acquisition_lock_timeout_ms = lock_ms
                deadline = sent_ms + lock_ms
            answered_acks: set[TopicPartition] = set()
            acquired = 0
            cluster = self._client.metadata.cluster
            debug = log.isEnabledFor(logging.DEBUG)
            # what this answer acquired was acquired through this generation of the session
            source = (node_id, session.generation)
            for topic in resp.get("responses", ()):
                name = cluster.topic_name(topic["topic_id"])
                for p in topic["partitions"]:
                    if name is None:
                        self._client.metadata.request_update()
                        continue
                    tp = _new_tuple(TopicPartition, (name, p["partition_index"]))
                    if acks and tp in acks:
                        answered_acks.add(tp)
                        ack_code = p.get("acknowledge_error_code", 0)
                        self._report(tp, acks[tp],
                                     _error(ack_code, p.get("acknowledge_error_message")) if ack_code else None)
                    if p.get("error_code", 0):
                        err = _error(p["error_code"], p.get("error_message"))
                        log.debug("share group %s: %s answered %r", self.group_id, tp, err)
                        self._client.metadata.request_update()
                        self._backoff[node_id] = (self._clock.now_ms() + self.config.retry_backoff_ms, cluster)
                        continue
                    ranges = p.get("acquired_records")
                    if debug:
                        log.debug("share group %s: node %d: %s acquired %s", self.group_id, node_id, tp,
                                  [(r["first_offset"], r["last_offset"], r["delivery_count"]) for r in ranges or ()])
                    if ranges:
                        acquired += self._take_acquired(tp, p, ranges, source, deadline)
            if acks:
                for tp in set(acks) - answered_acks:      # the broker said nothing: they went through
                    self._report(tp, acks[tp], None)
            self.counts["fetch-answers-total"] += 1
            self.counts["records-acquired-total"] += acquired
            if ahead:
                self._ahead_yield += acquired
                self._ahead_answered = True

    def _take_acquired(self, tp: TopicPartition, p: dict, ranges: list[dict], source: tuple[int, int],
                       lock_deadline_ms: int | None) -> int:
        """Keep what a partition's answer acquired (``ranges``, not empty) through ``source``
        (node, session generation); the number of offsets acquired."""
        self._acquired_from[tp] = source
        got = tuple([(r["first_offset"], r["last_offset"], r["delivery_count"]) for r in ranges])
        self._acquired.append(_new_tuple(Acquired, (tp, p.get("records"), got, source, lock_deadline_ms)))
        n = 0
        for first, last, _ in got:
            n += last - first + 1
        return n

    def _on_acknowledge(self, future: RequestFuture, node_id: int, acks: dict, epoch: int, outcome: Any) -> None:
        with self.lock:
            answer = self._answer(future, node_id, acks, outcome, "ShareAcknowledge")
            if answer is None:
                return
            session, resp = answer
            if epoch == FINAL_EPOCH:
                session.reset("closed")
            else:
                session.answered()
            lock_ms = resp.get("acquisition_lock_timeout_ms")
            if lock_ms and lock_ms > 0:
                self.acquisition_lock_timeout_ms = lock_ms
            cluster = self._client.metadata.cluster
            answered: set[TopicPartition] = set()
            for topic in resp.get("responses", ()):
                name = cluster.topic_name(topic["topic_id"])
                for p in topic["partitions"]:
                    tp = TopicPartition(name, p["partition_index"]) if name else None
                    if tp is None or tp not in acks:
                        continue
                    answered.add(tp)
                    code = p.get("error_code", 0)
                    self._report(tp, acks[tp], _error(code, p.get("error_message")) if code else None)
            for tp in set(acks) - answered:
                self._report(tp, acks[tp], None)
