"""Two members join a group on a broker that hangs up on group API versions it advertises.

librdkafka's mock cluster (2.16) advertises JoinGroup v0-6 and SyncGroup v0-4 but reads the
flexible v6/v4 bodies in the old layout: kclient's JoinGroup v6 protocols array (compact,
``02 06 72 61 ...`` for one protocol "range") is read as an int32 count of 33,976,929, more
than its limit of 1000, and the connection is closed without an answer. Apache Kafka accepts
the same bytes (test_broker_deviations.py), so the broker is at fault; kclient copes by stepping
one version down after repeated hang-ups (kclient.group.version_fallback). Here the harness's
caps are lifted so the mock advertises its own table, as a new user's mock would.
"""
from __future__ import annotations

import logging
import time

import pytest

from kclient import KafkaConsumer
from kclient.testing.mock_cluster import _MOCK_VERSION_CAPS

from mock_group import MemberPoller  # noqa: E402

JOIN_GROUP, SYNC_GROUP, LEAVE_GROUP = 11, 14, 13
#: What librdkafka 2.16's mock advertises for these (its handler table).
MOCK_OWN_RANGES = {JOIN_GROUP: (0, 6), SYNC_GROUP: (0, 4), LEAVE_GROUP: (0, 4)}


@pytest.fixture
def uncapped_mock(mock_faults):
    for api, (lo, hi) in MOCK_OWN_RANGES.items():
        mock_faults.set_apiversion(api, lo, hi)
    # The default initial rebalance delay (3 s) stays: with a short one the mock completes the
    # SyncGroup round with the leader's request and answers the follower's with INVALID_REQUEST
    # more often (see mock_group).
    yield mock_faults
    for api, hi in _MOCK_VERSION_CAPS.items():
        mock_faults.set_apiversion(api, 0, hi)


def test_two_members_join_when_the_broker_hangs_up_on_flexible_group_requests(
        uncapped_mock, topic_name, group_id, caplog):
    uncapped_mock.create_topic(topic_name, 4)
    uncapped_mock.wait_for_topic(topic_name, 4)
    poller = MemberPoller(uncapped_mock)     # the leader's SyncGroup waits for the follower's
    members = [KafkaConsumer(topic_name, bootstrap_servers=uncapped_mock.bootstrap, group_id=group_id,
                             session_timeout_ms=3000, heartbeat_interval_ms=300, retry_backoff_ms=50,
                             **poller.consumer_settings())
               for _ in range(2)]
    try:
        with caplog.at_level(logging.WARNING, logger="kclient.group.version_fallback"):
            deadline = time.monotonic() + 60
            while True:
                poller.poll(members, 50)
                owned = [m.assignment() for m in members]
                if all(owned) and len(set().union(*owned)) == 4 and sum(map(len, owned)) == 4:
                    break
                assert time.monotonic() < deadline, f"no split of 4 partitions in 60 s: {owned}"
        stepped = [r.getMessage() for r in caplog.records if "JOIN_GROUP v6" in r.getMessage()]
        assert stepped, "kclient should have logged that it stepped down from JoinGroup v6"
        assert "using v5" in stepped[0]
    finally:
        for m in members:
            m.close()
        poller.close()


# ---------------------------------------------------------------------- the rule, one layer
class _SentRequest:
    def __init__(self, version: int) -> None:
        self.api_version = version
        self.send_ms = 0


class _Client:
    """Stands in for ConsumerNetworkClient.send: records the cap and hands back a future."""

    def __init__(self, broker_max: int, broker_min: int = 0) -> None:
        self.broker_max, self.broker_min = broker_max, broker_min
        self.futures = []

    def send(self, node, api_key, body, max_version=None, **_):
        from kclient.network.future import RequestFuture

        class Sent(RequestFuture):   # like RequestFutureCompletionHandler: knows its request
            pass
        f = Sent()
        f.request = _SentRequest(min(self.broker_max, max_version if max_version is not None else 99))
        f.api_version = f.request.api_version
        self.futures.append(f)
        return f

    def broker_api_ranges(self, node):
        return {JOIN_GROUP: (self.broker_min, self.broker_max)}


def test_the_cap_drops_after_two_hang_ups_and_not_for_timeouts_or_answers():
    from kclient import errors as Errors
    from kclient.group.version_fallback import GroupVersionFallback
    from kclient.network.metadata import Node
    node = Node(1, "h", 1)
    client = _Client(broker_max=6, broker_min=5)
    sender = GroupVersionFallback(client, "g")

    def attempt(outcome):
        f = sender.send(node, JOIN_GROUP, {})
        if isinstance(outcome, BaseException):
            f.raise_(outcome)
        else:
            f.complete(outcome)
        return f.api_version

    hang_up = Errors.KafkaConnectionError("closed by the peer")
    assert attempt(hang_up) == 6 and sender.cap(node, JOIN_GROUP) is None
    assert attempt({"error_code": 0}) == 6                      # an answer clears the strike
    assert attempt(hang_up) == 6 and sender.cap(node, JOIN_GROUP) is None
    assert attempt(Errors.KafkaTimeoutError("slow")) == 6       # a timeout is no strike
    assert attempt(hang_up) == 6 and sender.cap(node, JOIN_GROUP) == 5
    assert attempt(hang_up) == 5 and attempt(hang_up) == 5      # never below the broker's minimum
    assert sender.cap(node, JOIN_GROUP) == 5
