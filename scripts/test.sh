#!/usr/bin/env bash
# Set up (idempotently) and run the whole test suite against the installed, compiled package.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh test --kafka
# tests/test_build.py fails if any kcore module is imported from anything but a compiled extension.
exec .venv/bin/pytest -p no:cacheprovider -q -rfEs "$@"
