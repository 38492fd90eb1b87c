"""The Structured Streaming side of the "kclient" source (``spark.readStream.format("kclient")``).

Spark keeps one reader for a query in a long-lived Python process on the driver and calls:

- ``initialOffset()`` for a query without a checkpoint: ``startingOffsets`` (default
  "latest"), ``startingTimestamp`` or ``startingOffsetsByTimestamp`` resolved at the first
  call; Spark calls it again before it plans the first micro-batch, and gets the same answer.
- ``latestOffset(start, limit)`` before every micro-batch: the partitions' latest offsets,
  capped by the read limit (``ReadMaxRows`` from ``maxOffsetsPerTrigger``, split across
  partitions in proportion to their backlog; ``ReadAllAvailable`` when the trigger says to
  read everything, e.g. ``Trigger.Once``) and, after ``prepareForTriggerAvailableNow()``, by
  the offsets latest when the query started. A partition that appeared since ``start``
  begins at its earliest offset; one that disappeared is data loss.
- ``partitions(start, end)``: one offset range per partition (split by ``minPartitions`` /
  ``maxRecordsPerPartition``), given to as many tasks as the session's cores and the
  micro-batch's records call for (kclient.spark.tasks), or each a task of its own with
  ``minPartitions``, or packed into at most ``kclient.maxPartitions`` tasks; ``read`` runs
  on executors through the per-worker client pool and the Arrow range reader, which handles
  records deleted before they are read.
- ``commit(end)``: with ``kclient.commitOffsets``, the end offsets go to ``kafka.group.id``
  so that lag tools see the query's progress. That is all they are for: the checkpoint
  decides where a restarted query resumes, and a failed commit only logs a warning.

Offsets are ``{"topic": {"partition": offset}}`` (kclient.spark.offsets). Data loss follows
``failOnDataLoss``: true raises DataLossError naming the partition; false logs a warning and
goes on with what is still there.

The same reader is also made and pickled by Spark to ship ``read`` to executors: it opens no
connection until a driver-side method runs, and never pickles one.
"""
from __future__ import annotations

import logging
from typing import Any, Iterator

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from kclient import errors as Errors
from kclient.spark.offsets import PartitionOffsets, from_json_offsets, rate_limit, to_json_offsets
from kclient.spark.partitions import RangePartition, read_partition
from kclient.spark.planning import OffsetRange, _Planner, _resolve_side, log_ignored, parse_options, split_offset_ranges
from kclient.spark.tasks import planning_cores, task_groups
from kclient.structs import OffsetAndMetadata

__all__ = ["KafkaStreamReader"]

log = logging.getLogger(__name__)

COMMIT_METADATA = "kclient.spark.stream"


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """See the module doc."""

    def __init__(self, options: dict[str, Any], arrow_schema, session_cores: int | None = None):
        self.options = options
        self.opts = parse_options(options, streaming=True)
        self.arrow_schema = arrow_schema
        self.session_cores = session_cores
        self._lookups: Any = None           # a planning._Planner, made on first use (driver only)
        self._committer: Any = None
        self._target: PartitionOffsets | None = None    # Trigger.AvailableNow's end
        self._latest: PartitionOffsets = {}
        self._initial: dict | None = None   # initialOffset()'s answer (Spark asks for it more than once)
        self._listed: list | None = None    # the partitions the last cluster lookup found

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_lookups=None, _committer=None)      # sockets stay in the driver's process
        return state

    def _planner(self):
        if self._lookups is None:
            log_ignored(self.opts)
            self._lookups = _Planner(self.opts)
        return self._lookups

    def _partitions(self, fresh: bool) -> list:
        """The partitions to read: asked of the cluster when ``fresh`` (once per micro-batch:
        partitions may have been added), else the last answer of this query if there is one."""
        if fresh or self._listed is None:
            self._listed = self._planner().partitions()
        return self._listed

    def _fail_or_warn(self, message: str) -> None:
        if self.opts.fail_on_data_loss:
            raise Errors.DataLossError(message + "; set failOnDataLoss to false to go on without it")
        log.warning("%s; going on (failOnDataLoss is false)", message)

    # -- offsets
    def initialOffset(self) -> dict:
        # Resolved once per query, as Spark's own source does: Spark asks again before it
        # plans the first micro-batch, and "latest" (the default) resolved a second time
        # would be another offset than the one that micro-batch's end was computed from.
        if self._initial is None:
            planner = self._planner()
            tps = self._partitions(fresh=False)
            start = _resolve_side(planner, self.opts, tps, "starting", {}) if tps else {}
            log.info("streaming query starts at %s", to_json_offsets(start))
            self._initial = to_json_offsets(start)
        return {topic: dict(parts) for topic, parts in self._initial.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        planner = self._planner()
        self._target = planner.latest(self._partitions(fresh=True))
        log.info("Trigger.AvailableNow: reading up to %s", to_json_offsets(self._target))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        planner = self._planner()
        begin = from_json_offsets(start)
        tps = self._partitions(fresh=True)
        latest = planner.latest(tps)
        self._latest = dict(latest)
        gone = sorted(set(begin) - set(latest))
        if gone:
            self._fail_or_warn("partitions " + ", ".join(f"{tp.topic}-{tp.partition}" for tp in gone)
                               + " no longer exist (topic deleted?); records not yet read from them are lost")
        end: PartitionOffsets = {}
        for tp in tps:
            end[tp] = latest[tp]
            if self._target is not None:
                if tp not in self._target:
                    if tp in begin:
                        end[tp] = begin[tp]
                    else:
                        del end[tp]           # appeared after the AvailableNow target: not this run's
                    continue
                end[tp] = min(end[tp], max(self._target[tp], begin.get(tp, 0)))
        if isinstance(limit, ReadMaxRows):
            # A new partition is read from its earliest offset: that is its backlog (and where
            # it stays, in the end offsets, while the limit admits none of it).
            new = [tp for tp in end if tp not in begin]
            froms = {**planner.earliest(new), **{tp: begin[tp] for tp in end if tp in begin}}
            end = rate_limit(froms, end, limit.max_rows)
        return to_json_offsets(end)

    def reportLatestOffset(self) -> dict | None:
        return to_json_offsets(self._latest) if self._latest else None

    # -- planning a micro-batch
    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begin, until = from_json_offsets(start), from_json_offsets(end)
        new = sorted(tp for tp in until if tp not in begin)
        if new:
            earliest = self._planner().earliest(new)
            for tp in new:
                if earliest[tp] > 0:
                    # Spark's rule: a partition added while the query ran starts at 0, unless
                    # retention already removed records from it before we saw it.
                    self._fail_or_warn(f"new partition {tp.topic}-{tp.partition} starts at offset {earliest[tp]}, "
                                       f"not 0: records 0 to {earliest[tp] - 1} were deleted before they were read")
                begin[tp] = earliest[tp]
        # Spark starts a micro-batch that never committed from initialOffset() again. After a
        # restart this process resolved startingOffsets anew, and "latest" may now lie past the
        # end that micro-batch was planned to (its offset log entry): where it started then is
        # not known here (a Python source gets no checkpoint to keep it in).
        restarted_first = self._initial is not None and start == self._initial
        ranges = []
        for tp in sorted(until):
            lo, hi = begin[tp], until[tp]
            if hi < lo:
                if restarted_first:
                    self._fail_or_warn(
                        f"{tp.topic}-{tp.partition}: the query restarted before its first micro-batch committed, and "
                        f"startingOffsets resolved again to offset {lo}, past that micro-batch's planned end {hi}: "
                        f"the records it was planned to read before offset {hi} cannot be found again (start with "
                        f"explicit startingOffsets or \"earliest\" for a query that may restart before its first "
                        f"commit); skipping the partition in this micro-batch, the next one reads on from {hi}")
                else:
                    self._fail_or_warn(f"{tp.topic}-{tp.partition}: the offset went back from {lo} to {hi} (the "
                                       f"topic may have been deleted and recreated); skipping it in this micro-batch")
                continue
            ranges.append(OffsetRange(tp.topic, tp.partition, lo, hi))
        planned = split_offset_ranges(ranges, self.opts.min_partitions, self.opts.max_records_per_partition)
        groups = task_groups(planned, self.opts, planning_cores(self.session_cores))
        log.debug("micro-batch of %d record(s) in %d range(s), %d task(s)", sum(r.size for r in planned),
                  len(planned), len(groups))
        return [RangePartition(group) for group in groups]

    def read(self, partition: InputPartition) -> Iterator:
        return read_partition(partition, self.opts, self.arrow_schema)

    # -- after a micro-batch
    def commit(self, end: dict) -> None:
        if not self.opts.commit_offsets:
            return
        offsets = from_json_offsets(end)
        if not offsets:
            return
        try:
            committer = self._committing_consumer()
            committer.assign(sorted(offsets))
            committer.commit({tp: OffsetAndMetadata(off, COMMIT_METADATA, -1) for tp, off in offsets.items()})
        except Errors.KafkaError as exc:
            log.warning("committing the streaming offsets to group %r failed (%s); lag monitoring will lag, the "
                        "query is unaffected (its checkpoint holds its offsets)", self.opts.group_id, exc)

    def _committing_consumer(self):
        if self._committer is None:
            from kclient.consumer.kafka_consumer import KafkaConsumer
            params = self.opts.client_params()
            params["group.id"] = self.opts.group_id
            self._committer = KafkaConsumer(params)
        return self._committer

    def stop(self) -> None:
        lookups, committer = self._lookups, self._committer
        self._lookups = self._committer = None
        try:
            if lookups is not None:
                lookups.close()
            if committer is not None:
                committer.close(autocommit=False)
        except Exception as exc:  # stopping is best effort
            log.debug("closing a streaming source client failed: %s", exc)
