"""How pytest-xdist hands out the suite's test files to its workers (``-n 2 --dist loadfile``).

xdist's file scheduler sends files in order of their number of tests, so the few long
integration files (building the wheel, the Spark sessions, the 3-node cluster's failovers) came
last and one worker ran them alone while the other had finished. Here:

- the longest files go first (longest-processing-time first keeps two workers evenly busy);
- files that need the replicated 3-node cluster, or the node with every security listener, run
  on one worker each, so each worker does not start its own copy of those brokers (three JVMs
  each, and half a minute of start-up); so do the files that read through one SparkSession.

The weights are rough seconds of a file in a two-worker run on 2 cores (its tests' times in
``--junitxml``; a group's are its files' summed); refresh them when files grow or shrink. A
file not listed is short and keeps xdist's order after the listed ones.
"""
from __future__ import annotations

#: Files that share one session-scoped fixture other files do not use (a broker, Spark): one
#: scope each, named after the fixture.
SHARED_BROKER_GROUPS: dict[str, tuple[str, ...]] = {
    "kafka3": (
        "tests/integration/consumer/test_follower_fetch.py",
        "tests/integration/consumer/test_truncation.py",
        "tests/integration/consumer/test_leader_discovery.py",
        "tests/integration/testing/test_chaos.py",
        "tests/integration/testing/test_harness_kafka.py",
        "tests/integration/testing/test_share_chaos.py",
        "tests/integration/share/test_share_unanswered_on_kafka.py",
    ),
    # Not a broker: the SparkSession of tests/conftest.py (one JVM start).
    "spark_session": (
        "tests/integration/spark/test_spark_datasource.py",
        "tests/integration/spark/test_spark_read.py",
    ),
    "secure_kafka": (
        "tests/integration/group/test_pacemaker_security.py",
        "tests/integration/network/test_security.py",
        "tests/integration/aio/test_aio.py",
        "tests/integration/share/test_share_pacemaker_on_kafka.py",
        "tests/integration/bench/test_liveness_secured.py",
    ),
}

#: Rough seconds per file (or group) in a two-worker run, for the files of 10 s or more.
WEIGHTS: dict[str, float] = {
    "kafka3": 175,
    "secure_kafka": 110,
    "tests/package/test_wheel.py": 100,
    "spark_session": 65,
    "tests/integration/group/test_group_protocols.py": 47,
    "tests/integration/network/test_oidc.py": 46,
    "tests/integration/spark/test_spark_readme_snippet.py": 38,
    "tests/integration/share/test_share_consumer.py": 33,
    "tests/integration/group/test_pacemaker_membership.py": 28,
    "tests/integration/consumer/test_kafka_python_examples.py": 24,
    "tests/integration/cli/test_first_hour.py": 23,
    "tests/integration/share/test_share_group_configs_on_kafka.py": 23,
    "tests/unit/kcore/test_messages_roundtrip.py": 23,
    "tests/integration/consumer/test_consumer.py": 19,
    "tests/integration/parallel/test_parallel_consumer.py": 17,
    "tests/integration/consumer/test_consumer_iteration.py": 16,
    "tests/integration/group/test_coordinator_faults.py": 15,
    "tests/integration/group/test_coordinator.py": 15,
    "tests/unit/kcore/test_pacemaker_tls_sasl.py": 13,
    "tests/unit/kcore/test_pacemaker.py": 13,
    "tests/integration/cli/test_verifiable_parity.py": 13,
    "tests/integration/consumer/test_consumer_faults.py": 13,
    "tests/integration/telemetry/test_metrics_push.py": 11,
    "tests/unit/kcore/test_queues.py": 11,
    "tests/integration/group/test_group_fencing.py": 11,
    "tests/integration/network/test_short_sasl_sessions.py": 11,
}

_GROUP_OF = {path: group for group, paths in SHARED_BROKER_GROUPS.items() for path in paths}


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or its shared-broker group."""
    path = nodeid.split("::", 1)[0]
    return _GROUP_OF.get(path, path)


def heaviest(scopes) -> str:
    """The unit to hand out next: the heaviest left; among unweighted ones the first (xdist's
    order), since max() keeps the first of equals."""
    return max(scopes, key=lambda scope: WEIGHTS.get(scope, 0.0))


def make_scheduler(config, log):
    """The xdist scheduler for ``--dist loadfile`` (None for any other mode: xdist's own)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirstScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            self.workqueue.move_to_end(heaviest(self.workqueue), last=False)
            super()._assign_work_unit(node)

    return LongestFirstScheduling(config, log)
