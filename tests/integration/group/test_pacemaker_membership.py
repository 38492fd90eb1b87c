"""Membership through a GIL-holding C call, on Apache Kafka and librdkafka's mock cluster.

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
INVALID_REQUEST (see test_coordinator_faults), which would test the mock, not us.
The scenarios (classic keeps/leaves on both brokers, KIP-848 on Kafka) run at the same time
in one module fixture (their 12 s stalls are sleeps), each test asserting on its own.
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

from kclient.testing.mock_cluster import MockCluster

from test_coordinator import GroupMember, wait_until  # noqa: E402
import repo_paths

REPO = str(repo_paths.REPO)
JOIN_GROUP, LEAVE_GROUP = 11, 13
STALL_S = 12
SESSION_MS = 6000

CHILD = r'''
import ctypes, ctypes.util, json, select, sys, time
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.subscription.listener import ConsumerRebalanceListener

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
                      group_protocol="consumer", **cfg["settings"], max_poll_interval_ms=cfg["max_poll"],
                      enable_auto_commit=False, auto_offset_reset="earliest")
else:
    c = KafkaConsumer(bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"], client_id="a-member",
                      **cfg["settings"], session_timeout_ms=cfg["session"], heartbeat_interval_ms=cfg["interval"],
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
link = lambda: coord.heartbeat_driver if hasattr(coord.heartbeat_driver, "pacemaker") else None
say(phase="stable", at=time.monotonic(), generation=coord.generation().generation_id,
    member=coord.generation().member_id, assignment=sorted(p.partition for p in c.assignment()),
    pacemaker=link() is not None)
while not select.select([sys.stdin], [], [], 0)[0]:   # poll until the parent says "stall"
    c.poll(timeout_ms=100)
sys.stdin.readline()
# B's join made A rejoin (eager: revoke, then get partition 0 back); on a busy machine A may
# still be in that rebalance when told to stall: it finishes it first.
deadline = time.monotonic() + 30
while not c.assignment() and time.monotonic() < deadline:
    c.poll(timeout_ms=100)
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
    def __init__(self, bootstrap, topic, group, max_poll_ms, protocol="classic", settings=None):
        cfg = {"bootstrap": bootstrap, "topic": topic, "group": group, "session": SESSION_MS,
               "interval": 1000, "max_poll": max_poll_ms, "stall": STALL_S, "after": 4, "protocol": protocol,
               "settings": settings or {}}
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


#: scenario id -> (backend, max.poll.interval.ms, group protocol). Each runs member A (and B)
#: through a 12 s stall; they all run at the same time (the stalls are sleeps, so a shared 2-core
#: machine has room). The two mock ones read a request log each, so "mock-leaves" gets a mock
#: cluster of its own.
SCENARIOS = {
    "kafka-keeps": ("kafka", 60000, "classic"),
    "kafka-leaves": ("kafka", 4000, "classic"),
    "mock-keeps": ("mock", 60000, "classic"),
    "mock-leaves": ("mock", 4000, "classic"),
    "kafka-consumer-keeps": ("kafka", 60000, "consumer"),
}
_RUN_TOGETHER = [["mock-keeps"], ["mock-leaves"], ["kafka-keeps"], ["kafka-leaves"], ["kafka-consumer-keeps"]]


def _classic_scenario(kind, cluster, topic, group, max_poll_ms, a_bootstrap=None, a_settings=None) -> dict:
    """A (child process) stalls 12 s; on Kafka, B (in this process) is in the group all along.
    A connects to ``a_bootstrap`` (default: the cluster's) with ``a_settings`` (e.g. TLS, SASL);
    B to the cluster's plaintext listener."""
    if kind == "mock":
        cluster.start_request_tracking()
    a = ChildMember(a_bootstrap or cluster.bootstrap, topic, group, max_poll_ms, settings=a_settings)
    b = None
    out: dict = {}
    try:
        out["stable"] = stable = a.read("stable", 120)
        assert stable["assignment"] == [0] and stable["pacemaker"]
        if kind == "kafka":
            b = GroupMember(cluster.bootstrap, group, [topic], name="b-member", session_timeout_ms=SESSION_MS,
                            heartbeat_interval_ms=1000, max_poll_interval_ms=60000,
                            partition_assignment_strategy=["sticky"]).start()
            wait_until(lambda: b.error is not None or b.stable(), 120, "member B to join")
            assert b.error is None, b.error
            assert b.assigned() == frozenset()              # sticky: A keeps partition 0
            out["b_generation"] = b.coord.generation().generation_id
        a.stall()
        out["stalling"] = stalling = a.read("stalling", 30)
        assert stalling["assignment"] == [0]
        # Watch B while A is inside its C call: when (if ever) does it get partition 0?
        out["b_got_at"] = None
        end = time.monotonic() + STALL_S + 60
        while True:
            if b is not None and out["b_got_at"] is None and {tp.partition for tp in b.assigned()} == {0}:
                out["b_got_at"] = time.monotonic()
            stalled = a.read("stalled", 0.1, optional=True)
            if stalled is not None:
                out["stalled"] = stalled
                break
            assert time.monotonic() < end, "member A's stall did not end"
        out["after"] = a.read("after", 60)
        if b is not None:     # before A closes (its LeaveGroup then hands B the partition)
            out["b_after"] = b.assigned(), b.coord.generation().generation_id
        a.proc.wait(60)
        if b is not None:
            out["b_final"], out["b_final_generation"] = b.assigned(), b.coord.generation().generation_id
    finally:
        a.close()
        if b is not None:
            b.close(3000)
        if kind == "mock":
            out["reqs"] = [(r.timestamp_us / 1e6, r.api_key) for r in cluster.get_requests()]
            cluster.stop_request_tracking()
    return out


def _consumer_scenario(cluster, topic, group, a_bootstrap=None, a_settings=None) -> dict:
    """KIP-848: A (child process) stalls 12 s; B, a consumer-protocol member, is in the group
    (A's connection as in ``_classic_scenario``)."""
    a = ChildMember(a_bootstrap or cluster.bootstrap, topic, group, 60000, protocol="consumer", settings=a_settings)
    b = None
    out: dict = {}
    try:
        out["stable"] = stable = a.read("stable", 120)
        assert stable["assignment"] == [0] and stable["pacemaker"]
        b = ThreadedConsumerMember(cluster.bootstrap, group, topic)
        wait_until(lambda: b.error is not None or b.in_group(), 60, "member B to join")
        assert b.error is None, b.error
        a.stall()
        out["stalling"] = stalling = a.read("stalling", 30)
        assert stalling["assignment"] == [0]
        out["stalled"] = a.read("stalled", STALL_S + 60)
        out["after"] = a.read("after", 60)
        a.proc.wait(60)
        assert b.error is None, b.error
        out["b_got_at"] = b.got_at
    finally:
        a.close()
        if b is not None:
            b.close()
    return out


@pytest.fixture(scope="module")
def stall_outcomes(request):
    """Runs every scenario (see SCENARIOS) once for the module; id -> ("ok", observations) or
    ("error", exception) or ("skip", reason)."""
    import threading
    import uuid

    kafka = request.getfixturevalue("kafka")
    mock = request.getfixturevalue("mock_cluster")
    mock_ok = getattr(mock, "supports_fault_injection", False)
    own_mock = MockCluster(3).start() if mock_ok else None    # for "mock-leaves"
    outcomes: dict = {}
    made = []

    def run(ids):
        for sid in ids:
            kind, max_poll_ms, protocol = SCENARIOS[sid]
            if kind == "mock" and not mock_ok:
                outcomes[sid] = ("skip", "fault injection (request tracking) needs the harness's mock cluster")
                continue
            cluster = kafka if kind == "kafka" else own_mock if sid == "mock-leaves" else mock
            topic, group = f"stall-{sid}-{uuid.uuid4().hex[:8]}", f"stall-{sid}-{uuid.uuid4().hex[:8]}"
            try:
                cluster.create_topic(topic, 1)
                made.append((cluster, topic))
                cluster.wait_for_topic(topic, 1)
                if protocol == "consumer":
                    outcomes[sid] = ("ok", _consumer_scenario(cluster, topic, group))
                else:
                    outcomes[sid] = ("ok", _classic_scenario(kind, cluster, topic, group, max_poll_ms))
            except BaseException as exc:   # reported by that scenario's test
                outcomes[sid] = ("error", exc)

    if mock_ok:
        mock.group_initial_rebalance_delay_ms(0)
        own_mock.group_initial_rebalance_delay_ms(0)
    threads = [threading.Thread(target=run, args=(ids,), daemon=True) for ids in _RUN_TOGETHER]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 280
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for ids in _RUN_TOGETHER:
            for sid in ids:
                outcomes.setdefault(sid, ("error", AssertionError(f"scenario {sid} did not finish in time")))
        yield outcomes
    finally:
        if mock_ok:
            mock.group_initial_rebalance_delay_ms(3000)
        for cluster, topic in made:
            if cluster is own_mock:
                continue
            try:
                cluster.delete_topic(topic)
            except Exception:   # the cluster may be gone at session end; memory only
                pass
        if own_mock is not None:
            own_mock.stop()


def _outcome(stall_outcomes, sid) -> dict:
    status, value = stall_outcomes[sid]
    if status == "skip":
        pytest.skip(value)
    if status == "error":
        raise value
    return value


@pytest.mark.parametrize("sid", ["kafka-keeps", "kafka-leaves", "mock-keeps", "mock-leaves"])
def test_gil_holding_call_and_max_poll_interval(stall_outcomes, sid):
    kind, max_poll_ms, _ = SCENARIOS[sid]
    leaves = sid.endswith("leaves")
    o = _outcome(stall_outcomes, sid)
    stable, stalling, stalled, after = o["stable"], o["stalling"], o["stalled"], o["after"]
    if not leaves:
        # the broker saw no rebalance: same member, same generation, nothing revoked
        assert (after["member"], after["generation"], after["assignment"]) == (
            stalling["member"], stalling["generation"], [0])
        assert not [e for e in after["events"] if e[0] in ("revoked", "lost") and e[1] > stalled["start"]]
        assert after["stats"]["sent"] >= 1
        if kind == "kafka":
            assert o["b_got_at"] is None and o["b_final"] == frozenset()
            assert o["b_final_generation"] == o["b_generation"]
        else:
            assert not [t for t, k in o["reqs"] if k == JOIN_GROUP and t > stable["at"]]
    else:
        if kind == "kafka":
            # B got partition 0 while A was still inside its C call
            assert o["b_got_at"] is not None and o["b_got_at"] < stalled["end"], (o["b_got_at"], stalled)
        else:
            leaves_at = [t for t, k in o["reqs"] if k == LEAVE_GROUP and stalled["start"] < t < stalled["end"]]
            assert leaves_at, "no LeaveGroup during the stall"
            assert leaves_at[0] - stalled["start"] >= max_poll_ms / 1000 - 1.5
        assert after["member"] != stable["member"] or after["generation"] != stable["generation"]


def test_consumer_protocol_member_keeps_its_partitions_through_a_gil_holding_call(stall_outcomes):
    """KIP-848 (group.protocol=consumer): the harness's broker session is 6 s; A's C call holds
    its GIL for 12 s. The pacemaker's ConsumerGroupHeartbeats keep A in the group at its epoch,
    and B, in the group all along, never gets the partition."""
    o = _outcome(stall_outcomes, "kafka-consumer-keeps")
    stalling, stalled, after = o["stalling"], o["stalled"], o["after"]
    # Same member, same partition, never fenced (a fenced member reports its partitions lost
    # and rejoins). Its epoch may move on: the broker bumps the group epoch as it pleases (here
    # it did so during the stall), and the pacemaker follows it.
    assert (after["member"], after["assignment"]) == (stalling["member"], [0])
    assert after["generation"] >= stalling["generation"] and after["stats"]["failed"] == 0
    assert not [e for e in after["events"] if e[0] in ("revoked", "lost") and e[1] > stalled["start"]]
    assert after["stats"]["sent"] >= STALL_S * 1000 // 500 // 2    # the broker's 500 ms interval, loosely
    # (monotonic clocks are system-wide: A's "after" instant is comparable with B's)
    assert o["b_got_at"] is None or o["b_got_at"] > after["at"], "B got the partition before A left"


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
        link = a._coordinator.heartbeat_driver
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
    link = m.coord.heartbeat_driver
    return link.pacemaker.stats()["sent"] if link is not None else 0


def test_pacemaker_follows_a_coordinator_move(mock_faults, mock_member, group_id):
    from kclient.group.coordinator_channel import coordinator_node_id

    m = mock_member()
    link = m.coord.heartbeat_driver
    assert link is not None and link.engaged
    wait_until(lambda: _pacemaker_sent(m) >= 2, 30, "pacemaker heartbeats")
    generation = m.coord.generation()
    old = m.coord.coordinator().node_id
    target = next(b for b in (1, 2, 3) if coordinator_node_id(b) != old)
    connects = link.pacemaker.stats()["connects"]
    mock_faults.coordinator_set("group", group_id, target)
    wait_until(lambda: m.coord.channel.known_node is not None
               and m.coord.channel.known_node.node_id == coordinator_node_id(target)
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
    assert m.coord.heartbeat_driver.engaged
