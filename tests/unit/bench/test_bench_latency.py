"""The latency benchmark's arithmetic (bench/latency.py), on timings made up here: what is
left out as warm-up, the split at the broker's append time, and the fetch timeline."""
from __future__ import annotations

import importlib.util

from repo_paths import REPO

# bench/ is a directory of the checkout, not an installed package: load the module by path.
_spec = importlib.util.spec_from_file_location("bench_latency", REPO / "bench" / "latency.py")
latency = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(latency)

T0 = 1_700_000_000_000_000      # us since the epoch


def test_records_sent_in_the_warm_up_are_left_out_and_the_delay_is_split_at_the_append():
    # four records 0.5 s apart; each reaches the broker 2 ms after its send and the
    # application 3 ms after its append, except the last, which waits 100 ms for the consumer
    sent = [T0 + i * 500_000 for i in range(4)]
    appended = [(s + 2000) // 1000 for s in sent]
    arrived = [a * 1000 + 3000 for a in appended]
    arrived[-1] += 97_000
    out = latency.analyse({"S": sent, "T": appended, "A": arrived, "C": [1_500_000]}, warmup_s=1.0)
    assert out["received"] == 4 and out["measured"] == 2          # sent at 1.0 s and 1.5 s
    assert out["cpu_s"] == 1.5
    assert out["p50_ms"] == 5.0 and out["max_ms"] == 102.0
    assert out["to_broker"]["max_ms"] == 2.0
    assert out["from_broker"]["p50_ms"] == 3.0 and out["from_broker"]["max_ms"] == 100.0
    assert latency.analyse({"S": [], "T": [], "A": []}, warmup_s=1.0) == {"received": 0, "measured": 0}


def test_the_fetch_timeline_splits_the_consumers_part_at_the_answer():
    # a fetch sent at 0 answered at 10 ms, idle 1 ms, another sent at 11 ms answered at 50 ms
    events = ["S0", "D10000", "S11000", "D50000"]
    phases = latency._fetch_phases(events, appended_us=[5000, 20000], arrived_us=[12000, 60000])
    assert phases["count"] == 2
    assert phases["round_trip"]["max_ms"] == 39.0 and phases["idle_between"]["max_ms"] == 1.0
    # the first record waited 5 ms for its answer and 2 ms after it; the second 30 and 10
    assert phases["append_to_answer"]["max_ms"] == 30.0 and phases["answer_to_app"]["max_ms"] == 10.0
    assert phases["append_to_answer"]["p50_ms"] in (5.0, 30.0)


def test_the_table_names_each_part():
    result = {"client": "kclient", "label": latency.LABELS["kclient"], "rate": 1000, "sent": 10, "measured": 8,
              "p50_ms": 1.0, "p99_ms": 2.0, "p999_ms": 3.0, "max_ms": 4.0, "cpu_s": 0.25,
              "to_broker": {"p50_ms": 0.5, "p99_ms": 1.0}, "from_broker": {"p50_ms": 0.5, "p99_ms": 1.5}}
    report = {"date": "d", "machine": "m", "load": "1.0 / 1.0 / 1.0", "command": "c", "broker": "4.4.0",
              "results": [result, {"client": "java", "rate": 1000, "error": "boom"}]}
    text = latency.markdown(report)
    assert "| 1,000 | kclient (for record in consumer, defaults) | 1.00 | 2.00 | 3.00 | 4.00 | 0.5 / 1.0 | 0.5 / 1.5 " \
           "| 0.25 | 8 / 10 |" in text
    assert "failed: boom" in text and "load average 1.0 / 1.0 / 1.0" in text


def _round(client, rate, round_no, p99, from_broker_p99=1.0):
    return {"client": client, "label": latency.LABELS[client], "rate": rate, "round": round_no, "sent": 10,
            "measured": 10, "p50_ms": p99 / 2, "p99_ms": p99, "p999_ms": p99 + 1, "max_ms": p99 + 2, "cpu_s": 1.0,
            "to_broker": {"p50_ms": 0.5, "p99_ms": 1.0}, "from_broker": {"p50_ms": 0.5, "p99_ms": from_broker_p99}}


def test_rounds_are_summarised_by_their_median_the_pooled_records_and_paired_rounds():
    results = [_round("kclient", 10000, 1, 10.0), _round("confluent", 10000, 1, 12.0),
               _round("kclient", 10000, 2, 30.0), _round("confluent", 10000, 2, 20.0),
               _round("kclient", 10000, 3, 14.0), _round("confluent", 10000, 3, 16.0),
               {"client": "java", "rate": 10000, "round": 1, "error": "boom"}]
    pooled = {(10000, "kclient"): {"whole": list(range(1000, 101_000, 1000)), "from_broker": [5000] * 100},
              (10000, "confluent"): {"whole": [2000] * 100, "from_broker": [1000] * 100}}
    summary = {row["client"]: row for row in latency.summarise(results, pooled)}
    assert set(summary) == {"kclient", "confluent"}              # the failed client has no row
    k, c = summary["kclient"], summary["confluent"]
    assert k["rounds"] == 3 and k["p99_ms"] == 14.0 and c["p99_ms"] == 16.0      # medians, not means
    assert k["pooled_p99_ms"] == 99.0 and k["pooled_from_broker_p99_ms"] == 5.0
    assert c["kclient_p99_at_or_below"] == 2 and c["paired_rounds"] == 3
    assert "paired_rounds" not in k
    text = latency.markdown({"date": "d", "machine": "m", "load": "l", "command": "c", "broker": "4.4.0",
                             "results": results, "summary": list(summary.values())})
    assert "| 2 | 10,000 | kclient (for record in consumer, defaults) | 15.00 | 30.00 |" in text
    assert "| 2 of 3 rounds |" in text and "| round | rate (msg/s) |" in text


def test_without_kclient_in_the_rounds_no_pairing_is_claimed():
    results = [_round("confluent", 1000, 1, 5.0), _round("confluent", 1000, 2, 7.0)]
    (row,) = latency.summarise(results, {})
    assert row["rounds"] == 2 and row["p99_ms"] == 6.0 and "paired_rounds" not in row
