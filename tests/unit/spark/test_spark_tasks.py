"""kclient.spark.tasks: how many Spark tasks read a plan, and which ranges each reads (plain
Python, no Spark, no broker)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kclient.spark.planning import OffsetRange, parse_options, split_offset_ranges
from kclient.spark.tasks import (MAX_TASK_RECORDS, MIN_TASK_RECORDS, cut_offset_ranges, planning_cores, task_count,
                                 task_groups)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}


def _covered(groups):
    return sorted((r.topic, r.partition, o) for g in groups for r in g for o in range(r.from_offset, r.until_offset))


def _sizes(groups):
    return [sum(r.size for r in g) for g in groups]


def test_task_count_is_one_wave_of_the_cores_for_a_micro_batch():
    assert task_count(250_000, 2) == 2              # the benchmark's micro-batch on local[2]
    assert task_count(1_000_000, 2) == 2
    assert task_count(1_000_000, 8) == 8


def test_task_count_gives_small_reads_fewer_tasks_than_cores():
    assert task_count(0, 4) == 0
    assert task_count(1, 4) == 1
    assert task_count(MIN_TASK_RECORDS, 4) == 1
    assert task_count(MIN_TASK_RECORDS + 1, 4) == 2
    assert task_count(3 * MIN_TASK_RECORDS, 16) == 3


def test_task_count_cuts_large_reads_into_whole_waves():
    assert task_count(10 * MAX_TASK_RECORDS, 2) == 10
    assert task_count(5 * MAX_TASK_RECORDS + 1, 4) == 8        # 6 tasks' worth, rounded to 2 waves of 4
    assert task_count(10 * MAX_TASK_RECORDS, 1) == 10
    # maxRecordsPerPartition lowers the ceiling
    assert task_count(1_000_000, 2, max_records_per_task=100_000) == 10
    with pytest.raises(ValueError, match="cores must be >= 1"):
        task_count(10, 0)


def test_cut_equal_ranges_on_their_ends():
    ranges = [OffsetRange("t", p, 0, 31_250) for p in range(8)]
    groups = cut_offset_ranges(ranges, 2)
    assert groups == [ranges[:4], ranges[4:]]


def test_cut_splits_a_range_where_no_end_is_near():
    ranges = [OffsetRange("t", p, 10, 310) for p in range(3)]          # 900 records on 2 tasks
    groups = cut_offset_ranges(ranges, 2)
    assert groups == [[OffsetRange("t", 0, 10, 310), OffsetRange("t", 1, 10, 160)],
                      [OffsetRange("t", 1, 160, 310), OffsetRange("t", 2, 10, 310)]]
    # one partition on 2 cores: both read half of it, in offset order
    assert cut_offset_ranges([OffsetRange("t", 0, 0, 1001)], 2) == [[OffsetRange("t", 0, 0, 500)],
                                                                     [OffsetRange("t", 0, 500, 1001)]]


def test_cut_joins_adjacent_pieces_of_one_partition_and_never_makes_empty_groups():
    pieces = [OffsetRange("t", 0, 0, 5), OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 0, 1)]
    assert cut_offset_ranges(pieces, 1) == [[OffsetRange("t", 0, 0, 9), OffsetRange("t", 1, 0, 1)]]
    assert cut_offset_ranges(pieces, 2) == [[OffsetRange("t", 0, 0, 5)], [OffsetRange("t", 0, 5, 9),
                                                                         OffsetRange("t", 1, 0, 1)]]
    assert cut_offset_ranges([OffsetRange("t", 0, 0, 3)], 8) == [[OffsetRange("t", 0, i, i + 1)] for i in range(3)]
    assert cut_offset_ranges([OffsetRange("t", 0, 4, 4)], 2) == []


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=12),
       starts=st.lists(st.integers(0, 10**9), min_size=12, max_size=12),
       count=st.integers(1, 20),
       max_records=st.one_of(st.none(), st.integers(1, 6000)))
def test_cut_reads_every_offset_once_in_balanced_groups(sizes, starts, count, max_records):
    ranges = [OffsetRange("t", i, starts[i], starts[i] + s) for i, s in enumerate(sizes)]
    total = sum(sizes)
    if max_records is not None:
        count = max(count, -(-total // max_records))
    groups = cut_offset_ranges(ranges, count, max_records)
    assert _covered(groups) == _covered([ranges])
    assert len(groups) == min(count, total)
    assert all(g for g in groups)
    flat = [r for g in groups for r in g]
    assert flat == sorted(flat)                                  # each partition's pieces in offset order
    if groups:
        share = total / len(groups)
        assert max(_sizes(groups)) <= share + 2 * (int(share) // 16) + 1
        if max_records is not None:
            assert max(_sizes(groups)) <= max_records


def test_task_groups_follow_the_cores_unless_the_options_decide():
    ranges = [OffsetRange("t", p, 0, 31_250) for p in range(8)]
    auto = task_groups(ranges, parse_options(BOOT), cores=2)
    assert auto == [ranges[:4], ranges[4:]]
    assert len(task_groups(ranges, parse_options(BOOT), cores=4)) == 4
    # kclient.maxPartitions: packed into that many, whole ranges (largest first)
    packed = task_groups(ranges, parse_options({**BOOT, "kclient.maxPartitions": "3"}), cores=2)
    assert len(packed) == 3 and all(r in ranges for g in packed for r in g)
    # one task per range, as in Spark's source, when asked for
    assert task_groups(ranges, parse_options({**BOOT, "kclient.maxPartitions": "8"}), cores=2) == [[r] for r in ranges]
    # minPartitions: each range (split to at least that many) is a task of its own
    opts = parse_options({**BOOT, "minPartitions": "16"})
    split = split_offset_ranges(ranges, opts.min_partitions)
    assert task_groups(split, opts, cores=2) == [[r] for r in split]
    # maxRecordsPerPartition caps every task
    capped = task_groups(ranges, parse_options({**BOOT, "maxRecordsPerPartition": "50000"}), cores=2)
    assert len(capped) == 6 and max(_sizes(capped)) <= 50_000 and _covered(capped) == _covered([ranges])
    assert task_groups([], parse_options(BOOT), cores=2) == []


def test_planning_cores_prefers_the_sessions():
    assert planning_cores(6) == 6
    assert planning_cores(None) >= 1
    assert planning_cores(0) == planning_cores(None)
