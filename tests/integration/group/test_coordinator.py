"""Group membership against Apache Kafka: joins, hand-overs, evictions, stalls, restarts, long work.

Members run the real stack (ConsumerNetworkClient + SubscriptionState + ConsumerCoordinator)
in a test-local poll loop (``GroupMember``), as threads of this process; the SIGKILL case runs
one member in a child process. Every wait is on a condition with a deadline. Session timeouts
are small (the harness's broker accepts them) to keep the suite fast; the "computes in pure Python" member
runs a busy loop, not a sleep. test_coordinator_faults.py reuses ``GroupMember``.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from kclient import errors as Errors
from kclient.config import ConsumerConfig
from kclient.group.consumer_coordinator import ConsumerCoordinator
from kclient.network.consumer_network_client import ConsumerNetworkClient
from kclient.network.network_config import NetworkClientConfig
from kclient.group.coordinator import MemberState
from kclient.group.group_config import ConsumerCoordinatorConfig, GroupRebalanceConfig
from kclient.structs import OffsetAndMetadata, TopicPartition
from kclient.subscription.state import SubscriptionState
from concurrent_runs import run_at_once
from repo_paths import REPO, TESTS

# A changed member state (assignment, listener call, poll) notifies this condition.
CHANGED = threading.Condition()


def wait_until(pred, timeout: float, what: str):
    """Wait for ``pred()``; woken by CHANGED, and re-checked every 50 ms for state that the
    heartbeat thread changes without notifying (member state, generation)."""
    deadline = time.monotonic() + timeout
    with CHANGED:
        while not pred():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}")
            CHANGED.wait(min(left, 0.05))


class Listener:
    def __init__(self):
        self.events: list[tuple[str, frozenset]] = []

    def _add(self, kind, parts):
        with CHANGED:
            self.events.append((kind, frozenset(parts)))
            CHANGED.notify_all()

    def on_partitions_revoked(self, revoked):
        self._add("revoked", revoked)

    def on_partitions_assigned(self, assigned):
        self._add("assigned", assigned)

    def on_partitions_lost(self, lost):
        self._add("lost", lost)

    def kinds(self):
        return [k for k, _ in self.events]


class GroupMember:
    """One consumer's group machinery driven by a test-local poll loop (no Fetcher)."""

    def __init__(self, bootstrap: str, group_id: str, topics, *, name: str = "member", **cfg):
        settings = {"bootstrap.servers": bootstrap, "group.id": group_id, "client.id": name,
                    "enable.auto.commit": False, "auto.offset.reset": "earliest"}
        settings.update({k.replace("_", "."): v for k, v in cfg.items()})
        self.name = name
        self.config = ConsumerConfig(settings)
        self.client = ConsumerNetworkClient(config=NetworkClientConfig.of(self.config))
        self.subs = SubscriptionState(self.config["auto.offset.reset"], self.config["exclude.internal.topics"])
        self.listener = Listener()
        self.subs.subscribe(list(topics), self.listener)
        self.client.metadata.set_topics(topics)
        self.coord = ConsumerCoordinator(self.client, self.subs, self.client.metadata,
                                         GroupRebalanceConfig.of(self.config), ConsumerCoordinatorConfig.of(self.config))
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self.stalled = threading.Event()
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.polls = 0

    # -- the loop
    def poll_once(self, timeout_ms: int = 100) -> None:
        clock = self.client._clock
        self.coord.record_poll(clock.now_ms())
        if self.coord.poll(timeout_ms) and self.subs.initializing_partitions():
            if self.coord.committer.refresh_committed_offsets_if_needed(timeout_ms):
                self.subs.reset_initializing_positions()
        self.client.poll(min(timeout_ms, self.coord.time_to_next_poll(clock.now_ms())))
        with CHANGED:
            self.polls += 1
            CHANGED.notify_all()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._running.is_set():
                    self.stalled.set()
                    self._running.wait()
                    self.stalled.clear()
                    continue
                self.poll_once()
        except BaseException as exc:  # surfaced by the test through .error
            self.error = exc
            with CHANGED:
                CHANGED.notify_all()

    def start(self) -> "GroupMember":
        self.thread = threading.Thread(target=self._loop, name=f"app-{self.name}", daemon=True)
        self.thread.start()
        return self

    def stall(self) -> None:
        """Stop calling poll() (the heartbeat thread keeps running)."""
        self._running.clear()
        assert self.stalled.wait(10)

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()
        if self.thread is not None:
            self.thread.join(15)
            assert not self.thread.is_alive()

    def close(self, timeout_ms: int = 5000) -> None:
        self.stop()
        try:
            self.coord.close(timeout_ms)
        finally:
            self.client.close()

    # -- observations
    def assigned(self) -> frozenset:
        return frozenset(self.subs.assigned_partitions())

    def stable(self) -> bool:
        return self.coord.state is MemberState.STABLE and not self.coord.rejoin_needed_or_pending()


def settled(members, partitions) -> bool:
    """Every member stable, assignments disjoint and covering ``partitions``."""
    for m in members:
        if m.error is not None:
            raise AssertionError(f"{m.name} failed: {m.error!r}")
    if not all(m.stable() for m in members):
        return False
    seen = [tp for m in members for tp in m.assigned()]
    return len(seen) == len(set(seen)) and set(seen) == set(partitions)


def parts(topic, n):
    return [TopicPartition(topic, p) for p in range(n)]


FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500, "retry_backoff_ms": 50}


@pytest.fixture
def members():
    made: list[GroupMember] = []

    def _make(bootstrap, group_id, topics, n=1, **cfg):
        out = []
        for _ in range(n):
            m = GroupMember(bootstrap, group_id, topics, name=f"m{len(made)}", **{**FAST, **cfg})
            made.append(m)
            out.append(m)
        return out

    yield _make
    for m in made:
        try:
            m.close(2000)
        except Exception:
            pass


# ---------------------------------------------------------------------- tests
def test_three_members_split_the_topic_and_a_closing_member_hands_over(broker, topic_name, group_id,
                                                                      create_topic, members):
    create_topic(broker, topic_name, 6)
    all_parts = parts(topic_name, 6)
    group = [m.start() for m in members(broker.bootstrap, group_id, [topic_name], n=3)]
    wait_until(lambda: settled(group, all_parts) and all(len(m.assigned()) == 2 for m in group), 60,
               "three members with two partitions each")
    generations = {m.coord.generation().generation_id for m in group}
    assert len(generations) == 1
    first_generation = generations.pop()
    leaving, staying = group[0], group[1:]
    given_up = leaving.assigned()
    leaving.close(5000)
    assert leaving.listener.events[-1] == ("revoked", given_up)      # told before leaving
    wait_until(lambda: settled(staying, all_parts), 60, "the two others to take over")
    assert given_up <= staying[0].assigned() | staying[1].assigned()
    assert all(m.coord.generation().generation_id > first_generation for m in staying)


_CHILD = r"""
import json, os, sys
sys.path[:0] = [sys.argv[1]] + sys.argv[2].split(os.pathsep)
from test_coordinator import GroupMember, FAST
m = GroupMember(sys.argv[3], sys.argv[4], [sys.argv[5]], name="child", **FAST)
last = None
while True:
    m.poll_once()
    now = sorted(p for _, p in m.assigned()) if m.stable() else None
    if now != last:
        print(json.dumps(now), flush=True)
        last = now
"""


def _killed_without_leaving(broker, topic_name, group_id, create_topic, members) -> None:
    create_topic(broker, topic_name, 4)
    all_parts = parts(topic_name, 4)
    # The child imports this module (and, through it, tests/support's helpers).
    tests_dir = os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), str(TESTS / "support"), str(TESTS)])
    repo = str(REPO)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, repo, tests_dir, broker.bootstrap, group_id, topic_name],
                             stdout=subprocess.PIPE)
    try:
        (survivor,) = members(broker.bootstrap, group_id, [topic_name])
        survivor.start()
        child_parts: set = set()
        buf = b""
        deadline = time.monotonic() + 60
        while True:   # read the child's reports until the two of them cover the topic
            assert time.monotonic() < deadline, "child and survivor never settled"
            r, _, _ = select.select([child.stdout], [], [], 0.2)
            if r:
                chunk = os.read(child.stdout.fileno(), 65536)
                assert chunk, f"child exited with {child.poll()}"
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    got = json.loads(line)
                    child_parts = {TopicPartition(topic_name, p) for p in got} if got else set()
            mine = survivor.assigned()
            if (child_parts and survivor.stable() and not mine & child_parts
                    and mine | child_parts == set(all_parts)):
                break
        generation = survivor.coord.generation().generation_id
        child.send_signal(signal.SIGKILL)               # no LeaveGroup: only the session timeout tells
        child.wait(10)
        wait_until(lambda: settled([survivor], all_parts), 60, "the survivor to own every partition")
        assert survivor.coord.generation().generation_id > generation
        assert ("assigned", frozenset(all_parts)) in survivor.listener.events
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        child.stdout.close()


def _stalling_past_max_poll_interval(broker, topic_name, group_id, create_topic, members) -> None:
    create_topic(broker, topic_name, 4)
    all_parts = parts(topic_name, 4)
    # max.poll.interval.ms below the session timeout: the stall, not the session, ends the membership
    slow, other = members(broker.bootstrap, group_id, [topic_name], n=2, max_poll_interval_ms=2500,
                          session_timeout_ms=8000, heartbeat_interval_ms=500)
    slow.start(), other.start()
    wait_until(lambda: settled([slow, other], all_parts) and slow.assigned(), 60, "two members settled")
    owned = slow.assigned()
    slow.stall()                                        # stops calling poll(); heartbeats go on
    wait_until(lambda: slow.coord.state is MemberState.UNJOINED, 30, "the stalled member to leave")
    wait_until(lambda: settled([other], all_parts), 60, "the other member to take everything over")
    assert slow.assigned() == owned                     # nobody told it yet: it has not polled
    slow.resume()                                       # next poll: listener told, member rejoins
    wait_until(lambda: settled([slow, other], all_parts) and slow.assigned(), 60, "the member to rejoin")
    kinds = slow.listener.kinds()
    assert "lost" in kinds and kinds.index("lost") > kinds.index("assigned")
    assert ("lost", owned) in slow.listener.events


def test_committed_offsets_survive_the_whole_group_restarting(broker, topic_name, group_id, create_topic,
                                                              members):
    create_topic(broker, topic_name, 4)
    all_parts = parts(topic_name, 4)
    first = [m.start() for m in members(broker.bootstrap, group_id, [topic_name], n=2, session_timeout_ms=10000)]
    wait_until(lambda: settled(first, all_parts), 60, "the first group to settle")
    for m in first:
        m.stall()                                       # commit from the test thread, loop parked
        offsets = {tp: OffsetAndMetadata(100 + 10 * tp.partition, f"note-{tp.partition}")
                   for tp in m.assigned()}
        m.coord.committer.commit_offsets_sync(offsets, 10_000)
    # Leader last: the order Tansu 0.6 gets wrong (it keeps a leader that leaves an otherwise
    # empty group as the leader of every later generation, so the restarted group never got an
    # assignment there); Apache Kafka starts the next generation afresh.
    for m in sorted(first, key=lambda m: m.coord.is_leader):
        m.close(5000)
    second = [m.start() for m in members(broker.bootstrap, group_id, [topic_name], n=2, session_timeout_ms=10000)]
    wait_until(lambda: settled(second, all_parts)
               and all(not m.subs.initializing_partitions() for m in second), 60, "the restarted group")
    for m in second:
        for tp in m.assigned():
            assert m.subs.position(tp).offset == 100 + 10 * tp.partition
    second[0].stall()
    got = second[0].coord.committer.fetch_committed_offsets(all_parts, 10_000)
    # The metadata string round-trips on Apache Kafka (Tansu 0.6 drops it).
    assert {tp: (oam.offset, oam.metadata) for tp, oam in got.items()} == \
        {tp: (100 + 10 * tp.partition, f"note-{tp.partition}") for tp in all_parts}


def test_member_computing_longer_than_session_timeout_keeps_its_partitions(broker, topic_name, group_id,
                                                                            create_topic, members):
    create_topic(broker, topic_name, 4)
    all_parts = parts(topic_name, 4)
    busy, other = members(broker.bootstrap, group_id, [topic_name], n=2, session_timeout_ms=3000,
                          heartbeat_interval_ms=300)
    busy.start(), other.start()
    wait_until(lambda: settled([busy, other], all_parts) and busy.assigned(), 60, "two members settled")
    mine, generation = busy.assigned(), busy.coord.generation()
    busy.stall()
    # Counted once the loop is parked: settled() can see the assignment before the loop's
    # listener call for it has returned (one full-suite run caught it in between).
    seen = len(busy.listener.kinds())     # the join may have taken two rounds (cooperative)
    # Pure-Python work on this thread, 1.5 session timeouts long, no poll(), no sleep.
    start = time.monotonic()
    x = 0
    while time.monotonic() - start < 4.5:
        for i in range(5000):
            x = (x + i * i) % 1_000_003
    busy.resume()
    with CHANGED:
        polls = busy.polls
    wait_until(lambda: busy.polls >= polls + 3 and other.polls > 0, 30, "both members polling again")
    assert busy.coord.generation() == generation
    assert other.coord.generation().generation_id == generation.generation_id
    assert busy.assigned() == mine and busy.stable()
    assert busy.listener.kinds()[seen:] == []             # nothing revoked, lost or reassigned since
    assert busy.coord.heartbeat_driver.failure is None


def _commit_with_a_stale_generation(broker, topic_name, group_id, create_topic, members) -> None:
    create_topic(broker, topic_name, 2)
    (m,) = members(broker.bootstrap, group_id, [topic_name], max_poll_interval_ms=2000,
                   session_timeout_ms=8000)
    m.start()
    wait_until(lambda: settled([m], parts(topic_name, 2)), 60, "the member to join")
    m.stall()
    wait_until(lambda: m.coord.state is MemberState.UNJOINED, 30, "the poll timeout to fire")
    with pytest.raises(Errors.CommitFailedError):
        m.coord.committer.commit_offsets_sync({TopicPartition(topic_name, 0): OffsetAndMetadata(1)}, 5000)


def _own_group_and_topic(broker, scenario, name: str) -> None:
    """A scenario with a group, a topic and members of its own, all removed after it."""
    tag = f"{name}-{uuid.uuid4().hex[:8]}"
    made: list[GroupMember] = []
    topics: list[str] = []

    def create_topic(cluster, topic: str, partitions: int) -> None:
        cluster.create_topic(topic, partitions)
        topics.append(topic)
        cluster.wait_for_topic(topic, partitions)

    def members(bootstrap, group_id, topics_, n=1, **cfg):
        out = [GroupMember(bootstrap, group_id, topics_, name=f"{name}-m{len(made) + i}", **{**FAST, **cfg})
               for i in range(n)]
        made.extend(out)
        return out
    try:
        scenario(broker, f"t-{tag}", f"g-{tag}", create_topic, members)
    finally:
        for m in made:
            try:
                m.close(2000)
            except Exception:
                pass
        for topic in topics:
            try:
                broker.delete_topic(topic)
            except Exception:   # memory only: the session broker keeps fewer topics
                pass


@pytest.fixture(scope="module")
def membership_timeouts(broker):
    """The scenarios that wait for the broker to end a membership (a session timeout, a
    max.poll.interval.ms stall) run at the same time, each with its own group, rather than
    one after another; each test below checks its own scenario."""
    return run_at_once({"killed": lambda: _own_group_and_topic(broker, _killed_without_leaving, "killed"),
                        "stalling": lambda: _own_group_and_topic(broker, _stalling_past_max_poll_interval,
                                                                 "stalling"),
                        "stale": lambda: _own_group_and_topic(broker, _commit_with_a_stale_generation, "stale")})


def test_member_killed_without_leaving_loses_partitions_after_session_timeout(membership_timeouts):
    membership_timeouts.check("killed")


def test_member_stalling_past_max_poll_interval_leaves_and_rejoins(membership_timeouts):
    membership_timeouts.check("stalling")


def test_commit_with_a_stale_generation_fails(membership_timeouts):
    membership_timeouts.check("stale")
