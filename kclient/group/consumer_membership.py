"""Membership of one member in a KIP-848 consumer group: the state machine, without I/O.

The consumer group protocol (``group.protocol=consumer``, Kafka 4) replaces JoinGroup /
SyncGroup / Heartbeat / LeaveGroup with one request, ConsumerGroupHeartbeat (api 68). The
broker runs the assignor; each heartbeat answer may carry the member's *target* assignment
(topic ids and partitions) and its member epoch. The member reconciles towards the target
incrementally: it gives up (revokes) what it no longer owns first, then takes what is new,
and tells the broker what it owns in its next heartbeat.

States (KIP-848, "Consumer Group Membership"):

    UNSUBSCRIBED --subscribe--> JOINING (epoch 0 heartbeat)
    JOINING / STABLE --answer with a new target--> RECONCILING
    RECONCILING --callbacks done, owned set updated--> ACKNOWLEDGING (send owned at once)
    ACKNOWLEDGING --heartbeat sent--> STABLE
    any --FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID--> FENCED (partitions lost) --> JOINING (epoch 0)
    any --close / unsubscribe--> PREPARE_LEAVING (revoke callbacks) --> LEAVING (epoch -1, or
        -2 for a static member) --sent--> UNSUBSCRIBED
    any --non-retriable error--> FATAL

This class only decides: it builds request bodies and digests answers; the coordinator
(kclient.group.consumer_group_coordinator) sends, runs listeners on the application thread and
resolves topic ids. Heartbeats go out through one method there (``_send_heartbeat``), so a
different sender (e.g. a GIL-free pacemaker) can take over without touching this logic.
"""
from __future__ import annotations

import enum
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from kclient.group.heartbeat_answer import (
    answer_error, answered_assignment, fences_member, is_fatal, take_member_fields,
)

__all__ = ["MemberState", "ConsumerMembership", "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "JOIN_EPOCH"]

log = logging.getLogger(__name__)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1          # a dynamic member leaves: the broker reassigns its partitions now
STATIC_LEAVE_EPOCH = -2   # a static member leaves temporarily: its partitions wait for it


class MemberState(enum.Enum):
    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    RECONCILING = "RECONCILING"
    ACKNOWLEDGING = "ACKNOWLEDGING"
    STABLE = "STABLE"
    FENCED = "FENCED"
    PREPARE_LEAVING = "PREPARE_LEAVING"
    LEAVING = "LEAVING"
    FATAL = "FATAL"


#: States in which the member heartbeats on its interval.
HEARTBEATING = frozenset({MemberState.JOINING, MemberState.RECONCILING, MemberState.ACKNOWLEDGING,
                          MemberState.STABLE})


@dataclass
class ConsumerMembership:
    group_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300000
    server_assignor: str | None = None
    member_id: str = field(default_factory=lambda: uuid.uuid4().hex)   # KIP-1082: the client makes it
    member_epoch: int = JOIN_EPOCH
    state: MemberState = MemberState.UNSUBSCRIBED
    heartbeat_interval_ms: int = 5000
    #: What the broker wants this member to own: {topic_id: frozenset(partitions)}; None: no news.
    target: dict[Any, frozenset[int]] | None = None
    #: The target of the last answer that carried one (kept while reconciling).
    target_epoch: int = JOIN_EPOCH
    #: What this member owns (after its callbacks ran), by topic id, as reported to the broker.
    owned: dict[Any, frozenset[int]] = field(default_factory=dict)
    fatal_error: BaseException | None = None

    # ------------------------------------------------------------------ transitions
    def subscribe(self) -> None:
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.FENCED):
            self._to(MemberState.JOINING, "subscribed")
            self.member_epoch = JOIN_EPOCH

    def in_group(self) -> bool:
        return self.state in HEARTBEATING and self.member_epoch > 0

    def fenced(self, reason: str) -> None:
        """The broker no longer knows this epoch: the caller reports the owned partitions lost,
        then calls ``rejoin``."""
        self._to(MemberState.FENCED, reason)
        self.target = None

    def rejoin(self) -> None:
        self.owned = {}
        self.member_epoch = JOIN_EPOCH
        self._to(MemberState.JOINING, "rejoining after being fenced")

    def reconciled(self, owned: dict[Any, frozenset[int]]) -> None:
        """The callbacks ran and the member now owns ``owned``: acknowledge it at once."""
        self.owned = dict(owned)
        if self.state is MemberState.RECONCILING:
            self._to(MemberState.ACKNOWLEDGING, "reconciled")

    def prepare_leaving(self) -> None:
        if self.state not in (MemberState.UNSUBSCRIBED, MemberState.FATAL):
            self._to(MemberState.PREPARE_LEAVING, "leaving")

    def leave_epoch(self) -> int:
        return STATIC_LEAVE_EPOCH if self.instance_id is not None else LEAVE_EPOCH

    def _to(self, state: MemberState, why: str) -> None:
        if state is not self.state:
            log.debug("member %s of group %s: %s -> %s (%s)", self.member_id, self.group_id,
                      self.state.value, state.value, why)
            self.state = state

    # ------------------------------------------------------------------ requests
    def heartbeat_body(self, topics: list[str] | None, regex: str | None, leaving: bool = False) -> dict:
        """A full ConsumerGroupHeartbeat: every field is sent each time, which the broker
        treats like "unchanged" when it is (simpler than tracking what was last sent, and a
        lost answer cannot leave the broker with stale state)."""
        if leaving:
            return {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": self.leave_epoch(),
                    "instance_id": self.instance_id, "rack_id": None, "rebalance_timeout_ms": -1,
                    "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
                    "topic_partitions": None}
        return {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": self.member_epoch,
                "instance_id": self.instance_id, "rack_id": self.rack_id,
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "subscribed_topic_names": None if regex is not None else list(topics or ()),
                "subscribed_topic_regex": regex, "server_assignor": self.server_assignor,
                "topic_partitions": [{"topic_id": tid, "partitions": sorted(ps)}
                                     for tid, ps in sorted(self.owned.items(), key=lambda kv: str(kv[0]))]}

    def sent(self) -> None:
        """A heartbeat left: an acknowledgement is done once it is sent (the broker answers
        with the same target, or a newer one)."""
        if self.state is MemberState.ACKNOWLEDGING:
            self._to(MemberState.STABLE, "acknowledged")
        elif self.state is MemberState.LEAVING:
            self._to(MemberState.UNSUBSCRIBED, "left")

    # ------------------------------------------------------------------ answers
    def on_response(self, response: dict) -> BaseException | None:
        """Digest an answer; returns the error to act on (None: nothing to do)."""
        if self.state in (MemberState.UNSUBSCRIBED, MemberState.PREPARE_LEAVING, MemberState.LEAVING,
                          MemberState.FENCED, MemberState.FATAL):
            # An answer to a heartbeat sent before the member left or was fenced: acting on it
            # would resurrect an epoch the member has given up (its partitions are to be lost).
            return None
        err = answer_error(response)
        if err is not None:
            if fences_member(err):
                self.fenced(f"{type(err).__name__} at epoch {self.member_epoch}")
            elif is_fatal(err):
                self.fatal_error = err
                self._to(MemberState.FATAL, repr(err))
            return err
        take_member_fields(self, response)
        target = answered_assignment(response)
        if target is not None:
            self.target = target
            self.target_epoch = self.member_epoch
            if self.target != self.owned or self.state is MemberState.JOINING:
                self._to(MemberState.RECONCILING, f"new target at epoch {self.member_epoch}")
            else:
                self._to(MemberState.STABLE, "target already owned")
        elif self.state is MemberState.JOINING and self.member_epoch > 0:
            self._to(MemberState.STABLE, "joined with nothing to reconcile")
        return None
