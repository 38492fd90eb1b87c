"""Java helpers of the harness (``kclient/testing/java/*.java``), compiled with ``javac`` once
per source and classpath into ``~/.cache/kclient/java-helpers/<hash>/``.

``compile_helper("TelemetryRecorder", jars)`` -> the directory holding the compiled classes,
to put on a JVM's classpath in front of ``jars``. A missing ``javac`` or a compile error
raises ``MavenError`` (the Apache Kafka fixtures skip on it, as for a missing Java).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from kclient.testing.maven import MavenError, cache_root, find_java

__all__ = ["compile_helper", "HELPERS"]

HELPERS = Path(__file__).resolve().parent / "java"


def _javac() -> str:
    java = find_java()
    javac = os.path.join(os.path.dirname(os.path.realpath(java)), "javac")
    if os.access(javac, os.X_OK):
        return javac
    found = shutil.which("javac")
    if not found:
        raise MavenError("javac is not installed (the test harness compiles small Java helpers): "
                         "install a JDK, e.g. `apt-get install openjdk-17-jdk-headless`")
    return found


def compile_helper(name: str, jars: list[Path]) -> Path:
    """The class directory of ``kclient/testing/java/<name>.java`` compiled against ``jars``."""
    source = HELPERS / f"{name}.java"
    deps = os.pathsep.join(str(j) for j in jars)
    digest = hashlib.sha256(source.read_bytes() + deps.encode()).hexdigest()[:16]
    out = cache_root() / "java-helpers" / f"{name}-{digest}"
    if (out / f"{name}.class").is_file():
        return out
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([_javac(), "-nowarn", "-d", str(tmp), "-cp", deps, str(source)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise MavenError(f"javac failed on {source.name}:\n{done.stderr[-2000:]}")
    try:
        tmp.rename(out)  # whole or not at all, should two processes compile at once
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
