"""Chaos with share-group members (KIP-932) on the 3-broker Apache Kafka of kclient.testing.chaos.

``ShareChaos(cluster, ChaosConfig(..., kinds=SHARE_FAULT_KINDS)).run()`` -> ``ShareChaosResult``.
The run is Chaos's (the producer of numbered records with acks=all, one fault at a time, a
quiet period), with share members instead of consumer group members: child processes of
``kclient.testing.share_chaos_member``, KafkaShareConsumers in explicit mode that accept most
records, reject some and release some once (kclient.testing.share_chaos_member.ack_type),
sending the acknowledgements with commit_sync() after each poll. The group starts at the
beginning of the topic and locks records for ``LOCK_MS``, so the records of a killed member
come back within seconds.

The checker, over the acknowledged records, every delivery and every acknowledgement with the
broker's answer:

* ``lost``: a record that never reached a final state: no ACCEPT or REJECT the broker took,
  and not archived after ``share.delivery.count.limit`` deliveries. An ACCEPT or REJECT whose
  outcome the member never learnt (it was killed after sending it, or the answer was lost
  with the connection to a leader killed while it wrote the acknowledgement to the share
  coordinator) counts only when the broker confirms it: the record is below the share
  partition's start offset (``list_share_group_offsets``), i.e. in a final state there (the
  quiet period waits for that, or for the record's delivery again and its acknowledgement);
* ``accepted_twice``: a record the broker took an ACCEPT of twice;
* ``redelivered_after_final``: a record delivered again after the broker took its ACCEPT or REJECT;
* ``mismatched``, ``member_exits``, ``stuck_on_close``: as for consumer groups;
* ``unclean_close``: a member told to stop (SIGTERM) that exited without its ``closed`` event
  (its close() raised: its share sessions may be left open).

Records the broker holds (``broker_held``): Apache Kafka 4.4.0's share-partition leader can keep
a record in limbo when the share coordinator it writes the record's acknowledgement to is
SIGKILLed with that write in flight: the member gets no answer, and the record is neither
confirmed (the start offset stays at it) nor delivered again, with any lock duration, until the
partition's leadership moves, when the new leader reads the record's state from the share
coordinator. When the quiet period finds every record still pending in that state for
``HELD_S`` (an acknowledgement of unknown outcome, the start offset not past it), it restarts
the leaders of their partitions with a controlled shutdown, and the checker then requires what
it requires of every record: confirmed by the start offset, or delivered again and
acknowledged. The partitions and counts are in the result, and logged.
"""
from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from kclient.testing.chaos import Chaos, ChaosConfig, ChaosResult, _Member, _Producer
from kclient.testing.kafka import KafkaCluster
from kclient.testing.share_chaos_member import ACCEPT, REJECT, RELEASE

__all__ = ["ShareChaos", "ShareChaosResult", "SHARE_FAULT_KINDS", "LOCK_MS", "DELIVERY_LIMIT", "HELD_S"]

log = logging.getLogger(__name__)

SHARE_FAULT_KINDS = ("leader_kill", "member_kill")
#: The group's record lock: a killed member's records come back after it.
LOCK_MS = 5000
#: share.delivery.count.limit (the broker's default): a record delivered this often is archived.
DELIVERY_LIMIT = 5
#: How long the quiet period waits on records the broker holds (three lock durations, each of
#: which would have brought a merely locked record back) before moving their leaders.
HELD_S = 3 * LOCK_MS / 1000


@dataclass
class ShareChaosResult(ChaosResult):
    accepted: int = 0
    rejected: int = 0
    released: int = 0
    archived: int = 0
    failed_acknowledgements: int = 0
    #: Records whose final acknowledgement's outcome the member never learnt (the broker's
    #: start offset decides), and the start offsets read after the quiet period.
    outcome_unknown: int = 0
    start_offsets: dict[int, int] = field(default_factory=dict)
    lost: list[tuple[int, int]] = field(default_factory=list)
    accepted_twice: list[tuple[int, int]] = field(default_factory=list)
    redelivered_after_final: list[tuple[int, int]] = field(default_factory=list)
    unclean_close: list[str] = field(default_factory=list)
    #: Partition -> records the broker held after an acknowledgement of unknown outcome, whose
    #: leader the quiet period restarted (see the module's doc).
    broker_held: dict[int, int] = field(default_factory=dict)

    def criteria(self) -> dict[str, int]:
        return {"lost": len(self.lost), "accepted_twice": len(self.accepted_twice),
                "redelivered_after_final": len(self.redelivered_after_final), "mismatched": self.mismatched,
                "member_exits": len(self.member_exits), "stuck_on_close": len(self.stuck_on_close),
                "unclean_close": len(self.unclean_close)}


class _ShareHistory:
    """Everything the share members reported, thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deliveries: list[tuple[float, str, int, int, int, int]] = []   # t, member, p, offset, value, count
        self.delivered: set[tuple[int, int]] = set()
        # (p, offset) -> [(t, member, type, status)], status "ok" | "failed" | "unknown", or
        # "sent" for the announcement before commit_sync (the outcome event follows unless killed)
        self.acks: dict[tuple[int, int], list[tuple[float, str, int, str]]] = defaultdict(list)
        self.final: dict[tuple[int, int], float] = {}       # the broker took an ACCEPT or REJECT, at t
        self.max_count: Counter = Counter()
        self.poll_errors = 0
        self.owner: dict[int, str] = {}                      # partitions seen, for Chaos's messages

    def add(self, member: str, event: dict[str, Any]) -> None:
        kind = event.get("e")
        with self.lock:
            if kind == "poll":
                t = event["t"]
                for p, recs in event["r"]:
                    self.owner[p] = member
                    for offset, value, count in recs:
                        self.deliveries.append((t, member, p, offset, value, count))
                        self.delivered.add((p, offset))
                        self.max_count[(p, offset)] = max(self.max_count[(p, offset)], count)
            elif kind == "acking":
                for p, offset, ack in event["r"]:
                    self.acks[(p, offset)].append((event["t"], member, ack, "sent"))
            elif kind == "ack":
                t, ok, failed = event["t"], set(event["ok"]), set(event["failed"])
                for p, offset, ack in event["r"]:
                    status = "ok" if p in ok else "failed" if p in failed else "unknown"
                    self.acks[(p, offset)].append((t, member, ack, status))
                    if status == "ok" and ack in (ACCEPT, REJECT):
                        self.final.setdefault((p, offset), t)
            elif kind == "error":
                self.poll_errors += 1
                log.info("share member %s: %s", member, event["err"])


class ShareChaos(Chaos):
    def __init__(self, cluster: KafkaCluster, config: ChaosConfig | None = None):
        super().__init__(cluster, config or ChaosConfig(kinds=SHARE_FAULT_KINDS))
        self.group = self.group.replace("chaos-group-", "chaos-share-group-")
        self.history = _ShareHistory()  # type: ignore[assignment]
        self.result = ShareChaosResult(seed=self.config.seed, workdir=str(self.workdir))
        self._killed_names: set[str] = set()
        #: The broker's start offset of each partition, read after the quiet period.
        self._start_offsets: dict[int, int] | None = None

    def _member_cmd(self, name: str) -> list[str]:
        settings = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 1000, "retry.backoff.ms": 100,
                    "metadata.max.age.ms": 5000, "client.id": f"share-chaos-{name}", **self.client_settings}
        cmd = [sys.executable, "-m", "kclient.testing.share_chaos_member", "--bootstrap",
               self.bootstrap, "--topic", self.topic, "--group", self.group]
        for k, v in settings.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd

    def _start_member(self, slot: int) -> _Member:
        if not self.all_members:     # the first member: the group's configs first
            self._configure_group()
        return super()._start_member(slot)

    def _configure_group(self) -> None:
        from kclient.admin import KafkaAdminClient
        wanted = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(LOCK_MS)}
        with KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap) as admin:
            admin.alter_group_configs(self.group, wanted)
            self._wait(lambda: {k: e.value for k, e in admin.describe_group_configs(self.group, list(wanted)).items()}
                       == wanted, 30, "the share group's configs applied")

    def _formed(self) -> bool:
        return bool(self.history.deliveries)

    def _final_by_members(self, key: tuple[int, int]) -> bool:
        """An ACCEPT or REJECT the broker answered, or the delivery limit reached."""
        h: _ShareHistory = self.history  # type: ignore[assignment]
        return key in h.final or h.max_count.get(key, 0) >= DELIVERY_LIMIT

    def _handled(self, key: tuple[int, int], killed: set[str]) -> bool:
        """The record reached a final state: an ACCEPT or REJECT the broker took, the delivery
        limit, or an ACCEPT or REJECT of unknown outcome that the broker confirms."""
        if self._final_by_members(key):
            return True
        return (self._start_offsets is not None and key[1] < self._start_offsets.get(key[0], -1)
                and self._maybe_taken(key, killed))

    def _maybe_taken(self, key: tuple[int, int], killed: set[str]) -> bool:
        """An ACCEPT or REJECT of this record was sent and its member never learnt the outcome:
        the request went unanswered, or the member was killed before reporting the answer."""
        h: _ShareHistory = self.history  # type: ignore[assignment]
        entries = h.acks.get(key, ())
        for i, (_, member, ack, status) in enumerate(entries):
            if ack not in (ACCEPT, REJECT):
                continue
            if status == "unknown":
                return True
            if status == "sent" and member in killed and not any(
                    m == member and s != "sent" for _, m, _, s in entries[i + 1:]):
                return True
        return False

    def _read_start_offsets(self) -> None:
        """The broker's start offset of each share partition: the records before it are in a
        final state there."""
        from kclient.admin import KafkaAdminClient
        with KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap) as admin:
            offsets = admin.list_share_group_offsets(self.group, timeout_ms=5000)
        self._start_offsets = {tp.partition: info.start_offset for tp, info in offsets.items()
                               if tp.topic == self.topic}

    def _quiet(self, producer: _Producer) -> None:
        super()._quiet(producer)
        result: ShareChaosResult = self.result  # type: ignore[assignment]
        for member in self.all_members:
            if member.stop_requested and not member.killed and not member.closed.is_set() \
                    and member.name not in result.stuck_on_close:
                result.unclean_close.append(member.name)
                log.error("share chaos: member %s exited without closing cleanly; log %s", member.name,
                          member.log_path)
        try:
            self._read_start_offsets()     # for the report, and for a quiet period that ran out
        except Exception as exc:           # keeps the last reading: unconfirmed records count as lost
            log.warning("share chaos: could not read the group's start offsets: %r", exc)
        killed = self._killed()
        with self.history.lock:
            result.outcome_unknown = sum(1 for key in list(producer.acked)
                                         if not self._final_by_members(key) and self._maybe_taken(key, killed))
        result.start_offsets = dict(sorted((self._start_offsets or {}).items()))

    def _killed(self) -> set[str]:
        return {m.name for m in self.all_members if m.killed}

    def _caught_up(self, producer: _Producer) -> bool:
        """Every record is final by the members' reports; those whose final acknowledgement had
        an unknown outcome wait for the broker's start offset to pass them (or for a delivery
        again and its acknowledgement)."""
        killed = self._killed()
        with self.history.lock:
            pending = [key for key in list(producer.acked) if not self._final_by_members(key)]
            if not all(self._maybe_taken(key, killed) for key in pending):
                return False
        if not pending:
            return True
        self._read_start_offsets()
        offsets = self._start_offsets or {}
        return all(o < offsets.get(p, -1) for p, o in pending)

    def _settle(self, producer: _Producer) -> bool:
        """Chaos's wait, and a leader move for records the broker holds (see the module's doc)."""
        deadline = time.monotonic() + self.config.quiet_timeout_s
        what = "every acknowledged record in a final state"
        if self._wait(lambda: self._caught_up(producer), min(HELD_S, self.config.quiet_timeout_s), what, 0.5):
            return True
        held = self._held_by_broker(producer)
        if held:
            result: ShareChaosResult = self.result  # type: ignore[assignment]
            result.broker_held = {p: len(offsets) for p, offsets in sorted(held.items())}
            leaders: set[int] = set()
            for p, offsets in sorted(held.items()):
                node = self.cluster.leader_of(self.topic, p)
                leaders.add(node)
                log.warning("share chaos: partition %d: the broker holds %d record(s) from offset %d whose "
                            "acknowledgement had no answer; restarting its leader, broker %d", p, len(offsets),
                            min(offsets), node)
            for node in sorted(leaders):    # each once, whatever number of its partitions hold records
                self.cluster.stop_broker(node, timeout=30)
                self.cluster.start_broker(node)
        return self._wait(lambda: self._caught_up(producer), max(0.0, deadline - time.monotonic()), what, 0.5)

    def _held_by_broker(self, producer: _Producer) -> dict[int, list[int]]:
        """The records still pending, by partition, when every one of them is held by the broker:
        an ACCEPT or REJECT of unknown outcome, the broker's start offset not past it. Empty when
        any pending record is otherwise (a record merely waiting would be a loss to report, not
        something to move a leader for)."""
        killed = self._killed()
        with self.history.lock:
            pending = [key for key in list(producer.acked) if not self._final_by_members(key)]
            if not pending or not all(self._maybe_taken(key, killed) for key in pending):
                return {}
        try:
            self._read_start_offsets()
        except Exception as exc:    # a broker still starting: no verdict this time
            log.warning("share chaos: could not read the group's start offsets: %r", exc)
            return {}
        offsets = self._start_offsets or {}
        held: dict[int, list[int]] = defaultdict(list)
        for p, o in pending:
            if o >= offsets.get(p, -1):
                held[p].append(o)
        return dict(held)

    def _behind(self, producer: _Producer) -> Counter:
        killed = self._killed()
        with self.history.lock:
            return Counter(p for p, o in list(producer.acked) if not self._handled((p, o), killed))

    def _check(self, producer: _Producer) -> None:
        result: ShareChaosResult = self.result  # type: ignore[assignment]
        h: _ShareHistory = self.history  # type: ignore[assignment]
        acked = dict(producer.acked)
        result.produced, result.acknowledged, result.send_failures = producer.produced, len(acked), producer.failures
        result.killed = sorted(self._killed())
        killed = set(result.killed)
        with h.lock:
            rows = list(h.deliveries)
            result.deliveries = len(rows)
            result.poll_errors = h.poll_errors
            result.mismatched = sum(1 for _, _, p, o, v, _ in rows if (p, o) in acked and acked[(p, o)] != v)
            result.lost = sorted(key for key in acked if not self._handled(key, killed))
            taken = Counter(key for key, acks in h.acks.items() for _, _, ack, status in acks
                            if ack == ACCEPT and status == "ok")
            result.accepted_twice = sorted(key for key, n in taken.items() if n > 1)
            result.redelivered_after_final = sorted({(p, o) for t, _, p, o, _, _ in rows
                                                     if (p, o) in h.final and t > h.final[(p, o)]})
            result.accepted = sum(1 for key in taken)
            result.rejected = sum(1 for acks in h.acks.values()
                                  if any(a == REJECT and s == "ok" for _, _, a, s in acks))
            result.released = sum(1 for acks in h.acks.values() for _, _, a, s in acks if a == RELEASE and s == "ok")
            result.failed_acknowledgements = sum(1 for acks in h.acks.values() for *_, s in acks if s == "failed")
            result.archived = sum(1 for key, n in h.max_count.items() if n >= DELIVERY_LIMIT and key not in h.final)
            result.report.acknowledged = len(acked)
            result.report.delivered = len(h.delivered)
            for p, o in (result.lost + result.accepted_twice + result.redelivered_after_final)[:10]:
                seen = [f"{m} #{c} at {t:.3f}" for t, m, rp, ro, _, c in rows if (rp, ro) == (p, o)]
                acks = [f"{m} type {a} {s} at {t:.3f}" for t, m, a, s in h.acks.get((p, o), ())]
                result.explain.append(f"partition {p} offset {o}: delivered {seen or 'never'}; acknowledged {acks}; "
                                      f"broker start offset {result.start_offsets.get(p, 'unknown')}")
        log.info("share chaos: %s", {**result.criteria(), "acknowledged": result.acknowledged,
                                     "deliveries": result.deliveries, "faults": dict(result.faults)})
