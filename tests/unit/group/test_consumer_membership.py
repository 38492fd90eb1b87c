"""The KIP-848 member state machine (kclient.group.consumer_membership), answer by answer."""
from __future__ import annotations

import uuid

from kclient.group.consumer_membership import ConsumerMembership, MemberState

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def answer(epoch: int, assignment=None, error: int = 0, interval: int = 500) -> dict:
    a = None if assignment is None else {"topic_partitions": [{"topic_id": t, "partitions": ps}
                                                             for t, ps in assignment.items()]}
    return {"error_code": error, "error_message": None, "member_id": None, "member_epoch": epoch,
            "heartbeat_interval_ms": interval, "assignment": a}


def joined(**kw) -> ConsumerMembership:
    m = ConsumerMembership(group_id="g", **kw)
    m.subscribe()
    assert m.state is MemberState.JOINING and m.member_epoch == 0
    return m


def test_join_reconcile_acknowledge_stable():
    m = joined()
    body = m.heartbeat_body(["a"], None)
    assert (body["member_epoch"], body["subscribed_topic_names"], body["topic_partitions"]) == (0, ["a"], [])
    assert m.on_response(answer(3, {T1: [0, 1]}, interval=700)) is None
    assert (m.state, m.member_epoch, m.heartbeat_interval_ms) == (MemberState.RECONCILING, 3, 700)
    assert m.target == {T1: frozenset({0, 1})}
    m.reconciled(m.target)
    assert m.state is MemberState.ACKNOWLEDGING
    body = m.heartbeat_body(["a"], None)
    assert body["member_epoch"] == 3 and body["topic_partitions"] == [{"topic_id": T1, "partitions": [0, 1]}]
    m.sent()
    assert m.state is MemberState.STABLE and m.in_group()
    # The same target again: nothing to reconcile.
    m.on_response(answer(3, {T1: [0, 1]}))
    assert m.state is MemberState.STABLE
    # A new target: reconcile again.
    m.on_response(answer(4, {T1: [0], T2: [5]}))
    assert m.state is MemberState.RECONCILING and m.target == {T1: frozenset({0}), T2: frozenset({5})}


def test_regex_subscription_sends_the_regex_instead_of_names():
    m = joined(server_assignor="uniform")
    body = m.heartbeat_body(["x"], "topic-.*")
    assert body["subscribed_topic_names"] is None and body["subscribed_topic_regex"] == "topic-.*"
    assert body["server_assignor"] == "uniform"


def test_fencing_loses_the_partitions_and_rejoins_at_epoch_zero():
    for code in (110, 25):   # FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID
        m = joined()
        m.on_response(answer(5, {T1: [0]}))
        m.reconciled(m.target)
        m.sent()
        member_id = m.member_id
        err = m.on_response(answer(0, error=code))
        assert err is not None and err.errno == code
        assert m.state is MemberState.FENCED and not m.in_group()
        # A late answer to a heartbeat sent before the fencing must not bring the old epoch back.
        assert m.on_response(answer(5, {T1: [0]})) is None and m.state is MemberState.FENCED
        m.rejoin()
        assert (m.state, m.member_epoch, m.owned, m.member_id) == (MemberState.JOINING, 0, {}, member_id)


def test_leave_epochs_dynamic_and_static():
    m = joined()
    m.on_response(answer(2, {}))
    assert m.heartbeat_body([], None, leaving=True)["member_epoch"] == -1
    s = joined(instance_id="i-1")
    body = s.heartbeat_body([], None, leaving=True)
    assert body["member_epoch"] == -2 and body["instance_id"] == "i-1"


def test_retriable_and_fatal_errors():
    m = joined()
    err = m.on_response(answer(0, error=14))      # COORDINATOR_LOAD_IN_PROGRESS: retry
    assert err is not None and m.state is MemberState.JOINING and m.fatal_error is None
    err = m.on_response(answer(0, error=112))     # UNSUPPORTED_ASSIGNOR: nothing to retry
    assert m.state is MemberState.FATAL and m.fatal_error is err


def test_answers_after_leaving_are_ignored():
    m = joined()
    m.on_response(answer(2, {T1: [0]}))
    m.prepare_leaving()
    assert m.on_response(answer(3, {T1: [0, 1]})) is None
    assert m.state is MemberState.PREPARE_LEAVING and m.member_epoch == 2
