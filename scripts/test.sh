#!/usr/bin/env bash
# Set up (idempotently) and run the whole test suite against the installed, compiled package.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test
# The console script (not `python -m pytest`) keeps the source tree off sys.path, so the tests
# import the compiled kcore that `pip install .` built, never an uncompiled source tree.
exec .venv/bin/pytest -p no:cacheprovider -q -rfEs "$@"
