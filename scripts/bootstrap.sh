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

# Runs a long step with its output in a log, printing the elapsed time every 20 s so that a
# silent pip or compiler is not mistaken for a hung one; the log's tail is shown if it fails.
# Usage: step "what (about how long)" command...
step() {
  local what=$1; shift
  local out; out=$(mktemp); local t0=$SECONDS
  log "$what"
  "$@" >"$out" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && log "  ... $(( (SECONDS - t0) / 60 )) min $(( (SECONDS - t0) % 60 )) s"
  done
  if ! wait "$pid"; then
    log "FAILED after $(( SECONDS - t0 )) s; the last lines of its output:"; tail -25 "$out" >&2; rm -f "$out"; return 1
  fi
  rm -f "$out"
  log "  done in $(( SECONDS - t0 )) s"
}

# What installing the extras $1 downloads, roughly (wheels for CPython 3.11 on x86-64), when
# the extras $2 are installed already.
extras_size() {
  local spark="PySpark, pyarrow and pandas (about 500 MB)"
  case ",$2," in *,spark,*) spark= ;; esac
  case ",$1," in
    *,test,*|*,bench,*) echo "${spark:+$spark, }the brokers' wheels and the test tools (about 100 MB): 1-3 min" ;;
    *,spark,*|*,demo,*) echo "${spark:-the Tansu broker (a few MB)}${spark:+ and the Tansu broker}: 1-3 min" ;;
    *) echo "a few MB" ;;
  esac
}

apt_install() {
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  if [ ! -f /tmp/.kclient-apt-updated ]; then $SUDO apt-get update -qq && touch /tmp/.kclient-apt-updated; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null; then log "installing python3 (apt, about 1 min)"; apt_install python3 python3-venv python3-dev; fi
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then log "installing python3-venv (apt, about 30 s)"; apt_install python3-venv; fi
if ! command -v cc >/dev/null; then log "installing a C compiler (apt build-essential, about 1-2 min)"; apt_install build-essential; fi
if ! "$PY" -c 'import sysconfig, os, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)'; then
  log "installing Python headers (apt, about 30 s)"; apt_install python3-dev
fi
if [ "$NEED_JAVA" = 1 ] && ! command -v java >/dev/null; then
  log "installing a Java 17 runtime, PySpark and Apache Kafka need one (apt, about 1-2 min)"; apt_install openjdk-17-jre-headless
fi
if [ "$NEED_KAFKA" = 1 ] && ! command -v mvn >/dev/null; then
  log "installing Maven, it fetches Apache Kafka's jars once (apt, about 1 min)"; apt_install maven
fi

if [ ! -x .venv/bin/python ]; then
  step "creating .venv (about 10 s)" bash -c "'$PY' -m venv .venv && .venv/bin/python -m pip install -q -U pip"
fi

# Reinstall only when the sources changed or an extra is wanted that is not installed yet;
# the extras installed before stay installed (demo.sh then test.sh adds the test toolchain,
# test.sh then demo.sh installs nothing).
sources=$( { cat setup.py pyproject.toml; find kcore kclient pyspark_kclient -type f \( -name '*.py' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.pyi' -o -name '*.h' \) | LC_ALL=C sort | xargs cat; } | sha256sum | cut -c1-16)
# An extra's name and the names it includes (test includes spark, broker, ...), from pyproject.toml.
expand_extras() {
  .venv/bin/python - "$1" <<'PY' 2>/dev/null || echo "$1"
import re, sys, tomllib
extras = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]
seen, todo = set(), [e for e in sys.argv[1].split(",") if e]
while todo:
    name = todo.pop()
    if name not in seen:
        seen.add(name)
        for req in extras.get(name, ()):
            m = re.match(r"kclient-cy\[([^\]]+)\]", req)
            todo += m.group(1).split(",") if m else []
print(",".join(sorted(seen)))
PY
}
installed=$(expand_extras "$(cat .venv/.kclient-extras 2>/dev/null || true)")
missing=
for e in ${EXTRAS//,/ }; do
  case ",$installed," in *",$e,"*) ;; *) missing="$missing,$e" ;; esac
done
if [ "$(cat .venv/.kclient-stamp 2>/dev/null)" != "$sources" ] || [ -n "$missing" ]; then
  want=$(echo "$installed$missing" | tr ',' '\n' | sed '/^$/d' | LC_ALL=C sort -u | paste -sd, -)
  # Cython's output is kept by content hash in ~/.cache/kclient/cython: a rebuild, another
  # checkout and the packaging test's sdist build translate only the modules that changed.
  # Editable: the PEP 660 build compiles every kcore/*.pyx in place, so the checkout itself is
  # the compiled package. Subprocesses and Spark workers that start from the checkout (cwd on
  # sys.path) then import the same compiled modules as the test process.
  if ls kcore/*.so >/dev/null 2>&1; then compile="recompiles the changed kcore modules"
  else compile="compiles kcore's $(ls kcore/*.pyx | wc -l) Cython modules: about 2 min on 2 cores"; fi
  if [ -n "$missing" ]; then fetch="downloads $(extras_size "$missing" "$installed")"; else fetch="the sources changed"; fi
  step "installing kclient[$want] in editable mode: $fetch; $compile" \
    env KCORE_CYTHON_CACHE="${KCORE_CYTHON_CACHE:-$HOME/.cache/kclient/cython}" .venv/bin/python -m pip install -q -e ".[$want]"
  echo "$sources" > .venv/.kclient-stamp
  expand_extras "$want" > .venv/.kclient-extras
else
  log "kclient[$EXTRAS] is up to date"
fi

if [ "$NEED_KAFKA" = 1 ]; then
  # Resolve the broker's jars now, so a missing network shows here once, not in the middle of a
  # test run (the tests that need Apache Kafka then skip, naming this same reason).
  [ -s .venv/.kafka-version ] || log "resolving Apache Kafka's jars into ~/.cache/kclient (once; about 1 min)"
  if .venv/bin/python -c 'from kclient.testing.kafka import kafka_jars, kafka_version; kafka_jars(); print(kafka_version())' > .venv/.kafka-version 2> .venv/.kafka-error; then
    log "Apache Kafka $(cat .venv/.kafka-version) jars are in ~/.cache/kclient"
  else
    log "WARNING: Apache Kafka is unavailable; its tests will be skipped: $(tail -3 .venv/.kafka-error)"
  fi
fi
