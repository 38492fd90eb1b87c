"""Share groups (KIP-932) against Apache Kafka 4.4: membership through ShareGroupHeartbeat."""
from __future__ import annotations

import time

import pytest

from kclient.config import ConsumerConfig
from kclient.network.consumer_network_client import ConsumerNetworkClient
from kclient.network.network_config import NetworkClientConfig
from kclient.protocol import ApiKey
from kclient.share.coordinator import ShareCoordinator
from kclient.share.heartbeat_loop import ShareHeartbeatLoop
from kclient.share.membership import ShareMemberState
from kclient.structs import TopicPartition


class ShareMember:
    """A share member's membership machinery, polled by the test as an application would."""

    def __init__(self, bootstrap: str, group_id: str, topics: list[str]):
        config = ConsumerConfig({"bootstrap.servers": bootstrap, "group.id": group_id,
                                 "client.id": "share-member"})
        self.client = ConsumerNetworkClient(config=NetworkClientConfig.of(config))
        self.client.metadata.set_topics(topics)
        self.heartbeats_answered = 0
        send = self.client.send

        def counting_send(node, api, body, *args, **kwargs):
            future = send(node, api, body, *args, **kwargs)
            if api == ApiKey.SHARE_GROUP_HEARTBEAT:
                future.add_both(self._answered)
            return future

        self.client.send = counting_send    # type: ignore[method-assign]
        self.coord = ShareCoordinator(self.client, group_id, retry_backoff_ms=100)
        self.loop = ShareHeartbeatLoop(self.coord)
        self.coord.set_driver(self.loop)
        self.coord.subscribe(topics)
        self.loop.start()

    def _answered(self, _outcome) -> None:
        self.heartbeats_answered += 1

    def poll_until(self, predicate, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.coord.raise_if_fatal()
            if predicate():
                return True
            self.client.poll(100)
        return predicate()

    def close(self) -> None:
        try:
            self.coord.close(5000)
        finally:
            self.client.close()


def test_member_joins_and_gets_every_partition_of_its_topic(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 3)
    member = ShareMember(kafka.bootstrap, group_id, [topic_name])
    try:
        want = {TopicPartition(topic_name, p) for p in range(3)}
        assert member.poll_until(lambda: member.coord.assignment() == want, 60), (
            f"assignment {member.coord.assignment()} in state {member.coord.membership.state}")
        m = member.coord.membership
        assert m.state is ShareMemberState.STABLE and m.member_epoch > 0
        epoch = m.member_epoch
        assert m.heartbeat_interval_ms == 500        # the harness's group.share.heartbeat.interval.ms
        # heartbeats on the broker's interval keep the member in the group with its assignment
        answered = member.heartbeats_answered
        assert member.poll_until(lambda: member.heartbeats_answered >= answered + 2, 10)
        assert m.state is ShareMemberState.STABLE and m.member_epoch >= epoch
        assert member.coord.assignment() == want
    finally:
        member.close()
    assert member.coord.membership.state is ShareMemberState.UNSUBSCRIBED


@pytest.mark.parametrize("members", [2])
def test_members_of_one_share_group_all_get_assignments(kafka, create_topic, topic_name, group_id, members):
    create_topic(kafka, topic_name, 2)
    group = [ShareMember(kafka.bootstrap, group_id, [topic_name]) for _ in range(members)]
    try:
        every = {TopicPartition(topic_name, p) for p in range(2)}
        for member in group:
            assert member.poll_until(lambda m=member: bool(m.coord.assignment())
                                     and m.coord.assignment() <= every, 60)
        # together they cover the topic
        assert group[0].poll_until(lambda: set().union(*(m.coord.assignment() for m in group)) == every, 30)
        ids = {m.coord.membership.member_id for m in group}
        assert len(ids) == members
    finally:
        for member in group:
            member.close()
