"""Where a classic member's LeaveGroup goes, and what close() waits for, when a JoinGroup or
SyncGroup is held by the broker: decided from the requests the network client still has for
the coordinator, not from the futures the member kept (an interrupt between sending a request
and storing its future loses the future, never the request).

No broker: a consumer whose network client only queues; the metadata names broker 1.
"""
from __future__ import annotations

import pytest

from kclient.clock import FakeClock
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.group.coordinator import HEARTBEAT, JOIN_GROUP, SYNC_GROUP
from kclient.group.coordinator_channel import coordinator_node_id
from kclient.network.metadata import Node


@pytest.fixture
def member():
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9", api_version=(3, 0), group_id="g",
                             enable_auto_commit=False, clock=FakeClock())
    consumer._client.metadata.update({
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9, "rack": None}],
        "cluster_id": "c", "controller_id": 1, "topics": []}, 0)
    coordinator = consumer._coordinator
    node = Node(coordinator_node_id(1), "127.0.0.1", 9)
    yield coordinator, node
    consumer._client.poll = lambda *a, **k: None
    consumer.close(autocommit=False, timeout_ms=0)


@pytest.mark.parametrize("api", [JOIN_GROUP, SYNC_GROUP])
def test_a_held_request_whose_future_was_lost_still_sends_leave_around_it(member, api):
    coordinator, node = member
    assert coordinator._leave_route(node) == node
    coordinator.channel.send_group_request(node, api, {})   # its future dropped, as by an interrupt
    assert coordinator._join_future is None and coordinator._sync_future is None
    route = coordinator._leave_route(node)
    assert route.node_id == 1 and route != node


def test_other_coordinator_requests_leave_the_route_alone(member):
    coordinator, node = member
    coordinator.channel.send_group_request(node, HEARTBEAT, {})
    assert coordinator._held_requests(node) == 0
    assert coordinator._leave_route(node) == node


def test_held_requests_counts_queued_ones_per_node(member):
    coordinator, node = member
    coordinator.channel.send_group_request(node, JOIN_GROUP, {})
    coordinator.channel.send_group_request(node, SYNC_GROUP, {})
    assert coordinator._held_requests(node) == 2
    assert coordinator._held_requests(Node(coordinator_node_id(2), "127.0.0.1", 9)) == 0
