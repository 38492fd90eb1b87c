"""Chaos on the 3-node Apache Kafka (kclient.testing.chaos), with the clients on PLAINTEXT and
on SASL_SSL: rolling restarts (in the soak), SIGKILL of a partition leader and of the group coordinator,
proxy latency / resets / blackholes / slow reads, SIGKILLed members, while a producer writes
numbered records with acks=all; every one of Jepsen's Kafka criteria must be zero. The longer soak is
``python -m bench chaos --minutes 30``.

The seed is fixed so that a failure can be replayed (``KCLIENT_CHAOS_SEED`` picks another);
the schedule still depends on timing, so a replay is close, not identical.
"""
from __future__ import annotations

import os

import pytest

from kclient.testing import _wire
from kclient.testing.chaos import (FAULT_KINDS, Chaos, ChaosConfig, ResourceSample, group_coordinator_partition,
                                   java_string_hash, resource_violations)

@pytest.mark.slow
@pytest.mark.parametrize("security", ["PLAINTEXT", "SASL_SSL"])
def test_chaos_loses_and_duplicates_nothing(kafka3, tmp_path, security):
    """Thirty seconds of faults per protocol: over SASL_SSL they also hit TLS handshakes, SASL
    logins and re-authentications."""
    if not kafka3.proxies:
        pytest.skip("the kafka3 cluster has no client proxies")
    seed = int(os.environ.get("KCLIENT_CHAOS_SEED", "19"))
    # Rolling broker restarts are left to the soak (python -m bench chaos): one takes most of
    # a 30 s window on a busy machine, and the test wants several kinds of fault in it.
    kinds = tuple(k for k in FAULT_KINDS if k != "broker_restart")
    config = ChaosConfig(duration_s=30, members=3, partitions=4, rate=150, seed=seed, workdir=tmp_path,
                         security=security, kinds=kinds)
    result = Chaos(kafka3, config).run()

    details = {"seed": seed, "faults": dict(result.faults), "skipped": dict(result.skipped_faults),
               "acknowledged": result.acknowledged, "deliveries": result.deliveries,
               "undelivered": result.undelivered_at_deadline, "logs": result.workdir,
               "lost": result.report.lost[:5], "duplicated": result.report.duplicated[:5],
               "nonmonotonic": result.report.nonmonotonic[:5], "skipped_offsets": result.report.skipped[:5],
               "split_brain": result.report.split_brain[:5], "member_exits": result.member_exits,
               "stuck_on_close": result.stuck_on_close, "resources": result.resource_violations,
               "explain": result.explain}
    assert result.criteria() == dict.fromkeys(result.criteria(), 0), details
    assert not result.resource_violations, details
    assert result.acknowledged >= 1000 and result.report.acknowledged == result.acknowledged, details
    assert len(result.faults) >= 2, details           # more than one kind of fault
    assert set(result.resource_ranges()) == {"m0", "m1", "m2"}, details   # every member was sampled
    proxies = kafka3.proxies_for(security)
    assert all(p.connections_accepted > 0 for p in proxies.values())
    assert kafka3.running and all(not p._blackholed for p in proxies.values())


def test_clients_of_the_proxied_listener_are_sent_to_the_proxies(kafka3):
    """Metadata through a proxy names the proxies, so clients never bypass them; the direct
    listener still names the brokers (every other test)."""
    if not kafka3.proxies:
        pytest.skip("the kafka3 cluster has no client proxies")
    with _wire.RawConnection.to(kafka3.proxied_bootstrap, 10) as conn:
        proxied = _wire.metadata(conn, [])["brokers"]
    assert {node: port for node, (_, port) in proxied.items()} == \
        {node: proxy.port for node, proxy in kafka3.proxies.items()}
    direct = kafka3.metadata([])["brokers"]
    assert {node: port for node, (_, port) in direct.items()} == {n.node_id: n.port for n in kafka3.nodes}
    # The SASL_SSL listener behind its own proxies names those.
    from kclient.consumer.kafka_consumer import KafkaConsumer
    with KafkaConsumer({"bootstrap.servers": kafka3.proxied_bootstrap_for("SASL_SSL"),
                        **kafka3.proxied_client_settings("SASL_SSL")}) as consumer:
        consumer.topics()
        nodes = consumer._metadata.cluster.nodes()
    assert {n.node_id: n.port for n in nodes} == {node: p.port for node, p in kafka3.secure_proxies.items()}


def test_the_group_coordinator_partition_is_kafkas():
    # Java: "hello".hashCode() == 99162322; "polygenelubricants".hashCode() == Integer.MIN_VALUE,
    # which Kafka's Utils.abs maps to 0.
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert group_coordinator_partition("polygenelubricants", 4) == 0
    assert group_coordinator_partition("hello", 50) == 99162322 % 50


def test_resource_bounds_catch_caps_and_steady_growth():
    flat = [ResourceSample(t, 60.0, 20, 6) for t in range(200)]
    assert resource_violations({"m0.0": flat}) == []
    leaking = [ResourceSample(t, 60.0 + t, 20 + t // 4, 6) for t in range(200)]
    found = resource_violations({"m0.0": leaking})
    assert any("RSS grew" in f for f in found) and any("fds grew" in f for f in found)
    assert resource_violations({"m1.0": [ResourceSample(0, 50.0, 999, 6)]}) == ["m1.0: 999 open fds > 256"]
    # A short-lived incarnation is held to the caps only.
    assert resource_violations({"m2.0": leaking[:60]}) == []
