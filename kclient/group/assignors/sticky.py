"""The "sticky" (KIP-54, KIP-341) and "cooperative-sticky" (KIP-429) assignors.

Goals, in priority order:
1. Balance. With identical subscriptions, partition counts differ by at most one. Otherwise no
   member holds 2+ fewer partitions than another member that has a partition it could take.
2. Stickiness. Keep as many partitions as possible with their previous owner.

Previous ownership comes from each member's subscription: for "sticky" from its user data
(the eager protocol revokes everything before joining, so the owned-partitions field is
empty), for "cooperative-sticky" from owned_partitions + generation_id (user data on
protocol versions < 2). Claims are resolved per partition: the claimant with the highest
generation keeps it; claimants tied at the highest generation all lose it (two members
cannot both have owned it in one generation: one of them is a zombie).

With identical subscriptions the result provably keeps the most partitions possible:
every member keeps min(owned, quota) and the members allowed one extra partition are chosen
among those that owned more than the quota. Otherwise unowned partitions go to the least
loaded eligible member (partitions with fewest eligible members first), then single
partitions move from the most loaded members while a move still narrows a gap of 2+,
moving partitions the donor did not previously own before ones it did.

Cooperative: a partition that moves between two current members is withheld from its new
owner for this generation; the old owner revokes it, rejoins, and the next rebalance hands
it over, so no partition is ever owned by two members at once.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
import logging
import struct
from typing import Mapping

from kclient.group.assignors.base import (
    AbstractPartitionAssignor,
    Assignment,
    RebalanceProtocol,
    Subscription,
    partitions_to_assign,
)
from kclient.group.classic_embedded_protocol import EmbeddedReader
from kclient.errors import ProtocolError
from kclient.structs import TopicPartition

log = logging.getLogger(__name__)

__all__ = [
    "StickyAssignor", "CooperativeStickyAssignor", "MemberData", "sticky_assign",
    "encode_sticky_user_data", "decode_sticky_user_data",
]

DEFAULT_GENERATION = -1
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True)
class MemberData:
    """What a member owned before this rebalance, and in which generation (-1: unknown)."""

    partitions: tuple[TopicPartition, ...] = ()
    generation: int = DEFAULT_GENERATION


# --------------------------------------------------------------------------- user data
def encode_sticky_user_data(partitions, generation: int) -> bytes:
    """StickyAssignor user data v1: previous_assignment [topic string, partitions [int32]],
    generation int32 (the layout Kafka's Java and librdkafka sticky assignors read)."""
    groups: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        groups.setdefault(topic, []).append(partition)
    out = bytearray(_I32.pack(len(groups)))
    for topic, parts in groups.items():
        raw = topic.encode("utf-8")
        out += _I16.pack(len(raw)) + raw + _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p)
    out += _I32.pack(generation)
    return bytes(out)


def decode_sticky_user_data(data: bytes | None) -> MemberData:
    """Read v1 (with generation), else v0 (without); unreadable data counts as owning nothing,
    as in Kafka: a peer's garbage must not break the whole group's assignment."""
    if not data:
        return MemberData()
    try:
        reader = EmbeddedReader(data, "sticky user data")
        partitions = reader.topic_partitions("previous_assignment")
    except ProtocolError as e:
        log.warning("ignoring unreadable sticky assignor user data: %s", e)
        return MemberData()
    try:
        generation = reader.int32("generation")
    except ProtocolError:
        generation = DEFAULT_GENERATION  # v0 user data has no generation
    return MemberData(tuple(partitions), generation)


# --------------------------------------------------------------------------- algorithm
def _resolve_ownership(
    partitions_per_topic: Mapping[str, int],
    topics_of: Mapping[str, frozenset],
    member_data: Mapping[str, MemberData],
) -> dict[TopicPartition, str]:
    """Each still-assignable partition's valid previous owner (highest generation wins)."""
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member in sorted(member_data):
        data = member_data[member]
        for tp in dict.fromkeys(data.partitions):  # dedupe, keep order
            count = partitions_per_topic.get(tp.topic)
            # A partition of a topic the member left, or that no longer exists, is not kept.
            if count is None or not 0 <= tp.partition < count or tp.topic not in topics_of[member]:
                continue
            claims.setdefault(tp, []).append((data.generation, member))
    owner: dict[TopicPartition, str] = {}
    for tp, claimants in claims.items():
        top = max(generation for generation, _ in claimants)
        winners = [m for generation, m in claimants if generation == top]
        if len(winners) == 1:
            owner[tp] = winners[0]
            if len(claimants) > 1:
                log.debug("%s claimed by %s; kept by %s (generation %d)", tp, claimants, winners[0], top)
        else:
            log.warning(
                "members %s all claim %s in generation %d; it is treated as unowned", winners, tp, top
            )
    return owner


def _assign_identical(
    all_parts: list[TopicPartition], members: list[str], owner: Mapping[TopicPartition, str]
) -> dict[str, list[TopicPartition]]:
    """All members subscribe to the same topics: fixed quotas, maximal stickiness."""
    quota, extra_slots = divmod(len(all_parts), len(members))
    owned_by: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for tp in all_parts:
        m = owner.get(tp)
        if m is not None:
            owned_by[m].append(tp)

    assignment: dict[str, list[TopicPartition]] = {}
    taken: set[TopicPartition] = set()
    for m in members:
        keep = quota
        # Only a member owning more than the quota gains from a quota+1 slot, so those slots
        # go to such members first: that is what makes the kept count maximal.
        if len(owned_by[m]) > quota and extra_slots > 0:
            keep += 1
            extra_slots -= 1
        assignment[m] = owned_by[m][:keep]
        taken.update(assignment[m])

    unassigned = iter([tp for tp in all_parts if tp not in taken])
    # Deal to members below quota in turn, so each topic's partitions spread across members.
    ring = deque(m for m in members if len(assignment[m]) < quota)
    while ring:
        m = ring.popleft()
        assignment[m].append(next(unassigned))
        if len(assignment[m]) < quota:
            ring.append(m)
    # What is left fills the remaining quota+1 slots, one per member at the quota.
    at_quota = iter([m for m in members if len(assignment[m]) == quota])
    for tp in unassigned:
        assignment[next(at_quota)].append(tp)
    return assignment


def _assign_general(
    all_parts: list[TopicPartition],
    members: list[str],
    topics_of: Mapping[str, frozenset],
    owner: Mapping[TopicPartition, str],
) -> dict[str, list[TopicPartition]]:
    """Members subscribe to different topics: greedy fill, then narrow every 2+ gap."""
    eligible: dict[str, list[str]] = {}
    for m in members:
        for topic in topics_of[m]:
            eligible.setdefault(topic, []).append(m)
    holding: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for tp, m in owner.items():
        holding[m].add(tp)

    # Partitions with the fewest possible owners first: they constrain the balance most.
    unowned = sorted((tp for tp in all_parts if tp not in owner), key=lambda tp: (len(eligible[tp.topic]), tp))
    for tp in unowned:
        m = min(eligible[tp.topic], key=lambda c: (len(holding[c]), c))
        holding[m].add(tp)

    # Each move from a donor with d partitions to a receiver with r < d - 1 lowers the sum of
    # squared counts, so this terminates; when it does, no such move is left (balance goal).
    moved = True
    while moved:
        moved = False
        for donor in sorted(members, key=lambda c: (-len(holding[c]), c)):
            # Partitions the donor did not own before move first: moving them costs nothing.
            for tp in sorted(holding[donor], key=lambda t: (owner.get(t) == donor, t)):
                if len(holding[donor]) < 2:
                    break
                receiver = min(
                    (c for c in eligible[tp.topic] if c != donor),
                    key=lambda c: (len(holding[c]), c),
                    default=None,
                )
                if receiver is not None and len(holding[receiver]) < len(holding[donor]) - 1:
                    holding[donor].discard(tp)
                    holding[receiver].add(tp)
                    moved = True
    return {m: sorted(holding[m]) for m in members}


def sticky_assign(
    partitions_per_topic: Mapping[str, int],
    topics_of: Mapping[str, frozenset],
    member_data: Mapping[str, MemberData],
) -> dict[str, list[TopicPartition]]:
    """The sticky assignment for members (id -> subscribed topics, previous ownership)."""
    members = sorted(topics_of)
    if not members:
        return {}
    subs = {m: Subscription(topics=tuple(sorted(topics_of[m]))) for m in members}
    all_parts = partitions_to_assign(partitions_per_topic, subs)
    owner = _resolve_ownership(partitions_per_topic, topics_of, member_data)
    first = topics_of[members[0]]
    if all(topics_of[m] == first for m in members):
        result = _assign_identical(all_parts, members, owner)
    else:
        result = _assign_general(all_parts, members, topics_of, owner)
    return {m: sorted(parts) for m, parts in result.items()}


# --------------------------------------------------------------------------- assignors
class _AbstractStickyAssignor(AbstractPartitionAssignor):
    def _member_data(self, subscription: Subscription) -> MemberData:
        raise NotImplementedError

    def _sticky(self, partitions_per_topic, subscriptions) -> dict[str, list[TopicPartition]]:
        topics_of = {m: frozenset(s.topics) for m, s in subscriptions.items()}
        data = {m: self._member_data(s) for m, s in subscriptions.items()}
        return sticky_assign(partitions_per_topic, topics_of, data)

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        result = self._sticky(partitions_per_topic, subscriptions)
        return {m: Assignment(partitions=tuple(parts)) for m, parts in result.items()}


class StickyAssignor(_AbstractStickyAssignor):
    """Eager sticky assignor: remembers its last assignment and sends it as user data."""

    name = "sticky"

    def __init__(self) -> None:
        self._member_assignment: tuple[TopicPartition, ...] | None = None
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        if self._member_assignment is None:
            return None
        return encode_sticky_user_data(self._member_assignment, self._generation)

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        self._member_assignment = tuple(assignment.partitions)
        self._generation = generation

    def _member_data(self, subscription: Subscription) -> MemberData:
        # Always user data: under the eager protocol owned_partitions is empty at join time.
        return decode_sticky_user_data(subscription.user_data)


class CooperativeStickyAssignor(_AbstractStickyAssignor):
    """Sticky assignment under the cooperative protocol (KIP-429); Kafka's default second choice."""

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def __init__(self) -> None:
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: set[str]) -> bytes | None:
        # Members on protocol versions < 2 have no generation field; Kafka sends it here too.
        return _I32.pack(self._generation)

    def on_assignment(self, assignment: Assignment, generation: int) -> None:
        self._generation = generation

    def _member_data(self, subscription: Subscription) -> MemberData:
        if subscription.generation_id >= 0:
            return MemberData(subscription.owned_partitions, subscription.generation_id)
        data = subscription.user_data
        if data is None:
            generation = DEFAULT_GENERATION
        elif len(data) >= 4:
            generation = _I32.unpack_from(data)[0]
        else:
            log.warning("ignoring unreadable cooperative-sticky user data (%d bytes)", len(data))
            generation = DEFAULT_GENERATION
        return MemberData(subscription.owned_partitions, generation)

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        result = self._sticky(partitions_per_topic, subscriptions)
        withhold_transfers(result, {m: s.owned_partitions for m, s in subscriptions.items()})
        return {m: Assignment(partitions=tuple(parts)) for m, parts in result.items()}


def withhold_transfers(assignment: dict[str, list[TopicPartition]], owned: Mapping[str, tuple]) -> None:
    """Remove from ``assignment`` (in place) every partition that a current member owns but
    loses this round: its new owner gets it only after the old owner has revoked it."""
    revoked: set[TopicPartition] = set()
    for m, parts in assignment.items():
        revoked.update(set(owned.get(m, ())) - set(parts))
    if not revoked:
        return
    for m, parts in assignment.items():
        mine = set(owned.get(m, ()))
        kept = [tp for tp in parts if tp in mine or tp not in revoked]
        if len(kept) != len(parts):
            log.debug("withholding %s from %s until revoked", sorted(set(parts) - set(kept)), m)
            assignment[m] = kept
