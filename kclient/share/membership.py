"""Membership of one member in a share group (KIP-932): the state machine, without I/O.

A share group has one request for membership, ShareGroupHeartbeat (api 76). The member sends
its subscription; the broker runs the assignor and answers with the member epoch, the
heartbeat interval and, when it changed, the member's assignment (topic ids and partitions).
Unlike a consumer group there is nothing to reconcile: a partition is shared, records are
locked one by one, so a share member takes its new assignment at once and gives up a partition
without revoking anything (its records' locks run out or are released).

States:

    UNSUBSCRIBED --subscribe--> JOINING (epoch 0 heartbeat)
    JOINING --answer with epoch > 0--> STABLE
    any --FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID--> FENCED (assignment dropped) --rejoin--> JOINING
    any --leave--> LEAVING (epoch -1) --sent--> UNSUBSCRIBED
    any --non-retriable error--> FATAL

The member id is made here, once, by the client (as for KIP-848 members) and kept across
rejoins. This class only decides: the coordinator (kclient.share.coordinator) sends the bodies
it builds and feeds it the answers.
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

__all__ = ["ShareMemberState", "ShareMembership", "JOIN_EPOCH", "LEAVE_EPOCH"]

log = logging.getLogger(__name__)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1


class ShareMemberState(enum.Enum):
    UNSUBSCRIBED = "UNSUBSCRIBED"
    JOINING = "JOINING"
    STABLE = "STABLE"
    FENCED = "FENCED"
    LEAVING = "LEAVING"
    FATAL = "FATAL"


#: States in which the member heartbeats on its interval.
HEARTBEATING = frozenset({ShareMemberState.JOINING, ShareMemberState.STABLE})


@dataclass
class ShareMembership:
    group_id: str
    rack_id: str | None = None
    member_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    member_epoch: int = JOIN_EPOCH
    state: ShareMemberState = ShareMemberState.UNSUBSCRIBED
    #: Until the broker says otherwise (group.share.heartbeat.interval.ms, 5000 by default).
    heartbeat_interval_ms: int = 5000
    #: The partitions the broker assigned: {topic_id: frozenset(partitions)}.
    assignment: dict[Any, frozenset[int]] = field(default_factory=dict)
    #: Bumped whenever ``assignment`` changes, so a reader notices without comparing sets.
    assignment_version: int = 0
    fatal_error: BaseException | None = None

    # ------------------------------------------------------------------ transitions
    def subscribe(self) -> None:
        if self.state in (ShareMemberState.UNSUBSCRIBED, ShareMemberState.FENCED):
            self.member_epoch = JOIN_EPOCH
            self._to(ShareMemberState.JOINING, "subscribed")

    def in_group(self) -> bool:
        return self.state is ShareMemberState.STABLE and self.member_epoch > 0

    def fenced(self, reason: str) -> None:
        """The broker no longer knows this member or epoch: its assignment is gone."""
        self._set_assignment({})
        self._to(ShareMemberState.FENCED, reason)

    def rejoin(self) -> None:
        """Join again with epoch 0 and the same member id."""
        if self.state is ShareMemberState.FENCED:
            self.member_epoch = JOIN_EPOCH
            self._to(ShareMemberState.JOINING, "rejoining after being fenced")

    def leave(self) -> bool:
        """Start leaving; False if there is nothing to leave (never joined, or already out)."""
        if self.state in (ShareMemberState.UNSUBSCRIBED, ShareMemberState.FATAL, ShareMemberState.LEAVING):
            return False
        joined = self.member_epoch > 0
        self._set_assignment({})
        if not joined:
            self.member_epoch = JOIN_EPOCH
            self._to(ShareMemberState.UNSUBSCRIBED, "left before joining")
            return False
        self._to(ShareMemberState.LEAVING, "leaving")
        return True

    def fail(self, error: BaseException) -> None:
        """An error the member cannot get past (the application's next poll raises it)."""
        self.fatal_error = error
        self._set_assignment({})
        self._to(ShareMemberState.FATAL, repr(error))

    def _to(self, state: ShareMemberState, why: str) -> None:
        if state is not self.state:
            log.debug("share member %s of group %s: %s -> %s (%s)", self.member_id, self.group_id,
                      self.state.value, state.value, why)
            self.state = state

    def _set_assignment(self, assignment: dict[Any, frozenset[int]]) -> None:
        if assignment != self.assignment:
            self.assignment = assignment
            self.assignment_version += 1

    # ------------------------------------------------------------------ requests
    def heartbeat_body(self, topics: list[str]) -> dict:
        """A ShareGroupHeartbeat. The subscription is sent each time: the broker treats an
        unchanged one like "no change", and a lost answer cannot leave it with stale state."""
        if self.state is ShareMemberState.LEAVING:
            return {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": LEAVE_EPOCH,
                    "rack_id": None, "subscribed_topic_names": None}
        return {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": self.member_epoch,
                "rack_id": self.rack_id, "subscribed_topic_names": sorted(topics)}

    def sent(self) -> None:
        """A heartbeat left: a leave is done once it is sent."""
        if self.state is ShareMemberState.LEAVING:
            self.member_epoch = JOIN_EPOCH
            self._to(ShareMemberState.UNSUBSCRIBED, "left")

    # ------------------------------------------------------------------ answers
    def on_response(self, response: dict) -> BaseException | None:
        """Digest an answer; returns the error to act on (None: nothing to do)."""
        if self.state not in HEARTBEATING:
            # An answer to a heartbeat sent before the member left or was fenced: acting on it
            # would bring back an epoch the member has given up.
            return None
        err = answer_error(response)
        if err is not None:
            if fences_member(err):
                self.fenced(f"{type(err).__name__} at epoch {self.member_epoch}")
            elif is_fatal(err):
                self.fail(err)
            return err
        take_member_fields(self, response)
        assignment = answered_assignment(response)
        if assignment is not None:
            self._set_assignment(assignment)
        if self.member_epoch > 0:
            self._to(ShareMemberState.STABLE, f"epoch {self.member_epoch}")
        return None
