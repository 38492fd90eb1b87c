"""group.protocol=consumer on Apache Kafka: a member the broker fenced, or one that stopped
polling, reports its partitions lost, rejoins at epoch 0 and gets an assignment again; commits
carry the member epoch.

The broker fences a member whose heartbeats stop for group.consumer.session.timeout.ms (6 s
in the harness): here the member's heartbeat thread is stopped and the test waits, on the
member's own state with a deadline, until the broker has reassigned the partitions to another
member (the GIL-free pacemaker, which would keep heartbeating, is closed too); the fenced member's next heartbeat answers UNKNOWN_MEMBER_ID (or FENCED_MEMBER_EPOCH).
"""
from __future__ import annotations

import time

from kclient import KafkaConsumer
from kclient.group.consumer_membership import MemberState
from kclient.structs import OffsetAndMetadata, TopicPartition


class Recorder:
    def __init__(self):
        self.events: list[tuple[str, frozenset]] = []

    def on_partitions_revoked(self, parts):
        self.events.append(("revoked", frozenset(parts)))

    def on_partitions_assigned(self, parts):
        self.events.append(("assigned", frozenset(parts)))

    def on_partitions_lost(self, parts):
        self.events.append(("lost", frozenset(parts)))


def poll_until(consumers, pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        for c in consumers:
            c.poll(timeout_ms=50)


def member(kafka, group_id, topic, listener=None, **extra) -> KafkaConsumer:
    c = KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group_id, group_protocol="consumer",
                      auto_offset_reset="earliest", enable_auto_commit=False, **extra)
    c.subscribe([topic], listener=listener)
    return c


def test_fenced_member_reports_lost_and_rejoins(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 2)
    everything = {TopicPartition(topic_name, p) for p in range(2)}
    rec = Recorder()
    a = member(kafka, group_id, topic_name, rec)
    b = member(kafka, group_id, topic_name)
    try:
        poll_until([a, b], lambda: a.assignment() and b.assignment(), 60, "two members to split")
        mine = a.assignment()
        coord = a._coordinator
        epoch = coord.membership.member_epoch
        a.commit({tp: OffsetAndMetadata(0) for tp in mine})   # with the member epoch as generation
        link = coord.heartbeat_driver                         # the GIL-free pacemaker's link and its loop
        assert link is not None and link.engaged
        link.python_driver.close(5)                           # a's heartbeats stop: the broker fences it
        coord._driver = None                                  # a's next poll starts a new driver
        link.close()                                          # ... the pacemaker's too
        poll_until([b], lambda: b.assignment() == everything, 60, "the broker to give b everything")
        poll_until([a, b], lambda: bool(a.assignment()) and not a.assignment() & b.assignment(), 60,
                   "a to rejoin and get partitions again")
        assert ("lost", frozenset(mine)) in rec.events
        assert coord.membership.state in (MemberState.STABLE, MemberState.ACKNOWLEDGING)
        assert coord.membership.member_epoch > epoch
    finally:
        a.close()
        b.close()


def test_member_that_stops_polling_leaves_then_rejoins_with_its_partitions_lost(
        kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 2)
    everything = {TopicPartition(topic_name, p) for p in range(2)}
    rec = Recorder()
    a = member(kafka, group_id, topic_name, rec, max_poll_interval_ms=1500)
    try:
        poll_until([a], lambda: a.assignment() == everything, 60, "a to own everything")
        membership = a._coordinator.membership
        deadline = time.monotonic() + 30
        while membership.state is not MemberState.FENCED:   # the heartbeat thread leaves on its own
            assert time.monotonic() < deadline, "the member did not leave after max.poll.interval.ms"
            with a._coordinator._cond:
                a._coordinator._cond.wait(0.1)
        poll_until([a], lambda: ("lost", frozenset(everything)) in rec.events and a.assignment() == everything,
                   60, "a to report its partitions lost and rejoin")
        assert rec.events[-2:] == [("lost", frozenset(everything)), ("assigned", frozenset(everything))]
    finally:
        a.close()


def test_server_assignor_is_used_and_an_unknown_one_fails_loudly(kafka, create_topic, topic_name, group_id):
    import pytest

    from kclient import errors as Errors
    create_topic(kafka, topic_name, 4)
    everything = {TopicPartition(topic_name, p) for p in range(4)}
    a = member(kafka, group_id, topic_name, group_remote_assignor="range")
    b = member(kafka, group_id, topic_name, group_remote_assignor="range")
    try:
        poll_until([a, b], lambda: a.assignment() and b.assignment()
                   and a.assignment() | b.assignment() == everything, 60, "two members to split with range")
        # The range assignor gives each member a contiguous block of partitions.
        assert sorted({tp.partition for tp in a.assignment()} | {tp.partition for tp in b.assignment()}) == [0, 1, 2, 3]
        assert {frozenset(tp.partition for tp in c.assignment()) for c in (a, b)} == {frozenset({0, 1}),
                                                                                       frozenset({2, 3})}
    finally:
        a.close()
        b.close()
    bad = member(kafka, group_id + "-bad", topic_name, group_remote_assignor="no-such-assignor")
    try:
        with pytest.raises(Errors.UnsupportedAssignorError):
            poll_until([bad], lambda: False, 30, "UNSUPPORTED_ASSIGNOR to be raised")
    finally:
        bad.close()
