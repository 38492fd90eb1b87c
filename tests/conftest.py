"""Shared fixtures: real brokers for integration tests, unique names per test.

- ``tansu`` / ``mock_cluster``: session-scoped, started only when a test asks for them.
  ``KCLIENT_TEST_BOOTSTRAP=host:port`` makes both yield that external cluster instead.
- ``mock_faults``: the mock cluster for fault-injection tests; skips with a reason when the
  suite runs against an external cluster (which cannot inject faults).
- ``cluster``: parametrized over both brokers, for tests that must pass on each.
- ``topic_name`` / ``group_id``: unique per test. ``create_topic(bootstrap_or_cluster, name,
  partitions)``: creates, waits until Metadata shows it, deletes it after the test.

Tests that use a broker are marked ``tansu`` / ``mock`` automatically (``-m "not tansu"``).
"""
from __future__ import annotations

import logging
import os
import re
import uuid

import pytest

from kclient.testing import ExternalCluster, MockCluster, TansuBroker

log = logging.getLogger(__name__)

EXTERNAL_BOOTSTRAP = os.environ.get("KCLIENT_TEST_BOOTSTRAP") or None
_EXTERNAL_REASON = ("KCLIENT_TEST_BOOTSTRAP points at an external cluster; fault injection needs the "
                    "librdkafka mock cluster (unset KCLIENT_TEST_BOOTSTRAP to run this test)")

# bootstrap string -> cluster object, so create_topic() accepts a plain bootstrap string.
_CLUSTERS: dict[str, object] = {}


def pytest_configure(config):
    for line in ("tansu: needs the Tansu broker", "mock: needs the librdkafka mock cluster",
                 "slow: long-running integration test"):
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config, items):
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        params = getattr(getattr(item, "callspec", None), "params", {})
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


@pytest.fixture(params=["tansu", "mock"])
def cluster(request):
    """Each broker in turn, for tests the client must pass on both."""
    return request.getfixturevalue("tansu" if request.param == "tansu" else "mock_cluster")


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
    """``create_topic(bootstrap_or_cluster, name, partitions=1, replication_factor=1)`` -> name.

    Returns once Metadata shows every partition with a leader; the topic is deleted after
    the test (session brokers keep their memory bounded).
    """
    created = []

    def _create(target, name: str, partitions: int = 1, replication_factor: int = 1, **kwargs) -> str:
        cluster = _resolve(target)
        cluster.create_topic(name, partitions, replication_factor, **kwargs)
        created.append((cluster, name))
        cluster.wait_for_topic(name, partitions)
        return name

    yield _create
    for cluster, name in reversed(created):
        try:
            cluster.delete_topic(name)
        except Exception as exc:  # already deleted by the test, or the broker is gone
            log.debug("could not delete topic %s after the test: %s", name, exc)
