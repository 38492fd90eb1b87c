"""Group membership under faults, on librdkafka's mock cluster (3 brokers).

Coordinator moves and injected coordinator errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, REBALANCE_IN_PROGRESS) on Heartbeat, JoinGroup, SyncGroup and
OffsetCommit must be survived, and the member must not lose its assignment for longer than
the fault requires: coordinator errors never revoke anything; a rebalance under the
cooperative protocol keeps the partitions the member still owns.

Members are single-member groups: the mock completes a SyncGroup round as soon as the leader's
assignments arrive, so a follower whose SyncGroup comes later gets INVALID_REQUEST (a mock
quirk; Tansu covers multi-member groups). The member loop is test_coordinator's.
"""
from __future__ import annotations

import time

import pytest

from kclient import errors as Errors
from kclient.group.coordinator import MemberState
from kclient.group.coordinator_channel import coordinator_node_id
from kclient.structs import OffsetAndMetadata, TopicPartition

from test_coordinator import GroupMember, wait_until  # noqa: E402

HEARTBEAT, JOIN_GROUP, SYNC_GROUP, OFFSET_COMMIT, LEAVE_GROUP = 12, 11, 14, 8, 13
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, LOAD_IN_PROGRESS, REBALANCE_IN_PROGRESS = 16, 15, 14, 27
COORDINATOR_ERRORS = [NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, LOAD_IN_PROGRESS]


@pytest.fixture
def mock(mock_faults):
    """The mock cluster with a short initial rebalance delay (group API versions it mis-parses
    are capped by MockCluster.start)."""
    mock_faults.group_initial_rebalance_delay_ms(100)
    yield mock_faults
    for api in (HEARTBEAT, JOIN_GROUP, SYNC_GROUP, OFFSET_COMMIT):
        mock_faults.clear_request_errors(api)
    mock_faults.group_initial_rebalance_delay_ms(3000)


@pytest.fixture
def member(mock, topic_name, group_id):
    mock.create_topic(topic_name, 4)
    mock.wait_for_topic(topic_name, 4)
    made = []

    def _make(**cfg):
        settings = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 200, "retry_backoff_ms": 50,
                    "partition_assignment_strategy": ["cooperative-sticky"], **cfg}
        m = GroupMember(mock.bootstrap, group_id, [topic_name], name=f"mock{len(made)}", **settings)
        made.append(m)
        m.start()
        wait_until(lambda: m.error is not None or (m.stable() and len(m.assigned()) == 4), 30, "the member to join")
        assert m.error is None, m.error
        return m

    yield _make
    for m in made:
        try:
            m.close(3000)
        except Exception:
            pass
    try:
        mock.delete_topic(topic_name)
    except Exception:
        pass


def heartbeat_answered_after(m, t_ms):
    hb = m.coord.heartbeat
    return hb.last_heartbeat_receive_ms is not None and hb.last_heartbeat_receive_ms > t_ms


def requests_of(mock, api):
    return [r for r in mock.get_requests() if r.api_key == api]


def assert_never_revoked(m):
    assert m.error is None, m.error
    assert [k for k, _ in m.listener.events if k in ("revoked", "lost")] == []


def test_coordinator_move_keeps_the_assignment(mock, member, group_id, topic_name):
    m = member()
    old = m.coord.coordinator().node_id
    others = [b for b in (1, 2, 3) if coordinator_node_id(b) != old]
    generation = m.coord.generation()
    moved_at = m.client._clock.now_ms()
    mock.coordinator_set("group", group_id, others[0])
    wait_until(lambda: m.coord.channel.known_node is not None
               and m.coord.channel.known_node.node_id == coordinator_node_id(others[0])
               and heartbeat_answered_after(m, moved_at + 200), 30, "heartbeats to the new coordinator")
    assert m.coord.generation() == generation and m.stable()
    assert m.assigned() == frozenset(TopicPartition(topic_name, p) for p in range(4))
    assert_never_revoked(m)


@pytest.mark.parametrize("errors", [COORDINATOR_ERRORS, [NOT_COORDINATOR, NOT_COORDINATOR, LOAD_IN_PROGRESS]])
def test_heartbeat_coordinator_errors_are_survived(mock, member, errors):
    m = member()
    generation, owned = m.coord.generation(), m.assigned()
    mock.start_request_tracking()
    try:
        mock.push_request_errors(HEARTBEAT, errors)
        pushed_at = m.client._clock.now_ms()
        wait_until(lambda: len(requests_of(mock, HEARTBEAT)) > len(errors)
                   and heartbeat_answered_after(m, pushed_at + 200 * len(errors)), 30,
                   "heartbeats answered again after the errors")
    finally:
        mock.stop_request_tracking()
    assert m.coord.generation() == generation and m.assigned() == owned and m.stable()
    assert_never_revoked(m)


def test_heartbeat_rebalance_in_progress_rejoins_keeping_partitions(mock, member):
    m = member()
    generation, owned = m.coord.generation(), m.assigned()
    mock.push_request_errors(HEARTBEAT, [REBALANCE_IN_PROGRESS])
    wait_until(lambda: m.coord.generation().generation_id > generation.generation_id and m.stable(), 30,
               "the rejoin")
    assert m.assigned() == owned
    assert_never_revoked(m)                          # cooperative: nothing to give up


def test_heartbeat_rebalance_in_progress_eager_revokes_only_for_the_rejoin(mock, member):
    m = member(partition_assignment_strategy=["range"])
    generation, owned = m.coord.generation(), m.assigned()
    mock.push_request_errors(HEARTBEAT, [REBALANCE_IN_PROGRESS])
    wait_until(lambda: m.coord.generation().generation_id > generation.generation_id and m.stable(), 30,
               "the rejoin")
    assert m.assigned() == owned
    kinds = [k for k, _ in m.listener.events]
    assert kinds == ["assigned", "revoked", "assigned"]   # revoked for one rebalance, then back


@pytest.mark.parametrize("api", [JOIN_GROUP, SYNC_GROUP])
def test_join_and_sync_errors_are_survived_during_a_rebalance(mock, member, api):
    m = member()
    generation, owned = m.coord.generation(), m.assigned()
    mock.push_request_errors(api, COORDINATOR_ERRORS + [REBALANCE_IN_PROGRESS])
    m.coord.request_rejoin("test: rebalance under errors")
    wait_until(lambda: m.error is not None or (m.coord.generation().generation_id > generation.generation_id
                                               and m.stable()), 30, "the rebalance to complete")
    assert m.assigned() == owned
    assert_never_revoked(m)


def test_offset_commit_errors_are_retried_and_rebalance_in_progress_fails_the_commit(mock, member, topic_name):
    m = member()
    m.stall()            # commits from this thread: the member's poll loop is parked meanwhile
    tp0 = TopicPartition(topic_name, 0)
    mock.push_request_errors(OFFSET_COMMIT, COORDINATOR_ERRORS)
    m.coord.committer.commit_offsets_sync({tp0: OffsetAndMetadata(42, "meta-42")}, 15_000)
    got = m.coord.committer.fetch_committed_offsets([tp0], 10_000)[tp0]
    assert (got.offset, got.metadata) == (42, "meta-42")

    mock.push_request_errors(OFFSET_COMMIT, [REBALANCE_IN_PROGRESS])
    with pytest.raises(Errors.CommitFailedError):
        m.coord.committer.commit_offsets_sync({tp0: OffsetAndMetadata(43)}, 15_000)
    assert m.coord.rejoin_needed_or_pending()
    generation, owned = m.coord.generation(), m.assigned()
    m.resume()
    wait_until(lambda: m.coord.generation().generation_id > generation.generation_id and m.stable(), 30,
               "the rejoin after the failed commit")
    m.stall()
    m.coord.committer.commit_offsets_sync({tp0: OffsetAndMetadata(44)}, 15_000)
    assert m.coord.committer.fetch_committed_offsets([tp0], 10_000)[tp0].offset == 44
    assert m.assigned() == owned
    assert_never_revoked(m)


def test_coordinator_down_then_back_is_rediscovered(mock, member):
    m = member()
    generation = m.coord.generation()
    node = m.coord.coordinator().node_id
    broker_id = coordinator_node_id(node)          # the mapping is its own inverse
    mock.broker_set_down(broker_id)
    try:
        wait_until(lambda: m.coord.channel.known_node is None or m.coord.state is not MemberState.STABLE, 30,
                   "the member to notice the coordinator is gone")
    finally:
        mock.broker_set_up(broker_id)
    back_at = m.client._clock.now_ms()
    wait_until(lambda: m.stable() and heartbeat_answered_after(m, back_at), 30, "heartbeats again")
    assert m.coord.generation() == generation and len(m.assigned()) == 4
    assert_never_revoked(m)


def test_group_api_versions_the_mock_misparses_are_capped(mock):
    """MockCluster.start caps what librdkafka 2.16's mock advertises but mis-parses
    (SyncGroup v4+, JoinGroup v6+, LeaveGroup v3+): a client negotiates versions it parses."""
    from kclient.network.consumer_network_client import ConsumerNetworkClient
    from kclient.network.network_config import NetworkClientConfig
    with ConsumerNetworkClient(config=NetworkClientConfig.of({"bootstrap.servers": mock.bootstrap})) as cnc:
        cnc.ensure_bootstrapped(10_000)
        node = cnc.least_loaded_node()
        deadline = time.monotonic() + 10
        while not cnc.try_connect(node):
            assert time.monotonic() < deadline, "no connection to the mock"
            cnc.poll(50)
        ranges = cnc.client.broker_api_ranges(node)
        assert (ranges[JOIN_GROUP][1], ranges[SYNC_GROUP][1], ranges[LEAVE_GROUP][1]) == (5, 3, 2)
        assert (cnc.api_version(node, JOIN_GROUP), cnc.api_version(node, LEAVE_GROUP)) == (5, 2)
