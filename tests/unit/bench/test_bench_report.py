"""The benchmark report's target arithmetic (bench/report.py), on figures made up here."""
from __future__ import annotations

import importlib.util

import pytest
from repo_paths import REPO

# bench/ is a directory of the checkout, not an installed package: load the module by path.
_spec = importlib.util.spec_from_file_location(
    "bench_report", REPO / "bench" / "report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)
markdown, paired_ratios, targets = report.markdown, report.paired_ratios, report.targets


def run(rate: float, ok: bool = True) -> dict:
    return {"ok": ok, "records_per_s": rate} if ok else {"ok": False, "error": "broke"}


def config(kclient_runs, java_runs) -> dict:
    def summary(runs):
        rates = sorted(r["records_per_s"] for r in runs if r["ok"])
        return {"records_per_s": rates[len(rates) // 2], "runs": len(runs), "valid_runs": len(rates)}
    return {"name": "c", "config": {"records": 5_000_000, "record_size": 100},
            "produce": {"seconds": 1.0},
            "results": {"kclient-records": summary(kclient_runs), "java": summary(java_runs)},
            "runs": {"kclient-records": kclient_runs, "java": java_runs}}


def test_paired_ratios_pair_runs_of_the_same_round_and_skip_invalid_ones():
    c = config([run(6.0), run(4.0), run(5.0), run(9.0)], [run(3.0), run(2.0), run(0, ok=False), run(3.0)])
    assert paired_ratios(c, "kclient-records", "java") == [2.0, 2.0, 3.0]
    assert paired_ratios(c, "kclient-records", "nobody") == []


def test_targets_are_met_on_the_medians_and_carry_the_round_by_round_median():
    # The machine slows in round 2 for both: the medians' ratio (5/3) misses 2x; every round
    # by itself shows 2x.
    c = config([run(8.0), run(4.0), run(5.0)], [run(4.0), run(2.0), run(2.5)])
    (t,) = targets(c)
    assert t["ratio"] == pytest.approx(5.0 / 2.5) and t["met"]
    c = config([run(8.0), run(4.0), run(5.0)], [run(4.0), run(2.0), run(3.0)])
    (t,) = targets(c)
    assert t["ratio"] == pytest.approx(5.0 / 3.0) and not t["met"]
    assert t["paired"] == {"median": 2.0, "min": pytest.approx(5 / 3), "max": 2.0, "rounds": 3}


def test_the_markdown_names_both_figures():
    c = config([run(8.0), run(4.0), run(5.0)], [run(4.0), run(2.0), run(3.0)])
    report = {"environment": {"date": "d", "cpu_count": 2, "python": "3.11"}, "command": "x",
              "repeat": 3, "configs": [c]}
    text = markdown(report)
    assert "1.67x, round by round 2.00x (median of 3; 1.67x–2.00x) — NOT met" in text


def test_defaults_drivers_get_their_own_target_lines():
    c = config([run(8.0), run(4.0), run(5.0)], [run(4.0), run(2.0), run(2.0)])
    c["results"]["kclient-records-defaults"] = {"records_per_s": 3.0}
    c["runs"]["kclient-records-defaults"] = [run(3.0), run(3.0), run(3.0)]
    names = [t["target"] for t in targets(c)]
    assert names == ["kclient per record >= 2x the Java consumer (records/s)",
                     "kclient per record (defaults) >= 2x the Java consumer (records/s)"]
    assert [t["met"] for t in targets(c)] == [True, False]
