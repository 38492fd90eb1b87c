"""The test brokers' class-data archive (kclient.testing.kafka.class_archive): one file per Java
runtime and classpath, next to the jars, so a JVM never maps classes archived from other jars."""
from __future__ import annotations

import os
import sys

from kclient.testing.kafka import class_archive


def test_the_archive_lives_next_to_the_jars_and_follows_the_classpath(tmp_path):
    jars = tmp_path / "kafka-4.0.0"
    cp = os.pathsep.join(str(jars / name) for name in ("kafka_2.13.jar", "kafka-clients.jar"))
    archive = class_archive(sys.executable, cp)
    assert archive.parent == jars and archive.suffix == ".jsa"
    assert class_archive(sys.executable, cp) == archive
    # a helper put in front of the jars (the telemetry recorder) is another classpath
    assert class_archive(sys.executable, os.pathsep.join([str(tmp_path / "helper"), cp])) != archive
    assert class_archive(sys.executable, cp.replace("4.0.0", "4.1.0")).parent != jars
