"""Membership through a GIL-holding C call, on Apache Kafka and librdkafka's mock cluster (issue 14).

Member A runs in a child process (its stall holds that interpreter's GIL, not ours): it
joins, owns the topic's only partition, then calls libc ``sleep`` through ``ctypes.PyDLL``
(which keeps the GIL) for 12 s with session.timeout.ms = 6 s.

- max.poll.interval.ms above the stall: the compiled pacemaker keeps A in the group. The
  broker's view: A's generation is unchanged and A saw no revocation; on Apache Kafka a second
  member B, in the group all along, never gets the partition; on the mock cluster its request
  log shows no JoinGroup from A after it became stable.
- max.poll.interval.ms below the stall: the pacemaker leaves the group (LeaveGroup) during the
  stall, and B gets the partition while A is still stalled (on the mock: the LeaveGroup is in
  its request log, sent during the stall).

B only runs on Apache Kafka: the mock cluster answers a follower's late SyncGroup with
INVALID_REQUEST (see test_coordinator_mock), which would test the mock, not us.
Every wait is a condition with a deadline; margins are seconds, not milliseconds.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time

import pytest

from test_coordinator_broker import GroupMember, wait_until  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOIN_GROUP, LEAVE_GROUP = 11, 13
STALL_S = 12
SESSION_MS = 6000

CHILD = r'''
import ctypes, ctypes.util, json, select, sys, time
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.consumer.listener import ConsumerRebalanceListener

cfg = json.loads(sys.argv[1])
events = []

class Listener(ConsumerRebalanceListener):
    def on_partitions_revoked(self, parts):
        events.append(["revoked", time.monotonic(), sorted(p.partition for p in parts)])
    def on_partitions_assigned(self, parts):
        events.append(["assigned", time.monotonic(), sorted(p.partition for p in parts)])
    def on_partitions_lost(self, parts):
        events.append(["lost", time.monotonic(), sorted(p.partition for p in parts)])

def say(**kw):
    print(json.dumps(kw), flush=True)

if cfg["protocol"] == "consumer":   # KIP-848: the broker sets the session and the interval
    c = KafkaConsumer(bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"], client_id="a-member",
                      group_protocol="consumer", max_poll_interval_ms=cfg["max_poll"],
                      enable_auto_commit=False, auto_offset_reset="earliest")
else:
    c = KafkaConsumer(bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"], client_id="a-member",
                      session_timeout_ms=cfg["session"], heartbeat_interval_ms=cfg["interval"],
                      max_poll_interval_ms=cfg["max_poll"], enable_auto_commit=False,
                      auto_offset_reset="earliest", partition_assignment_strategy=["sticky"])
c.subscribe([cfg["topic"]], listener=Listener())
deadline = time.monotonic() + 90
while not c.assignment():
    if time.monotonic() > deadline:
        say(phase="error", error="no assignment")
        sys.exit(1)
    c.poll(timeout_ms=200)
coord = c._coordinator
link = lambda: getattr(coord, "_cg_pacemaker", None) or coord._pacemaker
say(phase="stable", at=time.monotonic(), generation=coord.generation().generation_id,
    member=coord.generation().member_id, assignment=sorted(p.partition for p in c.assignment()),
    pacemaker=link() is not None)
while not select.select([sys.stdin], [], [], 0)[0]:   # poll until the parent says "stall"
    c.poll(timeout_ms=100)
sys.stdin.readline()
g = coord.generation()
say(phase="stalling", generation=g.generation_id, member=g.member_id,
    assignment=sorted(p.partition for p in c.assignment()))
libc = ctypes.PyDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.sleep.argtypes = [ctypes.c_uint]
t0 = time.monotonic()
remaining = cfg["stall"]
while remaining > 0:
    remaining = libc.sleep(remaining)
t1 = time.monotonic()
say(phase="stalled", start=t0, end=t1)
end = time.monotonic() + cfg["after"]
while time.monotonic() < end:
    c.poll(timeout_ms=100)
g = coord.generation()
say(phase="after", at=time.monotonic(), generation=g.generation_id, member=g.member_id, events=events,
    assignment=sorted(p.partition for p in c.assignment()),
    stats=link().pacemaker.stats() if link() is not None else None)
c.close()
'''


class ChildMember:
    def __init__(self, bootstrap, topic, group, max_poll_ms, protocol="classic"):
        cfg = {"bootstrap": bootstrap, "topic": topic, "group": group, "session": SESSION_MS,
               "interval": 1000, "max_poll": max_poll_ms, "stall": STALL_S, "after": 4, "protocol": protocol}
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cfg)], cwd=REPO, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def read(self, phase, timeout, optional=False):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            ready = select.select([self.proc.stdout], [], [], max(0.0, end - time.monotonic()))[0]
            if not ready:
                if optional:
                    return None
                break
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"member A exited (rc {self.proc.wait()}) before {phase}")
            msg = json.loads(line)
            if msg["phase"] == "error":
                raise AssertionError(msg["error"])
            if msg["phase"] == phase:
                return msg
        raise AssertionError(f"member A did not reach {phase} within {timeout} s")

    def stall(self):
        self.proc.stdin.write("stall\n")
        self.proc.stdin.flush()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


@pytest.fixture(params=["kafka", "mock"])
def backend(request, create_topic, topic_name):
    if request.param == "kafka":
        cluster = request.getfixturevalue("kafka")
    else:
        cluster = request.getfixturevalue("mock_faults")
        cluster.group_initial_rebalance_delay_ms(0)
    create_topic(cluster, topic_name, 1)
    yield request.param, cluster
    if request.param == "mock":
        cluster.group_initial_rebalance_delay_ms(3000)


@pytest.mark.parametrize("max_poll_ms,leaves", [(60000, False), (4000, True)], ids=["keeps", "leaves"])
def test_gil_holding_call_and_max_poll_interval(backend, topic_name, group_id, max_poll_ms, leaves):
    kind, cluster = backend
    if kind == "mock":
        cluster.start_request_tracking()
    a = ChildMember(cluster.bootstrap, topic_name, group_id, max_poll_ms)
    b = None
    try:
        stable = a.read("stable", 120)
        assert stable["assignment"] == [0] and stable["pacemaker"]
        if kind == "kafka":
            b = GroupMember(cluster.bootstrap, group_id, [topic_name], name="b-member", session_timeout_ms=SESSION_MS,
                            heartbeat_interval_ms=1000, max_poll_interval_ms=60000,
                            partition_assignment_strategy=["sticky"]).start()
            wait_until(lambda: b.error is not None or b.stable(), 120, "member B to join")
            assert b.error is None, b.error
            assert b.assigned() == frozenset()              # sticky: A keeps partition 0
            b_generation = b.coord.generation().generation_id
        a.stall()
        stalling = a.read("stalling", 30)
        assert stalling["assignment"] == [0]
        # Watch B while A is inside its C call: when (if ever) does it get partition 0?
        b_got_at = None
        end = time.monotonic() + STALL_S + 60
        while True:
            if b is not None and b_got_at is None and {tp.partition for tp in b.assigned()} == {0}:
                b_got_at = time.monotonic()
            stalled = a.read("stalled", 0.1, optional=True)
            if stalled is not None:
                break
            assert time.monotonic() < end, "member A's stall did not end"
        after = a.read("after", 60)
        a.proc.wait(60)
        if b is not None:
            b_final, b_final_generation = b.assigned(), b.coord.generation().generation_id
    finally:
        a.close()
        if b is not None:
            b.close(3000)
    if kind == "mock":
        reqs = [(r.timestamp_us / 1e6, r.api_key) for r in cluster.get_requests()]
        cluster.stop_request_tracking()
    if not leaves:
        # the broker saw no rebalance: same member, same generation, nothing revoked
        assert (after["member"], after["generation"], after["assignment"]) == (
            stalling["member"], stalling["generation"], [0])
        assert not [e for e in after["events"] if e[0] in ("revoked", "lost") and e[1] > stalled["start"]]
        assert after["stats"]["sent"] >= 1
        if kind == "kafka":
            assert b_got_at is None and b_final == frozenset()
            assert b_final_generation == b_generation
        else:
            assert not [t for t, k in reqs if k == JOIN_GROUP and t > stable["at"]]
    else:
        if kind == "kafka":
            # B got partition 0 while A was still inside its C call
            assert b_got_at is not None and b_got_at < stalled["end"], (b_got_at, stalled)
        else:
            leaves_at = [t for t, k in reqs if k == LEAVE_GROUP and stalled["start"] < t < stalled["end"]]
            assert leaves_at, "no LeaveGroup during the stall"
            assert leaves_at[0] - stalled["start"] >= max_poll_ms / 1000 - 1.5
        assert after["member"] != stable["member"] or after["generation"] != stable["generation"]



class ThreadedConsumerMember:
    """Member B for the consumer protocol: a KafkaConsumer polled by a thread of this process."""

    def __init__(self, bootstrap, group, topic):
        from kclient.consumer.kafka_consumer import KafkaConsumer

        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id="b-member",
                                      group_protocol="consumer", enable_auto_commit=False)
        self.consumer.subscribe([topic])
        self.got_at: float | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while not self._stop.is_set():
                self.consumer.poll(timeout_ms=100)
                if self.got_at is None and self.consumer.assignment():
                    self.got_at = time.monotonic()
        except BaseException as exc:   # surfaced by the test
            self.error = exc

    def in_group(self):
        return self.consumer._coordinator.membership.in_group()

    def close(self):
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def test_consumer_protocol_member_keeps_its_partitions_through_a_gil_holding_call(kafka, create_topic,
                                                                                   topic_name, group_id):
    """KIP-848 (group.protocol=consumer): the harness's broker session is 6 s; A's C call holds
    its GIL for 12 s. The pacemaker's ConsumerGroupHeartbeats keep A in the group at its epoch,
    and B, in the group all along, never gets the partition."""
    create_topic(kafka, topic_name, 1)
    a = ChildMember(kafka.bootstrap, topic_name, group_id, 60000, protocol="consumer")
    b = None
    try:
        stable = a.read("stable", 120)
        assert stable["assignment"] == [0] and stable["pacemaker"]
        b = ThreadedConsumerMember(kafka.bootstrap, group_id, topic_name)
        wait_until(lambda: b.error is not None or b.in_group(), 60, "member B to join")
        assert b.error is None, b.error
        a.stall()
        stalling = a.read("stalling", 30)
        assert stalling["assignment"] == [0]
        stalled = a.read("stalled", STALL_S + 60)
        after = a.read("after", 60)
        a.proc.wait(60)
        assert b.error is None, b.error
        b_got_at = b.got_at
    finally:
        a.close()
        if b is not None:
            b.close()
    # Same member, same partition, never fenced (a fenced member reports its partitions lost
    # and rejoins). Its epoch may move on: the broker bumps the group epoch as it pleases (here
    # it did so during the stall), and the pacemaker follows it.
    assert (after["member"], after["assignment"]) == (stalling["member"], [0])
    assert after["generation"] >= stalling["generation"] and after["stats"]["failed"] == 0
    assert not [e for e in after["events"] if e[0] in ("revoked", "lost") and e[1] > stalled["start"]]
    assert after["stats"]["sent"] >= STALL_S * 1000 // 500 // 2    # the broker's 500 ms interval, loosely
    # (monotonic clocks are system-wide: A's "after" instant is comparable with B's)
    assert b_got_at is None or b_got_at > after["at"], "B got the partition before A left"


def test_consumer_protocol_reassignment_arrives_through_the_pacemaker(kafka, create_topic, topic_name, group_id):
    """While A is STABLE only the pacemaker heartbeats; when B joins, the broker's new target
    for A (give up half) reaches A in a pacemaker answer, A revokes at its next poll and
    acknowledges with a Python heartbeat, and the pacemaker takes over again."""
    from kclient.consumer.kafka_consumer import KafkaConsumer

    create_topic(kafka, topic_name, 4)
    events: list[tuple[str, frozenset]] = []

    class Listener:
        def on_partitions_revoked(self, parts):
            events.append(("revoked", frozenset(p.partition for p in parts)))

        def on_partitions_assigned(self, parts):
            events.append(("assigned", frozenset(p.partition for p in parts)))

        def on_partitions_lost(self, parts):
            events.append(("lost", frozenset(p.partition for p in parts)))

    def consumer(name, listener=None):
        c = KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group_id, client_id=name,
                          group_protocol="consumer", enable_auto_commit=False)
        c.subscribe([topic_name], listener=listener)
        return c

    def poll_until(consumers, pred, what, timeout=60):
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            for c in consumers:
                c.poll(timeout_ms=50)

    a = consumer("a-member", Listener())
    b = None
    try:
        poll_until([a], lambda: len(a.assignment()) == 4, "A to own the 4 partitions")
        link = a._coordinator._cg_pacemaker
        assert link is not None
        poll_until([a], lambda: link.engaged and link.pacemaker.stats()["received"] >= 2, "pacemaker heartbeats")
        adopted = link.assignments_adopted
        b = consumer("b-member")
        poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2
                   and a._coordinator.membership.state.value == "STABLE", "A and B to split")
        assert link.assignments_adopted > adopted           # the new target came in a pacemaker answer
        assert [ps for k, ps in events if k == "revoked"] == [events[0][1] - {tp.partition for tp in a.assignment()}]
        assert not [k for k, _ in events if k == "lost"]
        poll_until([a], lambda: link.engaged, "the pacemaker to take over again")
        assert link.pacemaker.member_epoch == a._coordinator.membership.member_epoch
    finally:
        a.close()
        if b is not None:
            b.close()

# ---------------------------------------------------------------------------- in-process link
@pytest.fixture
def mock_member(mock_faults, create_topic, topic_name, group_id):
    mock_faults.group_initial_rebalance_delay_ms(100)
    create_topic(mock_faults, topic_name, 4)
    made = []

    def _make(**cfg):
        settings = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 200, "retry_backoff_ms": 50,
                    "partition_assignment_strategy": ["cooperative-sticky"], **cfg}
        m = GroupMember(mock_faults.bootstrap, group_id, [topic_name], name="pm-member", **settings).start()
        made.append(m)
        wait_until(lambda: m.error is not None or (m.stable() and len(m.assigned()) == 4), 60, "the member to join")
        assert m.error is None, m.error
        return m

    yield _make
    for m in made:
        m.close(3000)
    mock_faults.clear_request_errors(12)
    mock_faults.group_initial_rebalance_delay_ms(3000)


def _pacemaker_sent(m):
    link = m.coord._pacemaker
    return link.pacemaker.stats()["sent"] if link is not None else 0


def test_pacemaker_follows_a_coordinator_move(mock_faults, mock_member, group_id):
    from kclient.group.coordinator import coordinator_node_id

    m = mock_member()
    link = m.coord._pacemaker
    assert link is not None and link.engaged
    wait_until(lambda: _pacemaker_sent(m) >= 2, 30, "pacemaker heartbeats")
    generation = m.coord.generation()
    old = m.coord.coordinator().node_id
    target = next(b for b in (1, 2, 3) if coordinator_node_id(b) != old)
    connects = link.pacemaker.stats()["connects"]
    mock_faults.coordinator_set("group", group_id, target)
    wait_until(lambda: m.coord._coordinator is not None
               and m.coord._coordinator.node_id == coordinator_node_id(target)
               and link.pacemaker.stats()["connects"] > connects and link.pacemaker.is_active, 30,
               "the pacemaker on the new coordinator")
    received = link.pacemaker.stats()["received"]
    wait_until(lambda: link.pacemaker.stats()["received"] >= received + 2, 30, "answers from the new coordinator")
    assert m.coord.generation() == generation and len(m.assigned()) == 4
    assert [k for k, _ in m.listener.events if k in ("revoked", "lost")] == []


def test_pacemaker_unknown_member_id_makes_the_member_rejoin(mock_faults, mock_member):
    m = mock_member()
    wait_until(lambda: _pacemaker_sent(m) >= 1, 30, "pacemaker heartbeats")
    before = m.coord.generation()
    mock_faults.push_request_errors(12, [25])          # UNKNOWN_MEMBER_ID to the next Heartbeat
    wait_until(lambda: m.coord.generation().member_id != before.member_id and m.stable(), 60,
               "the member to rejoin with a new member id")
    assert m.error is None, m.error
    assert "lost" in [k for k, _ in m.listener.events]     # the eviction is visible
    assert m.coord._pacemaker.engaged
