"""The test brokers' class-data archive (kclient.testing.kafka.class_archive): one file per Java
runtime and classpath of jars, next to the jars, so a JVM never maps classes archived from other
jars."""
from __future__ import annotations

import os
import sys

from kclient.testing.kafka import class_archive


def test_the_archive_lives_next_to_the_jars_and_follows_the_classpath(tmp_path):
    jars = tmp_path / "kafka-4.0.0"
    cp = os.pathsep.join(str(jars / name) for name in ("kafka_2.13.jar", "kafka-clients.jar"))
    archive = class_archive(sys.executable, cp)
    assert archive is not None and archive.parent == jars and archive.suffix == ".jsa"
    assert class_archive(sys.executable, cp) == archive
    other = class_archive(sys.executable, cp.replace("4.0.0", "4.1.0"))
    assert other is not None and other.parent != jars


def test_a_classpath_with_a_directory_gets_no_archive(tmp_path):
    """The JVM archives classes from jars only: with a directory of compiled classes on the
    classpath (the telemetry recorder's) it refuses to start with an archive option."""
    cp = os.pathsep.join([str(tmp_path / "TelemetryRecorder"), str(tmp_path / "kafka_2.13.jar")])
    assert class_archive(sys.executable, cp) is None
