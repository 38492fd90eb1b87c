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
  :func:`group_offset_ranges`). ``minPartitions`` must not exceed it;
  ``maxRecordsPerPartition`` wins over it (a group never holds more records than that).
  Unset, and without ``minPartitions``, the data source picks the number of tasks from the
  session's cores and the number of records (kclient.spark.tasks): each task of a Python
  data source has a fixed cost of some 60-80 ms in Spark itself, so one task per Kafka
  partition, the layout of Spark's source, spends most of a small micro-batch's time there.
- read-side options checked here too: ``failOnDataLoss`` (true), ``kafkaConsumer.pollTimeoutMs``
  (120000), ``includeHeaders`` (false), ``fetchOffset.numRetries`` (3) and
  ``fetchOffset.retryIntervalMs`` (1000) for the driver's offset lookups.

The options are checked and parsed by ``kclient.spark.options`` against their table
(``SOURCE_OPTIONS``, where each default is defined); streaming queries
(``parse_options(options, streaming=True)``) start at ``"latest"`` by default and refuse the
``ending*`` options.

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
import functools
import heapq
import logging
import math
import time
from typing import Any, Callable, Iterable, Mapping

from kclient import errors as Errors
from kclient.config import ConsumerConfig
from kclient.spark.options import (EARLIEST, LATEST, SourceOptions, _bad, canonical_options, log_ignored,
                                   parse_options)
from kclient.spark.options import _as_bool  # noqa: F401 (datasource.py imports it from here)
from kclient.structs import TopicPartition

__all__ = ["OffsetRange", "SourceOptions", "parse_options", "canonical_options", "log_ignored", "plan_offset_ranges",
           "split_offset_ranges", "group_offset_ranges", "EARLIEST", "LATEST"]

log = logging.getLogger(__name__)

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
    """Offset lookups against the cluster for one planning call (or one streaming query):
    metadata and ListOffsets through kclient.spark.lookups, which imports the consumer's
    network layer only; a consumer is made only for the end-offset probe."""

    def __init__(self, opts: SourceOptions):
        from kclient.spark.lookups import ClusterLookups
        self.opts = opts
        self.lookups = ClusterLookups(opts.client_params())
        self._probe: Any = None     # the consumer of the end-offset probe, made on first use
        self._listed = False        # partitions() ran before: the metadata cache may be stale

    def close(self) -> None:
        try:
            if self._probe is not None:
                self._probe.close(autocommit=False)
        finally:
            self.lookups.close()

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
        c = self.lookups
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
                self.retrying("metadata refresh", c.refresh)
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

    # -- offsets
    def earliest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        return self.retrying("earliest offsets", lambda: self.lookups.earliest(tps))

    def latest(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        listed = self.retrying("latest offsets", lambda: self.lookups.latest(tps))
        if self.opts.end_offset_probe and not self.lookups.read_committed:
            probed = self._probe_high_watermarks(listed)
            for tp, hw in probed.items():
                if hw > listed.get(tp, -1):
                    log.debug("%s: fetch high watermark %d is past the listed end offset %d; using it",
                              tp, hw, listed[tp])
                    listed[tp] = hw
        return listed

    def _probe_consumer(self):
        if self._probe is None:
            from kclient.consumer.kafka_consumer import KafkaConsumer
            params = self.opts.client_params()
            # This consumer fetches only to probe end offsets: answers at the end of a partition
            # should not wait long for data.
            params["fetch.max.wait.ms"] = min(ConsumerConfig(params)["fetch.max.wait.ms"], _PROBE_WAIT_MS)
            self._probe = KafkaConsumer(params)
        return self._probe

    def _probe_high_watermarks(self, listed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """High watermarks from fetch answers at the listed end offsets (see the module doc)."""
        tps = sorted(tp for tp, off in listed.items() if off >= 0)
        if not tps:
            return {}
        c = self._probe_consumer()
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
        return self.retrying("offsets by timestamp", lambda: self.lookups.offsets_for_times(query))

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
