"""Offset-range planning on the Spark driver, with the options of Spark's Kafka source.

``plan_offset_ranges(options)`` turns the options a user would give to
``spark.read.format("kafka")`` into a list of :class:`OffsetRange` (one Spark task each):

- ``kafka.bootstrap.servers`` (required); every other ``kafka.``-prefixed option is passed to
  the client with the prefix removed (``kafka.fetch.max.bytes`` -> ``fetch.max.bytes``).
  As in Spark, ``kafka.auto.offset.reset``, ``kafka.enable.auto.commit``, the
  (de)serializers and ``kafka.interceptor.classes`` are refused: the source decides offsets.
- exactly one of ``subscribe`` (comma list), ``subscribePattern`` (a regex matching whole
  topic names) or ``assign`` (JSON ``{"topic": [0, 1]}``).
- where to start, highest priority first: ``startingTimestamp`` (ms, every partition),
  ``startingOffsetsByTimestamp`` (JSON ``{"topic": {"0": ms}}``), ``startingOffsets``:
  ``"earliest"`` (default), JSON ``{"topic": {"0": 42, "1": -2}}`` (-2 earliest), or the kclient
  extension ``"committed"``: the offsets ``kafka.group.id`` committed (see
  :func:`kclient.spark.commit_offset_ranges`); partitions without one start at
  ``committedOffsetsFallback`` (``earliest`` default, ``latest``, or ``error``).
  ``startingOffsetsByTimestampStrategy``: ``error`` (default) or ``latest`` when no record
  is at or after the timestamp.
- where to end (exclusive), likewise: ``endingTimestamp``, ``endingOffsetsByTimestamp``,
  ``endingOffsets`` (``"latest"`` default, or JSON with -1 for latest); a timestamp with no
  record at or after it ends at latest.
- ``maxRecordsPerPartition``: ranges larger than this are split; ``minPartitions``: if there
  are fewer ranges than this, large ranges are split (into near-equal pieces, in proportion
  to their size) so that there are at least about that many.
- ``kclient.maxPartitions`` (kclient's, unset by default): at most this many Spark
  partitions per read or micro-batch; the ranges are packed into that many groups of
  near-equal record counts, each read by one task, range after range (see
  :func:`group_offset_ranges`). Unset, every range is a Spark partition of its own, as in
  Spark's source. Each task of a Python data source has a fixed cost of some 60-80 ms in
  Spark itself (measured with Spark 4.2 local: the Python worker waits that long between
  tasks), which is the time it takes to read about 100,000 records of 100 B: a stream whose
  micro-batches hold a few thousand records per partition spends most of its time there.
  Set it to the number of cores the query may use. ``minPartitions`` must not exceed it;
  ``maxRecordsPerPartition`` wins over it (a group never holds more records than that).
- read-side options checked here too: ``failOnDataLoss`` (true), ``kafkaConsumer.pollTimeoutMs``
  (120000), ``includeHeaders`` (false), ``fetchOffset.numRetries`` (3) and
  ``fetchOffset.retryIntervalMs`` (1000) for the driver's offset lookups.

Option names are case-insensitive (as in Spark). Unknown options and bad values raise
ConfigurationError naming the option. kclient's own options: ``committedOffsetsFallback``
(above), ``kclient.endOffsetProbe`` (below) and ``kclient.maxRecordsPerBatch`` (records per
Arrow batch / poll on executors, default 65536).

Streaming queries (``parse_options(options, streaming=True)``, the ``readStream`` source in
kclient.spark.datasource) differ as Spark's source does: ``startingOffsets`` defaults to
``"latest"`` and may be ``"latest"`` / -1; the ``ending*`` options are refused;
``maxOffsetsPerTrigger`` caps the records of one micro-batch. kclient's
``kclient.commitOffsets`` (false) commits each finished micro-batch's end offsets to
``kafka.group.id``, for lag monitoring only (the checkpoint decides where a query resumes).
``minOffsetsPerTrigger`` and ``maxTriggerDelay`` are refused (not implemented). A batch read
accepts the streaming-only options for drop-in compatibility and logs a warning that they do
nothing there; ``groupIdPrefix`` is refused: the source reads assigned partitions and joins
no group, so it could only be ignored.

Offsets are resolved once, when planning: unlike Spark's batch relation (which re-resolves
"latest" every time the DataFrame runs), a planned DataFrame always reads the same records,
which is what lets a finished job commit exactly what it read.

Latest offsets come from ListOffsets, as in Spark. ``kclient.endOffsetProbe=true`` also
fetches at the listed end and takes the larger of that and the fetch answer's high watermark
(read_uncommitted only): for brokers whose ListOffsets(latest) counts batches instead of
records, such as Tansu 0.6 (the embedded broker of ``kclient demo``). Off by default: Apache
Kafka's answer is exact and the probe costs a fetch round trip.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import heapq
import json
import logging
import math
import re
import time
from typing import Any, Callable, Iterable, Mapping

from kclient import errors as Errors
from kclient.structs import TopicPartition

__all__ = ["OffsetRange", "SourceOptions", "parse_options", "canonical_options", "plan_offset_ranges",
           "split_offset_ranges", "group_offset_ranges", "EARLIEST", "LATEST"]

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1

# Source options (lower case -> the spelling used in messages).
_SOURCE_OPTIONS = {name.lower(): name for name in (
    "subscribe", "subscribePattern", "assign",
    "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
    "failOnDataLoss", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
    "includeHeaders", "minPartitions", "maxRecordsPerPartition",
    "committedOffsetsFallback", "kclient.endOffsetProbe", "kclient.maxRecordsPerBatch", "kclient.maxPartitions",
)}
# Options of streaming queries: a batch read accepts them (drop-in compatibility) and warns.
_STREAMING_ONLY = {name.lower(): name for name in (
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "groupIdPrefix", "kclient.commitOffsets",
)}
# Spark's options this source does not implement for streaming: refused rather than ignored.
_NOT_IMPLEMENTED = {"minoffsetspertrigger", "maxtriggerdelay"}
# Kafka settings Spark's source refuses, with the reason it gives.
_REFUSED_KAFKA = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "offsets are planned by the source; commit them with commit_offset_ranges()",
    "key.deserializer": "keys are always read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are always read as bytes; deserialize them with DataFrame operations",
    "interceptor.classes": "the source does not run consumer interceptors",
}
_PROBE_WAIT_MS = 50   # > 0: Tansu answers max_wait_ms=0 fetches with no partitions at all
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclasses.dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``from_offset`` (inclusive) to ``until_offset`` (exclusive) of one partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(self.until_offset - self.from_offset, 0)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition} [{self.from_offset}, {self.until_offset}))"


def _bad(option: str, problem: str) -> Errors.ConfigurationError:
    return Errors.ConfigurationError(f"option {option!r}: {problem}")


def _as_bool(option: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise _bad(option, f"must be 'true' or 'false', got {value!r}")


def _as_int(option: str, value: Any, *, minimum: int | None = None) -> int:
    if isinstance(value, bool):
        raise _bad(option, f"must be an integer, got {value!r}")
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise _bad(option, f"must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise _bad(option, f"must be >= {minimum}, got {number}")
    return number


def _as_json_object(option: str, value: Any) -> dict:
    if isinstance(value, Mapping):
        return dict(value)
    try:
        obj = json.loads(str(value))
    except ValueError as exc:
        raise _bad(option, f"is not valid JSON ({exc}): {value!r}") from None
    if not isinstance(obj, dict):
        raise _bad(option, f"must be a JSON object, got {value!r}")
    return obj


def _partition_map(option: str, value: Any, *, minimum: int) -> dict[TopicPartition, int]:
    """{"topic": {"0": n, ...}} -> {TopicPartition: n}."""
    out: dict[TopicPartition, int] = {}
    for topic, parts in _as_json_object(option, value).items():
        if not isinstance(parts, dict):
            raise _bad(option, f"topic {topic!r} must map partition numbers to values, got {parts!r}")
        for p, n in parts.items():
            try:
                partition = int(p)
            except (TypeError, ValueError):
                raise _bad(option, f"partition {p!r} of topic {topic!r} is not an integer") from None
            if isinstance(n, bool) or not isinstance(n, int):
                raise _bad(option, f"value for {topic}-{partition} must be an integer, got {n!r}")
            if n < minimum:
                raise _bad(option, f"value for {topic}-{partition} must be >= {minimum}, got {n}")
            out[TopicPartition(topic, partition)] = n
    return out


@dataclasses.dataclass
class SourceOptions:
    """Validated options (see the module doc); ``raw`` keeps the user's dict for executors."""

    kafka_params: dict[str, Any]
    strategy: str                      # "subscribe" | "subscribePattern" | "assign"
    topics: list[str] = dataclasses.field(default_factory=list)
    pattern: re.Pattern | None = None
    assigned: list[TopicPartition] = dataclasses.field(default_factory=list)
    starting: tuple[str, Any] = ("offsets", "earliest")   # (kind, spec): kind offsets|timestamp|by_timestamp|committed
    ending: tuple[str, Any] = ("offsets", "latest")
    starting_by_timestamp_strategy: str = "error"
    committed_fallback: str = "earliest"
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120000
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_partitions: int | None = None
    num_retries: int = 3
    retry_interval_ms: int = 1000
    end_offset_probe: bool = False
    max_records_per_batch: int = 65536
    streaming: bool = False
    max_offsets_per_trigger: int | None = None
    commit_offsets: bool = False
    # Options accepted but without effect here, each with why (logged by whoever plans).
    ignored: list[str] = dataclasses.field(default_factory=list)
    raw: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def group_id(self) -> str | None:
        return self.kafka_params.get("group.id")

    def client_params(self) -> dict[str, Any]:
        """Settings for a consumer that reads planned ranges: no group, no auto commit,
        no offset reset (a position out of range is data loss, decided by the source)."""
        params = {k: v for k, v in self.kafka_params.items() if k != "group.id"}
        params["enable.auto.commit"] = False
        params["auto.offset.reset"] = "none"
        return params


def canonical_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Options with the source's own spelling of known names: Spark hands a Python data
    source its options lower-cased, and messages should name them as the docs do."""
    known = {**_SOURCE_OPTIONS, **_STREAMING_ONLY}
    return {known.get(str(k).lower(), k): v for k, v in options.items()}


def log_ignored(opts: SourceOptions) -> None:
    """Say, once per plan on the driver, which accepted options do nothing here."""
    for note in opts.ignored:
        log.warning("%s", note)


def parse_options(options: Mapping[str, Any] | SourceOptions, *, streaming: bool = False) -> SourceOptions:
    """Validate Spark Kafka source options (see the module doc) of a batch read or, with
    ``streaming``, of a streaming query."""
    if isinstance(options, SourceOptions):
        return options
    if not isinstance(options, Mapping):
        raise TypeError(f"options must be a mapping of option names to values, got {type(options).__name__}")
    source: dict[str, tuple[str, Any]] = {}
    kafka: dict[str, Any] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise Errors.ConfigurationError(f"option names are strings, got {key!r}")
        low = key.lower()
        if low.startswith("kafka."):
            name = key[len("kafka."):]
            if name in _REFUSED_KAFKA:
                raise Errors.ConfigurationError(
                    f"Kafka option {key!r} is not supported: {_REFUSED_KAFKA[name]}")
            kafka[name] = value
        elif low in _SOURCE_OPTIONS:
            if low in source:
                raise Errors.ConfigurationError(f"option {key!r} is given twice ({source[low][0]!r} and {key!r})")
            source[low] = (key, value)
        elif low in _STREAMING_ONLY:
            if low in source:
                raise Errors.ConfigurationError(f"option {key!r} is given twice ({source[low][0]!r} and {key!r})")
            if streaming and low in _NOT_IMPLEMENTED:
                raise Errors.ConfigurationError(f"option {key!r} is not supported by the kclient source")
            source[low] = (key, value)
        else:
            # Case-insensitive, as the names are (Spark hands a Python source lower-cased ones).
            known = {n.lower(): n for n in [*_SOURCE_OPTIONS.values(), *_STREAMING_ONLY.values(),
                                             "kafka.bootstrap.servers"]}
            close = difflib.get_close_matches(low, list(known), n=1)
            hint = f" (did you mean {known[close[0]]!r}?)" if close else ""
            raise Errors.ConfigurationError(
                f"unknown option {key!r}{hint}; Kafka client settings take the prefix 'kafka.'")

    def get(name: str, default: Any = None) -> Any:
        entry = source.get(name.lower())
        return default if entry is None else entry[1]

    def spelled(name: str) -> str:
        entry = source.get(name.lower())
        return entry[0] if entry is not None else name

    servers = kafka.get("bootstrap.servers")
    if servers is None or (isinstance(servers, str) and not servers.strip()) or servers == []:
        raise Errors.ConfigurationError("option 'kafka.bootstrap.servers' must be specified for the Kafka source")
    _check_client_params(kafka)

    strategies = [s for s in ("subscribe", "subscribePattern", "assign") if s.lower() in source]
    if len(strategies) != 1:
        given = ", ".join(repr(spelled(s)) for s in strategies) or "none"
        raise Errors.ConfigurationError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be given "
            f"(given: {given})")
    strategy = strategies[0]
    opts = SourceOptions(kafka_params=kafka, strategy=strategy, raw=dict(options), streaming=streaming)
    if strategy == "subscribe":
        value = get("subscribe")
        topics = [t.strip() for t in (value if isinstance(value, (list, tuple)) else str(value).split(","))]
        topics = [t for t in topics if t]
        if not topics:
            raise _bad(spelled("subscribe"), f"names no topic: {value!r}")
        opts.topics = list(dict.fromkeys(topics))
    elif strategy == "subscribePattern":
        value = str(get("subscribePattern")).strip()
        if not value:
            raise _bad(spelled("subscribePattern"), "is empty")
        try:
            opts.pattern = re.compile(value)
        except re.error as exc:
            raise _bad(spelled("subscribePattern"), f"is not a valid regular expression ({exc}): {value!r}") from None
    else:
        name = spelled("assign")
        assigned: list[TopicPartition] = []
        for topic, parts in _as_json_object(name, get("assign")).items():
            if not isinstance(parts, list) or not parts or any(
                    isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in parts):
                raise _bad(name, f"topic {topic!r} must map to a non-empty list of partition numbers, got {parts!r}")
            assigned.extend(TopicPartition(topic, p) for p in parts)
        if not assigned:
            raise _bad(name, "assigns no partition")
        opts.assigned = sorted(set(assigned))

    opts.starting = _position_option(source, get, spelled, "starting", streaming)
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if get(name) is not None:
                raise _bad(spelled(name), "is not valid for streaming queries (a stream has no end)")
    else:
        opts.ending = _position_option(source, get, spelled, "ending", streaming)
    strategy_value = str(get("startingOffsetsByTimestampStrategy", "error")).strip().lower()
    if strategy_value not in ("error", "latest"):
        raise _bad(spelled("startingOffsetsByTimestampStrategy"), f"must be 'error' or 'latest', got {strategy_value!r}")
    opts.starting_by_timestamp_strategy = strategy_value
    fallback = str(get("committedOffsetsFallback", "earliest")).strip().lower()
    if fallback not in ("earliest", "latest", "error"):
        raise _bad(spelled("committedOffsetsFallback"), f"must be 'earliest', 'latest' or 'error', got {fallback!r}")
    opts.committed_fallback = fallback
    if opts.starting[0] == "committed" and not opts.group_id:
        raise _bad(spelled("startingOffsets"), "'committed' needs the option 'kafka.group.id'")

    opts.fail_on_data_loss = _as_bool(spelled("failOnDataLoss"), get("failOnDataLoss", True))
    opts.poll_timeout_ms = _as_int(spelled("kafkaConsumer.pollTimeoutMs"), get("kafkaConsumer.pollTimeoutMs", 120000),
                                   minimum=1)
    opts.include_headers = _as_bool(spelled("includeHeaders"), get("includeHeaders", False))
    if get("minPartitions") is not None:
        opts.min_partitions = _as_int(spelled("minPartitions"), get("minPartitions"), minimum=1)
    if get("maxRecordsPerPartition") is not None:
        opts.max_records_per_partition = _as_int(spelled("maxRecordsPerPartition"), get("maxRecordsPerPartition"),
                                                 minimum=1)
    if get("kclient.maxPartitions") is not None:
        opts.max_partitions = _as_int(spelled("kclient.maxPartitions"), get("kclient.maxPartitions"), minimum=1)
        if opts.min_partitions is not None and opts.min_partitions > opts.max_partitions:
            raise _bad(spelled("kclient.maxPartitions"),
                       f"is {opts.max_partitions}, below {spelled('minPartitions')!r} ({opts.min_partitions})")
    opts.num_retries = _as_int(spelled("fetchOffset.numRetries"), get("fetchOffset.numRetries", 3), minimum=0)
    opts.retry_interval_ms = _as_int(spelled("fetchOffset.retryIntervalMs"), get("fetchOffset.retryIntervalMs", 1000),
                                     minimum=0)
    opts.end_offset_probe = _as_bool(spelled("kclient.endOffsetProbe"), get("kclient.endOffsetProbe", False))
    opts.max_records_per_batch = _as_int(spelled("kclient.maxRecordsPerBatch"),
                                         get("kclient.maxRecordsPerBatch", 65536), minimum=1)
    _streaming_options(opts, source, get, spelled)
    return opts


def _streaming_options(opts: SourceOptions, source, get, spelled) -> None:
    if get("groupIdPrefix") is not None:
        raise _bad(spelled("groupIdPrefix"), "not supported: the kclient source reads assigned partitions and "
                   "joins no consumer group (to commit offsets for lag monitoring, set 'kafka.group.id' and "
                   "'kclient.commitOffsets')")
    if not opts.streaming:
        for low, (key, _) in source.items():
            if low in _STREAMING_ONLY:
                opts.ignored.append(f"option {key!r} only applies to streaming queries; ignored by this batch read")
        return
    if get("maxOffsetsPerTrigger") is not None:
        opts.max_offsets_per_trigger = _as_int(spelled("maxOffsetsPerTrigger"), get("maxOffsetsPerTrigger"),
                                               minimum=1)
    opts.commit_offsets = _as_bool(spelled("kclient.commitOffsets"), get("kclient.commitOffsets", False))
    if opts.commit_offsets and not opts.group_id:
        raise _bad(spelled("kclient.commitOffsets"), "needs the option 'kafka.group.id' (the group to commit to)")


def _check_client_params(kafka: dict[str, Any]) -> None:
    """Fail now, on the driver, for settings the consumer would refuse on every executor."""
    from kclient.config import ConsumerConfig
    try:
        ConsumerConfig(dict(kafka))
    except Errors.ConfigurationError as exc:
        for key, value in kafka.items():      # name the option as the user spelled it
            try:
                ConsumerConfig({key: value})
            except Errors.ConfigurationError as one:
                raise Errors.ConfigurationError(f"option 'kafka.{key}': {one}") from None
        raise Errors.ConfigurationError(f"the 'kafka.'-prefixed options are invalid together: {exc}") from None


def _position_option(source, get, spelled, side: str, streaming: bool) -> tuple[str, Any]:
    """Where a side ("starting"/"ending") is, by priority: timestamp > by-timestamp > offsets.
    A stream starts at "latest" by default, and may (it reads what arrives later)."""
    ts_name, by_name, off_name = f"{side}Timestamp", f"{side}OffsetsByTimestamp", f"{side}Offsets"
    if get(ts_name) is not None:
        return ("timestamp", _as_int(spelled(ts_name), get(ts_name), minimum=0))
    if get(by_name) is not None:
        return ("by_timestamp", _partition_map(spelled(by_name), get(by_name), minimum=0))
    name = spelled(off_name)
    value = get(off_name, "latest" if streaming or side == "ending" else "earliest")
    if isinstance(value, str) and value.strip().lower() in ("earliest", "latest", "committed"):
        word = value.strip().lower()
        if side == "starting" and word == "latest" and not streaming:
            raise _bad(name, "'latest' is not allowed for batch queries (it would read nothing)")
        if side == "ending" and word == "earliest":
            raise _bad(name, "'earliest' is not allowed for batch queries (it would read nothing)")
        if side == "ending" and word == "committed":
            raise _bad(name, "'committed' is only supported for 'startingOffsets'")
        return ("committed", None) if word == "committed" else ("offsets", word)
    specific = _partition_map(name, value, minimum=EARLIEST)
    for tp, off in specific.items():
        if side == "starting" and off == LATEST and not streaming:
            raise _bad(name, f"offset for {tp.topic}-{tp.partition} can't be latest (-1) for batch queries")
        if side == "ending" and off == EARLIEST:
            raise _bad(name, f"offset for {tp.topic}-{tp.partition} can't be earliest (-2) for batch queries")
    return ("offsets", specific)


# ------------------------------------------------------------------ splitting (pure)
def _split_even(rng: OffsetRange, pieces: int) -> list[OffsetRange]:
    """rng in `pieces` contiguous parts whose sizes differ by at most one record."""
    pieces = max(1, min(pieces, rng.size))
    base, extra = divmod(rng.size, pieces)
    out, start = [], rng.from_offset
    for i in range(pieces):
        end = start + base + (1 if i < extra else 0)
        out.append(OffsetRange(rng.topic, rng.partition, start, end))
        start = end
    return out


def split_offset_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None = None,
                        max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Split ranges for parallelism: first every range larger than max_records_per_partition
    into the fewest near-equal pieces within that cap; then, if fewer than min_partitions
    ranges remain, each range into ceil(size * min_partitions / total) near-equal pieces
    (so at least min_partitions in all, a few more after rounding). Empty ranges are dropped;
    the result is ordered by topic, partition and offset."""
    out = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        if max_records_per_partition < 1:
            raise ValueError(f"max_records_per_partition must be >= 1, got {max_records_per_partition}")
        out = [piece for r in out for piece in _split_even(r, -(-r.size // max_records_per_partition))]
    if min_partitions is not None and 0 < len(out) < min_partitions:
        total = sum(r.size for r in out)
        out = [piece for r in out for piece in _split_even(r, math.ceil(r.size * min_partitions / total))]
    return sorted(out)


def group_offset_ranges(ranges: Iterable[OffsetRange], max_partitions: int | None = None,
                        max_records_per_partition: int | None = None) -> list[list[OffsetRange]]:
    """Ranges packed into Spark partitions: one each without ``max_partitions``; otherwise
    at most that many groups, filled largest range first into the group holding the fewest
    records so far (so group sizes differ by at most the largest range), with more groups if
    one would hold more than ``max_records_per_partition`` records. Empty ranges are dropped;
    a group's ranges, and the groups by their first range, are in topic, partition and offset
    order (pieces of one partition are read in offset order by one task)."""
    if max_partitions is not None and max_partitions < 1:
        raise ValueError(f"max_partitions must be >= 1, got {max_partitions}")
    out = sorted(r for r in ranges if r.size > 0)
    if max_partitions is None or max_partitions >= len(out):
        return [[r] for r in out]
    largest_first = sorted(out, key=lambda r: (-r.size, r))
    count = max_partitions
    if max_records_per_partition is not None:       # fewer groups could not stay within the cap
        count = max(count, -(-sum(r.size for r in out) // max_records_per_partition))
    while True:
        loads = [(0, i) for i in range(count)]          # a heap of (records, group)
        groups: list[list[OffsetRange]] = [[] for _ in range(count)]
        for rng in largest_first:
            load, i = heapq.heappop(loads)
            groups[i].append(rng)
            heapq.heappush(loads, (load + rng.size, i))
        cap = max_records_per_partition
        if cap is None or count >= len(out) or max(load for load, _ in loads) <= cap:
            return sorted(sorted(g) for g in groups)
        count += 1


# ------------------------------------------------------------------ planning (driver)
class _Planner:
    """Offset lookups against the cluster for one planning call."""

    def __init__(self, opts: SourceOptions):
        from kclient.consumer.kafka_consumer import KafkaConsumer
        self.opts = opts
        params = opts.client_params()
        # This consumer fetches only to probe end offsets: answers at the end of a partition
        # should not wait long for data.
        params["fetch.max.wait.ms"] = min(int(params.get("fetch.max.wait.ms", 500)), _PROBE_WAIT_MS)
        self.consumer = KafkaConsumer(params)
        self._read_committed = str(self.consumer.config["isolation.level"]) == "read_committed"
        self._listed = False        # partitions() ran before: the metadata cache may be stale

    def close(self) -> None:
        self.consumer.close(autocommit=False)

    def retrying(self, what: str, fn: Callable[[], Any]) -> Any:
        """fn() with fetchOffset.numRetries retries on retriable errors."""
        attempt = 0
        while True:
            try:
                return fn()
            except Errors.KafkaError as exc:
                if not (exc.retriable or exc.invalid_metadata) or attempt >= self.opts.num_retries:
                    raise
                attempt += 1
                log.warning("%s failed (%s); retry %d of %d in %d ms", what, exc, attempt,
                            self.opts.num_retries, self.opts.retry_interval_ms)
                time.sleep(self.opts.retry_interval_ms / 1000.0)

    # -- partitions
    def partitions(self) -> list[TopicPartition]:
        opts = self.opts
        c = self.consumer
        if opts.strategy == "assign":
            missing = []
            for topic in sorted({tp.topic for tp in opts.assigned}):
                have = self.retrying(f"metadata of {topic!r}", functools.partial(c.partitions_for_topic, topic)) or set()
                missing += [tp for tp in opts.assigned if tp.topic == topic and tp.partition not in have]
            if missing:
                names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
                raise _bad(_spelling(opts, "assign"), f"partitions {names} do not exist")
            return list(opts.assigned)
        if opts.strategy == "subscribe":
            topics = opts.topics
            if self._listed:
                # The stream reader keeps its planner for the whole query, and partitions_for_topic
                # answers from the metadata cache (stale for up to metadata.max.age.ms): ask the
                # cluster again so that partitions added since the last micro-batch are read now
                # (Spark's own source describes the topics on every call too).
                self.retrying("metadata refresh", self._refresh_metadata)
        else:
            pattern = opts.pattern
            assert pattern is not None  # parse_options() sets it for the subscribePattern strategy
            every = self.retrying("topic list", c.topics)
            topics = sorted(t for t in every if t not in _INTERNAL_TOPICS and pattern.fullmatch(t))
            if not topics:
                log.warning("no topic matches subscribePattern %r: nothing to read", pattern.pattern)
        out: list[TopicPartition] = []
        for topic in topics:
            parts = self.retrying(f"metadata of {topic!r}", functools.partial(c.partitions_for_topic, topic))
            if parts is None:
                log.warning("topic %r does not exist: nothing to read from it", topic)
                continue
            out.extend(TopicPartition(topic, p) for p in sorted(parts))
        self._listed = True
        return out

    def _refresh_metadata(self) -> None:
        """A metadata update for the topics this planner's consumer already looked up, sent
        at once: Spark calls the stream reader's initialOffset, latestOffset and partitions in
        quick succession when a query starts, and each refresh waited out retry.backoff.ms
        after the previous one before it was even sent."""
        c = self.consumer
        if not c._client.await_metadata_update(int(c.config["request.timeout.ms"]), immediate=True):
            raise Errors.KafkaTimeoutError("no metadata update for the subscribed topics in time")

    # -- offsets
    def earliest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        return self.retrying("earliest offsets", lambda: self.consumer.beginning_offsets(tps))

    def latest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        listed = self.retrying("latest offsets", lambda: self.consumer.end_offsets(tps))
        if self.opts.end_offset_probe and not self._read_committed:
            probed = self._probe_high_watermarks(listed)
            for tp, hw in probed.items():
                if hw > listed.get(tp, -1):
                    log.debug("%s: fetch high watermark %d is past the listed end offset %d; using it",
                              tp, hw, listed[tp])
                    listed[tp] = hw
        return listed

    def _probe_high_watermarks(self, listed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """High watermarks from fetch answers at the listed end offsets (see the module doc)."""
        c = self.consumer
        tps = sorted(tp for tp, off in listed.items() if off >= 0)
        if not tps:
            return {}
        c.assign(tps)
        for tp in tps:
            c.seek(tp, listed[tp])
        wait_ms = min(int(c.config["fetch.max.wait.ms"]), 500)
        deadline = time.monotonic() + max(2 * wait_ms, 100) / 1000.0 + int(c.config["request.timeout.ms"]) / 1000.0
        out: dict[TopicPartition, int] = {}
        try:
            while len(out) < len(tps) and time.monotonic() < deadline:
                c.poll_columnar(timeout_ms=max(wait_ms, 50), max_records=1)
                for tp in tps:
                    hw = c.highwater(tp)
                    if hw is not None and hw >= 0:
                        out[tp] = hw
        except Errors.KafkaError as exc:   # the probe is a correction only; ListOffsets stands
            log.debug("end-offset probe failed (%s); using the listed end offsets", exc)
        finally:
            c.assign([])
        return out

    def by_timestamp(self, query: dict[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        if not query:
            return {}
        found = self.retrying("offsets by timestamp", lambda: self.consumer.offsets_for_times(query))
        return {tp: (None if v is None else v.offset) for tp, v in found.items()}

    def committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        from kclient.admin import KafkaAdminClient
        group = self.opts.group_id
        assert group is not None  # parse_options() refuses startingOffsets 'committed' without a group id
        with KafkaAdminClient(_admin_params(self.opts.kafka_params)) as admin:
            found = self.retrying(f"committed offsets of group {group!r}",
                                  lambda: admin.list_consumer_group_offsets(group, partitions=tps))
        return {tp: om.offset for tp, om in found.items() if om is not None and om.offset >= 0}


def _admin_params(kafka_params: Mapping[str, Any]) -> dict[str, Any]:
    from kclient.admin import ADMIN_CONFIGS
    names = {d.name for d in ADMIN_CONFIGS}
    return {k: v for k, v in kafka_params.items() if k in names}


def _spelling(opts: SourceOptions, name: str) -> str:
    for key in opts.raw:
        if key.lower() == name.lower():
            return key
    return name


def _resolve_side(planner: _Planner, opts: SourceOptions, tps: list[TopicPartition], side: str,
                  cache: dict) -> dict[TopicPartition, int]:
    """Concrete offsets for one side of the ranges."""
    kind, spec = opts.starting if side == "starting" else opts.ending

    def earliest() -> dict[TopicPartition, int]:
        if "earliest" not in cache:
            cache["earliest"] = planner.earliest(tps)
        return cache["earliest"]

    def latest() -> dict[TopicPartition, int]:
        if "latest" not in cache:
            cache["latest"] = planner.latest(tps)
        return cache["latest"]

    if kind == "offsets" and spec == "earliest":
        return dict(earliest())
    if kind == "offsets" and spec == "latest":
        return dict(latest())
    if kind == "offsets":
        name = _spelling(opts, f"{side}Offsets")
        _require_all(name, spec, tps)
        out = {}
        for tp in tps:
            off = spec[tp]
            out[tp] = earliest()[tp] if off == EARLIEST else latest()[tp] if off == LATEST else off
        return out
    if kind in ("timestamp", "by_timestamp"):
        if kind == "by_timestamp":
            name = _spelling(opts, f"{side}OffsetsByTimestamp")
            _require_all(name, spec, tps)
            query = {tp: spec[tp] for tp in tps}
        else:
            name = _spelling(opts, f"{side}Timestamp")
            query = {tp: spec for tp in tps}
        found = planner.by_timestamp(query)
        out = {}
        for tp in tps:
            off = found.get(tp)
            if off is None:
                if side == "starting" and opts.starting_by_timestamp_strategy == "error":
                    raise Errors.OffsetOutOfRangeError(
                        f"option {name!r}: no record of {tp.topic}-{tp.partition} has a timestamp at or after "
                        f"{query[tp]}; set startingOffsetsByTimestampStrategy to 'latest' to start at the "
                        f"end instead")
                off = latest()[tp]
            out[tp] = off
        return out
    # committed (starting only)
    committed = planner.committed(tps)
    out = {}
    missing = [tp for tp in tps if tp not in committed]
    if missing and opts.committed_fallback == "error":
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
        raise Errors.NoOffsetForPartitionError(
            f"startingOffsets 'committed': group {opts.group_id!r} has no committed offset for {names} "
            f"and committedOffsetsFallback is 'error'")
    for tp in tps:
        if tp in committed:
            out[tp] = committed[tp]
        else:
            out[tp] = (earliest() if opts.committed_fallback == "earliest" else latest())[tp]
    if missing:
        log.info("group %r has no committed offset for %d partition(s); starting them at %s",
                 opts.group_id, len(missing), opts.committed_fallback)
    return out


def _require_all(option: str, spec: dict[TopicPartition, int], tps: list[TopicPartition]) -> None:
    missing = [tp for tp in tps if tp not in spec]
    if missing:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
        raise _bad(option, f"must give every partition to read; missing {names}")
    extra = sorted(set(spec) - set(tps))
    if extra:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in extra)
        raise _bad(option, f"names partitions that are not read: {names}")


def plan_offset_ranges(options: Mapping[str, Any] | SourceOptions) -> list[OffsetRange]:
    """The offset ranges a batch read of these options covers, split for parallelism (see
    the module doc), one per Spark task: ``kclient.maxPartitions`` is for the data source
    (group these ranges with :func:`group_offset_ranges` to apply it by hand). Runs on the
    driver; connects to the cluster."""
    opts = parse_options(options)
    if opts.max_partitions is not None:
        log.warning("option 'kclient.maxPartitions' applies to the kclient data source (spark.read/readStream"
                    ".format(\"kclient\"), read_kafka); plan_offset_ranges returns one range per task: pack them "
                    "with group_offset_ranges()")
    return _plan_offset_ranges(opts)


def _plan_offset_ranges(opts: SourceOptions) -> list[OffsetRange]:
    """plan_offset_ranges() for the data source, which groups the ranges itself."""
    log_ignored(opts)
    planner = _Planner(opts)
    try:
        return _plan_with(opts, planner)
    finally:
        planner.close()


def _plan_with(opts: SourceOptions, planner) -> list[OffsetRange]:
    """Planning over a lookup object with partitions(), earliest(tps), latest(tps),
    by_timestamp({tp: ms}) and committed(tps) (the cluster's, or a unit test's)."""
    tps = planner.partitions()
    if not tps:
        return []
    cache: dict = {}
    start = _resolve_side(planner, opts, tps, "starting", cache)
    end = _resolve_side(planner, opts, tps, "ending", cache)
    ranges = []
    for tp in tps:
        lo, hi = start[tp], end[tp]
        if lo > hi:
            message = (f"{tp.topic}-{tp.partition}: the starting offset {lo} is after the ending offset {hi} "
                       f"(the topic may have been deleted and recreated, or records were lost)")
            if opts.fail_on_data_loss:
                raise Errors.DataLossError(message + "; set failOnDataLoss to false to skip this partition")
            log.warning("%s; skipping the partition (failOnDataLoss is false)", message)
            continue
        ranges.append(OffsetRange(tp.topic, tp.partition, lo, hi))
    planned = split_offset_ranges(ranges, opts.min_partitions, opts.max_records_per_partition)
    log.info("planned %d offset range(s) over %d partition(s), %d record(s) at most",
             len(planned), len(tps), sum(r.size for r in planned))
    return planned
