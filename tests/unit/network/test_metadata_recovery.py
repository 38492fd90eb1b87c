"""Rebootstrap (KIP-899, KIP-1102) and leader epochs across topic ids: NetworkClient and
Metadata against scripted brokers on a fake clock."""
from __future__ import annotations

from kclient.network.metadata import Metadata
from test_network_client import (BROKER_RANGES, METADATA, T0, ScriptedCluster, connect, metadata_response,
                                 poll_until)

import pytest
from kclient.clock import FakeClock
from kclient.network.network_config import NetworkClientConfig
from kclient.network.network_client import NetworkClient


@pytest.fixture
def clock():
    return FakeClock(T0)


@pytest.fixture
def cluster():
    c = ScriptedCluster()
    yield c
    c.close()


def bootstrapped(clock, cluster, **cfg):
    """A client that bootstrapped from b0:9092 (node -1) and learnt brokers 1 and 2."""
    cfg.setdefault("bootstrap.servers", "b0:9092")
    client = NetworkClient(NetworkClientConfig.of(cfg), clock=clock, socket_factory=cluster.socket_factory)
    answer_metadata(client, cluster, -1, nodes=(1, 2))
    assert sorted(n.node_id for n in client.metadata.cluster.nodes()) == [1, 2]
    return client


def answer_metadata(client, cluster, node_id, nodes, error_code=0, connection=0):
    """Answer ApiVersions and Metadata on the node's ``connection``-th connection (0: its first)."""
    def connected() -> bool:
        client.clock.advance(10)       # past any reconnect backoff of the fake clock
        return len(cluster.conns.get(node_id, ())) > connection
    poll_until(client, connected)
    peer = cluster.conns[node_id][connection]
    peer.answer_api_versions()
    poll_until(client, lambda: not peer.no_request_pending())
    api, version, corr, _, _ = peer.read_request()
    assert api == METADATA
    version_before = client.metadata.update_version
    body = metadata_response(nodes=nodes)
    body["error_code"] = error_code
    peer.respond(METADATA, version, corr, body)
    if error_code == 0:
        poll_until(client, lambda: client.metadata.update_version > version_before)
    else:
        poll_until(client, lambda: client.metadata.time_to_next_update(client.clock.now_ms()) > 0)


def test_every_known_broker_gone_starts_again_from_the_bootstrap_servers(clock, cluster):
    client = bootstrapped(clock, cluster, **{"reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 100})
    cluster.refuse |= {1, 2}                        # the learnt brokers are gone,
    cluster.peer(-1).close()                        # and so is the old cluster behind the bootstrap address
    old_connections = len(cluster.conns[-1])
    client.metadata.request_update()
    for _ in range(20):                             # each known broker refuses once, then backs off
        if client.rebootstraps:
            break
        client.poll(0)
        clock.advance(10)
    assert client.rebootstraps == 1
    assert client.metadata.cluster.is_bootstrap
    # the bootstrap address now leads to the replacement cluster (brokers 7 and 8)
    answer_metadata(client, cluster, -1, nodes=(7, 8), connection=old_connections)
    assert sorted(n.node_id for n in client.metadata.cluster.nodes()) == [7, 8]
    client.close()


def test_strategy_none_keeps_trying_the_known_brokers(clock, cluster):
    client = bootstrapped(clock, cluster, **{"metadata.recovery.strategy": "none",
                                             "reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 100})
    connections_to_bootstrap = len(cluster.conns[-1])
    cluster.refuse |= {1, 2}
    client.metadata.request_update()
    for _ in range(50):
        client.poll(0)
        clock.advance(50)
    assert client.rebootstraps == 0
    assert sorted(n.node_id for n in client.metadata.cluster.nodes()) == [1, 2]
    assert len(cluster.conns[-1]) == connections_to_bootstrap     # the bootstrap server was not asked again
    client.close()


def test_a_broker_answering_rebootstrap_required_triggers_it(clock, cluster):
    client = bootstrapped(clock, cluster)
    connect(client, cluster, 1, ranges={**BROKER_RANGES, METADATA: (0, 13)})   # v13: a top-level error code
    client.metadata.request_update()
    clock.advance(1000)
    client.poll(0)
    peer = cluster.peer(1)
    api, version, corr, _, _ = peer.read_request()
    assert api == METADATA
    body = metadata_response(nodes=(1, 2))
    body["error_code"] = 129                        # REBOOTSTRAP_REQUIRED
    peer.respond(METADATA, version, corr, body)
    poll_until(client, lambda: client.rebootstraps == 1)
    assert client.metadata.cluster.is_bootstrap
    client.close()


def test_no_metadata_answer_for_the_trigger_time_rebootstraps(clock, cluster):
    client = bootstrapped(clock, cluster, **{"metadata.recovery.rebootstrap.trigger.ms": 2000,
                                             "retry.backoff.ms": 100, "retry.backoff.max.ms": 100})
    connect(client, cluster, 1)
    client.metadata.request_update()
    peer = cluster.peer(1)
    for _ in range(30):                             # broker 1 answers every refresh with no brokers
        if client.rebootstraps:
            break
        clock.advance(200)
        client.poll(0)
        if not peer.no_request_pending():
            api, version, corr, _, _ = peer.read_request()
            assert api == METADATA
            peer.respond(METADATA, version, corr, metadata_response(nodes=(1,)) | {"brokers": []})
            poll_until(client, lambda: client.metadata.time_to_next_update(clock.now_ms()) > 0
                       or client.rebootstraps > 0)
    assert client.rebootstraps == 1
    assert clock.now_ms() - T0 >= 2000
    client.close()


def test_rebootstrap_setting_is_checked():
    from kclient.errors import KafkaConfigurationError
    with pytest.raises(KafkaConfigurationError, match="metadata.recovery.strategy"):
        NetworkClientConfig.of({"bootstrap.servers": "b:1", "metadata.recovery.strategy": "sometimes"})
    assert NetworkClientConfig.of({"bootstrap.servers": "b:1"}).rebootstrap is True      # Java 4.0's default


# ---------------------------------------------------------------------- epochs per topic id
def _topic(tid, epoch, leader=1):
    return {"error_code": 0, "name": "t", "topic_id": tid, "is_internal": False, "partitions": [
        {"error_code": 0, "partition_index": 0, "leader_id": leader, "leader_epoch": epoch,
         "replica_nodes": [leader], "isr_nodes": [leader], "offline_replicas": []}]}


def test_a_recreated_topic_starts_its_leader_epochs_again():
    import uuid
    old, new = uuid.uuid4(), uuid.uuid4()
    md = Metadata()
    md.bootstrap([("b0", 9092)])
    md.add_topics("t")
    md.update(metadata_response(nodes=(1, 2), topics=[_topic(old, 7)]), 1)
    assert md.cluster.leader_epoch(("t", 0)) == 7
    # same topic id, older epoch: stale, the cached leader stays
    md.update(metadata_response(nodes=(1, 2), topics=[_topic(old, 3, leader=2)]), 2)
    assert md.cluster.leader_for(("t", 0)).node_id == 1
    # a new topic id (the topic was recreated, or another cluster after a rebootstrap): accepted
    md.update(metadata_response(nodes=(1, 2), topics=[_topic(new, 0, leader=2)]), 3)
    assert md.cluster.leader_for(("t", 0)).node_id == 2
    assert md.last_seen_leader_epoch(("t", 0)) == 0


# ---------------------------------------------------------------------- leader hints (KIP-951)
def _known(epoch=3):
    md = Metadata()
    md.bootstrap([("b0", 9092)])
    md.add_topics("t")
    md.update(metadata_response(nodes=(1, 2), topics=[_topic(None, epoch, leader=1)]), 1)
    return md


def test_a_leader_hint_with_a_newer_epoch_moves_the_partition_at_once():
    md = _known()
    version = md.update_version
    assert md.update_partition_leaders({("t", 0): (2, 4)}) == {("t", 0)}
    assert md.cluster.leader_for(("t", 0)).node_id == 2 and md.cluster.leader_epoch(("t", 0)) == 4
    assert md.last_seen_leader_epoch(("t", 0)) == 4
    assert md.update_version == version                 # not a metadata answer


def test_a_leader_hint_naming_an_unknown_broker_needs_its_endpoint():
    from kclient.network.metadata import Node
    md = _known()
    assert md.update_partition_leaders({("t", 0): (9, 4)}) == set()
    assert md.cluster.leader_for(("t", 0)).node_id == 1
    assert md.update_partition_leaders({("t", 0): (9, 4)}, [Node(9, "broker9", 9093)]) == {("t", 0)}
    assert md.cluster.leader_for(("t", 0)).address == "broker9:9093"


@pytest.mark.parametrize("hint", [(2, 3), (2, 2), (-1, 9), (2, -1)])
def test_stale_or_empty_leader_hints_are_ignored(hint):
    md = _known(epoch=3)
    before = md.cluster
    assert md.update_partition_leaders({("t", 0): hint}) == set()
    assert md.cluster is before


def test_a_leader_hint_for_an_unknown_partition_is_ignored():
    md = _known()
    assert md.update_partition_leaders({("t", 7): (2, 9), ("other", 0): (2, 9)}) == set()
