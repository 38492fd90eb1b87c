"""Jars from Maven Central, resolved once into a per-user cache outside the repository.

``resolve_jars(["org.apache.kafka:kafka_2.13:4.1.1"], "kafka-4.1.1")`` writes a small pom that
depends on the given artifacts, runs ``mvn dependency:copy-dependencies`` into
``~/.cache/kclient/<name>/`` (``$KCLIENT_CACHE_DIR`` overrides the root) and returns the jar
paths. A finished resolution leaves a stamp naming its artifacts, so later calls only list the
directory: no Maven, no network. Missing Maven or Java, or a failed resolution, raises
``MavenError`` saying what is missing and how to install it.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape

from kclient.testing._base import BrokerNotFoundError

log = logging.getLogger(__name__)

__all__ = ["MavenError", "cache_root", "resolve_jars", "find_java", "java_major_version"]

_STAMP = ".resolved"


class MavenError(BrokerNotFoundError):
    """Maven or Java is missing, or Maven could not resolve the artifacts."""


def cache_root() -> Path:
    root = Path(os.environ.get("KCLIENT_CACHE_DIR") or Path.home() / ".cache" / "kclient")
    root.mkdir(parents=True, exist_ok=True)
    return root


def find_java() -> str:
    """The java executable: $JAVA_HOME/bin/java, else `java` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if not found:
        raise MavenError("no Java runtime found (need Java 17 or newer): install it with "
                         "`apt-get install openjdk-17-jre-headless`, or set JAVA_HOME")
    return found


def java_major_version(java: str) -> int:
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    text = out.stderr + out.stdout
    # `openjdk version "17.0.15" 2025-04-15` / `openjdk version "1.8.0_392"`
    for line in text.splitlines():
        if "version" in line and '"' in line:
            version = line.split('"')[1]
            parts = version.split(".")
            major = int(parts[1]) if parts[0] == "1" else int(parts[0].split("-")[0])
            return major
    raise MavenError(f"could not read the Java version from `{java} -version`: {text.strip()[:200]}")


def _pom(artifacts: list[str]) -> str:
    deps = []
    for coordinate in artifacts:
        parts = coordinate.split(":")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"expected GROUP:ARTIFACT:VERSION, got {coordinate!r}")
        group, artifact, version = (escape(p) for p in parts)
        deps.append(f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                    f"<version>{version}</version></dependency>")
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n"
            "  <modelVersion>4.0.0</modelVersion>\n"
            "  <groupId>kclient.cache</groupId><artifactId>jars</artifactId><version>1</version>\n"
            "  <dependencies>\n" + "\n".join(deps) + "\n  </dependencies>\n</project>\n")


def resolve_jars(artifacts: list[str], name: str, *, timeout: float = 900.0) -> list[Path]:
    """Every jar that ``artifacts`` need (with their transitive dependencies), resolved once.

    Concurrent callers (e.g. two test processes) are serialised by a lock file; the second one
    finds the stamp and returns at once.
    """
    target = cache_root() / name
    target.mkdir(parents=True, exist_ok=True)
    wanted = "\n".join(sorted(artifacts)) + "\n"
    stamp = target / _STAMP
    with open(target / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.is_file() and stamp.read_text() == wanted):
            _copy_dependencies(artifacts, target, timeout)
            stamp.write_text(wanted)
    jars = sorted(target.glob("*.jar"))
    if not jars:
        raise MavenError(f"{target} holds no jars although it is marked resolved; delete it and retry")
    return jars


def _copy_dependencies(artifacts: list[str], target: Path, timeout: float) -> None:
    mvn = shutil.which("mvn")
    if not mvn:
        raise MavenError("Maven is not installed (needed once to download the jars for "
                         f"{', '.join(artifacts)}): install it with `apt-get install maven`")
    find_java()
    for old in target.glob("*.jar"):
        old.unlink()
    key = hashlib.sha256("\n".join(artifacts).encode()).hexdigest()[:12]
    with tempfile.TemporaryDirectory(prefix=f"kclient-pom-{key}-") as work:
        Path(work, "pom.xml").write_text(_pom(artifacts))
        cmd = [mvn, "-B", "-q", "-f", str(Path(work, "pom.xml")), "dependency:copy-dependencies",
               "-DincludeScope=runtime", f"-DoutputDirectory={target}"]
        log.info("resolving %s with Maven into %s", ", ".join(artifacts), target)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise MavenError(f"Maven did not finish resolving {', '.join(artifacts)} within "
                             f"{timeout:.0f} s (is Maven Central reachable?)") from None
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-3000:]
        raise MavenError(f"Maven could not resolve {', '.join(artifacts)} (exit {done.returncode}; "
                         f"is Maven Central reachable?):\n{tail}")
