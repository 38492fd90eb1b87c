#!/usr/bin/env bash
# Create or refresh the project's virtual environment. Idempotent: re-running with no source
# change reinstalls nothing. Usage: scripts/bootstrap.sh [extras] [--java] [--kafka]
#   extras: comma list of pyproject extras to install (default: test)
#   --java: also make sure a Java 17 runtime is present (PySpark needs one)
#   --kafka: also make sure Java 17 and Maven are present and fetch Apache Kafka's jars into
#            ~/.cache/kclient (the reference test broker; Maven Central must be reachable once)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
EXTRAS=${1:-test}
NEED_JAVA=0
NEED_KAFKA=0
for a in "$@"; do
  [ "$a" = "--java" ] && NEED_JAVA=1
  [ "$a" = "--kafka" ] && NEED_JAVA=1 && NEED_KAFKA=1
done
case "$EXTRAS" in --*) EXTRAS=test ;; esac

log() { echo "[bootstrap] $*" >&2; }

apt_install() {
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  if [ ! -f /tmp/.kclient-apt-updated ]; then $SUDO apt-get update -qq && touch /tmp/.kclient-apt-updated; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null; then log "installing python3"; apt_install python3 python3-venv python3-dev; fi
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then log "installing python3-venv"; apt_install python3-venv; fi
if ! command -v cc >/dev/null; then log "installing a C compiler"; apt_install build-essential; fi
if ! "$PY" -c 'import sysconfig, os, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)'; then
  log "installing Python headers"; apt_install python3-dev
fi
if [ "$NEED_JAVA" = 1 ] && ! command -v java >/dev/null; then
  log "installing a Java 17 runtime (PySpark and Apache Kafka need one)"; apt_install openjdk-17-jre-headless
fi
if [ "$NEED_KAFKA" = 1 ] && ! command -v mvn >/dev/null; then
  log "installing Maven (fetches Apache Kafka's jars once)"; apt_install maven
fi

if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q -U pip
fi

# Reinstall only when the sources or the wanted extras changed.
stamp=$( { echo "$EXTRAS"; cat setup.py pyproject.toml; find kcore kclient pyspark_kclient -type f \( -name '*.py' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.pyi' -o -name '*.h' \) | LC_ALL=C sort | xargs cat; } | sha256sum | cut -c1-16)
if [ "$(cat .venv/.kclient-stamp 2>/dev/null)" != "$stamp" ]; then
  # Editable: the PEP 660 build compiles every kcore/*.pyx in place, so the checkout itself is
  # the compiled package. Subprocesses and Spark workers that start from the checkout (cwd on
  # sys.path) then import the same compiled modules as the test process.
  log "building and installing kclient[$EXTRAS] in editable mode (compiles kcore)"
  .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
  echo "$stamp" > .venv/.kclient-stamp
else
  log "kclient[$EXTRAS] is up to date"
fi

if [ "$NEED_KAFKA" = 1 ]; then
  # Resolve the broker's jars now, so a missing network shows here once, not in the middle of a
  # test run (the tests that need Apache Kafka then skip, naming this same reason).
  if .venv/bin/python -c 'from kclient.testing.kafka import kafka_jars, kafka_version; kafka_jars(); print(kafka_version())' > .venv/.kafka-version 2> .venv/.kafka-error; then
    log "Apache Kafka $(cat .venv/.kafka-version) jars are in ~/.cache/kclient"
  else
    log "WARNING: Apache Kafka is unavailable; its tests will be skipped: $(tail -3 .venv/.kafka-error)"
  fi
fi
