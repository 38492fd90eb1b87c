"""kclient.spark planning: option parsing, range splitting (plain Python), and offset
resolution against real brokers (no Spark needed)."""
from __future__ import annotations

import pickle
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kclient import errors as Errors
from kclient.producer import KafkaProducer
from kclient.spark import (OffsetRange, commit_offset_ranges, group_offset_ranges, parse_options,
                           plan_offset_ranges, split_offset_ranges)
from kclient.structs import TopicPartition


# ------------------------------------------------------------------ splitting (pure)
def _covered(ranges):
    return sorted((r.topic, r.partition, o) for r in ranges for o in range(r.from_offset, r.until_offset))


def test_offset_range_is_picklable_and_ordered():
    r = OffsetRange("t", 3, 10, 20)
    assert pickle.loads(pickle.dumps(r)) == r
    assert r.size == 10 and r.topic_partition == TopicPartition("t", 3)
    assert sorted([OffsetRange("t", 1, 5, 9), OffsetRange("t", 0, 7, 8), OffsetRange("t", 1, 0, 5)]) == [
        OffsetRange("t", 0, 7, 8), OffsetRange("t", 1, 0, 5), OffsetRange("t", 1, 5, 9)]


def test_min_partitions_splits_in_proportion_to_size():
    ranges = [OffsetRange("a", 0, 0, 900), OffsetRange("a", 1, 100, 200)]
    out = split_offset_ranges(ranges, min_partitions=10)
    by_tp = {}
    for r in out:
        by_tp.setdefault(r.partition, []).append(r)
    assert len(by_tp[0]) == 9 and len(by_tp[1]) == 1
    assert {r.size for r in by_tp[0]} == {100}
    assert _covered(out) == _covered(ranges)


def test_split_pieces_are_near_equal_and_contiguous():
    out = split_offset_ranges([OffsetRange("a", 0, 5, 15)], min_partitions=3)
    assert out == [OffsetRange("a", 0, 5, 9), OffsetRange("a", 0, 9, 12), OffsetRange("a", 0, 12, 15)]


def test_min_partitions_not_reached_leaves_ranges_alone():
    ranges = [OffsetRange("a", p, 0, 100) for p in range(4)]
    assert split_offset_ranges(ranges, min_partitions=4) == ranges
    assert split_offset_ranges(ranges, min_partitions=2) == ranges


def test_min_partitions_never_makes_empty_pieces():
    out = split_offset_ranges([OffsetRange("a", 0, 0, 3), OffsetRange("a", 1, 0, 0)], min_partitions=10)
    assert out == [OffsetRange("a", 0, 0, 1), OffsetRange("a", 0, 1, 2), OffsetRange("a", 0, 2, 3)]


def test_max_records_per_partition_caps_every_piece():
    ranges = [OffsetRange("a", 0, 0, 1001), OffsetRange("b", 0, 50, 60)]
    out = split_offset_ranges(ranges, max_records_per_partition=100)
    assert max(r.size for r in out) <= 100
    assert len([r for r in out if r.topic == "a"]) == 11      # the fewest pieces within the cap
    assert [r for r in out if r.topic == "b"] == [OffsetRange("b", 0, 50, 60)]
    assert _covered(out) == _covered(ranges)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=8),
       starts=st.lists(st.integers(0, 10**12), min_size=8, max_size=8),
       min_partitions=st.one_of(st.none(), st.integers(1, 64)),
       max_records=st.one_of(st.none(), st.integers(1, 3000)))
def test_split_covers_every_offset_exactly_once(sizes, starts, min_partitions, max_records):
    ranges = [OffsetRange("t", i, starts[i], starts[i] + s) for i, s in enumerate(sizes)]
    out = split_offset_ranges(ranges, min_partitions, max_records)
    assert _covered(out) == _covered(ranges)
    assert all(r.size > 0 for r in out)
    if max_records is not None and min_partitions is None:
        assert all(r.size <= max_records for r in out)
    total = sum(sizes)
    if min_partitions is not None and total:
        assert len(out) >= min(min_partitions, total)
    for p in range(len(sizes)):                     # near-equal pieces per partition
        pieces = [r.size for r in out if r.partition == p]
        if pieces and max_records is None:
            assert max(pieces) - min(pieces) <= 1


# ------------------------------------------------------------------ grouping (pure)
def test_without_max_partitions_every_range_is_a_partition_of_its_own():
    ranges = [OffsetRange("t", 1, 0, 5), OffsetRange("t", 0, 3, 9), OffsetRange("t", 2, 4, 4)]
    assert group_offset_ranges(ranges) == [[OffsetRange("t", 0, 3, 9)], [OffsetRange("t", 1, 0, 5)]]
    assert group_offset_ranges(ranges, max_partitions=5) == group_offset_ranges(ranges)


def test_max_partitions_packs_ranges_into_balanced_groups():
    ranges = [OffsetRange("t", p, 0, 31250) for p in range(8)]
    groups = group_offset_ranges(ranges, max_partitions=2)
    assert [sum(r.size for r in g) for g in groups] == [125000, 125000]
    assert [[r.partition for r in g] for g in groups] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    skewed = [OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 0, 50), OffsetRange("t", 2, 0, 40),
              OffsetRange("t", 3, 0, 10)]
    assert sorted(sum(r.size for r in g) for g in group_offset_ranges(skewed, max_partitions=2)) == [90, 100]
    assert group_offset_ranges(skewed, max_partitions=1) == [sorted(skewed)]
    for ranges in (skewed, []):
        with pytest.raises(ValueError, match="max_partitions must be >= 1, got 0"):
            group_offset_ranges(ranges, max_partitions=0)


def test_pieces_of_one_partition_stay_in_offset_order_within_a_group():
    pieces = split_offset_ranges([OffsetRange("t", 0, 0, 100)], min_partitions=4)
    (group,) = group_offset_ranges(pieces, max_partitions=1)
    assert [r.from_offset for r in group] == [0, 25, 50, 75]


def test_max_records_per_partition_wins_over_max_partitions():
    ranges = [OffsetRange("t", p, 0, 60) for p in range(3)]
    groups = group_offset_ranges(ranges, max_partitions=2, max_records_per_partition=100)
    assert len(groups) == 3 and all(sum(r.size for r in g) <= 100 for g in groups)
    assert len(group_offset_ranges(ranges, max_partitions=2, max_records_per_partition=120)) == 2


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=12),
       max_partitions=st.integers(1, 16),
       max_records=st.one_of(st.none(), st.integers(100, 6000)))
def test_grouping_reads_every_range_once_within_the_limits(sizes, max_partitions, max_records):
    ranges = split_offset_ranges([OffsetRange("t", i, 0, s) for i, s in enumerate(sizes)],
                                 max_records_per_partition=max_records)
    groups = group_offset_ranges(ranges, max_partitions, max_records)
    assert sorted(r for g in groups for r in g) == ranges
    assert all(g == sorted(g) for g in groups) and groups == sorted(groups)
    if max_records is None:
        assert len(groups) == min(max_partitions, len(ranges))
        loads = [sum(r.size for r in g) for g in groups]
        if loads:       # largest first into the lightest group: within one range of each other
            assert max(loads) - min(loads) <= max(r.size for r in ranges)
    else:
        assert all(sum(r.size for r in g) <= max_records for g in groups)
        assert len(groups) >= min(max_partitions, len(ranges))


# ------------------------------------------------------------------ option parsing
BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}


def _err(options, *needles):
    with pytest.raises(Errors.ConfigurationError) as info:
        parse_options(options)
    for needle in needles:
        assert needle in str(info.value), str(info.value)
    return info.value


def test_parse_defaults_and_case_insensitive_names():
    o = parse_options({**BOOT, "SUBSCRIBE": "a, b,a", "includeheaders": "TRUE", "minPartitions": 4,
                       "kafka.fetch.max.bytes": "1048576", "maxOffsetsPerTrigger": "10"})
    assert o.strategy == "subscribe" and o.topics == ["a", "b"]
    assert o.include_headers is True and o.min_partitions == 4
    assert o.starting == ("offsets", "earliest") and o.ending == ("offsets", "latest")
    assert o.fail_on_data_loss is True and o.poll_timeout_ms == 120000
    assert o.kafka_params == {"bootstrap.servers": "127.0.0.1:9", "fetch.max.bytes": "1048576"}
    params = o.client_params()
    assert params["auto.offset.reset"] == "none" and params["enable.auto.commit"] is False


def test_parse_assign_pattern_and_offsets_json():
    o = parse_options({**BOOT, "assign": '{"t": [1, 0], "u": [2]}',
                       "startingOffsets": '{"t": {"0": 5, "1": -2}, "u": {"2": 7}}',
                       "endingOffsets": '{"t": {"0": -1, "1": 9}, "u": {"2": 8}}'})
    assert o.assigned == [TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 2)]
    assert o.starting[1][TopicPartition("t", 1)] == -2 and o.ending[1][TopicPartition("t", 0)] == -1
    p = parse_options({**BOOT, "subscribePattern": "orders-.*", "startingTimestamp": "1000",
                       "startingOffsetsByTimestamp": '{"x": {"0": 5}}', "endingOffsetsByTimestamp": '{"x": {"0": 9}}'})
    assert p.pattern.pattern == "orders-.*"
    assert p.starting == ("timestamp", 1000)          # the global timestamp wins
    assert p.ending == ("by_timestamp", {TopicPartition("x", 0): 9})


@pytest.mark.parametrize("options,needles", [
    ({"subscribe": "t"}, ["kafka.bootstrap.servers"]),
    ({**BOOT}, ["subscribe", "assign"]),
    ({**BOOT, "subscribe": "t", "assign": '{"t": [0]}'}, ["exactly one", "'assign'"]),
    ({**BOOT, "subscribe": " , "}, ["'subscribe'"]),
    ({**BOOT, "assign": "{not json"}, ["'assign'", "JSON"]),
    ({**BOOT, "assign": '{"t": [-1]}'}, ["'assign'"]),
    ({**BOOT, "subscribePattern": "("}, ["'subscribePattern'", "regular expression"]),
    ({**BOOT, "subscribe": "t", "startingOffsets": "latest"}, ["'startingOffsets'", "batch"]),
    ({**BOOT, "subscribe": "t", "endingOffsets": "earliest"}, ["'endingOffsets'", "batch"]),
    ({**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'}, ["'startingOffsets'", "t-0"]),
    ({**BOOT, "subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, ["'endingOffsets'", "t-0"]),
    ({**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, ["'startingOffsets'", "'x'"]),
    ({**BOOT, "subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'}, ["'startingOffsets'", ">= -2"]),
    ({**BOOT, "subscribe": "t", "startingOffsets": "committed"}, ["'startingOffsets'", "kafka.group.id"]),
    ({**BOOT, "subscribe": "t", "endingOffsets": "committed"}, ["'endingOffsets'"]),
    ({**BOOT, "subscribe": "t", "minPartitions": "0"}, ["'minPartitions'", ">= 1"]),
    ({**BOOT, "subscribe": "t", "maxRecordsPerPartition": "lots"}, ["'maxRecordsPerPartition'", "integer"]),
    ({**BOOT, "subscribe": "t", "kclient.maxPartitions": "0"}, ["'kclient.maxPartitions'", ">= 1"]),
    ({**BOOT, "subscribe": "t", "minPartitions": "8", "kclient.maxPartitions": "4"},
     ["'kclient.maxPartitions'", "'minPartitions' (8)"]),
    ({**BOOT, "subscribe": "t", "failOnDataLoss": "maybe"}, ["'failOnDataLoss'"]),
    ({**BOOT, "subscribe": "t", "kafkaConsumer.pollTimeoutMs": "0"}, ["'kafkaConsumer.pollTimeoutMs'"]),
    ({**BOOT, "subscribe": "t", "startingTimestamp": "-5"}, ["'startingTimestamp'"]),
    ({**BOOT, "subscribe": "t", "startingOffsetsByTimestampStrategy": "oldest"},
     ["'startingOffsetsByTimestampStrategy'"]),
    ({**BOOT, "subscribe": "t", "committedOffsetsFallback": "none"}, ["'committedOffsetsFallback'"]),
    ({**BOOT, "subscribe": "t", "startingOffset": "earliest"}, ["'startingOffset'", "did you mean 'startingOffsets'"]),
    ({**BOOT, "subscribe": "t", "kafka.auto.offset.reset": "earliest"}, ["kafka.auto.offset.reset", "startingOffsets"]),
    ({**BOOT, "subscribe": "t", "kafka.enable.auto.commit": "true"}, ["kafka.enable.auto.commit"]),
    ({**BOOT, "subscribe": "t", "kafka.value.deserializer": "x"}, ["kafka.value.deserializer"]),
    ({**BOOT, "subscribe": "t", "kafka.fetch.max.bytes": "lots"}, ["fetch.max.bytes"]),
    ({**BOOT, "subscribe": "t", "kafka.no.such.setting": "1"}, ["no.such.setting"]),
])
def test_bad_options_name_the_option(options, needles):
    _err(options, *needles)


# ------------------------------------------------------------------ against brokers
def _produce(bootstrap, topic, per_partition, partitions, *, timestamps=None, batch=True, linger_ms=5):
    p = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms if batch else 0,
                       "batch.size": 65536 if batch else 1})
    for part in range(partitions):
        for i in range(per_partition):
            ts = None if timestamps is None else timestamps(part, i)
            p.send(topic, key=b"k%d" % i, value=b"v%d-%d" % (part, i), partition=part, timestamp_ms=ts)
            if not batch:
                p.flush()
    p.flush()
    p.close()


def test_plan_earliest_to_latest_with_min_partitions(mock_cluster, create_topic, topic_name, caplog):
    create_topic(mock_cluster, topic_name, 3)
    _produce(mock_cluster.bootstrap, topic_name, 40, 3)
    opts = {"kafka.bootstrap.servers": mock_cluster.bootstrap, "subscribe": topic_name}
    assert plan_offset_ranges(opts) == [OffsetRange(topic_name, p, 0, 40) for p in range(3)]
    # a data source option: the ranges stay one per task, and the caller is told
    assert plan_offset_ranges({**opts, "kclient.maxPartitions": "1"}) == plan_offset_ranges(opts)
    assert any("'kclient.maxPartitions' applies to the kclient data source" in m for m in caplog.messages)
    split = plan_offset_ranges({**opts, "minPartitions": "7"})
    assert len(split) >= 7 and _covered(split) == _covered(plan_offset_ranges(opts))
    capped = plan_offset_ranges({**opts, "maxRecordsPerPartition": "15"})
    assert len(capped) == 9 and max(r.size for r in capped) <= 15


def test_plan_specific_offsets_assign_and_pattern(mock_cluster, create_topic, topic_name):
    create_topic(mock_cluster, topic_name, 2)
    _produce(mock_cluster.bootstrap, topic_name, 30, 2)
    boot = mock_cluster.bootstrap
    ranges = plan_offset_ranges({
        "kafka.bootstrap.servers": boot, "assign": f'{{"{topic_name}": [1, 0]}}',
        "startingOffsets": f'{{"{topic_name}": {{"0": 5, "1": -2}}}}',
        "endingOffsets": f'{{"{topic_name}": {{"0": -1, "1": 12}}}}'})
    assert ranges == [OffsetRange(topic_name, 0, 5, 30), OffsetRange(topic_name, 1, 0, 12)]
    pattern = plan_offset_ranges({"kafka.bootstrap.servers": boot, "subscribePattern": topic_name[:-8] + ".{8}"})
    assert [r for r in pattern if r.topic == topic_name] == [OffsetRange(topic_name, p, 0, 30) for p in range(2)]
    with pytest.raises(Errors.ConfigurationError, match=f"'startingOffsets'.*{topic_name}-1"):
        plan_offset_ranges({"kafka.bootstrap.servers": boot, "subscribe": topic_name,
                            "startingOffsets": f'{{"{topic_name}": {{"0": 1}}}}'})
    with pytest.raises(Errors.ConfigurationError, match=f"'assign'.*{topic_name}-7"):
        plan_offset_ranges({"kafka.bootstrap.servers": boot, "assign": f'{{"{topic_name}": [0, 7]}}'})
    assert plan_offset_ranges({"kafka.bootstrap.servers": boot, "subscribe": topic_name + "-missing"}) == []


def test_plan_start_after_end_is_data_loss(mock_cluster, create_topic, topic_name):
    create_topic(mock_cluster, topic_name, 1)
    _produce(mock_cluster.bootstrap, topic_name, 10, 1)
    opts = {"kafka.bootstrap.servers": mock_cluster.bootstrap, "subscribe": topic_name,
            "startingOffsets": f'{{"{topic_name}": {{"0": 50}}}}'}
    with pytest.raises(Errors.DataLossError, match="failOnDataLoss"):
        plan_offset_ranges(opts)
    assert plan_offset_ranges({**opts, "failOnDataLoss": "false"}) == []


class _Lookups:
    """Offsets of one partition-set as a broker would answer them: a single-layer fake for
    the timestamp rules (neither test broker implements ListOffsets by timestamp: the mock
    answers none, Tansu the first offset for any time)."""

    def __init__(self, tps, earliest, latest, times):
        self.tps, self._earliest, self._latest, self._times = tps, earliest, latest, times
        self.queries = []

    def partitions(self):
        return list(self.tps)

    def earliest(self, tps):
        return {tp: self._earliest for tp in tps}

    def latest(self, tps):
        return {tp: self._latest for tp in tps}

    def by_timestamp(self, query):
        self.queries.append(dict(query))
        # earliest offset whose timestamp is >= the query; timestamps are times[offset]
        return {tp: next((o for o, t in enumerate(self._times) if t >= ts), None) for tp, ts in query.items()}

    def committed(self, tps):
        raise AssertionError("not used")


def test_plan_by_timestamp_rules():
    from kclient.spark.planning import _plan_with
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    base = 1_700_000_000_000
    lookups = _Lookups([a, b], 0, 20, [base + 1000 * i for i in range(20)])

    def plan(**options):
        return _plan_with(parse_options({**BOOT, "subscribe": "t", **options}), lookups)

    assert plan(startingTimestamp=str(base + 5000), endingTimestamp=str(base + 15000)) == [
        OffsetRange("t", p, 5, 15) for p in range(2)]
    assert lookups.queries[-2] == {a: base + 5000, b: base + 5000}
    assert plan(startingOffsetsByTimestamp=f'{{"t": {{"0": {base + 2500}, "1": {base}}}}}',
                endingOffsetsByTimestamp=f'{{"t": {{"0": {base + 99000}, "1": {base + 3000}}}}}') == [
        OffsetRange("t", 0, 3, 20), OffsetRange("t", 1, 0, 3)]          # no record at 99000: latest
    # the global timestamp wins over per-partition timestamps and offsets
    assert plan(startingTimestamp=str(base + 19000), startingOffsetsByTimestamp='{"t": {"0": 0, "1": 0}}',
                startingOffsets='{"t": {"0": 1, "1": 1}}') == [OffsetRange("t", p, 19, 20) for p in range(2)]
    with pytest.raises(Errors.OffsetOutOfRangeError, match="startingOffsetsByTimestampStrategy"):
        plan(startingTimestamp=str(base + 10**9))
    assert plan(startingTimestamp=str(base + 10**9), startingOffsetsByTimestampStrategy="latest") == []
    with pytest.raises(Errors.ConfigurationError, match="'startingOffsetsByTimestamp'.*t-1"):
        plan(startingOffsetsByTimestamp=f'{{"t": {{"0": {base}}}}}')


def test_plan_by_timestamp_on_kafka(broker, create_topic, topic_name):
    """The same rules against a broker that answers ListOffsets by timestamp for real."""
    create_topic(broker, topic_name, 2)
    base = (int(time.time()) - 86_400) * 1000     # within Kafka's retention (see test_spark_read)
    _produce(broker.bootstrap, topic_name, 20, 2, timestamps=lambda part, i: base + 1000 * i)
    opts = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic_name}
    assert plan_offset_ranges({**opts, "startingTimestamp": str(base + 5000),
                               "endingTimestamp": str(base + 15000)}) == \
        [OffsetRange(topic_name, p, 5, 15) for p in range(2)]
    by_part = plan_offset_ranges({**opts,
                                  "startingOffsetsByTimestamp": f'{{"{topic_name}": {{"0": {base + 2500}, "1": {base}}}}}',
                                  "endingOffsetsByTimestamp": f'{{"{topic_name}": {{"0": {base + 99000}, "1": {base + 3000}}}}}'})
    assert by_part == [OffsetRange(topic_name, 0, 3, 20), OffsetRange(topic_name, 1, 0, 3)]
    with pytest.raises(Errors.OffsetOutOfRangeError, match="startingOffsetsByTimestampStrategy"):
        plan_offset_ranges({**opts, "startingTimestamp": str(base + 10**9)})


def test_plan_resumes_from_committed_offsets(mock_cluster, create_topic, topic_name, group_id):
    create_topic(mock_cluster, topic_name, 2)
    boot = mock_cluster.bootstrap
    _produce(boot, topic_name, 10, 2)
    opts = {"kafka.bootstrap.servers": boot, "subscribe": topic_name, "kafka.group.id": group_id,
            "startingOffsets": "committed"}
    with pytest.raises(Errors.NoOffsetForPartitionError, match=group_id):
        plan_offset_ranges({**opts, "committedOffsetsFallback": "error"})
    assert plan_offset_ranges({**opts, "committedOffsetsFallback": "latest"}) == []
    first = plan_offset_ranges(opts)                       # nothing committed: from earliest
    assert first == [OffsetRange(topic_name, p, 0, 10) for p in range(2)]
    assert commit_offset_ranges(first, opts) == {TopicPartition(topic_name, p): 10 for p in range(2)}
    assert plan_offset_ranges(opts) == []
    _produce(boot, topic_name, 4, 2)
    assert plan_offset_ranges(opts) == [OffsetRange(topic_name, p, 10, 14) for p in range(2)]


@pytest.mark.parametrize("cluster", ["kafka", "tansu"], indirect=True)
def test_latest_offsets_and_the_end_offset_probe(cluster, create_topic, topic_name):
    """Apache Kafka lists exact end offsets: the plan reads every record without the probe.
    Tansu's ListOffsets(latest) is the last batch's base offset + 1: there only the probe
    (kclient.endOffsetProbe=true, which the demo sets for its embedded Tansu) plans it all."""
    create_topic(cluster, topic_name, 2)
    # Batches of many records whatever the machine's load (the final flush sends them): with a
    # 5 ms linger one CI run sent a partition's last record alone, and a one-record last batch
    # makes Tansu's answer exact.
    _produce(cluster.bootstrap, topic_name, 500, 2, batch=True, linger_ms=10_000)
    opts = {"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic_name}
    full = [OffsetRange(topic_name, p, 0, 500) for p in range(2)]
    assert plan_offset_ranges({**opts, "kclient.endOffsetProbe": "true"}) == full
    unprobed = plan_offset_ranges(opts)
    if cluster.kind == "kafka":
        assert unprobed == full
    else:
        assert all(r.until_offset < 500 for r in unprobed), "Tansu now counts records: drop the probe"

def test_a_planner_refresh_is_not_held_back_by_retry_backoff(mock_cluster, create_topic, topic_name):
    """Spark calls a stream reader's initialOffset, latestOffset and partitions in quick
    succession, each asking the cluster for the topics' partitions: none may wait out
    retry.backoff.ms (here 60 s, beyond request.timeout.ms) after the previous refresh."""
    from kclient.spark.planning import _Planner
    create_topic(mock_cluster, topic_name, 2)
    planner = _Planner(parse_options({"kafka.bootstrap.servers": mock_cluster.bootstrap, "subscribe": topic_name,
                                      "kafka.retry.backoff.ms": "60000", "kafka.retry.backoff.max.ms": "60000",
                                      "kafka.request.timeout.ms": "5000"}))
    try:
        expected = [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]
        assert planner.partitions() == expected
        for _ in range(3):
            version = planner.lookups.metadata_version
            assert planner.partitions() == expected
            assert planner.lookups.metadata_version > version          # asked the cluster again, at once
    finally:
        planner.close()
