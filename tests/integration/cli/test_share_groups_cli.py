"""``kclient share-groups`` run as a real command against Apache Kafka 4.4: list, describe,
reset, delete offsets and delete, with the exit status and messages of refused operations."""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import time

from kclient import cli
from kclient.admin import KafkaAdminClient
from kclient.producer import KafkaProducer
from kclient.share.consumer import KafkaShareConsumer
from kclient.structs import TopicPartition


def share_groups(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    """The command in this process (its exit status, stdout and stderr), which is what it runs
    as ``kclient share-groups``; test_the_installed_command runs it as a real command once."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["share-groups", "--bootstrap-server", bootstrap, *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli.main(argv)
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def wait_for(predicate, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(0.05)        # a check interval, not a wait for the condition


def test_list_describe_reset_delete(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 2)
    bootstrap = kafka.bootstrap
    tp0 = TopicPartition(topic_name, 0)
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.alter_group_configs(group_id, {"share.auto.offset.reset": "earliest"})
        assert wait_for(lambda: admin.describe_group_configs(group_id)["share.auto.offset.reset"].value
                        == "earliest", 10)
        with KafkaProducer(bootstrap_servers=bootstrap) as p:
            for i in range(6):
                p.send(topic_name, b"v%d" % i, partition=0)
            p.flush(10)
        with KafkaShareConsumer(topic_name, bootstrap_servers=bootstrap, group_id=group_id,
                                client_id="cli-member") as member:
            got, deadline = 0, time.monotonic() + 30
            while got < 6 and time.monotonic() < deadline:
                got += sum(len(rs) for rs in member.poll(200).values())
            member.commit_sync(10000)
            assert got == 6

            members = share_groups(bootstrap, "--describe", group_id, "--members")
            assert members.returncode == 0, members.stderr
            header, row = members.stdout.splitlines()
            assert header.split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
            assert row.split()[0] == group_id and "cli-member" in row.split()
            assert row.split()[-2:] == ["2", f"{topic_name}:0,1"]

            busy = share_groups(bootstrap, "--reset-offsets", group_id, "--topic", topic_name, "--to-earliest",
                                "--execute")
            assert busy.returncode == 1 and "active members" in busy.stderr, busy

        listed = share_groups(bootstrap, "--list")
        assert listed.returncode == 0 and group_id in listed.stdout.split(), listed
        state = wait_for(lambda: (r := share_groups(bootstrap, "--describe", group_id, "--state"))
                         and "Empty" in r.stdout and r, 20)
        assert state and state.stdout.splitlines()[0].split() == ["GROUP", "COORDINATOR-ID", "STATE", "#MEMBERS"]
        assert state.stdout.splitlines()[1].split()[2:] == ["Empty", "0"], state

        offsets = wait_for(lambda: (r := share_groups(bootstrap, "--describe", group_id))
                           and f"{group_id} {topic_name} 0" in " ".join(r.stdout.split()) and r, 15)
        assert offsets and offsets.returncode == 0, offsets
        lines = offsets.stdout.splitlines()
        assert lines[0] == f"Share group '{group_id}' has no active members."
        assert lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
        assert lines[2].split()[:3] == [group_id, topic_name, "0"] and lines[2].split()[4] == "0"

        dry = share_groups(bootstrap, "--reset-offsets", group_id, "--topic", f"{topic_name}:0", "--to-offset", "2")
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.splitlines()[1].split() == [group_id, topic_name, "0", "2"]
        assert "dry run" in dry.stdout
        assert admin.list_share_group_offsets(group_id)[tp0].start_offset != 2
        done = share_groups(bootstrap, "--reset-offsets", "--group", group_id, "--topic", f"{topic_name}:0",
                            "--to-offset", "2", "--execute")
        assert done.returncode == 0 and "dry run" not in done.stdout, done
        assert admin.list_share_group_offsets(group_id)[tp0].start_offset == 2
        latest = share_groups(bootstrap, "--reset-offsets", group_id, "--all-topics", "--to-latest", "--execute")
        assert latest.returncode == 0, latest.stderr
        assert admin.list_share_group_offsets(group_id)[tp0].start_offset == 6

        deleted_offsets = share_groups(bootstrap, "--delete-offsets", group_id, "--topic", topic_name)
        assert deleted_offsets.returncode == 0, deleted_offsets.stderr
        assert admin.list_share_group_offsets(group_id) == {}

        deleted = share_groups(bootstrap, "--delete", group_id)
        assert deleted.returncode == 0 and "successful" in deleted.stdout, deleted
        gone = share_groups(bootstrap, "--describe", group_id)
        assert gone.returncode == 1 and "does not exist" in gone.stderr, gone
        again = share_groups(bootstrap, "--delete", group_id)
        assert again.returncode == 1 and "does not exist" in again.stderr, again


def test_a_missing_topic_is_refused(kafka, group_id, topic_name):
    r = share_groups(kafka.bootstrap, "--reset-offsets", group_id, "--topic", topic_name + "-none", "--to-earliest")
    assert r.returncode == 1 and "does not exist" in r.stderr, r


def test_the_installed_command(kafka, group_id):
    r = subprocess.run([sys.executable, "-m", "kclient", "share-groups", "--bootstrap-server", kafka.bootstrap,
                        "--describe", group_id], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"share group {group_id!r} does not exist" in r.stderr, r
