"""How many Spark tasks read a read's or a micro-batch's offset ranges, and which ranges each
task reads (pure functions; the data source's batch and stream readers call
:func:`task_groups`).

Every task of a Python data source costs Spark some 60-80 ms of its own (the Python worker
waits that long between tasks), about the time it takes to read 100,000 records of 100 B. One
task per Kafka partition, the layout of Spark's JVM source, spends most of a small
micro-batch's time there. So, unless the options say otherwise, the number of tasks comes from
the cores Spark gives the session and from the number of records, the way Spark sizes the
splits of its file sources (``spark.sql.files.maxPartitionBytes``, ``openCostInBytes`` and
the default parallelism):

- each task reads ``total / cores`` records, but at least ``MIN_TASK_RECORDS`` (below that a
  second task costs more core time than it saves) and at most ``MAX_TASK_RECORDS`` (or
  ``maxRecordsPerPartition`` when that is lower), so a large read is cut into several waves
  of tasks for retries and stragglers;
- past one wave, the number of tasks is rounded up to whole waves (a multiple of the cores);
- the ranges, in topic, partition and offset order, are laid end to end and cut into that
  many pieces of near-equal record counts: a cut falls on a range's end when one is close,
  otherwise inside a range, which is then read by two tasks (as ``minPartitions`` splits a
  large range in Spark's source). One partition's pieces stay in offset order.

``kclient.maxPartitions`` or ``minPartitions`` in the options hand the decision to the user:
the ranges as split by ``minPartitions`` / ``maxRecordsPerPartition`` are then each a task, or
packed into at most ``kclient.maxPartitions`` tasks (:func:`group_offset_ranges`).

"The cores Spark gives" is the session's default parallelism when ``register(spark)`` (or
``read_kafka``) registered the source with the session, otherwise the number of CPUs the
planning process may use, which is the default parallelism of a ``local[*]`` session.
"""
from __future__ import annotations

import bisect
import os
from typing import Iterable, Sequence

from kclient.spark.options import SourceOptions
from kclient.spark.planning import OffsetRange, group_offset_ranges

__all__ = ["MIN_TASK_RECORDS", "MAX_TASK_RECORDS", "task_count", "cut_offset_ranges", "task_groups",
           "planning_cores"]

#: The fewest records a task is given when the read has more: one Arrow batch at the default
#: ``kclient.maxRecordsPerBatch``, about half of what a task's fixed cost in Spark buys.
MIN_TASK_RECORDS = 65_536
#: The most records a task is given by default: 100 MB of 100 B records, about one split of
#: Spark's file sources (``spark.sql.files.maxPartitionBytes``, 128 MB).
MAX_TASK_RECORDS = 1_000_000


def planning_cores(session_cores: int | None = None) -> int:
    """The cores to plan for: the session's (when known), else this process's CPUs."""
    if session_cores is not None and session_cores >= 1:
        return session_cores
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:         # not on Linux
        return max(os.cpu_count() or 1, 1)


def task_count(total_records: int, cores: int, max_records_per_task: int | None = None) -> int:
    """The number of tasks for ``total_records`` on ``cores`` (see the module doc)."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    if total_records <= 0:
        return 0
    ceiling = MAX_TASK_RECORDS if max_records_per_task is None else min(MAX_TASK_RECORDS, max_records_per_task)
    if ceiling < 1:
        raise ValueError(f"max_records_per_task must be >= 1, got {max_records_per_task}")
    per_task = min(ceiling, max(MIN_TASK_RECORDS, -(-total_records // cores)))
    count = -(-total_records // per_task)
    if count > cores:
        count = cores * -(-count // cores)        # whole waves
    return count


def cut_offset_ranges(ranges: Iterable[OffsetRange], count: int,
                      max_records: int | None = None) -> list[list[OffsetRange]]:
    """The ranges laid end to end (topic, partition, offset order; empty ones dropped) and cut
    into ``count`` groups of near-equal record counts (fewer when there are fewer records). A
    cut moves to the nearest range end within 1/16 of a group's share (so that equal ranges
    are not split needlessly) unless that would make a group larger than ``max_records``."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    ordered = sorted(r for r in ranges if r.size > 0)
    total = sum(r.size for r in ordered)
    count = min(count, total)
    if count == 0:
        return []
    if count == 1:
        return _slice(ordered, [total])
    ends, position = [], 0               # each range's end on the line of all records
    for r in ordered:
        position += r.size
        ends.append(position)
    share = total / count
    slack = int(share) // 16
    if max_records is not None:
        slack = max(0, min(slack, (max_records - -(-total // count)) // 2))
    cuts, previous = [], 0
    for i in range(1, count):
        target = round(i * share)
        k = bisect.bisect_left(ends, target)
        nearest = min(ends[max(k - 1, 0):k + 1], key=lambda end: abs(end - target))
        cut = nearest if abs(nearest - target) <= slack else target
        cut = min(max(cut, previous + 1), total - (count - i))    # every group keeps a record
        cuts.append(cut)
        previous = cut
    cuts.append(total)
    return _slice(ordered, cuts)


def _slice(ordered: Sequence[OffsetRange], cuts: list[int]) -> list[list[OffsetRange]]:
    """The records of ``ordered``, laid end to end, between consecutive cuts (increasing, the
    last one the total), as groups of ranges."""
    groups: list[list[OffsetRange]] = []
    group: list[OffsetRange] = []
    line, c = 0, 0                     # records laid so far; the cut that closes the group
    for r in ordered:
        start = r.from_offset
        while start < r.until_offset:
            take = min(r.until_offset - start, cuts[c] - line)
            piece = OffsetRange(r.topic, r.partition, start, start + take)
            if group and group[-1].topic_partition == piece.topic_partition and group[-1].until_offset == start:
                # pieces of one partition that follow each other: one read, not two
                piece = OffsetRange(r.topic, r.partition, group.pop().from_offset, piece.until_offset)
            group.append(piece)
            start += take
            line += take
            if line == cuts[c]:
                groups.append(group)
                group = []
                c += 1
    return groups


def task_groups(ranges: Iterable[OffsetRange], opts: SourceOptions, cores: int) -> list[list[OffsetRange]]:
    """The ranges each task reads (see the module doc)."""
    if opts.max_partitions is not None or opts.min_partitions is not None:
        return group_offset_ranges(ranges, opts.max_partitions, opts.max_records_per_partition)
    ranges = list(ranges)
    count = task_count(sum(r.size for r in ranges), cores, opts.max_records_per_partition)
    if count == 0:
        return []
    return cut_offset_ranges(ranges, count, opts.max_records_per_partition)
