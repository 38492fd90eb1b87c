"""Offsets by time: ListOffsets requests for resets, ``beginning_offsets``/``end_offsets`` and
``offsets_for_times``.

Resets (``auto.offset.reset`` and ``seek_to_beginning``/``seek_to_end``) are asynchronous:
``reset_positions_if_needed()`` sends one ListOffsets per leader for the partitions in
AWAIT_RESET and returns; the answers move positions when a later poll completes them. The
lookups the application asks for (``beginning_offsets`` ...) block up to their timeout,
retrying after metadata refreshes when a leader moved.

Positions from a reset carry the leader epoch the broker answered with; the offset epoch is
unknown (as in Java), so no truncation check is needed for them.

A ``by_duration:<duration>`` reset (KIP-1106) looks up the first offset whose timestamp is at
or after now - duration. When no record is that recent the broker answers with no offset, and
the partition starts at the end instead, as if the lookup had found the next record appended:
the end offset is asked first, so that records appended between the two requests are not
skipped. (Java's consumer leaves the partition awaiting its reset and asks again after
``request.timeout.ms``, which ends at the same offset for records appended since.)
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.structs import OffsetAndTimestamp, TopicPartition
from kclient.subscription.state import FetchPosition, OffsetResetStrategy, Truncation
from kclient.protocol import ApiKey

__all__ = ["OffsetFetcher", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP",
           "list_offsets_body", "parse_list_offsets"]

log = logging.getLogger(__name__)

LIST_OFFSETS_KEY = int(ApiKey.LIST_OFFSETS)
OFFSET_FOR_LEADER_EPOCH_KEY = int(ApiKey.OFFSET_FOR_LEADER_EPOCH)
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3          # the record with the largest timestamp (ListOffsets v7+)

_UNSUPPORTED_FOR_MESSAGE_FORMAT = 43

_STRATEGY_TIMESTAMP = {OffsetResetStrategy.EARLIEST: EARLIEST_TIMESTAMP,
                       OffsetResetStrategy.LATEST: LATEST_TIMESTAMP}

ISOLATION = {"read_uncommitted": 0, "read_committed": 1}


def list_offsets_body(partitions: dict[TopicPartition, tuple[int, int]], isolation_level: int,
                      timeout_ms: int) -> Callable[[int], dict]:
    """ListOffsets body for {tp: (timestamp, current_leader_epoch)} (built per version)."""
    by_topic: dict[str, list] = {}
    for tp, (ts, epoch) in partitions.items():
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "current_leader_epoch": epoch, "timestamp": ts})

    def body(version: int) -> dict:
        return {"replica_id": -1, "isolation_level": isolation_level, "timeout_ms": timeout_ms,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
    return body


def parse_list_offsets(response: dict) -> dict[TopicPartition, tuple[int, int, int, int]]:
    """{tp: (error_code, offset, timestamp, leader_epoch)} from a ListOffsets response."""
    out = {}
    for t in response.get("topics") or []:
        for p in t.get("partitions") or []:
            out[TopicPartition(t["name"], p["partition_index"])] = (
                p.get("error_code", 0), p.get("offset", -1), p.get("timestamp", -1),
                p.get("leader_epoch", -1))
    return out


def offsets_for_leader_epoch_body(positions: dict[TopicPartition, FetchPosition]) -> Callable[[int], dict]:
    """OffsetsForLeaderEpoch body asking, per partition, for the end offset of the epoch of
    the record before the position, fenced by the leader epoch the position is valid under."""
    by_topic: dict[str, list] = {}
    for tp, pos in positions.items():
        by_topic.setdefault(tp.topic, []).append(
            {"partition": tp.partition, "current_leader_epoch": pos.current_leader_epoch,
             "leader_epoch": pos.offset_epoch})

    def body(version: int) -> dict:
        # replica_id -1: a consumer (the default -2 is a debugging client, v3+).
        return {"replica_id": -1, "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
    return body


def parse_offsets_for_leader_epoch(response: dict) -> dict[TopicPartition, tuple[int, int, int]]:
    """{tp: (error_code, leader_epoch, end_offset)} from an OffsetsForLeaderEpoch response."""
    out = {}
    for t in response.get("topics") or []:
        for p in t.get("partitions") or []:
            out[TopicPartition(t["topic"], p["partition"])] = (
                p.get("error_code", 0), p.get("leader_epoch", -1), p.get("end_offset", -1))
    return out


def truncation_error(truncations: list[Truncation]) -> Errors.OffsetOutOfRangeError:
    """LogTruncationError for truncations found with auto.offset.reset 'none' (or
    OffsetOutOfRangeError when the leader knew no epoch that old), naming each partition,
    its position and where its log diverges."""
    divergent = {t.tp: t.divergent for t in truncations if t.divergent is not None}
    if divergent:
        detail = ", ".join(f"{t.tp} at offset {t.position.offset} (log diverges at offset "
                           f"{t.divergent.offset}, leader epoch {t.divergent.leader_epoch})"
                           for t in truncations if t.divergent is not None)
        truncated = Errors.LogTruncationError(
            f"log truncation detected and auto.offset.reset is 'none': {detail}; records after "
            f"the divergent offsets may be lost: seek to continue")
        truncated.divergent_offsets = divergent
        exc: Errors.OffsetOutOfRangeError = truncated
    else:
        detail = ", ".join(f"{t.tp} at offset {t.position.offset} (leader epoch {t.position.offset_epoch})"
                           for t in truncations)
        exc = Errors.OffsetOutOfRangeError(
            f"the leader knows no leader epoch at or before the position of {detail}, and "
            f"auto.offset.reset is 'none'")
    exc.partitions = {t.tp: t.position.offset for t in truncations}
    return exc


def _is_retriable(code: int) -> bool:
    cls = Errors.for_code(code)
    return bool(cls is not None and (cls.retriable or cls.invalid_metadata))


class OffsetFetcher:
    def __init__(self, client, subscriptions, *, isolation_level: str = "read_uncommitted",
                 request_timeout_ms: int = 30000, retry_backoff_ms: int = 100,
                 clock: Clock | None = None,
                 on_position_reset: Callable[[TopicPartition], None] | None = None):
        self._client = client
        self._metadata = client.metadata
        self._subscriptions = subscriptions
        self._isolation = ISOLATION[isolation_level]
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff_ms = retry_backoff_ms
        self._clock = clock or SYSTEM_CLOCK
        self._on_position_reset = on_position_reset
        self._cached_reset_error: BaseException | None = None
        self._cached_validation_error: BaseException | None = None

    # ------------------------------------------------------------------ resets (async)
    def reset_positions_if_needed(self) -> None:
        """Send ListOffsets for partitions awaiting a reset; raise an error a previous reset
        request hit that retrying cannot fix (e.g. topic authorization)."""
        exc, self._cached_reset_error = self._cached_reset_error, None
        if exc is not None:
            raise exc
        now = self._clock.now_ms()
        partitions = self._subscriptions.partitions_needing_reset(now)
        if not partitions:
            return
        cluster = self._metadata.cluster
        by_node: dict[int, dict[TopicPartition, tuple[int, int]]] = {}
        strategies: dict[TopicPartition, OffsetResetStrategy] = {}
        for tp in partitions:
            strategy = self._subscriptions.reset_strategy(tp)
            # A by_duration reset starts by asking for the end offset (see the module's doc).
            ts = LATEST_TIMESTAMP if strategy is OffsetResetStrategy.BY_DURATION else _STRATEGY_TIMESTAMP.get(strategy)
            if ts is None:
                continue
            leader = cluster.leader_for(tp)
            if leader is None:
                log.debug("leader of %s unknown; refreshing metadata before resetting it", tp)
                self._metadata.add_topics(tp.topic)
                self._metadata.request_update()
                continue
            epoch = cluster.leader_epoch(tp)
            by_node.setdefault(leader.node_id, {})[tp] = (ts, -1 if epoch is None else epoch)
            strategies[tp] = strategy
        for node_id, parts in by_node.items():
            # Not again until this request answered or timed out (a retry would duplicate it).
            self._subscriptions.set_next_allowed_retry(parts, now + self._request_timeout_ms)
            by_duration = {tp: v for tp, v in parts.items() if strategies[tp] is OffsetResetStrategy.BY_DURATION}
            plain = {tp: v for tp, v in parts.items() if tp not in by_duration}
            if plain:
                fut = self._client.send(node_id, LIST_OFFSETS_KEY,
                                        list_offsets_body(plain, self._isolation, self._request_timeout_ms))
                fut.add_both(self._on_reset_response, plain, strategies)
            if by_duration:
                fut = self._client.send(node_id, LIST_OFFSETS_KEY,
                                        list_offsets_body(by_duration, self._isolation, self._request_timeout_ms))
                fut.add_both(self._on_end_offsets_for_duration_reset, node_id, by_duration, strategies)

    def _on_end_offsets_for_duration_reset(self, node_id: int, parts, strategies, result) -> None:
        """The end offsets are known: look up the offsets for now - duration (from the same
        leader), falling back to these ends."""
        if isinstance(result, BaseException):
            self._on_reset_response(parts, strategies, result)
            return
        ends = parse_list_offsets(result)
        found = {tp: ends[tp] for tp in parts if tp in ends and ends[tp][0] == 0 and ends[tp][1] >= 0}
        missing = {tp: v for tp, v in parts.items() if tp not in found}
        if missing:  # errors: retried, or raised, as for any reset
            self._apply_reset_results(missing, strategies, ends)
        if not found:
            return
        target = self._clock.wall_ms() - (self._subscriptions.reset_duration_ms or 0)
        lookup = {tp: (target, epoch) for tp, (_ts, epoch) in parts.items() if tp in found}
        fut = self._client.send(node_id, LIST_OFFSETS_KEY,
                                list_offsets_body(lookup, self._isolation, self._request_timeout_ms))
        fut.add_both(self._on_duration_lookup_response, lookup, strategies, found)

    def _on_duration_lookup_response(self, parts, strategies, ends, result) -> None:
        if isinstance(result, BaseException):
            self._on_reset_response(parts, strategies, result)
            return
        results = parse_list_offsets(result)
        for tp in parts:
            code, offset, _ts, _epoch = results.get(tp, (Errors.UnknownTopicOrPartitionError.errno, -1, -1, -1))
            if code == 0 and offset < 0:
                log.debug("no record of %s is that recent: resetting it to its end offset %d", tp, ends[tp][1])
                results[tp] = ends[tp]
        self._apply_reset_results(parts, strategies, results)

    def _on_reset_response(self, parts, strategies, result) -> None:
        now = self._clock.now_ms()
        if isinstance(result, BaseException):
            log.debug("ListOffsets for reset of %s failed: %s", sorted(parts), result)
            if getattr(result, "invalid_metadata", False):
                self._metadata.request_update()
            self._subscriptions.request_failed(parts, now + self._retry_backoff_ms)
            if not getattr(result, "retriable", False):
                self._cached_reset_error = result
            return
        self._apply_reset_results(parts, strategies, parse_list_offsets(result))

    def _apply_reset_results(self, parts, strategies,
                             results: dict[TopicPartition, tuple[int, int, int, int]]) -> None:
        now = self._clock.now_ms()
        failed = []
        for tp in parts:
            code, offset, _ts, epoch = results.get(tp, (Errors.UnknownTopicOrPartitionError.errno, -1, -1, -1))
            if code == 0 and offset >= 0:
                position = FetchPosition(offset, None, epoch if epoch >= 0 else None)
                if self._subscriptions.maybe_seek_unvalidated(tp, position, strategies[tp]):
                    if self._on_position_reset is not None:
                        self._on_position_reset(tp)
                continue
            failed.append(tp)
            if code == 0 or _is_retriable(code):
                log.debug("reset of %s: retrying (error %d, offset %d)", tp, code, offset)
                if code and Errors.error_class(code).invalid_metadata:
                    self._metadata.request_update()
            else:
                cls = Errors.error_class(code)
                self._cached_reset_error = cls(f"resetting the offset of {tp} failed")
        if failed:
            self._subscriptions.request_failed(failed, now + self._retry_backoff_ms)

    # ------------------------------------------------------------------ validation (KIP-320)
    def validate_positions_if_needed(self) -> None:
        """Check positions awaiting validation (after a leader change, or restored from a
        committed offset with its leader epoch) against their leader with
        OffsetsForLeaderEpoch: one request per leader, answered asynchronously. Raises an
        error an earlier answer found that retrying cannot fix: LogTruncationError (the log was
        truncated below the position and auto.offset.reset is 'none'), OffsetOutOfRangeError,
        or an authorization error."""
        exc, self._cached_validation_error = self._cached_validation_error, None
        if exc is not None:
            raise exc
        subs = self._subscriptions
        now = self._clock.now_ms()
        partitions = subs.partitions_needing_validation(now)
        if not partitions:
            return
        cluster = self._metadata.cluster
        by_node: dict[int, dict[TopicPartition, FetchPosition]] = {}
        for tp in partitions:
            position = subs.position(tp)
            if position is None or position.offset_epoch is None or position.current_leader_epoch is None:
                subs.complete_validation(tp)  # nothing to compare against: fetch at once
                continue
            leader = cluster.leader_for(tp)
            if leader is None:
                self._metadata.add_topics(tp.topic)
                self._metadata.request_update()
                continue
            by_node.setdefault(leader.node_id, {})[tp] = position
        for node_id, positions in by_node.items():
            if self._client.api_version(node_id, OFFSET_FOR_LEADER_EPOCH_KEY) is None and \
                    self._client.api_version(node_id, LIST_OFFSETS_KEY) is not None:
                # Connected, and the broker has no OffsetsForLeaderEpoch v2+: positions are
                # used unchecked, as by clients without KIP-320.
                log.debug("node %d cannot validate positions (no OffsetsForLeaderEpoch v2+): "
                          "using %s unchecked", node_id, sorted(positions))
                for tp in positions:
                    subs.complete_validation(tp)
                continue
            subs.set_next_allowed_retry(positions, now + self._request_timeout_ms)
            fut = self._client.send(node_id, OFFSET_FOR_LEADER_EPOCH_KEY, offsets_for_leader_epoch_body(positions))
            fut.add_both(self._on_validation_response, node_id, positions)

    def _on_validation_response(self, node_id: int, positions: dict[TopicPartition, FetchPosition],
                                result) -> None:
        subs = self._subscriptions
        now = self._clock.now_ms()
        if isinstance(result, BaseException):
            if isinstance(result, Errors.UnsupportedVersionError):
                log.debug("node %d cannot validate positions: %s", node_id, result)
                for tp in positions:
                    subs.complete_validation(tp)
                return
            log.debug("OffsetsForLeaderEpoch to node %d failed: %s", node_id, result)
            if getattr(result, "invalid_metadata", False) or isinstance(result, Errors.KafkaConnectionError):
                self._metadata.request_update()
            subs.request_failed(positions, now + self._retry_backoff_ms)
            return
        answers = parse_offsets_for_leader_epoch(result)
        truncations = []
        failed = []
        for tp, position in positions.items():
            code, leader_epoch, end_offset = answers.get(tp, (Errors.UnknownTopicOrPartitionError.errno, -1, -1))
            if code:
                cls = Errors.error_class(code)
                if cls is Errors.TopicAuthorizationFailedError:
                    denied = Errors.TopicAuthorizationFailedError(f"not authorized to read topic {tp.topic!r}")
                    denied.unauthorized_topics = {tp.topic}
                    self._cached_validation_error = denied
                elif not (cls.retriable or cls.invalid_metadata):
                    self._cached_validation_error = cls(f"validating the position of {tp} failed")
                else:
                    log.debug("validation of %s: retrying after %s", tp, cls.__name__)
                if cls.invalid_metadata:
                    self._metadata.request_update()
                failed.append(tp)
                continue
            outcome = subs.maybe_complete_validation(tp, position, leader_epoch, end_offset)
            if outcome is not None:
                truncations.append(outcome)
        if failed:
            subs.request_failed(failed, now + self._retry_backoff_ms)
        self._handle_truncations(truncations)

    def _handle_truncations(self, truncations: list[Truncation]) -> None:
        """Positions a validation moved drop what was fetched for them; the rest become the
        error validate_positions_if_needed raises next."""
        unresolved = []
        for t in truncations:
            if t.reset:
                if self._on_position_reset is not None:
                    self._on_position_reset(t.tp)
            else:
                unresolved.append(t)
        if unresolved:
            self._cached_validation_error = truncation_error(unresolved)

    def fetch_offsets_by_times(self, timestamps: dict[TopicPartition, int], timeout_ms: int,
                               ) -> dict[TopicPartition, tuple[int, int, int] | None]:
        """{tp: (offset, timestamp, leader_epoch) | None}; None when no record has a timestamp
        at or after the searched one. KafkaTimeoutError if not all answered in time."""
        clock = self._clock
        deadline = clock.now_ms() + timeout_ms
        remaining = dict(timestamps)
        out: dict[TopicPartition, tuple[int, int, int] | None] = {}
        if not remaining:
            return out
        self._metadata.add_topics(*{tp.topic for tp in remaining})
        while True:
            cluster = self._metadata.cluster
            by_node: dict[int, dict[TopicPartition, tuple[int, int]]] = {}
            missing_leader = False
            for tp, ts in remaining.items():
                leader = cluster.leader_for(tp)
                if leader is None:
                    missing_leader = True
                    continue
                epoch = cluster.leader_epoch(tp)
                by_node.setdefault(leader.node_id, {})[tp] = (ts, -1 if epoch is None else epoch)
            futures = [(self._client.send(node, LIST_OFFSETS_KEY,
                                          list_offsets_body(parts, self._isolation, self._request_timeout_ms)), parts)
                       for node, parts in by_node.items()]
            retry_metadata = missing_leader
            for fut, parts in futures:
                self._client.poll_future(fut, max(deadline - clock.now_ms(), 0))
                if not fut.is_done:
                    break
                if fut.failed():
                    exc = fut.exception
                    if not (getattr(exc, "retriable", False) or getattr(exc, "invalid_metadata", False)):
                        raise exc
                    retry_metadata = True
                    continue
                results = parse_list_offsets(fut.value)
                for tp in parts:
                    code, offset, ts, epoch = results.get(tp, (Errors.UnknownTopicOrPartitionError.errno, -1, -1, -1))
                    if code == 0:
                        out[tp] = None if offset < 0 else (offset, ts, epoch)
                        remaining.pop(tp, None)
                    elif code == _UNSUPPORTED_FOR_MESSAGE_FORMAT:
                        out[tp] = None  # UNSUPPORTED_FOR_MESSAGE_FORMAT: no timestamps in this log
                        remaining.pop(tp, None)
                    elif _is_retriable(code):
                        retry_metadata = True
                    else:
                        raise Errors.error_class(code)(f"ListOffsets for {tp} failed")
            if not remaining:
                return out
            left = deadline - clock.now_ms()
            if left <= 0:
                raise Errors.KafkaTimeoutError(
                    f"failed to get offsets by times for {sorted(remaining)} in {timeout_ms} ms")
            if retry_metadata:
                self._client.await_metadata_update(min(left, max(self._retry_backoff_ms, 1) * 10))

    def offsets_for_times(self, timestamps: dict[TopicPartition, int], timeout_ms: int,
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        found = self.fetch_offsets_by_times(timestamps, timeout_ms)
        return {tp: (None if v is None else OffsetAndTimestamp(v[0], v[1], v[2] if v[2] >= 0 else None))
                for tp, v in found.items()}

    def beginning_or_end_offsets(self, partitions: Iterable[TopicPartition], timestamp: int,
                                 timeout_ms: int) -> dict[TopicPartition, int]:
        found = self.fetch_offsets_by_times({tp: timestamp for tp in partitions}, timeout_ms)
        return {tp: (v[0] if v is not None else -1) for tp, v in found.items()}
