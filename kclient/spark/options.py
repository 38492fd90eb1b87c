"""The Spark source's options: their table (``SOURCE_OPTIONS``, on the clients' ConfigDef
machinery) and their parsing into :class:`SourceOptions`.

The options are those of Spark's Kafka source (``spark.read.format("kafka")``), and kclient's
own (``kclient.*``, ``committedOffsetsFallback``); docs/configuration.md lists them all, generated
from the table:

- ``kafka.bootstrap.servers`` (required); every other ``kafka.``-prefixed option is passed to
  the client with the prefix removed (``kafka.fetch.max.bytes`` -> ``fetch.max.bytes``) and
  checked here against the consumer's table. As in Spark, ``kafka.auto.offset.reset``,
  ``kafka.enable.auto.commit``, the (de)serializers and ``kafka.interceptor.classes`` are
  refused: the source decides offsets.
- exactly one of ``subscribe``, ``subscribePattern`` or ``assign``.
- where to start, highest priority first: ``startingTimestamp``, ``startingOffsetsByTimestamp``,
  ``startingOffsets``; where to end (exclusive), likewise with ``ending*``.

Option names are case-insensitive (as in Spark: it hands a Python data source its options
lower-cased). Unknown options and bad values raise ConfigurationError naming the option as the
user spelled it; an unknown name is answered with the closest known one.

Streaming queries (``parse_options(options, streaming=True)``) differ as Spark's source does:
``startingOffsets`` defaults to ``"latest"``; the ``ending*`` options are refused;
``minOffsetsPerTrigger`` and ``maxTriggerDelay`` are refused (not implemented). A batch read
accepts the streaming-only options for drop-in compatibility and logs a warning that they do
nothing there; ``groupIdPrefix`` is refused: the source reads assigned partitions and joins no
group, so it could only be ignored.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import re
from typing import Any, Mapping

from kclient import errors as Errors
from kclient.config import ConfigDef, ConfigRegistry, ConsumerConfig
from kclient.structs import TopicPartition

__all__ = ["SOURCE_OPTIONS", "SourceOptions", "parse_options", "canonical_options", "log_ignored",
           "EARLIEST", "LATEST", "STREAMING"]

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1

#: The group of the options that only streaming queries act on.
STREAMING = "streaming"

SOURCE_OPTIONS = ConfigRegistry([
    ConfigDef("kafka.bootstrap.servers", "list", None,
              doc="required: the cluster's host:port list; every other 'kafka.'-prefixed option is a "
                  "consumer setting (prefix removed)"),
    ConfigDef("subscribe", "list", None, doc="topics to read, a comma list (one of subscribe, "
                                             "subscribePattern, assign)"),
    ConfigDef("subscribePattern", "str", None, doc="a regular expression matching whole topic names"),
    ConfigDef("assign", "str", None, doc='partitions to read, JSON {"topic": [0, 1]}'),
    ConfigDef("startingOffsets", "str", "earliest",
              doc='where to start without a timestamp: earliest, latest (streaming only: its default), '
                  'committed (the offsets kafka.group.id committed) or JSON {"topic": {"0": 42}} (-2: '
                  'earliest, -1: latest)'),
    ConfigDef("endingOffsets", "str", "latest",
              doc='where a batch read ends (exclusive): latest or JSON {"topic": {"0": 42}} (-1: latest)'),
    ConfigDef("startingTimestamp", "long", None, min=0,
              doc="start every partition at its first record at or after this time (ms); wins over "
                  "the other starting options"),
    ConfigDef("endingTimestamp", "long", None, min=0,
              doc="end every partition at its first record at or after this time (ms)"),
    ConfigDef("startingOffsetsByTimestamp", "str", None,
              doc='per partition start time, JSON {"topic": {"0": ms}}'),
    ConfigDef("endingOffsetsByTimestamp", "str", None, doc='per partition end time, JSON {"topic": {"0": ms}}'),
    ConfigDef("startingOffsetsByTimestampStrategy", "str", "error", choices=("error", "latest"),
              doc="when no record is at or after a starting timestamp: error, or start at latest"),
    ConfigDef("committedOffsetsFallback", "str", "earliest", choices=("earliest", "latest", "error"),
              doc="kclient: with startingOffsets=committed, where a partition without a committed "
                  "offset starts"),
    ConfigDef("failOnDataLoss", "bool", True,
              doc="fail when planned records no longer exist (deleted or compacted); false: skip them"),
    ConfigDef("kafkaConsumer.pollTimeoutMs", "long", 120000, min=1,
              doc="how long a task waits for records it planned to read"),
    ConfigDef("fetchOffset.numRetries", "int", 3, min=0,
              doc="retries of the driver's offset lookups on retriable errors"),
    ConfigDef("fetchOffset.retryIntervalMs", "long", 1000, min=0, doc="wait between those retries"),
    ConfigDef("includeHeaders", "bool", False, doc="add the records' headers column"),
    ConfigDef("minPartitions", "int", None, min=1,
              doc="split large ranges so that there are at least about this many Spark partitions"),
    ConfigDef("maxRecordsPerPartition", "long", None, min=1,
              doc="split ranges larger than this many records"),
    ConfigDef("kclient.maxPartitions", "int", None, min=1,
              doc="kclient: at most this many Spark partitions per read or micro-batch, ranges packed "
                  "into groups of near-equal record counts (each Python task costs Spark some 60-80 "
                  "ms); at least minPartitions"),
    ConfigDef("kclient.endOffsetProbe", "bool", False,
              doc="kclient: also fetch at the listed end offset and take the larger of that and the "
                  "high watermark (brokers whose ListOffsets counts batches, such as Tansu 0.6)"),
    ConfigDef("kclient.maxRecordsPerBatch", "int", 65536, min=1,
              doc="kclient: records per Arrow batch (and poll) on executors"),
    ConfigDef("maxOffsetsPerTrigger", "long", None, min=1, group=STREAMING,
              doc="streaming: the most records one micro-batch reads"),
    ConfigDef("minOffsetsPerTrigger", "long", None, group=STREAMING,
              doc="streaming: refused (not implemented)"),
    ConfigDef("maxTriggerDelay", "str", None, group=STREAMING, doc="streaming: refused (not implemented)"),
    ConfigDef("groupIdPrefix", "str", None, group=STREAMING,
              doc="refused: the source reads assigned partitions and joins no consumer group"),
    ConfigDef("kclient.commitOffsets", "bool", False, group=STREAMING,
              doc="kclient, streaming: commit each finished micro-batch's end offsets to kafka.group.id, "
                  "for lag monitoring only (the checkpoint decides where a query resumes)"),
], noun="option", case_insensitive=True,
   unknown_hint="; Kafka client settings take the prefix 'kafka.'")

# Spark's options this source does not implement for streaming: refused rather than ignored.
_NOT_IMPLEMENTED = {"minOffsetsPerTrigger", "maxTriggerDelay"}
# Kafka settings Spark's source refuses, with the reason it gives.
_REFUSED_KAFKA = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "offsets are planned by the source; commit them with commit_offset_ranges()",
    "key.deserializer": "keys are always read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are always read as bytes; deserialize them with DataFrame operations",
    "interceptor.classes": "the source does not run consumer interceptors",
}


def _default(name: str) -> Any:
    return SOURCE_OPTIONS.defs[name].default


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
    starting_by_timestamp_strategy: str = _default("startingOffsetsByTimestampStrategy")
    committed_fallback: str = _default("committedOffsetsFallback")
    fail_on_data_loss: bool = _default("failOnDataLoss")
    poll_timeout_ms: int = _default("kafkaConsumer.pollTimeoutMs")
    include_headers: bool = _default("includeHeaders")
    min_partitions: int | None = _default("minPartitions")
    max_records_per_partition: int | None = _default("maxRecordsPerPartition")
    max_partitions: int | None = _default("kclient.maxPartitions")
    num_retries: int = _default("fetchOffset.numRetries")
    retry_interval_ms: int = _default("fetchOffset.retryIntervalMs")
    end_offset_probe: bool = _default("kclient.endOffsetProbe")
    max_records_per_batch: int = _default("kclient.maxRecordsPerBatch")
    streaming: bool = False
    max_offsets_per_trigger: int | None = _default("maxOffsetsPerTrigger")
    commit_offsets: bool = _default("kclient.commitOffsets")
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
    return {SOURCE_OPTIONS.find(str(k)) or k: v for k, v in options.items()}


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
        if key.lower().startswith("kafka."):
            name = key[len("kafka."):]
            if name in _REFUSED_KAFKA:
                raise Errors.ConfigurationError(
                    f"Kafka option {key!r} is not supported: {_REFUSED_KAFKA[name]}")
            kafka[name] = value
            continue
        # Case-insensitive, as the names are (Spark hands a Python source lower-cased ones).
        name = SOURCE_OPTIONS.canonical_name(key)
        if name in source:
            raise Errors.ConfigurationError(f"option {key!r} is given twice ({source[name][0]!r} and {key!r})")
        if streaming and name in _NOT_IMPLEMENTED:
            raise Errors.ConfigurationError(f"option {key!r} is not supported by the kclient source")
        source[name] = (key, value)

    def get(name: str, default: Any = None) -> Any:
        entry = source.get(name)
        return default if entry is None else entry[1]

    def spelled(name: str) -> str:
        entry = source.get(name)
        return entry[0] if entry is not None else name

    def checked(name: str) -> Any:
        """The option's value checked against its definition, or its default."""
        return _checked(name, spelled(name), get(name))

    servers = kafka.get("bootstrap.servers")
    if servers is None or (isinstance(servers, str) and not servers.strip()) or servers == []:
        raise Errors.ConfigurationError("option 'kafka.bootstrap.servers' must be specified for the Kafka source")
    _check_client_params(kafka)

    strategies = [s for s in ("subscribe", "subscribePattern", "assign") if s in source]
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
    opts.starting_by_timestamp_strategy = checked("startingOffsetsByTimestampStrategy")
    opts.committed_fallback = checked("committedOffsetsFallback")
    if opts.starting[0] == "committed" and not opts.group_id:
        raise _bad(spelled("startingOffsets"), "'committed' needs the option 'kafka.group.id'")

    opts.fail_on_data_loss = checked("failOnDataLoss")
    opts.poll_timeout_ms = checked("kafkaConsumer.pollTimeoutMs")
    opts.include_headers = checked("includeHeaders")
    opts.min_partitions = checked("minPartitions")
    opts.max_records_per_partition = checked("maxRecordsPerPartition")
    opts.max_partitions = checked("kclient.maxPartitions")
    if opts.max_partitions is not None:
        if opts.min_partitions is not None and opts.min_partitions > opts.max_partitions:
            raise _bad(spelled("kclient.maxPartitions"),
                       f"is {opts.max_partitions}, below {spelled('minPartitions')!r} ({opts.min_partitions})")
    opts.num_retries = checked("fetchOffset.numRetries")
    opts.retry_interval_ms = checked("fetchOffset.retryIntervalMs")
    opts.end_offset_probe = checked("kclient.endOffsetProbe")
    opts.max_records_per_batch = checked("kclient.maxRecordsPerBatch")
    _streaming_options(opts, source, get, spelled, checked)
    return opts


def _streaming_options(opts: SourceOptions, source, get, spelled, checked) -> None:
    if get("groupIdPrefix") is not None:
        raise _bad(spelled("groupIdPrefix"), "not supported: the kclient source reads assigned partitions and "
                   "joins no consumer group (to commit offsets for lag monitoring, set 'kafka.group.id' and "
                   "'kclient.commitOffsets')")
    if not opts.streaming:
        for name, (key, _) in source.items():
            if SOURCE_OPTIONS.defs[name].group == STREAMING:
                opts.ignored.append(f"option {key!r} only applies to streaming queries; ignored by this batch read")
        return
    opts.max_offsets_per_trigger = checked("maxOffsetsPerTrigger")
    opts.commit_offsets = checked("kclient.commitOffsets")
    if opts.commit_offsets and not opts.group_id:
        raise _bad(spelled("kclient.commitOffsets"), "needs the option 'kafka.group.id' (the group to commit to)")


def _check_client_params(kafka: dict[str, Any]) -> None:
    """Fail now, on the driver, for settings the consumer would refuse on every executor."""
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
        return ("timestamp", _checked(ts_name, spelled(ts_name), get(ts_name)))
    if get(by_name) is not None:
        return ("by_timestamp", _partition_map(spelled(by_name), get(by_name), minimum=0))
    name = spelled(off_name)
    # A stream reads what arrives from now on unless told otherwise.
    value = get(off_name, "latest" if streaming else SOURCE_OPTIONS.defs[off_name].default)
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


def _checked(name: str, spelled: str, value: Any) -> Any:
    """``value`` of option ``name`` (given as ``spelled``) checked against its definition; its
    default if not given."""
    d = SOURCE_OPTIONS.defs[name]
    if value is None:
        return d.default
    if d.type == "bool":
        return _as_bool(spelled, value)
    if d.type in ("int", "long"):
        return _as_int(spelled, value, minimum=None if d.min is None else int(d.min))
    if d.choices is not None:
        word = str(value).strip().lower()
        if word not in d.choices:
            raise _bad(spelled, f"must be one of {list(d.choices)}, got {word!r}")
        return word
    return value
