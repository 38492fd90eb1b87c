"""KafkaAdminClient's share-group and group-config operations against Apache Kafka 4.4, checked
through real share members and, for describe --offsets, Kafka's own ShareGroupCommand."""
from __future__ import annotations

import subprocess
import time

import pytest

from kclient import errors as Errors
from kclient.admin import KafkaAdminClient
from kclient.producer import KafkaProducer
from kclient.share.consumer import KafkaShareConsumer
from kclient.structs import TopicPartition
from kclient.testing.kafka import kafka_version
from kclient.testing.maven import MavenError, find_java, resolve_jars

SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"


def wait_for(predicate, timeout_s: float, step=None):
    deadline = time.monotonic() + timeout_s
    while True:
        if step is not None:
            step()
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        if step is None:
            time.sleep(0.05)        # a check interval, not a wait for the condition


def produce(bootstrap: str, topic: str, n: int, partition: int) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(n):
            p.send(topic, value=b"v%d" % i, partition=partition)
        p.flush(10)


def earliest_group(admin: KafkaAdminClient, group_id: str) -> None:
    """The group starts at the beginning of each partition (the broker applies group configs a
    moment after the call returns)."""
    admin.alter_group_configs(group_id, {"share.auto.offset.reset": "earliest"})
    assert wait_for(lambda: admin.describe_group_configs(group_id)["share.auto.offset.reset"].value == "earliest",
                    10)


def consume_all(consumer: KafkaShareConsumer, want: int, timeout_s: float = 30) -> int:
    got = 0
    deadline = time.monotonic() + timeout_s
    while got < want and time.monotonic() < deadline:
        got += sum(len(rs) for rs in consumer.poll(200).values())
    consumer.commit_sync(10000)
    return got


def test_describe_list_offsets_reset_delete_of_a_share_group(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 2)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    with KafkaAdminClient(bootstrap_servers=kafka.bootstrap) as admin:
        earliest_group(admin, group_id)
        produce(kafka.bootstrap, topic_name, 10, 0)
        with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                                client_id="admin-test") as member:
            assert consume_all(member, 10) == 10
            (desc,) = admin.describe_share_groups([group_id])
            assert desc.group_id == group_id and desc.state == "Stable"
            (m,) = desc.members
            assert m.client_id == "admin-test" and m.subscribed_topics == [topic_name]
            assert m.assignment == [tp0, tp1]
            assert desc.coordinator_id >= 0 and desc.group_epoch >= 1
            assert group_id in {g.group_id for g in admin.list_share_groups()}
            # every record accepted: none left to deliver (the persisted start offset may still
            # be the first batch's until the next write of the partition's state)
            offsets = wait_for(lambda: (i := admin.list_share_group_offsets(group_id).get(tp0)) and i.lag == 0
                               and i, 15)
            assert offsets and offsets.start_offset in (0, 10), admin.list_share_group_offsets(group_id)
            with pytest.raises(Errors.NonEmptyGroupError, match=f"{group_id}.*active members"):
                admin.alter_share_group_offsets(group_id, {tp0: 0})
            with pytest.raises(Errors.NonEmptyGroupError):
                admin.delete_share_group_offsets(group_id, [topic_name])
        assert wait_for(lambda: admin.describe_share_groups([group_id])[0].state == "Empty", 20)
        produce(kafka.bootstrap, topic_name, 5, 0)
        info = wait_for(lambda: (i := admin.list_share_group_offsets(group_id, [tp0]).get(tp0)) and i.lag == 5
                        and i, 10)
        assert info and info.start_offset in (0, 10), info

        # back to offset 3: records 3..14 are delivered again
        assert admin.alter_share_group_offsets(group_id, {tp0: 3}) == {tp0: None}
        assert admin.list_share_group_offsets(group_id, [tp0])[tp0].start_offset == 3
        with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id) as member:
            assert consume_all(member, 12) == 12
        assert wait_for(lambda: admin.describe_share_groups([group_id])[0].state == "Empty", 20)

        assert admin.delete_share_group_offsets(group_id, [topic_name]) == {topic_name: None}
        assert admin.list_share_group_offsets(group_id) == {}
        assert admin.delete_share_groups([group_id]) == {group_id: None}
        assert group_id not in {g.group_id for g in admin.list_share_groups()}
        with pytest.raises(Errors.GroupIdNotFoundError, match=group_id):
            admin.describe_share_groups([group_id])


def test_group_configs_set_read_and_reset(kafka, group_id):
    with KafkaAdminClient(bootstrap_servers=kafka.bootstrap) as admin:
        before = admin.describe_group_configs(group_id)
        assert before["share.record.lock.duration.ms"].source != "GROUP_CONFIG"
        admin.alter_group_configs(group_id, {"share.record.lock.duration.ms": 15000,
                                             "share.delivery.count.limit": 3})
        entries = wait_for(lambda: (e := admin.describe_group_configs(
            group_id, ["share.record.lock.duration.ms", "share.delivery.count.limit"]))
            ["share.delivery.count.limit"].value == "3" and e, 10)
        assert entries and set(entries) == {"share.record.lock.duration.ms", "share.delivery.count.limit"}
        assert entries["share.record.lock.duration.ms"].value == "15000"
        assert entries["share.record.lock.duration.ms"].source == "GROUP_CONFIG"
        admin.alter_group_configs(group_id, {"share.delivery.count.limit": None})
        assert wait_for(lambda: admin.describe_group_configs(group_id)["share.delivery.count.limit"].source
                        != "GROUP_CONFIG", 10)
        with pytest.raises(Errors.InvalidConfigError, match=group_id):
            admin.alter_group_configs(group_id, {"share.delivery.count.limit": 1000})


def _tools_classpath() -> str:
    try:
        jars = resolve_jars([f"org.apache.kafka:kafka-tools:{kafka_version()}"], f"kafka-tools-{kafka_version()}")
    except MavenError as exc:
        pytest.skip(f"kafka-tools is unavailable: {exc}")
    return ":".join(str(j) for j in jars)


def test_list_share_group_offsets_matches_kafkas_share_group_command(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 2)
    with KafkaAdminClient(bootstrap_servers=kafka.bootstrap) as admin:
        earliest_group(admin, group_id)
        produce(kafka.bootstrap, topic_name, 7, 1)
        with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id) as member:
            assert consume_all(member, 7) == 7
        produce(kafka.bootstrap, topic_name, 4, 1)
        ours = wait_for(lambda: (o := admin.list_share_group_offsets(group_id)).get(
            TopicPartition(topic_name, 1)) and o[TopicPartition(topic_name, 1)].lag == 4 and o, 10)
        assert ours
    out = subprocess.run(
        [find_java(), "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", _tools_classpath(), SHARE_GROUP_COMMAND, "--bootstrap-server",
         kafka.bootstrap, "--describe", "--offsets", "--group", group_id],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    theirs = {}
    for line in out.stdout.splitlines():
        cols = line.split()
        # GROUP TOPIC PARTITION START-OFFSET LAG; "-" for a partition without share state
        if len(cols) == 5 and cols[0] == group_id and cols[1] == topic_name:
            start = None if cols[3] == "-" else int(cols[3])
            lag = None if cols[4] == "-" else int(cols[4])
            theirs[TopicPartition(cols[1], int(cols[2]))] = (start, lag)
    assert theirs, out.stdout
    assert {tp: (i.start_offset, i.lag) for tp, i in ours.items()} == \
        {tp: v for tp, v in theirs.items() if v[0] is not None}, out.stdout
    assert theirs[TopicPartition(topic_name, 1)][1] == 4, out.stdout
