"""bench --baseline: a second checkout's kclient drivers run beside this one's."""
from __future__ import annotations

import argparse
import sys

import pytest
from repo_paths import REPO

sys.path.insert(0, str(REPO))

from bench import runner  # noqa: E402
from bench.drivers import load  # noqa: E402


def test_each_kclient_driver_gets_a_baseline_twin_right_after_it():
    assert runner.baseline_drivers(["raw-fetch", "kclient-records", "kclient-columnar", "java"]) == [
        "raw-fetch", "kclient-records", "kclient-records@baseline", "kclient-columnar",
        "kclient-columnar@baseline", "java"]


def test_a_driver_the_baseline_lacks_gets_no_twin():
    known = 'DRIVERS = {"kclient-records": "bench.drivers.kclient_records"}'
    assert runner.baseline_drivers(["kclient-records", "kclient-iter"], known) == [
        "kclient-records", "kclient-records@baseline", "kclient-iter"]


def test_a_baseline_driver_loads_as_its_bare_driver():
    assert runner.bare_driver("kclient-records@baseline") == "kclient-records"
    assert runner.bare_driver("java") == "java"
    assert load("kclient-records@baseline") is load("kclient-records")


def test_a_baseline_must_be_a_kclient_checkout(tmp_path):
    assert runner._checkout(str(REPO)) == REPO
    with pytest.raises(argparse.ArgumentTypeError, match="not a kclient checkout"):
        runner._checkout(str(tmp_path))
