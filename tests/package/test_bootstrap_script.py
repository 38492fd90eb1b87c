"""scripts/bootstrap.sh and scripts/demo.sh's use of it, with pip replaced by a recorder: which
extras each command installs, that re-running installs nothing, and that every set-up step
says what it does and about how long it takes.

The checkout's scripts run in a copy of the project's top level (pyproject.toml, setup.py and
small stand-ins for the package sources), with a .venv whose python runs the real interpreter
except for ``-m pip``, which only records its arguments.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
import repo_paths

ROOT = repo_paths.REPO

FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  shift 2; echo "$*" >> "$PIP_LOG"; exit 0
fi
exec {python} "$@"
"""


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    (proj / "scripts").mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py"):
        shutil.copy(ROOT / name, proj / name)
    for name in ("bootstrap.sh", "demo.sh"):
        shutil.copy(ROOT / "scripts" / name, proj / "scripts" / name)
    for pkg, name in (("kcore", "wire.pyx"), ("kcore", "wire.so"), ("kclient", "__init__.py"),
                      ("pyspark_kclient", "__init__.py")):
        (proj / pkg).mkdir(exist_ok=True)
        (proj / pkg / name).write_text("# stand-in\n")
    venv_bin = proj / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    python = venv_bin / "python"
    python.write_text(FAKE_PYTHON.format(python=sys.executable))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return proj


def _bootstrap(proj: Path, *args: str) -> tuple[list[str], str]:
    log = proj / "pip.log"
    log.unlink(missing_ok=True)
    env = dict(os.environ, PIP_LOG=str(log), PYTHON=sys.executable)
    proc = subprocess.run(["bash", "scripts/bootstrap.sh", *args], cwd=proj, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    return calls, proc.stderr


def _extras(call: str) -> set[str]:
    match = re.search(r"-e \.\[([^\]]*)\]", call)
    assert match, call
    return set(match.group(1).split(","))


def test_demo_script_installs_the_demo_extra_not_the_test_toolchain():
    text = (ROOT / "scripts" / "demo.sh").read_text()
    assert re.search(r"^bash scripts/bootstrap\.sh demo\b", text, flags=re.M), text


def test_bootstrap_installs_each_extra_once_and_names_steps_with_estimates(tmp_path):
    proj = _project(tmp_path)

    calls, out = _bootstrap(proj, "demo")
    assert len(calls) == 1 and _extras(calls[0]) == {"demo"}, calls
    step = next(line for line in out.splitlines() if "installing kclient[demo]" in line)
    assert re.search(r"about \d+ MB", step) and re.search(r"\d+(-\d+)? min", step), step
    assert "done in" in out

    calls, out = _bootstrap(proj, "demo")
    assert calls == [] and "up to date" in out

    # The test toolchain comes on top of what the demo installed, and covers the demo after.
    calls, _ = _bootstrap(proj, "test")
    assert len(calls) == 1 and {"test", "demo"} <= _extras(calls[0]), calls
    calls, out = _bootstrap(proj, "demo")
    assert calls == [] and "up to date" in out

    # A changed source reinstalls, with every extra installed so far.
    (proj / "kclient" / "__init__.py").write_text("# changed\n")
    calls, _ = _bootstrap(proj, "demo")
    assert len(calls) == 1 and {"test", "demo"} <= _extras(calls[0]), calls
