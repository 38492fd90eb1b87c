"""What the consumer is subscribed to, what it is assigned, and where it is in each partition.

Follows Kafka's Java SubscriptionState. A consumer uses exactly one of: a topic list
(AUTO_TOPICS), a regex (AUTO_PATTERN) — both group-managed — or a manual assignment
(USER_ASSIGNED); mixing them raises IllegalStateError until ``unsubscribe()``.

Each assigned partition has a fetch state:
  INITIALIZING      just assigned; needs a committed offset or a reset
  AWAIT_RESET       a reset (earliest/latest) was requested; ListOffsets pending
  AWAIT_VALIDATION  position known but must be checked against the leader's epoch
  FETCHING          position valid; fetchable unless paused or pending revocation
Invalid transitions are ignored (as in Kafka): e.g. a validation request does not override
a pending reset. Pause state and position survive only for partitions that stay assigned.

Pattern subscriptions match whole topic names (``re.fullmatch``, Java's ``Matcher.matches``;
kafka-python matched only a prefix) and skip internal topics while
``exclude.internal.topics`` is true.

Threads: the application thread owns this object. The coordinator's assignment callbacks
also run on the application thread (inside ``poll()``); the heartbeat thread never touches
it. A re-entrant lock still guards every method that reads or writes more than one field
(the few that read a single attribute, e.g. ``has_auto_assigned_partitions``, need none), so
a read from another thread (metrics, a rebalance listener running elsewhere) sees a
consistent state and never a half-applied assignment.
"""
from __future__ import annotations

from dataclasses import dataclass
import enum
import functools
import logging
import re
import threading
from typing import Callable, Iterable

from kclient.errors import (
    ConfigurationError,
    IllegalArgumentError,
    IllegalStateError,
    NoOffsetForPartitionError,
)
from kclient.config.durations import by_duration_ms
from kclient.subscription.listener import validate_listener
from kclient.structs import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

__all__ = [
    "SubscriptionState", "SubscriptionType", "FetchState", "FetchPosition", "Truncation",
    "OffsetResetStrategy", "parse_reset_strategy", "INTERNAL_TOPICS", "ensure_valid_topic_name",
]

SUBSCRIPTION_EXCEPTION_MESSAGE = (
    "Subscription to topics, partitions and pattern are mutually exclusive: choose one of"
    " (1) subscribe to topics by name, (2) subscribe to topics matching a regex pattern,"
    " (3) assign specific topic-partitions; call unsubscribe() before switching."
)

# Kafka's internal topics (org.apache.kafka.common.internals.Topic); metadata responses also
# flag them, and callers may pass those flags in addition.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

_TOPIC_MAX_LENGTH = 249
_TOPIC_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


class SubscriptionType(enum.Enum):
    NONE = "NONE"
    AUTO_TOPICS = "AUTO_TOPICS"
    AUTO_PATTERN = "AUTO_PATTERN"
    USER_ASSIGNED = "USER_ASSIGNED"


class FetchState(enum.Enum):
    INITIALIZING = "INITIALIZING"
    FETCHING = "FETCHING"
    AWAIT_RESET = "AWAIT_RESET"
    AWAIT_VALIDATION = "AWAIT_VALIDATION"

    @property
    def requires_position(self) -> bool:
        return self in (FetchState.FETCHING, FetchState.AWAIT_VALIDATION)

    @property
    def has_valid_position(self) -> bool:
        return self is FetchState.FETCHING


_VALID_TRANSITIONS = {
    FetchState.INITIALIZING: frozenset({FetchState.FETCHING, FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION}),
    FetchState.FETCHING: frozenset({FetchState.FETCHING, FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION}),
    FetchState.AWAIT_RESET: frozenset({FetchState.FETCHING, FetchState.AWAIT_RESET}),
    FetchState.AWAIT_VALIDATION: frozenset({FetchState.FETCHING, FetchState.AWAIT_RESET, FetchState.AWAIT_VALIDATION}),
}


_FETCHING = FetchState.FETCHING
_AWAIT_VALIDATION = FetchState.AWAIT_VALIDATION


class OffsetResetStrategy(str, enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"
    BY_DURATION = "by_duration"  # KIP-1106; how far back: SubscriptionState.reset_duration_ms


_RESET_ALIASES = {"smallest": "earliest", "largest": "latest"}  # old names kafka-python accepts


def parse_reset_strategy(value) -> OffsetResetStrategy:
    """``auto.offset.reset`` value -> OffsetResetStrategy; ConfigurationError naming the setting."""
    if isinstance(value, OffsetResetStrategy):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        key = _RESET_ALIASES.get(key, key)
        if by_duration_ms(value) is not None:
            return OffsetResetStrategy.BY_DURATION
        try:
            return OffsetResetStrategy(key)
        except ValueError:
            pass
    raise ConfigurationError(
        f"auto.offset.reset: {value!r} is not one of 'earliest', 'latest', 'none'"
    )


def ensure_valid_topic_name(topic) -> str:
    """Kafka's topic name rules (Topic.validate); TypeError/IllegalArgumentError otherwise."""
    if not isinstance(topic, str):
        raise TypeError(f"topic names must be str, got {type(topic).__name__}")
    if not topic:
        raise IllegalArgumentError("topic name is empty")
    if topic in (".", ".."):
        raise IllegalArgumentError(f"topic name cannot be {topic!r}")
    if len(topic) > _TOPIC_MAX_LENGTH:
        raise IllegalArgumentError(
            f"topic name {topic!r} is longer than {_TOPIC_MAX_LENGTH} characters"
        )
    if not _TOPIC_LEGAL.fullmatch(topic):
        raise IllegalArgumentError(
            f"topic name {topic!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
        )
    return topic


@dataclass(frozen=True, init=False)
class FetchPosition:
    """Next offset to fetch; ``offset_epoch``: leader epoch of the record before it (for
    truncation detection); ``current_leader_epoch``: the leader epoch it was obtained under."""

    offset: int
    offset_epoch: int | None = None
    current_leader_epoch: int | None = None

    def __init__(self, offset: int, offset_epoch: int | None = None, current_leader_epoch: int | None = None):
        # Every poll makes one per partition it drained: the fields go into the instance's
        # dict in one step, where a frozen dataclass's generated __init__ makes one
        # object.__setattr__ call per field (twice the time). Still frozen for everyone else.
        self.__dict__.update(offset=offset, offset_epoch=offset_epoch, current_leader_epoch=current_leader_epoch)


@dataclass(frozen=True)
class Truncation:
    """The outcome of a validation that found the log diverging below ``position``.
    ``divergent``: where it diverges (None: the leader knows no epoch that old); ``reset``:
    the position already moved there (a reset policy is set), else the caller raises."""

    tp: TopicPartition
    position: FetchPosition
    divergent: OffsetAndMetadata | None
    reset: bool = False


class TopicPartitionState:
    __slots__ = (
        "fetch_state", "position", "high_watermark", "log_start_offset", "last_stable_offset",
        "paused", "pending_revocation", "reset_strategy", "next_retry_time_ms",
    )

    def __init__(self) -> None:
        self.fetch_state = FetchState.INITIALIZING
        self.position: FetchPosition | None = None
        self.high_watermark: int | None = None
        self.log_start_offset: int | None = None
        self.last_stable_offset: int | None = None
        self.paused = False
        self.pending_revocation = False
        self.reset_strategy: OffsetResetStrategy | None = None
        self.next_retry_time_ms: int | None = None

    def transition(self, new_state: FetchState, apply: Callable[[], None] | None = None) -> bool:
        if new_state not in _VALID_TRANSITIONS[self.fetch_state]:
            return False
        self.fetch_state = new_state
        if apply is not None:
            apply()
        if self.position is None and new_state.requires_position:
            raise IllegalStateError(f"fetch state {new_state.name} needs a position, and there is none")
        return True

    @property
    def has_valid_position(self) -> bool:
        return self.fetch_state.has_valid_position

    @property
    def is_fetchable(self) -> bool:
        return not self.paused and not self.pending_revocation and self.fetch_state.has_valid_position

    def awaiting_retry_backoff(self, now_ms: int) -> bool:
        return self.next_retry_time_ms is not None and now_ms < self.next_retry_time_ms

    def seek_validated(self, position: FetchPosition) -> None:
        def apply() -> None:
            self.position = position
            self.reset_strategy = None
            self.next_retry_time_ms = None

        self.transition(FetchState.FETCHING, apply)

    def reset(self, strategy: OffsetResetStrategy) -> None:
        def apply() -> None:
            self.reset_strategy = strategy
            self.next_retry_time_ms = None

        self.transition(FetchState.AWAIT_RESET, apply)


def _synchronized(method):
    # The methods the fetch path calls every poll take the lock themselves (``with
    # self._lock:`` in their body): this wrapper is one more Python call each time.
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


def _changing(method):
    # Methods that can change what the fetcher would fetch (the fetchable partitions, their
    # positions other than by records handed out, the assignment): each bumps ``changes``,
    # which the fetcher's per-round requests go by (FetchRequests.send_fetches).
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            self._changes += 1
            return method(self, *args, **kwargs)

    return wrapper


def _as_partition(tp) -> TopicPartition:
    try:
        topic, partition = tp
    except (TypeError, ValueError):
        raise TypeError(f"expected a TopicPartition, got {tp!r}") from None
    ensure_valid_topic_name(topic)
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise IllegalArgumentError(f"invalid partition number {partition!r} for topic {topic!r}")
    return TopicPartition(topic, partition)


def _partition_list(partitions) -> list[TopicPartition]:
    if isinstance(partitions, (str, bytes)) or (
        isinstance(partitions, tuple) and len(partitions) == 2 and isinstance(partitions[0], str)
    ):
        raise TypeError("expected a collection of TopicPartition, got a single value")
    return [_as_partition(tp) for tp in partitions]


class SubscriptionState:
    def __init__(self, default_reset_strategy="latest", exclude_internal_topics: bool = True):
        self._lock = threading.RLock()
        self._default_reset_strategy = parse_reset_strategy(default_reset_strategy)
        self.reset_duration_ms = (by_duration_ms(default_reset_strategy)
                                  if isinstance(default_reset_strategy, str) else None)
        self._exclude_internal_topics = bool(exclude_internal_topics)
        self._type = SubscriptionType.NONE
        self._pattern: re.Pattern | None = None
        # Topics subscribed to, or (USER_ASSIGNED) the topics of the assigned partitions.
        self._subscription: frozenset[str] = frozenset()
        self._group_subscription: frozenset[str] = frozenset()
        self._assignment: dict[TopicPartition, TopicPartitionState] = {}
        self._listener = None
        self._assignment_id = 0
        self._changes = 0
        # (changes, the fetchable partitions then): what is fetchable changes only with a
        # change counted in ``changes``, so a drain per poll reads it without the lock.
        self._fetchable: tuple[int, frozenset[TopicPartition]] = (-1, frozenset())
        self._all_fetching: tuple[int, bool] = (-1, False)     # has_all_fetch_positions, the same way

    # ------------------------------------------------------------------ subscription type
    def _set_subscription_type(self, kind: SubscriptionType) -> None:
        if self._type is SubscriptionType.NONE:
            self._type = kind
        elif self._type is not kind:
            raise IllegalStateError(SUBSCRIPTION_EXCEPTION_MESSAGE)

    @property
    def subscription_type(self) -> SubscriptionType:
        return self._type

    def has_auto_assigned_partitions(self) -> bool:
        """Group-managed (topics or pattern), as opposed to manual assignment or nothing."""
        # One attribute read (atomic under the GIL): no lock, it is asked several times per poll.
        kind = self._type  # identity tests: enum members hash in Python code
        return kind is SubscriptionType.AUTO_TOPICS or kind is SubscriptionType.AUTO_PATTERN

    partitions_auto_assigned = has_auto_assigned_partitions  # kafka-python's name

    def has_pattern_subscription(self) -> bool:
        return self._type is SubscriptionType.AUTO_PATTERN

    def has_no_subscription_or_user_assignment(self) -> bool:
        return self._type is SubscriptionType.NONE

    # ------------------------------------------------------------------ subscribing
    @_synchronized
    def subscribe(self, topics: Iterable[str], listener=None) -> bool:
        """Subscribe to a topic list; True if the topic set changed."""
        if isinstance(topics, (str, bytes)):
            raise TypeError("topics must be a collection of topic names, not a single string")
        topic_set = frozenset(ensure_valid_topic_name(t) for t in topics)
        validate_listener(listener)
        self._set_subscription_type(SubscriptionType.AUTO_TOPICS)
        self._listener = listener
        return self._change_subscription(topic_set)

    @_synchronized
    def subscribe_pattern(self, pattern, listener=None) -> None:
        """Subscribe to every topic whose whole name matches ``pattern`` (str or re.Pattern)."""
        if isinstance(pattern, str):
            try:
                compiled = re.compile(pattern)
            except re.error as e:
                raise IllegalArgumentError(f"invalid topic pattern {pattern!r}: {e}") from None
        elif isinstance(pattern, re.Pattern):
            compiled = pattern
        else:
            raise TypeError(f"pattern must be a str or re.Pattern, got {type(pattern).__name__}")
        validate_listener(listener)
        self._set_subscription_type(SubscriptionType.AUTO_PATTERN)
        self._listener = listener
        self._pattern = compiled

    @_synchronized
    def subscribe_from_pattern(self, topics: Iterable[str]) -> bool:
        """Set the topics a pattern currently matches (after a metadata update); True if changed."""
        if self._type is not SubscriptionType.AUTO_PATTERN:
            raise IllegalStateError(
                f"subscribe_from_pattern needs a pattern subscription, not {self._type.name}"
            )
        return self._change_subscription(frozenset(topics))

    def _change_subscription(self, topics: frozenset[str]) -> bool:
        if topics == self._subscription:
            return False
        self._subscription = topics
        return True

    @_changing
    def unsubscribe(self) -> None:
        self._subscription = frozenset()
        self._group_subscription = frozenset()
        self._assignment = {}
        self._pattern = None
        self._listener = None
        self._type = SubscriptionType.NONE
        self._assignment_id += 1

    @property
    def subscription(self) -> frozenset[str]:
        """Topics subscribed to (group-managed only; empty under manual assignment)."""
        with self._lock:
            if self.has_auto_assigned_partitions():
                return self._subscription
            return frozenset()

    @property
    def subscribed_pattern(self) -> re.Pattern | None:
        return self._pattern

    @property
    def rebalance_listener(self):
        return self._listener

    @property
    def changes(self) -> int:
        """Bumped by every change of what is fetched other than positions moving on with the
        records handed out (assignment, pause, resume, seek, reset, validation, revocation):
        a fetcher that saw the same value has nothing to look up again."""
        return self._changes

    @property
    def assignment_id(self) -> int:
        """Bumped on every assignment change, so in-flight results for an old one can be dropped."""
        return self._assignment_id

    # ------------------------------------------------------------------ metadata hooks
    def _is_internal(self, topic: str, internal_topics: Iterable[str]) -> bool:
        return topic in INTERNAL_TOPICS or topic in internal_topics

    @_synchronized
    def topics_matching_pattern(self, topics: Iterable[str], internal_topics: Iterable[str] = ()) -> set[str]:
        """The metadata topics the pattern selects (internal ones skipped if excluded)."""
        pattern = self._pattern
        if self._type is not SubscriptionType.AUTO_PATTERN or pattern is None:
            return set()
        internal = frozenset(internal_topics)
        return {
            t for t in topics
            if pattern.fullmatch(t)
            and not (self._exclude_internal_topics and self._is_internal(t, internal))
        }

    @_synchronized
    def matches_subscription(self, topic: str, is_internal: bool = False) -> bool:
        """Whether ``topic`` belongs to this member's subscription; called per topic on each
        metadata update (pattern re-matching, partition-count snapshots)."""
        if self._type is SubscriptionType.AUTO_PATTERN:
            if self._pattern is None or not self._pattern.fullmatch(topic):
                return False
            return not (self._exclude_internal_topics and (is_internal or topic in INTERNAL_TOPICS))
        if self._type is SubscriptionType.NONE:
            return False
        return topic in self._subscription

    @_synchronized
    def group_subscribe(self, topics: Iterable[str]) -> bool:
        """Leader: track every member's topics so metadata covers them; True if some are
        outside this member's own subscription."""
        if not self.has_auto_assigned_partitions():
            raise IllegalStateError(SUBSCRIPTION_EXCEPTION_MESSAGE)
        self._group_subscription = frozenset(topics)
        return not self._group_subscription <= self._subscription

    @_synchronized
    def reset_group_subscription(self) -> None:
        self._group_subscription = frozenset()

    @property
    def group_subscription(self) -> frozenset[str]:
        return self._group_subscription

    @_synchronized
    def metadata_topics(self) -> frozenset[str]:
        """Topics whose metadata this member needs (the leader: the whole group's)."""
        return self._subscription | self._group_subscription

    @_synchronized
    def needs_metadata(self, topic: str) -> bool:
        return topic in self._subscription or topic in self._group_subscription

    # ------------------------------------------------------------------ assignment
    def _set_assignment(self, partitions: list[TopicPartition]) -> None:
        # Keep the state (position, pause) of partitions that stay; order by topic so that
        # one topic's partitions go into fetch requests together.
        old = self._assignment
        self._assignment = {tp: old.get(tp) or TopicPartitionState() for tp in sorted(set(partitions))}
        self._assignment_id += 1

    @_changing
    def assign_from_user(self, partitions) -> bool:
        """Manual assignment (``consumer.assign``); True if the partition set changed."""
        parts = _partition_list(partitions)
        self._set_subscription_type(SubscriptionType.USER_ASSIGNED)
        if set(parts) == self._assignment.keys():
            return False
        self._set_assignment(parts)
        self._change_subscription(frozenset(tp.topic for tp in parts))
        return True

    def _in_subscription(self, topic: str) -> bool:
        if self._type is SubscriptionType.AUTO_PATTERN:
            return self._pattern is not None and self._pattern.fullmatch(topic) is not None
        return topic in self._subscription

    @_synchronized
    def check_assignment_matched_subscription(self, partitions: Iterable[TopicPartition]) -> bool:
        """False if some partition's topic is outside the subscription (the subscription
        changed while the rebalance ran: the coordinator should rejoin)."""
        for tp in partitions:
            if not self._in_subscription(tp.topic):
                log.info("assigned partition %s is not in the subscription %s", tp,
                         self._pattern.pattern if self._pattern is not None else sorted(self._subscription))
                return False
        return True

    @_changing
    def assign_from_subscribed(self, partitions) -> None:
        """Apply a group assignment; validated against the subscription before any change."""
        if not self.has_auto_assigned_partitions():
            raise IllegalStateError(
                "cannot apply a group assignment while partitions are assigned manually or nothing"
                " is subscribed"
            )
        parts = _partition_list(partitions)
        bad = sorted(tp for tp in parts if not self._in_subscription(tp.topic))
        if bad:
            raise IllegalArgumentError(f"assigned partitions {bad} are not in the subscription")
        self._set_assignment(parts)

    @_synchronized
    def assigned_partitions(self) -> set[TopicPartition]:
        return set(self._assignment)

    @_synchronized
    def assigned_partitions_list(self) -> list[TopicPartition]:
        return list(self._assignment)

    def num_assigned_partitions(self) -> int:
        return len(self._assignment)

    def is_assigned(self, tp: TopicPartition) -> bool:
        with self._lock:
            return tp in self._assignment

    def _state(self, tp: TopicPartition) -> TopicPartitionState:
        state = self._assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"No current assignment for partition {tp}")
        return state

    @_changing
    def move_partition_to_end(self, tp: TopicPartition) -> None:
        """Fairness: a partition that just returned data goes behind the others."""
        state = self._assignment.pop(tp, None)
        if state is not None:
            self._assignment[tp] = state

    @_changing
    def mark_pending_revocation(self, partitions: Iterable[TopicPartition]) -> None:
        """Cooperative rebalance: stop fetching these before the listener gives them up."""
        for tp in partitions:
            self._state(tp).pending_revocation = True

    # ------------------------------------------------------------------ positions
    @_changing
    def seek(self, tp: TopicPartition, offset: int) -> None:
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise IllegalArgumentError(f"seek offset must be an int >= 0, got {offset!r}")
        self._state(tp).seek_validated(FetchPosition(offset))

    @_changing
    def seek_validated(self, tp: TopicPartition, position: FetchPosition) -> None:
        self._state(tp).seek_validated(position)

    @_changing
    def seek_unvalidated(self, tp: TopicPartition, position: FetchPosition) -> None:
        """A position from a committed offset or reset: check it against the leader epoch
        first when both epochs are known (truncation detection), else fetch at once."""
        state = self._state(tp)
        state.seek_validated(position)
        if position.offset_epoch is not None and position.current_leader_epoch is not None:
            state.transition(FetchState.AWAIT_VALIDATION)

    @_changing
    def maybe_seek_unvalidated(
        self, tp: TopicPartition, position: FetchPosition, requested: OffsetResetStrategy
    ) -> bool:
        """Apply a ListOffsets reset result unless the partition was revoked, re-seeked, or a
        different reset was requested while the request was in flight."""
        state = self._assignment.get(tp)
        if state is None:
            log.debug("skipping reset of %s: no longer assigned", tp)
            return False
        if state.fetch_state is not FetchState.AWAIT_RESET:
            log.debug("skipping reset of %s: no longer awaiting reset", tp)
            return False
        if state.reset_strategy is not requested:
            log.debug("skipping reset of %s: a %s reset was requested since", tp, state.reset_strategy)
            return False
        log.info("resetting offset for partition %s to position %s", tp, position)
        self.seek_unvalidated(tp, position)
        return True

    @_synchronized
    def position(self, tp: TopicPartition) -> FetchPosition | None:
        return self._state(tp).position

    @_synchronized
    def valid_position(self, tp: TopicPartition) -> FetchPosition | None:
        state = self._state(tp)
        return state.position if state.fetch_state is _FETCHING else None

    @_synchronized
    def advance_position(self, tp: TopicPartition, position: FetchPosition) -> bool:
        """Move tp's position forward to ``position`` after records were handed out: only
        from a valid position, never backwards (one lock for the fetcher's per-poll check
        and update). False if nothing moved."""
        state = self._assignment.get(tp)
        if state is None or state.fetch_state is not _FETCHING:
            return False
        current = state.position
        if current is None or position.offset < current.offset:
            return False
        if position.current_leader_epoch is None and current.current_leader_epoch is not None:
            # Records move the position on, not the leader it was validated under: a newer
            # leader epoch is adopted only through maybe_validate_for_leader_epochs (KIP-320).
            position = FetchPosition(position.offset, position.offset_epoch, current.current_leader_epoch)
        state.position = position
        return True

    def advance_positions(self, positions: Iterable[tuple[TopicPartition, FetchPosition]],
                          log_starts: bool = False) -> list[int | None] | None:
        """``advance_position`` for each (tp, position), under one lock (a poll's partitions).
        With ``log_starts``: also returns each partition's log start offset, as
        ``log_start_offsets`` would (the poll's metrics need them: one lock instead of two)."""
        with self._lock:
            # advance_position's checks, inline: a poll moves several partitions.
            get = self._assignment.get
            starts: list[int | None] | None = [] if log_starts else None
            for tp, position in positions:
                state = get(tp)
                if state is None:
                    if starts is not None:
                        starts.append(None)
                    continue
                if starts is not None:
                    starts.append(state.log_start_offset)
                if state.fetch_state is not _FETCHING:
                    continue
                current = state.position
                if current is None or position.offset < current.offset:
                    continue
                if position.current_leader_epoch is None and current.current_leader_epoch is not None:
                    position = FetchPosition(position.offset, position.offset_epoch, current.current_leader_epoch)
                state.position = position
            return starts

    def valid_positions(self, partitions: Iterable[TopicPartition]) -> list[FetchPosition | None]:
        """The valid position of each partition (None where it is not assigned or has no
        valid position), under one lock."""
        with self._lock:
            get = self._assignment.get
            return [s.position if (s := get(tp)) is not None and s.fetch_state is _FETCHING else None
                    for tp in partitions]

    def set_positions(self, positions: Iterable[tuple[TopicPartition, FetchPosition]]) -> None:
        """Set each (tp, position) whose partition still has a valid position (the caller
        read them valid: one that changed meanwhile, on another thread, is left alone),
        under one lock."""
        with self._lock:
            get = self._assignment.get
            for tp, position in positions:
                state = get(tp)
                if state is not None and state.fetch_state is _FETCHING:
                    state.position = position

    def record_fetched_offsets(self, offsets: Iterable[tuple[TopicPartition, int, int, int]],
                               returned: Iterable[TopicPartition] = ()) -> None:
        """What one Fetch answer reported, under one lock: (tp, high watermark, last stable
        offset, log start offset) each, -1 where not reported (partitions no longer assigned
        are ignored: a late answer); then the partitions that ``returned`` records move
        behind the others (``move_partition_to_end``)."""
        with self._lock:
            assignment = self._assignment
            get = assignment.get
            for tp, hw, lso, start in offsets:
                state = get(tp)
                if state is None:
                    continue
                if hw >= 0:
                    state.high_watermark = hw
                if lso >= 0:
                    state.last_stable_offset = lso
                if start >= 0:
                    state.log_start_offset = start
            for tp in returned:
                state = assignment.pop(tp, None)
                if state is not None:
                    assignment[tp] = state

    @_changing
    def set_position(self, tp: TopicPartition, position: FetchPosition) -> None:
        """Advance after records were returned; only from a valid position."""
        state = self._state(tp)
        if not state.has_valid_position:
            raise IllegalStateError(f"cannot set a new position for {tp} without a valid current position")
        state.position = position

    @_synchronized
    def has_valid_position(self, tp: TopicPartition) -> bool:
        state = self._assignment.get(tp)
        return state is not None and state.fetch_state is _FETCHING

    def has_all_fetch_positions(self) -> bool:
        cached = self._all_fetching
        if cached[0] == self._changes:
            return cached[1]
        with self._lock:
            fetching = all(s.fetch_state is _FETCHING for s in self._assignment.values())
            self._all_fetching = (self._changes, fetching)
            return fetching

    @_synchronized
    def initializing_partitions(self) -> set[TopicPartition]:
        return {tp for tp, s in self._assignment.items() if s.fetch_state is FetchState.INITIALIZING}

    def missing_fetch_positions(self) -> set[TopicPartition]:
        """Partitions with no position yet (INITIALIZING): look up committed offsets, else reset."""
        return self.initializing_partitions()

    @_synchronized
    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        """Offsets to commit: the position of every assigned partition that has a valid one."""
        return {
            tp: OffsetAndMetadata(
                pos.offset, "",
                pos.offset_epoch if pos.offset_epoch is not None else -1,
            )
            for tp, s in self._assignment.items()
            if s.has_valid_position and (pos := s.position) is not None  # FETCHING has a position
        }

    # ------------------------------------------------------------------ resets
    @property
    def default_reset_strategy(self) -> OffsetResetStrategy:
        return self._default_reset_strategy

    def has_default_offset_reset_policy(self) -> bool:
        return self._default_reset_strategy is not OffsetResetStrategy.NONE

    @_changing
    def request_offset_reset(self, partitions, strategy=None) -> None:
        """Ask for a reset of one partition or a collection (``seek_to_beginning``/``_end``)."""
        chosen = self._default_reset_strategy if strategy is None else parse_reset_strategy(strategy)
        if isinstance(partitions, tuple) and len(partitions) == 2 and isinstance(partitions[0], str):
            partitions = [partitions]
        for tp in partitions:
            log.debug("seeking to %s offset of partition %s", chosen.value, tp)
            self._state(tp).reset(chosen)

    @_changing
    def request_offset_reset_if_partition_assigned(self, tp: TopicPartition) -> None:
        state = self._assignment.get(tp)
        if state is not None:
            state.reset(self._default_reset_strategy)

    @_synchronized
    def is_offset_reset_needed(self, tp: TopicPartition) -> bool:
        return self._state(tp).fetch_state is FetchState.AWAIT_RESET

    @_synchronized
    def reset_strategy(self, tp: TopicPartition) -> OffsetResetStrategy | None:
        return self._state(tp).reset_strategy

    @_changing
    def reset_initializing_positions(self, include: Callable[[TopicPartition], bool] | None = None) -> None:
        """Partitions without a committed offset take the default reset strategy; with
        ``auto.offset.reset=none`` they raise NoOffsetForPartitionError instead."""
        missing = set()
        for tp, s in self._assignment.items():
            if s.fetch_state is FetchState.INITIALIZING and (include is None or include(tp)):
                if self._default_reset_strategy is OffsetResetStrategy.NONE:
                    missing.add(tp)
                else:
                    s.reset(self._default_reset_strategy)
        if missing:
            err = NoOffsetForPartitionError(
                f"no committed offset for partitions {sorted(missing)} and auto.offset.reset is 'none'"
            )
            err.partitions = missing
            raise err

    @_synchronized
    def partitions_needing_reset(self, now_ms: int) -> set[TopicPartition]:
        return {
            tp for tp, s in self._assignment.items()
            if s.fetch_state is FetchState.AWAIT_RESET and not s.awaiting_retry_backoff(now_ms)
        }

    @_synchronized
    def set_next_allowed_retry(self, partitions: Iterable[TopicPartition], at_ms: int) -> None:
        for tp in partitions:
            self._state(tp).next_retry_time_ms = at_ms

    @_synchronized
    def request_failed(self, partitions: Iterable[TopicPartition], next_retry_ms: int) -> None:
        """A reset/validation request failed; retry after backoff (revoked partitions ignored)."""
        for tp in partitions:
            state = self._assignment.get(tp)
            if state is not None:
                state.next_retry_time_ms = next_retry_ms

    # ------------------------------------------------------------------ validation
    @_synchronized
    def partitions_needing_validation(self, now_ms: int) -> set[TopicPartition]:
        for s in self._assignment.values():
            if s.fetch_state is _AWAIT_VALIDATION:
                break
        else:
            return set()  # the usual case, checked every poll
        return {
            tp for tp, s in self._assignment.items()
            if s.fetch_state is FetchState.AWAIT_VALIDATION and not s.awaiting_retry_backoff(now_ms)
        }

    @_synchronized
    def awaiting_validation(self, tp: TopicPartition) -> bool:
        return self._state(tp).fetch_state is FetchState.AWAIT_VALIDATION

    @_changing
    def request_position_validation(self, tp: TopicPartition) -> None:
        self._state(tp).transition(FetchState.AWAIT_VALIDATION)

    @_changing
    def complete_validation(self, tp: TopicPartition) -> None:
        state = self._state(tp)
        if state.fetch_state is FetchState.AWAIT_VALIDATION:
            state.transition(FetchState.FETCHING, lambda: setattr(state, "next_retry_time_ms", None))

    @_synchronized
    def maybe_validate_for_leader_epochs(self, epochs: dict[TopicPartition, int]) -> list[TopicPartition]:
        """After a metadata update (KIP-320): a position obtained under an older leader epoch
        than the partition's current one must be checked for truncation before fetching goes
        on, if the epoch of the record before it is known. Positions without a leader epoch
        adopt the current one (nothing to compare against). Returns the partitions that now
        await validation."""
        moved = []
        for tp, s in self._assignment.items():
            state = s.fetch_state
            if state is not _FETCHING and state is not _AWAIT_VALIDATION:
                continue
            pos = s.position
            epoch = epochs.get(tp, -1)
            if pos is None or epoch < 0:
                continue
            current = pos.current_leader_epoch
            if current is not None and epoch <= current:
                continue
            s.position = FetchPosition(pos.offset, pos.offset_epoch, epoch)
            self._changes += 1
            if current is not None and pos.offset_epoch is not None and state is _FETCHING:
                log.debug("leader epoch of %s moved from %d to %d: validating position %d",
                          tp, current, epoch, pos.offset)
                s.transition(_AWAIT_VALIDATION)
                s.next_retry_time_ms = None
                moved.append(tp)
        return moved

    @_changing
    def request_validation_at(self, tp: TopicPartition, position: FetchPosition) -> bool:
        """The fetch at ``position`` found the log diverging (a Fetch answer's diverging
        epoch): await validation, unless the position moved on meanwhile."""
        state = self._assignment.get(tp)
        if state is None or state.position != position or state.fetch_state is not _FETCHING:
            return False
        state.transition(_AWAIT_VALIDATION)
        return True

    @_changing
    def maybe_complete_validation(self, tp: TopicPartition, requested: FetchPosition, leader_epoch: int,
                                  end_offset: int) -> Truncation | None:
        """Apply an OffsetsForLeaderEpoch answer (or a Fetch's diverging epoch): the end offset
        of the largest leader epoch <= ``requested.offset_epoch`` on the current leader.

        * the answer is for an older position, or the partition moved on: ignored (None);
        * epoch or end offset undefined (the leader knows no such epoch): treated as out of
          range: a reset per ``auto.offset.reset``, or a Truncation with no divergent offset;
        * end offset below the position: the log was truncated. With a reset policy the
          position moves to the first offset known to diverge (``end_offset``), as Java's
          consumer does, so records after it are read again from the new leader; without one
          a Truncation is returned for the caller to raise LogTruncationError;
        * otherwise the position is valid and fetching resumes.
        """
        state = self._assignment.get(tp)
        if state is None or state.fetch_state is not _AWAIT_VALIDATION or state.position != requested:
            log.debug("ignoring validation of %s at %s: the position changed", tp, requested)
            return None
        if end_offset < 0 or leader_epoch < 0:
            if self.has_default_offset_reset_policy():
                log.info("leader of %s knows no epoch <= %s for position %d: resetting the offset",
                         tp, requested.offset_epoch, requested.offset)
                state.reset(self._default_reset_strategy)
                return None
            return Truncation(tp, requested, None)
        if end_offset < requested.offset:
            if self.has_default_offset_reset_policy():
                log.warning("truncation detected for partition %s at offset %d (leader epoch %s): "
                            "resetting the position to the first offset known to diverge, %d "
                            "(epoch %d)", tp, requested.offset, requested.offset_epoch, end_offset,
                            leader_epoch)
                state.seek_validated(FetchPosition(end_offset, leader_epoch, requested.current_leader_epoch))
                return Truncation(tp, requested, OffsetAndMetadata(end_offset, "", leader_epoch), reset=True)
            return Truncation(tp, requested, OffsetAndMetadata(end_offset, "", leader_epoch))
        if requested.offset_epoch is not None and leader_epoch < requested.offset_epoch:
            # The leader never had our epoch but its older one reaches past the position: go
            # on under the leader's epoch, or every fetch would report the divergence again.
            state.position = FetchPosition(requested.offset, leader_epoch, requested.current_leader_epoch)
        state.transition(_FETCHING, lambda: setattr(state, "next_retry_time_ms", None))
        return None

    # ------------------------------------------------------------------ pause / fetchable
    @_changing
    def pause(self, tp: TopicPartition) -> None:
        self._state(tp).paused = True

    @_changing
    def resume(self, tp: TopicPartition) -> None:
        self._state(tp).paused = False

    @_synchronized
    def is_paused(self, tp: TopicPartition) -> bool:
        state = self._assignment.get(tp)
        return state is not None and state.paused

    @_synchronized
    def paused_partitions(self) -> set[TopicPartition]:
        return {tp for tp, s in self._assignment.items() if s.paused}

    def is_fetchable(self, tp: TopicPartition) -> bool:
        with self._lock:
            state = self._assignment.get(tp)
            return (state is not None and state.fetch_state is _FETCHING and not state.paused
                    and not state.pending_revocation)

    def fetchable_set(self) -> frozenset[TopicPartition]:
        """The partitions ``is_fetchable`` is true of (as of the last change: each one that
        can change them is counted in ``changes``)."""
        cached = self._fetchable
        if cached[0] == self._changes:
            return cached[1]
        with self._lock:
            fetchable = frozenset(tp for tp, s in self._assignment.items()
                                  if s.fetch_state is _FETCHING and not s.paused and not s.pending_revocation)
            self._fetchable = (self._changes, fetchable)
            return fetchable

    @_synchronized
    def fetchable_partitions(self, is_available: Callable[[TopicPartition], bool] | None = None) -> list[TopicPartition]:
        """Assigned, not paused, not pending revocation, valid position; in fetch order."""
        # TopicPartitionState.is_fetchable inlined: this runs on every poll.
        if is_available is None:
            return [tp for tp, s in self._assignment.items()
                    if s.fetch_state is _FETCHING and not s.paused and not s.pending_revocation]
        return [
            tp for tp, s in self._assignment.items()
            if s.fetch_state is _FETCHING and not s.paused and not s.pending_revocation and is_available(tp)
        ]

    def fetch_candidates(self, read_committed: bool = False) -> list[tuple]:
        """For the fetcher, under one lock instead of three per partition: (tp, FetchPosition
        or None, end offset or None) of every fetchable partition, in fetch order. The end
        offset is the high watermark, or the last stable offset when read_committed."""
        with self._lock:
            out = []
            for tp, s in self._assignment.items():
                if s.fetch_state is _FETCHING and not s.paused and not s.pending_revocation:
                    out.append((tp, s.position, s.last_stable_offset if read_committed else s.high_watermark))
            return out

    @_synchronized
    def lags(self) -> list[tuple[TopicPartition, int, int]]:
        """(tp, records-lag, records-lead) of each assigned partition with a position and
        known offsets: lag to the high watermark (the last stable offset when it is known),
        lead from the log start."""
        out = []
        for tp, s in self._assignment.items():
            pos = s.position
            end = s.last_stable_offset if s.last_stable_offset is not None else s.high_watermark
            if pos is None or end is None:
                continue
            start = s.log_start_offset
            out.append((tp, max(end - pos.offset, 0), pos.offset - start if start is not None else pos.offset))
        return out

    # ------------------------------------------------------------------ offsets from fetches
    @_synchronized
    def update_high_watermark(self, tp: TopicPartition, offset: int) -> bool:
        """False (ignored) if ``tp`` is no longer assigned: a late fetch response."""
        state = self._assignment.get(tp)
        if state is None:
            return False
        state.high_watermark = offset
        return True

    @_synchronized
    def update_log_start_offset(self, tp: TopicPartition, offset: int) -> bool:
        state = self._assignment.get(tp)
        if state is None:
            return False
        state.log_start_offset = offset
        return True

    @_synchronized
    def update_last_stable_offset(self, tp: TopicPartition, offset: int) -> bool:
        state = self._assignment.get(tp)
        if state is None:
            return False
        state.last_stable_offset = offset
        return True

    @_synchronized
    def high_watermark(self, tp: TopicPartition) -> int | None:
        return self._state(tp).high_watermark

    @_synchronized
    def log_start_offset(self, tp: TopicPartition) -> int | None:
        return self._state(tp).log_start_offset

    def log_start_offsets(self, partitions: Iterable[TopicPartition]) -> list[int | None]:
        """The log start offset of each partition (None where unknown or not assigned), under
        one lock: the fetcher's per-poll metrics ask for every partition it drained."""
        with self._lock:
            get = self._assignment.get
            return [None if (s := get(tp)) is None else s.log_start_offset for tp in partitions]

    @_synchronized
    def last_stable_offset(self, tp: TopicPartition) -> int | None:
        return self._state(tp).last_stable_offset

    @_synchronized
    def partition_end_offset(self, tp: TopicPartition, isolation_level: str = "read_uncommitted") -> int | None:
        state = self._state(tp)
        if isolation_level == "read_committed":
            return state.last_stable_offset
        return state.high_watermark

    @_synchronized
    def partition_lag(self, tp: TopicPartition, isolation_level: str = "read_uncommitted") -> int | None:
        """End offset minus position, or None when either is unknown."""
        state = self._state(tp)
        end = self.partition_end_offset(tp, isolation_level)
        if end is None or state.position is None:
            return None
        return end - state.position.offset

    @_synchronized
    def partition_lead(self, tp: TopicPartition) -> int | None:
        """Position minus log start offset, or None when either is unknown."""
        state = self._state(tp)
        if state.log_start_offset is None or state.position is None:
            return None
        return state.position.offset - state.log_start_offset

    @_synchronized
    def fetch_state(self, tp: TopicPartition) -> FetchState:
        return self._state(tp).fetch_state

    def __repr__(self) -> str:
        return (
            f"SubscriptionState(type={self._type.name}, subscription={sorted(self._subscription)},"
            f" pattern={self._pattern.pattern if self._pattern else None},"
            f" assigned={len(self._assignment)})"
        )
