"""KIP-714 payloads: the names of the metric table in the KIP's form, the subscription's prefix
selection, delta and cumulative sums, and the OTLP bytes read back with the test's protobuf
reader."""
from __future__ import annotations

import pytest
from otlp_reader import decode_metrics_data

from kclient.consumer.metric_table import TABLE
from kclient.telemetry.naming import telemetry_name
from kclient.telemetry.otlp import TEMPORALITY_CUMULATIVE, TEMPORALITY_DELTA, DataPoint, encode_metrics_data
from kclient.telemetry.points import TelemetryPoints, selects

PUSHED = {(m.group, m.name): m.kind for m in TABLE if m.java}


def test_names_follow_the_kip_mapping():
    assert telemetry_name("consumer-coordinator-metrics", "join-rate") == "org.apache.kafka.consumer.coordinator.join.rate"
    assert telemetry_name("consumer-metrics", "io-wait-ratio") == "org.apache.kafka.consumer.io.wait.ratio"
    assert (telemetry_name("consumer-fetch-manager-metrics", "records-lag-max")
            == "org.apache.kafka.consumer.fetch.manager.records.lag.max")
    assert len({telemetry_name(m.group, m.name) + str(m.tags) for m in TABLE}) == len(TABLE)


@pytest.mark.parametrize("requested, name, chosen", [
    ([], "org.apache.kafka.consumer.join.rate", False),
    (["*"], "org.apache.kafka.consumer.join.rate", True),
    ([""], "org.apache.kafka.consumer.join.rate", True),
    (["org.apache.kafka.consumer.coordinator."], "org.apache.kafka.consumer.coordinator.join.rate", True),
    (["org.apache.kafka.consumer.coordinator."], "org.apache.kafka.consumer.io.ratio", False),
    (["org.apache.kafka.producer.", "org.apache.kafka.consumer.io"], "org.apache.kafka.consumer.io.ratio", True),
])
def test_subscription_prefixes_select_metrics(requested, name, chosen):
    assert selects(requested, name) is chosen


def test_otlp_round_trip():
    points = [
        DataPoint("org.apache.kafka.consumer.node.request.total", "sum", (("node_id", "node-1"),), 12.0, 2_000, 1_000),
        DataPoint("org.apache.kafka.consumer.io.ratio", "gauge", (), 0.25, 2_000),
    ]
    for temporality in (TEMPORALITY_DELTA, TEMPORALITY_CUMULATIVE):
        resource, metrics = decode_metrics_data(encode_metrics_data(
            points, resource=[("group_id", "g")], temporality=temporality))
        assert resource == {"group_id": "g"}
        total, ratio = metrics
        assert (total.name, total.kind, total.temporality, total.monotonic) == (
            "org.apache.kafka.consumer.node.request.total", "sum", temporality, True)
        assert [(p.attributes, p.value, p.start_ns, p.time_ns) for p in total.points] == [
            ({"node_id": "node-1"}, 12.0, 1_000, 2_000)]
        assert (ratio.name, ratio.kind, [(p.attributes, p.value) for p in ratio.points]) == (
            "org.apache.kafka.consumer.io.ratio", "gauge", [({}, 0.25)])


def test_points_are_java_metrics_selected_by_prefix_with_delta_sums():
    snapshots = iter([
        {"consumer-fetch-manager-metrics": {"records-consumed-total": 10, "records-consumed-rate": 1.5,
                                            "buffered-bytes": 7},
         "consumer-node-metrics,node-id=node-1": {"request-total": 3},
         "consumer-metrics": {"io-ratio": 0.5}},
        {"consumer-fetch-manager-metrics": {"records-consumed-total": 25, "records-consumed-rate": 2.0,
                                            "buffered-bytes": 0},
         "consumer-node-metrics,node-id=node-1": {"request-total": 4},
         "consumer-metrics": {"io-ratio": 0.5}},
    ])
    tp = TelemetryPoints(lambda: next(snapshots), start_ns=100, kinds=PUSHED)
    wanted = ["org.apache.kafka.consumer.fetch.manager.", "org.apache.kafka.consumer.node."]
    first = {(p.name, p.attributes): p for p in tp.points(wanted, True, 1_000)}
    second = {(p.name, p.attributes): p for p in tp.points(wanted, True, 2_000)}
    # kclient's own buffered-bytes is not pushed under Java's namespace; io.ratio is not asked for.
    assert set(first) == set(second) == {
        ("org.apache.kafka.consumer.fetch.manager.records.consumed.total", ()),
        ("org.apache.kafka.consumer.fetch.manager.records.consumed.rate", ()),
        ("org.apache.kafka.consumer.node.request.total", (("node_id", "node-1"),)),
    }
    total = "org.apache.kafka.consumer.fetch.manager.records.consumed.total", ()
    assert (first[total].value, first[total].start_ns, first[total].kind) == (10, 100, "sum")
    assert (second[total].value, second[total].start_ns) == (15, 1_000)        # the change since the last push
    assert second["org.apache.kafka.consumer.fetch.manager.records.consumed.rate", ()].kind == "gauge"


def test_cumulative_sums_keep_the_start_time():
    tp = TelemetryPoints(lambda: {"consumer-coordinator-metrics": {"join-total": 2}}, start_ns=5, kinds=PUSHED)
    for now in (10, 20):
        (p,) = tp.points(["*"], False, now)
        assert (p.value, p.start_ns, p.time_ns) == (2, 5, now)
