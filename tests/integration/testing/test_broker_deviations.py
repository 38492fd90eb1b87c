"""The stand-in brokers' deviations, checked on Apache Kafka where no workaround is needed.

The librdkafka mock cluster is capped in the harness at SyncGroup v3, JoinGroup v5 and
LeaveGroup v2 because it mis-parses newer versions. Here kclient's own codec sends each of
those requests at every version Apache Kafka and kclient share, over a raw connection, and
the reference broker accepts every one: the requests are right and the caps are the mock's.
(The Tansu deviations are checked where they matter: end offsets and timestamps in
test_producer_admin/test_spark_planning, commit metadata and a departing leader in
test_coordinator, aborted transactions in test_consumer.)
"""
from __future__ import annotations

import pytest

from kclient.group.classic_embedded_protocol import Assignment, Subscription, serialize_assignment, serialize_subscription
from kclient.protocol import CLIENT_VERSIONS, ApiKey, decode_response, encode_request
from kclient.structs import TopicPartition
from kclient.testing import _wire
from kclient.testing.mock_cluster import _MOCK_VERSION_CAPS

MEMBER_ID_REQUIRED = 79
COORDINATOR_NOT_READY = (14, 15, 16)


def _call(conn: _wire.RawConnection, api: ApiKey, version: int, body: dict) -> dict:
    conn.send(encode_request(api, version, conn.next_correlation_id(), "kclient-deviations", body))
    return decode_response(api, version, conn.recv_frame())


def _versions_above_cap(kafka, api: ApiKey) -> list[int]:
    with _wire.RawConnection.to(kafka.bootstrap) as conn:
        _, ranges = _wire.api_versions(conn)
    top = min(ranges[api][1], CLIENT_VERSIONS[api][1])
    return list(range(_MOCK_VERSION_CAPS[api] + 1, top + 1))


def _join(conn, version: int, group: str, topic: str, member_id: str = "") -> dict:
    body = {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": serialize_subscription(Subscription((topic,)))}]}
    if version >= 8:
        body["reason"] = "deviation check"
    return _call(conn, ApiKey.JOIN_GROUP, version, body)


def _find_coordinator(conn, group: str) -> None:
    """Until the (single) node coordinates ``group``: the first lookup creates the offsets topic."""
    def found():
        answer = _call(conn, ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        return answer["coordinators"][0]["error_code"] == 0
    _wire.wait_until(found, 60, f"a coordinator for {group!r}", interval=0.1)


def _joined_member(conn, join_version: int, group: str, topic: str) -> dict:
    _find_coordinator(conn, group)
    answers: list[dict] = []

    def answered():
        # Right after FindCoordinator names the node, its offsets partition may still be
        # loading: NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE are retried.
        answers.append(_join(conn, join_version, group, topic))
        return answers[-1]["error_code"] not in COORDINATOR_NOT_READY
    _wire.wait_until(answered, 60, f"group {group!r} to be loaded on its coordinator", interval=0.1)
    answer = answers[-1]
    if answer["error_code"] == MEMBER_ID_REQUIRED:    # v4+: KIP-394 asks for a second join
        answer = _join(conn, join_version, group, topic, answer["member_id"])
    assert answer["error_code"] == 0, answer
    return answer


@pytest.fixture
def topic(broker, create_topic, topic_name):
    return create_topic(broker, topic_name, 2)


def test_join_group_above_the_mock_cap(broker, topic, group_id):
    versions = _versions_above_cap(broker, ApiKey.JOIN_GROUP)
    assert versions, "Apache Kafka should speak JoinGroup above the mock's cap"
    for v in versions:
        with _wire.RawConnection.to(broker.bootstrap) as conn:
            answer = _joined_member(conn, v, f"{group_id}-{v}", topic)
            assert answer["leader"] == answer["member_id"]
            if v >= 7:
                assert answer["protocol_name"] == "range"


def test_sync_and_leave_group_above_the_mock_cap(broker, topic, group_id):
    sync_versions = _versions_above_cap(broker, ApiKey.SYNC_GROUP)
    leave_versions = _versions_above_cap(broker, ApiKey.LEAVE_GROUP)
    assert sync_versions and leave_versions
    mine = Assignment((TopicPartition(topic, 0), TopicPartition(topic, 1)))
    for sync_v in sync_versions:
        for leave_v in leave_versions:
            group = f"{group_id}-{sync_v}-{leave_v}"
            with _wire.RawConnection.to(broker.bootstrap) as conn:
                joined = _joined_member(conn, 5, group, topic)
                member = joined["member_id"]
                body = {"group_id": group, "generation_id": joined["generation_id"], "member_id": member,
                        "group_instance_id": None,
                        "assignments": [{"member_id": member, "assignment": serialize_assignment(mine)}]}
                if sync_v >= 5:
                    body.update(protocol_type="consumer", protocol_name="range")
                synced = _call(conn, ApiKey.SYNC_GROUP, sync_v, body)
                assert synced["error_code"] == 0, (sync_v, synced)
                assert bytes(synced["assignment"]) == serialize_assignment(mine)
                left = _call(conn, ApiKey.LEAVE_GROUP, leave_v,
                             {"group_id": group, "members": [{"member_id": member, "group_instance_id": None,
                                                              "reason": "deviation check"}]})
                assert left["error_code"] == 0, (leave_v, left)
                assert [m["error_code"] for m in left["members"]] == [0]
