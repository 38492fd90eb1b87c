"""Shared fixtures: real brokers for integration tests, unique names per test.

- ``kafka``: Apache Kafka 4.x (KRaft, one node), the reference broker; ``broker`` /
  ``broker_bootstrap`` are the primary broker every integration test should use unless it needs
  another. ``kafka3``: a replicated 3-node cluster for failover tests.
- ``tansu`` / ``mock_cluster``: session-scoped, started only when a test asks for them.
  ``KCLIENT_TEST_BOOTSTRAP=host:port`` makes all of them yield that external cluster instead.
  When Java or Maven is missing (or Maven Central unreachable), the Apache Kafka fixtures skip
  their tests with the reason, and the run's summary lists them (``-rs``).
- ``mock_faults``: the mock cluster for fault-injection tests; skips with a reason when the
  suite runs against an external cluster (which cannot inject faults).
- ``cluster``: parametrized over Apache Kafka, Tansu and the mock cluster, for tests that must
  pass on each.
- ``topic_name`` / ``group_id``: unique per test. ``create_topic(bootstrap_or_cluster, name,
  partitions)``: creates, waits until Metadata shows it, deletes it after the test.

Tests that use a broker are marked ``kafka`` / ``tansu`` / ``mock`` automatically
(``-m "not kafka"``).
"""
from __future__ import annotations

import logging
import os
import re
import uuid

import pytest

from kclient.testing import ExternalCluster, KafkaCluster, MavenError, MockCluster, TansuBroker

log = logging.getLogger(__name__)

EXTERNAL_BOOTSTRAP = os.environ.get("KCLIENT_TEST_BOOTSTRAP") or None
_EXTERNAL_REASON = ("KCLIENT_TEST_BOOTSTRAP points at an external cluster; fault injection needs the "
                    "librdkafka mock cluster (unset KCLIENT_TEST_BOOTSTRAP to run this test)")

# bootstrap string -> cluster object, so create_topic() accepts a plain bootstrap string.
_CLUSTERS: dict[str, object] = {}


def pytest_configure(config):
    for line in ("kafka: needs the Apache Kafka broker", "tansu: needs the Tansu broker",
                 "mock: needs the librdkafka mock cluster",
                 "slow: long-running integration test"):
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        params = dict(getattr(getattr(item, "callspec", None), "params", {}))
        params.setdefault("cluster", params.get("records_deletable"))
        if names & {"kafka", "kafka3", "broker"} or params.get("cluster") == "kafka":
            item.add_marker(pytest.mark.kafka)
        if "tansu" in names or params.get("cluster") == "tansu":
            item.add_marker(pytest.mark.tansu)
        if names & {"mock_cluster", "mock_faults"} or params.get("cluster") == "mock":
            item.add_marker(pytest.mark.mock)


def _session_cluster(factory):
    if EXTERNAL_BOOTSTRAP:
        cluster = ExternalCluster(EXTERNAL_BOOTSTRAP)
        _CLUSTERS[cluster.bootstrap] = cluster
        yield cluster
        return
    cluster = factory().start()
    _CLUSTERS[cluster.bootstrap] = cluster
    try:
        yield cluster
    finally:
        _CLUSTERS.pop(cluster.bootstrap, None)
        cluster.stop()


# Set once the Apache Kafka fixture failed to start for want of Java or Maven: every later test
# that needs it skips with the same reason instead of trying again.
_KAFKA_UNAVAILABLE: dict[str, str] = {}


def _kafka_cluster(brokers: int):
    key = f"kafka{brokers}"
    if key in _KAFKA_UNAVAILABLE:
        pytest.skip(_KAFKA_UNAVAILABLE[key])
    # Several nodes: one rack each, so that fetching from followers (KIP-392) can be tested.
    racks = [f"rack-{n}" for n in range(1, brokers + 1)] if brokers > 1 else None
    try:
        # Several nodes: a fault proxy in front of each for clients of the chaos test (a second
        # listener; ``bootstrap`` stays direct for every other test).
        # Several nodes also get the secured listeners, and a SASL_SSL listener behind proxies
        # too, so that the chaos test can inject faults into TLS and SASL connections.
        yield from _session_cluster(lambda: KafkaCluster(
            brokers, racks=racks, client_proxies=brokers > 1, security=brokers > 1,
            proxied_protocols=("PLAINTEXT", "SASL_SSL") if brokers > 1 else ("PLAINTEXT",)))
    except MavenError as exc:
        _KAFKA_UNAVAILABLE[key] = f"Apache Kafka is unavailable: {exc}"
        pytest.skip(_KAFKA_UNAVAILABLE[key])


@pytest.fixture(scope="session")
def kafka():
    """One Apache Kafka node for the whole session (or the external cluster)."""
    yield from _kafka_cluster(1)


@pytest.fixture(scope="session")
def secure_kafka():
    """One Apache Kafka node with the SSL, SASL_PLAINTEXT, SASL_SSL and MTLS listeners besides
    PLAINTEXT (KafkaCluster(security=True): test certificates, PLAIN and SCRAM users, 2 s SASL
    sessions), shared by the TLS / SASL tests of every layer; started on first use. A SASL_SSL
    listener relayed through the liveness benchmark's judge (bench/tls_relay.py) too."""
    try:
        cluster = KafkaCluster(security=True, relayed_protocols=("SASL_SSL",)).start()
    except MavenError as exc:
        pytest.skip(f"Apache Kafka is unavailable: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka3():
    """Three Apache Kafka nodes (replication 3, min.insync.replicas 2, racks rack-1..3 with the
    rack-aware replica selector, a FaultProxy per node behind ``proxied_bootstrap``), started
    on first use."""
    if EXTERNAL_BOOTSTRAP:
        pytest.skip("KCLIENT_TEST_BOOTSTRAP points at an external cluster; the 3-node failover "
                    "tests stop and start the harness's own nodes")
    yield from _kafka_cluster(3)


@pytest.fixture(scope="session")
def broker(kafka):
    """The primary broker of the suite: Apache Kafka."""
    return kafka


@pytest.fixture(scope="session")
def broker_bootstrap(kafka) -> str:
    return kafka.bootstrap


@pytest.fixture(scope="session")
def tansu():
    """A Tansu broker for the whole session (or the external cluster)."""
    yield from _session_cluster(TansuBroker)


@pytest.fixture(scope="session")
def mock_cluster():
    """A 3-broker librdkafka mock cluster for the whole session (or the external cluster)."""
    yield from _session_cluster(lambda: MockCluster(3))


@pytest.fixture
def mock_faults(mock_cluster):
    """The mock cluster, for tests that inject faults; skipped against an external cluster.

    Tests that change broker state (down, rtt, leaders, coordinators, pushed errors) must
    undo it: the cluster is shared by the session.
    """
    if not getattr(mock_cluster, "supports_fault_injection", False):
        pytest.skip(_EXTERNAL_REASON)
    return mock_cluster


@pytest.fixture
def tansu_bootstrap(tansu) -> str:
    return tansu.bootstrap


@pytest.fixture
def mock_bootstrap(mock_cluster) -> str:
    return mock_cluster.bootstrap


@pytest.fixture(params=["kafka", "mock"])
def records_deletable(request):
    """A harness cluster whose records a test may delete: Apache Kafka (DeleteRecords) or the mock."""
    if EXTERNAL_BOOTSTRAP:
        pytest.skip("KCLIENT_TEST_BOOTSTRAP points at an external cluster; deleting records needs "
                    "the harness's own brokers")
    return request.getfixturevalue("kafka" if request.param == "kafka" else "mock_faults")


@pytest.fixture(params=["kafka", "tansu", "mock"])
def cluster(request):
    """Each broker in turn, for tests the client must pass on every one."""
    return request.getfixturevalue({"mock": "mock_cluster"}.get(request.param, request.param))


def _unique(prefix: str, request) -> str:
    # Legal topic/group characters only; the test name keeps broker logs readable.
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-")[:60]
    return f"{prefix}-{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic_name(request) -> str:
    return _unique("t", request)


@pytest.fixture
def group_id(request) -> str:
    return _unique("g", request)


def _resolve(target):
    if hasattr(target, "create_topic"):
        return target
    if isinstance(target, str):
        return _CLUSTERS.get(target) or ExternalCluster(target)
    raise TypeError(f"create_topic needs a bootstrap string or a cluster, not {type(target).__name__}")


@pytest.fixture
def create_topic():
    """``create_topic(bootstrap_or_cluster, name, partitions=1, replication_factor=None)`` -> name.

    Returns once Metadata shows every partition with a leader; the topic is deleted after
    the test (session brokers keep their memory bounded).
    """
    created = []

    def _create(target, name: str, partitions: int = 1, replication_factor: int | None = None,
                **kwargs) -> str:
        cluster = _resolve(target)
        if replication_factor is not None:  # else the cluster's default (3 on a 3-node Kafka)
            kwargs["replication_factor"] = replication_factor
        cluster.create_topic(name, partitions, **kwargs)
        created.append((cluster, name))
        cluster.wait_for_topic(name, partitions)
        return name

    yield _create
    for cluster, name in reversed(created):
        try:
            cluster.delete_topic(name)
        except Exception as exc:  # already deleted by the test, or the broker is gone
            log.debug("could not delete topic %s after the test: %s", name, exc)


def pytest_xdist_make_scheduler(config, log):
    """Longest test files first, and the files of a shared broker on one worker
    (tests/support/scheduling.py)."""
    from scheduling import make_scheduler

    return make_scheduler(config, log)


#: The test driver JVM's start-up settings: the C1 compiler only (the JIT's second tier costs
#: start-up CPU that small test jobs never win back) and the serial collector, as the broker
#: harness runs its JVMs. The queries, sources and Python workers are Spark's as configured.
SPARK_TEST_DRIVER = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


@pytest.fixture(scope="session")
def spark_session():
    """One local SparkSession for the Spark test files of a worker (the scheduler runs them on
    one worker: tests/support/scheduling.py): starting Spark's JVM and its Python workers is
    most of what a session costs."""
    pytest.importorskip("pyspark")
    from kclient.spark import local_session
    session = local_session("local[2]", "kclient-tests", conf=SPARK_TEST_DRIVER)
    yield session
    session.stop()
