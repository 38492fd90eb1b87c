"""Share groups with per-group broker configs (IncrementalAlterConfigs on the GROUP resource),
against Apache Kafka 4.4: the acquisition lock runs out, the delivery count limit archives,
RENEW extends the lock, and a member killed with SIGKILL loses nothing.

The harness lowers ``group.share.min.record.lock.duration.ms`` to 1 s, so a test's lock lasts
2 s instead of the 15 s minimum.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

from kclient.producer import KafkaProducer
from kclient.share.consumer import AcknowledgeType, KafkaShareConsumer
from kclient.structs import TopicPartition
from kclient.testing.group_configs import alter_group_configs

import repo_paths
from test_share_consumer import collect, ready, wait_for  # noqa: E402

REPO = str(repo_paths.REPO)
LOCK_MS = 2000


def produce_one_batch(bootstrap: str, topic: str, values: list[bytes]) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=500) as p:
        for v in values:
            p.send(topic, value=v, partition=0)
        p.flush()


def explicit(kafka, topic: str, group: str, **kw) -> KafkaShareConsumer:
    return KafkaShareConsumer(topic, bootstrap_servers=kafka.bootstrap, group_id=group,
                              share_acknowledgement_mode="explicit", **kw)


def test_an_unacknowledged_record_comes_back_after_the_lock_timeout_to_another_member(kafka, create_topic,
                                                                                     topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    alter_group_configs(kafka.bootstrap, group_id, {"share.record.lock.duration.ms": str(LOCK_MS)})
    a, b = explicit(kafka, topic_name, group_id), explicit(kafka, topic_name, group_id)
    try:
        for m in (a, b):
            ready(m)
        assert a.acquisition_lock_timeout_ms() == LOCK_MS
        produce_one_batch(kafka.bootstrap, topic_name, [b"l0", b"l1", b"l2"])
        # whichever member fetches the batch first holds it and never acknowledges it
        got: dict[str, list] = {"a": [], "b": []}
        assert wait_for(lambda: got["a"] or got["b"], 30, step=lambda: [
            got[n].extend(r for rs in m.poll(100).values() for r in rs) for n, m in (("a", a), ("b", b))])
        holder, other = ("a", "b") if got["a"] else ("b", "a")
        other_member = a if other == "a" else b
        assert [(r.value, r.delivery_count) for r in got[holder]] == [(b"l0", 1), (b"l1", 1), (b"l2", 1)]
        held_at = time.monotonic()
        again = collect(other_member, 3, timeout_s=30, ack=lambda r: AcknowledgeType.ACCEPT)
        assert time.monotonic() - held_at >= LOCK_MS / 1000 - 0.5
        assert [(r.value, r.delivery_count) for r in again] == [(b"l0", 2), (b"l1", 2), (b"l2", 2)]
        assert other_member.commit_sync(10000) == {TopicPartition(topic_name, 0): None}
    finally:
        a.close(5000)
        b.close(5000)


def test_the_delivery_count_limit_of_the_group_archives(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    alter_group_configs(kafka.bootstrap, group_id, {"share.delivery.count.limit": "2"})
    with explicit(kafka, topic_name, group_id) as c:
        ready(c)
        produce_one_batch(kafka.bootstrap, topic_name, [b"poison"])
        counts = []
        for _ in range(2):
            [r] = collect(c, 1, ack=lambda r: AcknowledgeType.RELEASE)
            counts.append(r.delivery_count)
            assert c.commit_sync(10000) == {TopicPartition(topic_name, 0): None}
        assert counts == [1, 2]
        assert not c.poll(2000)            # released on its last delivery: archived


def test_renew_keeps_the_lock_past_its_duration(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    alter_group_configs(kafka.bootstrap, group_id, {"share.record.lock.duration.ms": str(LOCK_MS)})
    a, b = explicit(kafka, topic_name, group_id), explicit(kafka, topic_name, group_id)
    try:
        ready(a)
        produce_one_batch(kafka.bootstrap, topic_name, [b"slow"])
        [record] = collect(a, 1)
        ready(b)
        stolen: list = []
        start = time.monotonic()
        # two lock durations and more, renewing all the while; b polls and must get nothing
        while time.monotonic() - start < 2.5 * LOCK_MS / 1000:
            a.acknowledge(record, type=AcknowledgeType.RENEW)
            assert a.commit_sync(5000) == {TopicPartition(topic_name, 0): None}
            [record] = a.poll(1000)[TopicPartition(topic_name, 0)]
            assert (record.value, record.delivery_count) == (b"slow", 1)
            stolen.extend(r for rs in b.poll(200).values() for r in rs)
        assert not stolen
        a.acknowledge(record, type=AcknowledgeType.ACCEPT)
        assert a.commit_sync(10000) == {TopicPartition(topic_name, 0): None}
        assert not b.poll(LOCK_MS + 500)
    finally:
        a.close(5000)
        b.close(5000)


KILLED_MEMBER = r'''
import json, sys, time
from kclient.share.consumer import KafkaShareConsumer

cfg = json.loads(sys.argv[1])
c = KafkaShareConsumer(cfg["topic"], bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"],
                       share_acknowledgement_mode="explicit")
deadline = time.monotonic() + 90
while c.acquisition_lock_timeout_ms() is None or not c.metrics()["assigned-partitions"]:
    assert not c.poll(100) and time.monotonic() < deadline
print(json.dumps({"phase": "ready"}), flush=True)
held = []
while not held:
    for records in c.poll(200).values():
        held.extend(r.value.decode() for r in records)
print(json.dumps({"phase": "holding", "values": held}), flush=True)
while True:          # never acknowledges; killed by the test
    time.sleep(1)
'''


def test_a_member_killed_with_sigkill_loses_nothing(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    alter_group_configs(kafka.bootstrap, group_id, {"share.record.lock.duration.ms": str(LOCK_MS)})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    cfg = {"bootstrap": kafka.bootstrap, "topic": topic_name, "group": group_id}
    child = subprocess.Popen([sys.executable, "-c", KILLED_MEMBER, json.dumps(cfg)], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, text=True)
    survivor = None
    try:
        def read(phase: str) -> dict:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if select.select([child.stdout], [], [], 0.5)[0]:
                    line = child.stdout.readline()
                    assert line, f"the member exited (rc {child.wait()}) before {phase}"
                    msg = json.loads(line)
                    if msg["phase"] == phase:
                        return msg
            raise AssertionError(f"the member did not reach {phase}")

        read("ready")
        values = [f"k{i}".encode() for i in range(20)]
        produce_one_batch(kafka.bootstrap, topic_name, values)
        holding = read("holding")
        assert sorted(holding["values"]) == sorted(v.decode() for v in values)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        survivor = KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                                      share_acknowledgement_mode="explicit")
        again = collect(survivor, 20, timeout_s=60, ack=lambda r: AcknowledgeType.ACCEPT)
        assert sorted(r.value for r in again) == sorted(values)
        assert {r.delivery_count for r in again} == {2}
        assert survivor.commit_sync(10000) == {TopicPartition(topic_name, 0): None}
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(30)
        if survivor is not None:
            survivor.close(5000)
