#!/usr/bin/env bash
# Set up (idempotently) and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh demo --java
exec .venv/bin/kclient demo "$@"
