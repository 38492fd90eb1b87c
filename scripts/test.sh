#!/usr/bin/env bash
# Set up (idempotently) and run the checks and the whole test suite against the installed,
# compiled package. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test --kafka
# Lint and type check first: seconds each, and they name the line.
echo "[test] ruff check" >&2
.venv/bin/ruff check --quiet .
echo "[test] mypy (kclient and the kcore stubs; config in pyproject.toml)" >&2
.venv/bin/mypy --no-error-summary
# tests/test_build.py fails if any kcore module is imported from anything but a compiled extension;
# tests/test_wheel.py builds the sdist and wheel and smoke-tests the wheel in a clean venv.
# Two workers (pytest-xdist), a test file each at a time: much of the suite waits on brokers
# (session timeouts, rebalance rounds, a minute of chaos), so two files at once take about 60%
# of the serial time on 2 cores. Each worker starts its own brokers. `-n 0` runs serially.
# Python's bytecode and pytest's rewritten test modules are cached in the (ignored) __pycache__
# folders: where the environment turns that off (PYTHONDONTWRITEBYTECODE, common in containers),
# each worker would compile every test module again while collecting, and every child process
# the client, about 10 s of CPU per worker and a third of a second per child.
unset PYTHONDONTWRITEBYTECODE
exec .venv/bin/pytest -p no:cacheprovider -q -rfEs -n 2 --dist loadfile "$@"
