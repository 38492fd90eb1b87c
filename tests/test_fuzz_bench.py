"""``python -m bench fuzz`` (atheris) runs, prints its table and exits 0 on two cheap targets.

The long fuzzing is a benchmark (``python -m bench fuzz --seconds 60``), not part of the suite;
this only checks that the harness works. It needs atheris (the ``bench`` extra), not the test
extra: without it the run is skipped. The target list is checked without atheris.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TARGETS = ["groupcodec.heartbeat", "consumer_protocol.assignment"]


def test_every_response_decoder_has_a_fuzz_target():
    sys.path.insert(0, str(REPO))
    try:
        from bench.fuzz_targets import API_NAMES, build_targets
    finally:
        sys.path.remove(str(REPO))
    from kclient.protocol.messages import RESPONSES
    assert set(API_NAMES) == set(RESPONSES)
    names = build_targets()
    assert {f"response.{n}" for n in API_NAMES.values()} <= set(names)
    assert set(TARGETS) <= set(names)


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                    reason="atheris is not installed (it is in the 'bench' extra, not 'test')")
def test_fuzz_bench_runs_two_targets_and_prints_its_table(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "fuzz", "--seconds", "2", "--targets", ",".join(TARGETS),
         "--seed", "7", "--workdir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert re.split(r"\s+", lines[0].strip())[:5] == ["target", "executions", "exec/s", "crashes", "hangs"]
    for target in TARGETS:
        row = next(line for line in lines if line.startswith(target + " "))
        _, executions, _rate, crashes, hangs, *_ = row.split()
        assert int(executions) > 100 and crashes == "0" and hangs == "0", row
    assert "2 targets" in proc.stdout and "0 crashes, 0 hangs" in proc.stdout
    # the seeds were written and libFuzzer grew each corpus from them
    for target in TARGETS:
        assert any((tmp_path / "corpus" / target).iterdir())


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                    reason="atheris is not installed (it is in the 'bench' extra, not 'test')")
def test_fuzz_bench_reports_an_unexpected_exception_and_exits_non_zero(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "fuzz", "--seconds", "1", "--targets", "selftest.exception",
         "--seed", "7", "--workdir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("selftest.exception "))
    assert row.split()[3] == "1", row
    assert "KeyError: 'selftest'" in proc.stdout and "input hex: " in proc.stdout
