"""Consumer groups end to end, once per group protocol: classic (JoinGroup/SyncGroup) and consumer (KIP-848).

Every test runs with ``group_protocol`` = classic and consumer on Apache Kafka 4.x (where the
harness sets group.consumer.session.timeout.ms=6000 and heartbeat 500 ms; classic members ask
for the same timing themselves), and classic on librdkafka's mock cluster. The mock is not run
with the consumer protocol: librdkafka 2.16's mock aborts (an assertion in its
validate_subscription, "SubscribedTopicNames == NULL iff SubscribedTopicRegex is null") on a
ConsumerGroupHeartbeat that names topics and leaves the regex null, which is what Kafka's
ConsumerGroupHeartbeatRequest.json allows and Apache Kafka accepts.

Members are real KafkaConsumers, polled in turn from the test thread on Kafka and all at once
(one thread each) on the mock (see mock_group); each keeps its membership alive between polls
from its own heartbeat thread. The SIGKILL case runs one member in a child process. Every wait
is a condition with a deadline.
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid

import pytest

from kclient import KafkaConsumer, KafkaProducer
from kclient import errors as Errors
from kclient.structs import TopicPartition

from concurrent_runs import run_at_once
from mock_group import JOIN_GROUP, MemberPoller, is_mock  # noqa: E402
from repo_paths import REPO

#: (broker fixture, group protocol)
CASES = [pytest.param(("kafka", "classic"), id="kafka-classic"),
         pytest.param(("kafka", "consumer"), id="kafka-consumer"),
         pytest.param(("mock", "classic"), id="mock-classic")]

#: Classic members choose their timing; consumer-protocol members get it from the broker.
CLASSIC_TIMING = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}
#: The mock ends a rebalance round that waits for a member after the session timeout: a
#: shorter one there keeps its rounds short (the pacemaker heartbeats without the GIL).
MOCK_CLASSIC_TIMING = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 300}


#: librdkafka 2.16's mock answers a SyncGroup that arrives after the leader's has completed the
#: round with INVALID_REQUEST (rd_kafka_mock_cgrp_classic_check_state: SyncGroup is not allowed
#: in state UP; Kafka answers it with the member's assignment). Members polls through
#: mock_group.MemberPoller, which makes the leader's SyncGroup wait for the followers'. A member
#: in a second process (the SIGKILL case) is out of its reach.
MOCK_LATE_SYNC = "the mock refuses a follower's late SyncGroup with INVALID_REQUEST (Kafka answers it)"
#: The mock answers an OffsetCommit of the current generation with REBALANCE_IN_PROGRESS while
#: the group is JOINING (check_state allows only JoinGroup/LeaveGroup there); Kafka accepts it
#: while preparing a rebalance, which is when a member commits before giving partitions up.
MOCK_JOINING_COMMIT = "the mock refuses the commit made before a rebalance (Kafka accepts it)"
MOCK_LATE_SYNC_TESTS = {"test_killed_member_loses_its_partitions_after_the_session_timeout"}
#: A static member's restart takes the mock two rebalance rounds (6-11 s here with 3 s
#: sessions; Kafka hands the partitions back without a rebalance): the suite's time is spent
#: on Kafka's run of it.
MOCK_SLOW = {"test_static_member_restart_keeps_its_partitions":
             "the mock spends two rebalance rounds (6-11 s) on a static member's restart; run on Kafka"}


@pytest.fixture(params=CASES)
def setup(request):
    kind, protocol = request.param
    if kind == "mock" and request.node.originalname in MOCK_LATE_SYNC_TESTS:
        pytest.skip(MOCK_LATE_SYNC)
    if kind == "mock" and request.node.originalname in MOCK_SLOW:
        pytest.skip(MOCK_SLOW[request.node.originalname])
    if kind == "mock" and request.node.originalname == "test_every_record_is_read_once_across_a_hand_over":
        pytest.skip(MOCK_JOINING_COMMIT)
    if kind == "kafka":
        return request.getfixturevalue("kafka"), protocol
    # The mock waits group_initial_rebalance_delay_ms (3 s by default) before a new group's
    # first round: 500 ms still gathers members that join together, for less waiting.
    mock = request.getfixturevalue("mock_faults")
    mock.group_initial_rebalance_delay_ms(500)
    request.addfinalizer(lambda: mock.group_initial_rebalance_delay_ms(3000))
    return mock, protocol


def settings(protocol: str, **extra) -> dict:
    base = {"group_protocol": protocol, "auto_offset_reset": "earliest", "enable_auto_commit": False,
            "retry_backoff_ms": 100, "metadata_max_age_ms": 1000}
    if protocol == "classic":
        base.update(CLASSIC_TIMING)
    base.update(extra)
    return base


class Members:
    """KafkaConsumers of one group, closed at the end of the test."""

    def __init__(self, cluster, group_id: str, protocol: str) -> None:
        self.cluster, self.group_id, self.protocol = cluster, group_id, protocol
        self.all: list[KafkaConsumer] = []
        self.records: dict[int, list] = {}
        self.poller = MemberPoller(cluster)

    def add(self, topics=(), pattern: str | None = None, **extra) -> KafkaConsumer:
        if self.poller.on_mock and self.protocol == "classic":
            extra = {**MOCK_CLASSIC_TIMING, **extra}
        c = KafkaConsumer(bootstrap_servers=self.cluster.bootstrap, group_id=self.group_id,
                          **settings(self.protocol, **{**self.poller.consumer_settings(), **extra}))
        if pattern is not None:
            c.subscribe(pattern=pattern)
        else:
            c.subscribe(list(topics))
        self.all.append(c)
        self.records[id(c)] = []
        return c

    def live(self) -> list[KafkaConsumer]:
        return [c for c in self.all if not c._closed]

    def poll_all(self, commit: bool = False) -> None:
        live = self.live()
        for c, got in zip(live, self.poller.poll(live, 50)):
            for recs in got.values():
                self.records[id(c)].extend((r.topic, r.partition, r.offset) for r in recs)
            if commit and got:
                try:
                    c.commit()
                except Errors.CommitFailedError:
                    # A rebalance began: the coordinator commits what was consumed before it
                    # gives a partition up (auto-commit), and the next poll completes it.
                    pass

    def wait(self, pred, timeout: float, what: str, commit: bool = False) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}: " + \
                repr([sorted(c.assignment()) for c in self.live()])
            self.poll_all(commit)

    def close(self) -> None:
        for c in self.live():
            try:
                c.close()
            except Exception:
                pass
        self.poller.close()


@pytest.fixture
def members(setup, group_id, create_topic):
    # After create_topic, so torn down before it: members close (and auto-commit) while their
    # topics still exist.
    cluster, protocol = setup
    m = Members(cluster, group_id, protocol)
    yield m
    m.close()


def parts(topic: str, n: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


def split(consumers, everything: set) -> bool:
    """Each consumer owns something, nothing twice, everything once."""
    owned = [c.assignment() for c in consumers]
    return all(owned) and sum(map(len, owned)) == len(everything) and set().union(*owned) == everything


@pytest.mark.parametrize("n", [2, 3])
def test_members_split_the_partitions(setup, members, create_topic, topic_name, n):
    cluster, _ = setup
    create_topic(cluster, topic_name, 6)
    for _ in range(n):
        members.add([topic_name])
    members.wait(lambda: split(members.live(), parts(topic_name, 6)), 60, f"{n} members to split 6 partitions")


def test_closing_member_hands_its_partitions_over(setup, members, create_topic, topic_name):
    cluster, _ = setup
    create_topic(cluster, topic_name, 4)
    a, b = members.add([topic_name]), members.add([topic_name])
    members.wait(lambda: split([a, b], parts(topic_name, 4)), 60, "two members to split")
    a.close()
    members.wait(lambda: b.assignment() == parts(topic_name, 4), 30, "the survivor to take everything")


def test_members_recover_when_the_mock_stalls_for_longer_than_a_session(mock_faults, create_topic, topic_name, group_id):
    """The mock's process stopped (SIGSTOP) for longer than the session timeout while a third
    member joins: the mock then drops members whose JoinGroup or SyncGroup it held, leaving
    their connections blocked (see mock_group). Their requests time out, the members
    reconnect and rejoin, and the three split the partitions. (Before MOCK_REQUEST_TIMEOUTS, a
    member waited on its JoinGroup for max.poll.interval.ms, five minutes: a clean-clone run
    failed with one member empty for a minute.)"""
    mock_faults.group_initial_rebalance_delay_ms(500)
    members = Members(mock_faults, group_id, "classic")
    # Half of MOCK_REQUEST_TIMEOUTS: the newcomer's JoinGroup, held on the connection the mock
    # leaves blocked, times out 10 s after it was sent rather than 15 s (both well past the
    # stall, so the members still recover only through the timeout and a new connection).
    timeouts = {"request_timeout_ms": 5000, "max_poll_interval_ms": 5000}
    try:
        create_topic(mock_faults, topic_name, 6)
        first = [members.add([topic_name], **timeouts) for _ in range(2)]
        members.wait(lambda: split(first, parts(topic_name, 6)), 60, "two members to split 6 partitions")
        joins = sum(1 for r in mock_faults.get_requests() if r.api_key == JOIN_GROUP)
        members.add([topic_name], **timeouts)
        # Stop the mock once it holds the newcomer's JoinGroup (its connection is blocked then).
        members.wait(lambda: sum(1 for r in mock_faults.get_requests() if r.api_key == JOIN_GROUP) > joins,
                     30, "the newcomer's JoinGroup")
        os.kill(mock_faults.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        stall_s = MOCK_CLASSIC_TIMING["session_timeout_ms"] / 1000 + 1.5
        try:
            # The members keep polling (and heartbeating into the void) through the stall,
            # which ends once both earlier members gave the silent coordinator up and the
            # mock's view of every member is older than its session by a margin (its session
            # check runs once a second).
            members.wait(lambda: all(c._coordinator.coordinator_unknown() for c in first)
                         and time.monotonic() - stopped >= stall_s,
                         30, "the earlier members to give the stopped coordinator up")
        finally:
            os.kill(mock_faults.pid, signal.SIGCONT)
        members.wait(lambda: split(members.live(), parts(topic_name, 6)), 60, "3 members to split after the stall")
    finally:
        members.close()
        mock_faults.group_initial_rebalance_delay_ms(3000)


_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from kclient import KafkaConsumer
c = KafkaConsumer(sys.argv[4], bootstrap_servers=sys.argv[2], group_id=sys.argv[3], **json.loads(sys.argv[5]))
last = None
while True:
    c.poll(timeout_ms=100)
    now = sorted(p.partition for p in c.assignment())
    if now != last:
        print(json.dumps(now), flush=True)
        last = now
"""


def _killed_member(cluster, protocol: str, members: Members, create_topic, topic_name: str) -> None:
    create_topic(cluster, topic_name, 4)
    repo = str(REPO)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, repo, cluster.bootstrap, members.group_id, topic_name,
                              json.dumps(settings(protocol))], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        survivor = members.add([topic_name])
        child_parts: set = set()
        buf = b""

        def settled() -> bool:
            nonlocal buf, child_parts
            r, _, _ = select.select([child.stdout], [], [], 0)
            if r:
                chunk = os.read(child.stdout.fileno(), 65536)
                assert chunk, f"child exited with {child.wait(5)}: {child.stderr.read().decode()[-2000:]}"
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    child_parts = {TopicPartition(topic_name, p) for p in json.loads(line)}
            mine = survivor.assignment()
            return bool(child_parts and mine) and not mine & child_parts and mine | child_parts == parts(topic_name, 4)

        members.wait(settled, 60, "the child and the survivor to split")
        child.send_signal(signal.SIGKILL)      # no leave: only the session timeout tells the broker
        child.wait(10)
        members.wait(lambda: survivor.assignment() == parts(topic_name, 4), 60,
                     "the survivor to own everything after the session timeout")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        child.stdout.close()
        child.stderr.close()


def _regex_picks_up_a_new_topic(cluster, protocol: str, members: Members, create_topic, topic_name: str) -> None:
    first, second = f"{topic_name}-a", f"{topic_name}-b"
    create_topic(cluster, first, 2)
    c = members.add(pattern=re.escape(topic_name) + r"-.*")
    members.wait(lambda: c.assignment() == parts(first, 2), 60, "the pattern's first topic")
    create_topic(cluster, second, 2)
    # Kafka refreshes a consumer group's regex subscriptions on its own schedule; the classic
    # member re-matches on each metadata refresh (metadata.max.age.ms=1000 here).
    members.wait(lambda: c.assignment() == parts(first, 2) | parts(second, 2), 90, "the new topic to be assigned")


def _on_kafka(kafka, protocol: str, scenario, name: str) -> None:
    """A scenario with a group and topics of its own, deleted after it."""
    tag = f"{name}-{protocol}-{uuid.uuid4().hex[:8]}"
    members = Members(kafka, f"g-{tag}", protocol)
    made: list[str] = []

    def create_topic(cluster, topic: str, partitions: int) -> None:
        cluster.create_topic(topic, partitions)
        made.append(topic)
        cluster.wait_for_topic(topic, partitions)
    try:
        scenario(kafka, protocol, members, create_topic, f"t-{tag}")
    finally:
        members.close()
        for topic in made:
            try:
                kafka.delete_topic(topic)
            except Exception:   # memory only: the session broker keeps fewer topics
                pass


@pytest.fixture(scope="module")
def kafka_waits(kafka):
    """On Kafka, the scenarios that wait out a session timeout (a killed member) or Kafka's
    regex refresh (at most every 10 s, fixed in the broker) run at the same time, per group
    protocol, rather than one after another; each test below checks its own scenario."""
    scenarios = {"killed": _killed_member, "regex": _regex_picks_up_a_new_topic}
    return run_at_once({f"{name}-{protocol}": (lambda n=name, p=protocol, s=scenario: _on_kafka(kafka, p, s, n))
                        for name, scenario in scenarios.items() for protocol in ("classic", "consumer")})


def test_killed_member_loses_its_partitions_after_the_session_timeout(setup, request):
    cluster, protocol = setup           # (not on the mock: MOCK_LATE_SYNC)
    request.getfixturevalue("kafka_waits").check(f"killed-{protocol}")


def test_regex_subscription_picks_up_a_new_topic(setup, request, members, create_topic, topic_name):
    cluster, protocol = setup
    if is_mock(cluster):
        _regex_picks_up_a_new_topic(cluster, protocol, members, create_topic, topic_name)
    else:
        request.getfixturevalue("kafka_waits").check(f"regex-{protocol}")


def test_static_member_restart_keeps_its_partitions(setup, members, create_topic, topic_name):
    cluster, _ = setup
    create_topic(cluster, topic_name, 4)
    a = members.add([topic_name], group_instance_id="static-a")
    b = members.add([topic_name], group_instance_id="static-b")
    members.wait(lambda: split([a, b], parts(topic_name, 4)), 60, "two static members to split")
    kept, others = a.assignment(), b.assignment()
    a.close()
    a2 = members.add([topic_name], group_instance_id="static-a")
    members.wait(lambda: a2.assignment() == kept, 30, "the restarted static member to get its partitions back")
    assert b.assignment() == others
    # Within the session timeout nothing moved: b never owned a's partitions.


def test_every_record_is_read_once_across_a_hand_over(setup, members, create_topic, topic_name):
    cluster, _ = setup
    create_topic(cluster, topic_name, 4)
    total = 400
    with KafkaProducer(bootstrap_servers=cluster.bootstrap) as producer:
        for i in range(total):
            producer.send(topic_name, value=b"%d" % i, partition=i % 4)
        producer.flush(30)
    # Auto-commit on (rarely, by time): what is consumed is committed before a partition is revoked.
    once = {"max_poll_records": 20, "enable_auto_commit": True, "auto_commit_interval_ms": 60000}
    a = members.add([topic_name], **once)
    members.wait(lambda: len(members.records[id(a)]) >= total // 4, 60, "the first member to read a quarter",
                 commit=True)
    b = members.add([topic_name], **once)
    members.wait(lambda: split([a, b], parts(topic_name, 4)), 60, "the second member to join", commit=True)
    a.close()
    everything = lambda: members.records[id(a)] + members.records[id(b)]   # noqa: E731
    members.wait(lambda: len(set(everything())) >= total, 60, "every record to be read", commit=True)
    seen = everything()
    assert len(seen) == len(set(seen)) == total, "a record was read twice or not at all"
