"""Operator metrics (kclient.consumer.metrics): the windowed statistics against hand-computed
values, and every metric of KafkaConsumer.metrics() on a group member reading from Apache
Kafka."""
from __future__ import annotations

import time

import pytest

from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.consumer.metrics import WindowedStat
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition


def test_windowed_stat_rate_avg_max_over_the_kept_windows():
    s = WindowedStat(window_ms=1000, samples=2)
    s.record(10, 0)
    s.record(30, 500)
    assert s.avg(900) == 20 and s.max(900) == 30
    assert s.rate(900) == pytest.approx(2 / 1.0)            # at least one window of span
    s.record(5, 1500)                                       # second window
    assert s.avg(1600) == pytest.approx(15) and s.max(1600) == 30
    assert s.rate(1600) == pytest.approx(3 / 1.6)
    assert s.rate(1600, of_sum=True) == pytest.approx(45 / 1.6)
    s.record(7, 2600)                                       # a third window: the first is dropped
    assert s.max(2700) == 7 and s.avg(2700) == pytest.approx(6)
    assert (s.total_count, s.total_sum) == (4, 52)          # totals are for the whole life
    assert s.max(10_000) == 0 and s.avg(10_000) == 0        # everything aged out


def test_an_idle_stat_reports_zero():
    s = WindowedStat(30000, 2)
    assert (s.rate(5), s.avg(5), s.max(5), s.total_count) == (0, 0, 0, 0)


def test_consumer_metrics_on_kafka(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 2)

    def produce(start: int, n: int) -> None:
        with KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=5) as p:
            for i in range(start, start + n):
                p.send(topic_name, b"v%05d" % i, partition=i % 2)
            p.flush(30)

    produce(0, 200)
    with KafkaConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                       auto_offset_reset="earliest", enable_auto_commit=False, heartbeat_interval_ms=500,
                       metrics_sample_window_ms=5000, metrics_num_samples=3) as c:
        got = 0
        deadline = time.monotonic() + 60
        while got < 200 and time.monotonic() < deadline:
            got += sum(len(r) for r in c.poll(200).values())
        assert got == 200
        c.commit()
        c.commit()
        m = c.metrics()
        fetch = m["consumer-fetch-manager-metrics"]
        assert fetch["records-consumed-total"] == 200 and fetch["records-consumed-rate"] > 0
        assert fetch["bytes-consumed-total"] > 200 * 6 and fetch["bytes-consumed-rate"] > 0
        assert fetch["fetch-total"] >= 1 and fetch["fetch-rate"] > 0
        assert fetch["fetch-latency-max"] >= fetch["fetch-latency-avg"] >= 0
        assert fetch["records-lag-max"] == 0
        for p in range(2):
            part = m[f"consumer-fetch-manager-metrics,topic={topic_name},partition={p}"]
            assert {k: part[k] for k in ("records-lag", "records-lead", "preferred-read-replica")} == {
                "records-lag": 0, "records-lead": 100, "preferred-read-replica": -1}
            # After each poll that returned records of the partition: lag down to 0, lead up to 100.
            assert part["records-lag-max"] >= part["records-lag-avg"] >= 0 and 0 <= part["records-lead-min"] <= 100
            assert 0 < part["records-lead-avg"] <= 100
        coord = m["consumer-coordinator-metrics"]
        assert coord["commit-total"] == 2 and coord["commit-rate"] > 0
        assert coord["commit-latency-max"] >= coord["commit-latency-avg"] >= 0
        assert coord["rebalance-total"] >= 1 and coord["rebalance-latency-max"] > 0   # a metadata change may add one
        assert coord["assigned-partitions"] == 2
        deadline = time.monotonic() + 30
        while c.metrics()["consumer-coordinator-metrics"]["last-heartbeat-seconds-ago"] < 0:
            assert time.monotonic() < deadline, "no heartbeat answered in 30 s"
            c.poll(100)
        assert 0 <= c.metrics()["consumer-coordinator-metrics"]["last-heartbeat-seconds-ago"] < 30
        assert m["consumer-metrics"]["connection-count"] >= 1
        # New records: the lag shows once a fetch answer brings the new high watermark.
        produce(200, 100)
        deadline = time.monotonic() + 30
        while c.metrics()["consumer-fetch-manager-metrics"]["records-lag-max"] == 0 and time.monotonic() < deadline:
            c.poll(100, max_records=1)
        lags = [c.metrics()[f"consumer-fetch-manager-metrics,topic={topic_name},partition={p}"]["records-lag"]
                for p in range(2)]
        assert max(lags) > 0 and sum(lags) <= 100
        assert c.metrics()["consumer-fetch-manager-metrics"]["records-lag-max"] == max(lags)


def test_a_manual_assignment_has_no_coordinator_metrics(kafka, create_topic, topic_name):
    create_topic(kafka, topic_name, 1)
    with KafkaConsumer(bootstrap_servers=kafka.bootstrap) as c:
        c.assign([TopicPartition(topic_name, 0)])
        m = c.metrics()
    assert "consumer-coordinator-metrics" not in m
    assert m["consumer-metrics"]["assigned-partitions"] == 1


def test_a_consumer_protocol_member_reports_only_what_it_measures(kafka, create_topic, topic_name, group_id):
    """KIP-848 members: the coordinator group holds the gauges, not zeros for rates nobody records."""
    create_topic(kafka, topic_name, 1)
    with KafkaConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                       group_protocol="consumer") as c:
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(100)
        coordinator = c.metrics()["consumer-coordinator-metrics"]
        assert set(coordinator) == {"assigned-partitions", "last-heartbeat-seconds-ago"}
        assert coordinator["assigned-partitions"] == 1
