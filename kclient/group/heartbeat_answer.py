"""What a KIP-848-style heartbeat answer says, read the same way for consumer groups
(ConsumerGroupHeartbeat) and share groups (ShareGroupHeartbeat): both answers carry an error,
the member id and epoch, the heartbeat interval and, when it changed, the assignment by topic
id. Each membership decides what the answer does to its own state machine.
"""
from __future__ import annotations

from typing import Any, Protocol

from kclient import errors as Errors

__all__ = ["answer_error", "fences_member", "is_fatal", "take_member_fields", "answered_assignment"]

#: Errors after which the member finds its coordinator again and retries.
_COORDINATOR_ERRORS = (Errors.NotCoordinatorError, Errors.CoordinatorNotAvailableError)


class _Member(Protocol):
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int


def answer_error(response: dict) -> BaseException | None:
    """The error the answer carries, with the broker's message when it sent one."""
    code = response.get("error_code", 0)
    if not code:
        return None
    cls = Errors.error_class(code)
    message = response.get("error_message")
    return cls(message) if message else cls()


def fences_member(error: BaseException) -> bool:
    """The broker no longer knows the member or its epoch: it must rejoin at epoch 0."""
    return isinstance(error, (Errors.FencedMemberEpochError, Errors.UnknownMemberIdError))


def is_fatal(error: BaseException) -> bool:
    """Neither retriable nor cured by finding the coordinator again."""
    return not getattr(error, "retriable", False) and not isinstance(error, _COORDINATOR_ERRORS)


def take_member_fields(member: _Member, response: dict) -> None:
    """The member id (when the broker names one), the epoch and the heartbeat interval of a
    good answer."""
    if response.get("member_id"):
        member.member_id = response["member_id"]
    member.member_epoch = response["member_epoch"]
    interval = response.get("heartbeat_interval_ms")
    if interval and interval > 0:
        member.heartbeat_interval_ms = interval


def answered_assignment(response: dict) -> dict[Any, frozenset[int]] | None:
    """{topic_id: partitions} without empty entries; None: the answer leaves it unchanged."""
    assignment = response.get("assignment")
    if assignment is None:
        return None
    target = {tp["topic_id"]: frozenset(tp["partitions"]) for tp in assignment["topic_partitions"]}
    return {tid: ps for tid, ps in target.items() if ps}
