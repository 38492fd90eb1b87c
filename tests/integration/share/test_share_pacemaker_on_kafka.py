"""A share member keeps its membership through a GIL-holding C call, on Apache Kafka.

Member A runs in a child process (its stall holds that interpreter's GIL, not ours): it
acquires five records (explicit mode, not acknowledged), then calls libc ``sleep`` through
``ctypes.PyDLL`` (which keeps the GIL) for longer than the broker's share session timeout
(the harness sets ``group.share.session.timeout.ms`` to 6 s). The pacemaker's
ShareGroupHeartbeats keep A in the group: member B, polling in this process all along, never
gets A's records (an evicted member's records are released to the others), and A's
acknowledgements after the stall are accepted. Once on the plaintext listener, and once with A
on SASL_SSL SCRAM-SHA-512 (the pacemaker's own connection does TLS and SCRAM in C, and renews
its 2 s SASL sessions during the stall).
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest

from kclient.producer import KafkaProducer
from kclient.share.consumer import KafkaShareConsumer

import repo_paths
from kclient.testing.pki import SCRAM_USER

REPO = str(repo_paths.REPO)
STALL_S = 8
SESSION_MS = 6000      # the harness's group.share.session.timeout.ms

CHILD = r'''
import ctypes, ctypes.util, json, logging, sys, time
from kclient.share.consumer import AcknowledgeType, KafkaShareConsumer

cfg = json.loads(sys.argv[1])
transitions = []   # the membership's state changes (its debug log lines)

class Transitions(logging.Handler):
    def emit(self, record):
        transitions.append(record.getMessage())

log = logging.getLogger("kclient.share.membership")
log.setLevel(logging.DEBUG)
log.addHandler(Transitions())

def say(**kw):
    print(json.dumps(kw), flush=True)

c = KafkaShareConsumer(cfg["topic"], bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"],
                       client_id="a-member", share_acknowledgement_mode="explicit", **cfg["settings"])
deadline = time.monotonic() + 90
while c.acquisition_lock_timeout_ms() is None or not c.metrics()["assigned-partitions"]:
    assert not c.poll(100)
    if time.monotonic() > deadline:
        say(phase="error", error="no assignment")
        sys.exit(1)
say(phase="ready")
held = []
while len(held) < cfg["records"]:
    for records in c.poll(200).values():
        held.extend(records)
    if time.monotonic() > deadline:
        say(phase="error", error=f"only {len(held)} records")
        sys.exit(1)
coord = c._coordinator
link = coord.driver
def member():
    m = coord.membership
    return {"member": m.member_id, "epoch": m.member_epoch, "state": m.state.value,
            "assignment": sorted(tp.partition for tp in coord.assignment())}
say(phase="holding", offsets=[r.offset for r in held], pacemaker=hasattr(link, "pacemaker"),
    engaged=link.engaged, **member())
del transitions[:]
sys.stdin.readline()
libc = ctypes.PyDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.sleep.argtypes = [ctypes.c_uint]
t0 = time.monotonic()
remaining = cfg["stall"]
while remaining > 0:
    remaining = libc.sleep(remaining)
say(phase="stalled", start=t0, end=time.monotonic())
for r in held:
    c.acknowledge(r, type=AcknowledgeType.ACCEPT)
results = c.commit_sync(10000)
say(phase="after", results={str(tp): None if e is None else repr(e) for tp, e in results.items()},
    stats=link.pacemaker.stats(), transitions=transitions, **member())
c.close()
'''


class Child:
    def __init__(self, cfg: dict):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cfg)], cwd=REPO, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def read(self, phase: str, timeout: float, while_waiting=None) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if while_waiting is not None:
                while_waiting()
            if not select.select([self.proc.stdout], [], [], 0.05)[0]:
                continue
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"member A exited (rc {self.proc.wait()}) before {phase}")
            msg = json.loads(line)
            assert msg["phase"] != "error", msg["error"]
            if msg["phase"] == phase:
                return msg
        raise AssertionError(f"member A did not reach {phase} within {timeout} s")

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


@pytest.fixture(params=["plaintext", "sasl_ssl-scram-sha-512"])
def a_listener(request):
    """(cluster, A's bootstrap, A's security settings); B always uses the plaintext listener."""
    if request.param == "plaintext":
        kafka = request.getfixturevalue("kafka")
        return kafka, kafka.bootstrap, {}
    kafka = request.getfixturevalue("secure_kafka")
    return kafka, kafka.bootstrap_for("SASL_SSL"), {
        "security.protocol": "SASL_SSL", "ssl.cafile": str(kafka.pki.ca_file), "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.plain.username": SCRAM_USER[0], "sasl.plain.password": SCRAM_USER[1]}


def test_share_member_keeps_its_membership_and_records_through_a_gil_holding_call(a_listener, create_topic,
                                                                                 topic_name, group_id):
    kafka, a_bootstrap, a_settings = a_listener
    create_topic(kafka, topic_name, 1)
    a = Child({"bootstrap": a_bootstrap, "settings": a_settings, "topic": topic_name, "group": group_id,
               "stall": STALL_S, "records": 5})
    b = None
    try:
        a.read("ready", 120)
        with KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=100) as p:    # one batch: one poll
            for i in range(5):
                p.send(topic_name, value=f"held-{i}".encode(), partition=0)
            p.flush()
        holding = a.read("holding", 60)
        assert holding["pacemaker"] and holding["engaged"] and holding["state"] == "STABLE"
        b = KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id, client_id="b-member")
        got_by_b: list = []

        def poll_b() -> None:
            for records in b.poll(50).values():
                got_by_b.extend(records)

        deadline = time.monotonic() + 60
        while not (b.metrics()["assigned-partitions"] and b.acquisition_lock_timeout_ms() is not None):
            assert time.monotonic() < deadline, "B got no assignment"
            poll_b()
        a.send("stall")
        stalled = a.read("stalled", STALL_S + 30, while_waiting=poll_b)
        assert stalled["end"] - stalled["start"] >= STALL_S - 0.5 > SESSION_MS / 1000
        after = a.read("after", 60, while_waiting=poll_b)
        # same member, never fenced (a fenced member rejoins at epoch 0, then gets a new epoch
        # but loses what it acquired); the broker accepted A's acknowledgements
        assert after["member"] == holding["member"] and after["state"] == "STABLE"
        assert after["transitions"] == [] and after["assignment"] == holding["assignment"] == [0]
        assert after["epoch"] >= holding["epoch"]
        assert after["results"] == {f"TopicPartition(topic='{topic_name}', partition=0)": None}
        assert after["stats"]["failed"] == 0
        assert after["stats"]["sent"] >= STALL_S * 1000 // 1000 // 2    # the harness's 1 s interval, loosely
        for _ in range(10):
            poll_b()
        assert not got_by_b, [(r.offset, r.delivery_count) for r in got_by_b]
    finally:
        a.close()
        if b is not None:
            b.close()
