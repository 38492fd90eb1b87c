"""The Spark driver's cluster lookups (kclient.spark.lookups): the answers a KafkaConsumer with
the same settings gives, without importing the consumer."""
from __future__ import annotations

import os
import subprocess
import sys

import repo_paths

from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.spark.lookups import ClusterLookups
from kclient.structs import TopicPartition


def test_lookups_answer_as_a_consumer_with_the_same_settings(mock_cluster, create_topic, topic_name):
    create_topic(mock_cluster, topic_name, 3)
    with KafkaProducer(bootstrap_servers=mock_cluster.bootstrap, linger_ms=5) as p:
        for i in range(30):
            p.send(topic_name, b"v%d" % i, partition=i % 3)
        p.flush(10)
    settings = {"bootstrap.servers": mock_cluster.bootstrap, "enable.auto.commit": False,
                "auto.offset.reset": "none"}
    tps = [TopicPartition(topic_name, p) for p in range(3)]
    lookups = ClusterLookups(settings)
    consumer = KafkaConsumer(settings)
    try:
        assert lookups.partitions_for_topic(topic_name) == consumer.partitions_for_topic(topic_name) == {0, 1, 2}
        assert topic_name in lookups.topics()
        assert lookups.earliest(tps) == consumer.beginning_offsets(tps) == {tp: 0 for tp in tps}
        assert lookups.latest(tps) == consumer.end_offsets(tps) == {tp: 10 for tp in tps}
        version = lookups.metadata_version
        lookups.refresh()
        assert lookups.metadata_version > version
        assert not lookups.read_committed
        assert ClusterLookups({**settings, "isolation.level": "read_committed"}).read_committed
    finally:
        lookups.close()
        consumer.close(autocommit=False)


def test_planning_on_the_driver_imports_no_consumer():
    """Spark runs a stream reader's driver side in a new Python process per query: what the
    reader imports to plan is part of every query's start."""
    code = ("import sys\n"
            "from kclient.spark.datasource import KafkaDataSource\n"
            "from kclient.spark.stream import KafkaStreamReader\n"
            "from kclient.spark.planning import _Planner, parse_options\n"
            "opts = parse_options({'kafka.bootstrap.servers': 'localhost:1', 'subscribe': 't'}, streaming=True)\n"
            "_Planner(opts).close()\n"
            "print(sorted(m for m in sys.modules if m.startswith(('kclient.consumer.kafka_consumer', 'kclient.group', "
            "'kclient.consumer.fetcher', 'kclient.spark.reader'))))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo_paths.REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env,
                         cwd=repo_paths.REPO).stdout
    assert out.strip() == "[]"
