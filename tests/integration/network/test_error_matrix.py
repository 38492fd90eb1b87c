"""Every API a group consumer sends, answered with injected errors by librdkafka's mock cluster.

One row per (API, injected answers): the retriable ones must be survived (the consumer still
reads every record once), the fatal ones must surface as the documented exception from
``poll()`` / ``commit()`` (not a hang, not a silent retry loop), and a broken connection
(ERR__TRANSPORT: the mock drops the connection instead of answering) must be reconnected.
Heartbeat, JoinGroup, SyncGroup, OffsetCommit's retriable codes, Fetch's retriable codes and
ListOffsets' are covered in more depth by test_coordinator_faults.py / test_consumer_faults.py;
this module is the breadth: each API at least once, retriable and fatal.

The injected answers are consumed by the next requests of that API, whichever broker gets
them; the stack is cleared after each row.
"""
from __future__ import annotations

import time

import pytest

from kclient import errors as Errors
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.producer import KafkaProducer
from kclient.protocol import ApiKey

RECORDS = 20
TRANSPORT = -195            # librdkafka's RD_KAFKA_RESP_ERR__TRANSPORT: the mock closes the connection
COORDINATOR_NOT_AVAILABLE, LOAD_IN_PROGRESS, NOT_COORDINATOR = 15, 14, 16
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED = 29, 30
UNKNOWN_MEMBER_ID = 25
NOT_LEADER, LEADER_NOT_AVAILABLE = 6, 5

#: (api, injected answers, expected): expected None = survived (every record read once),
#: an exception class = raised by poll().
MATRIX = [
    (ApiKey.FIND_COORDINATOR, [COORDINATOR_NOT_AVAILABLE, LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE], None),
    (ApiKey.FIND_COORDINATOR, [TRANSPORT], None),
    (ApiKey.FIND_COORDINATOR, [GROUP_AUTHORIZATION_FAILED], Errors.GroupAuthorizationFailedError),
    (ApiKey.JOIN_GROUP, [NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, UNKNOWN_MEMBER_ID], None),
    (ApiKey.JOIN_GROUP, [TRANSPORT], None),
    (ApiKey.JOIN_GROUP, [GROUP_AUTHORIZATION_FAILED], Errors.GroupAuthorizationFailedError),
    (ApiKey.SYNC_GROUP, [GROUP_AUTHORIZATION_FAILED], Errors.GroupAuthorizationFailedError),
    (ApiKey.OFFSET_FETCH, [LOAD_IN_PROGRESS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE], None),
    (ApiKey.OFFSET_FETCH, [TRANSPORT], None),
    (ApiKey.OFFSET_FETCH, [GROUP_AUTHORIZATION_FAILED], Errors.GroupAuthorizationFailedError),
    (ApiKey.LIST_OFFSETS, [NOT_LEADER, LEADER_NOT_AVAILABLE, TRANSPORT], None),
    (ApiKey.LIST_OFFSETS, [TOPIC_AUTHORIZATION_FAILED], Errors.TopicAuthorizationFailedError),
    (ApiKey.FETCH, [TRANSPORT, TRANSPORT], None),
    (ApiKey.METADATA, [TRANSPORT], None),
]


def _row_id(row) -> str:
    api, errors, expected = row
    return f"{ApiKey(api).name.lower()}-{'-'.join(str(e) for e in errors)}-{'raises' if expected else 'survives'}"


@pytest.fixture
def fed_topic(mock_faults, create_topic, topic_name):
    mock_faults.group_initial_rebalance_delay_ms(0)
    create_topic(mock_faults, topic_name, 1)
    with KafkaProducer(bootstrap_servers=mock_faults.bootstrap, linger_ms=5) as p:
        for i in range(RECORDS):
            p.send(topic_name, b"r%d" % i, partition=0)
        p.flush(20)
    yield topic_name
    for api in {int(row[0]) for row in MATRIX} | {int(ApiKey.OFFSET_COMMIT), int(ApiKey.LEAVE_GROUP),
                                                   int(ApiKey.HEARTBEAT)}:
        mock_faults.clear_request_errors(api)
    mock_faults.broker_set_rtt(-1, 0)
    mock_faults.group_initial_rebalance_delay_ms(3000)


def _consumer(mock, group_id, **extra) -> KafkaConsumer:
    """A group member; subscribe() it after ``_warm`` (see there)."""
    return KafkaConsumer(bootstrap_servers=mock.bootstrap, group_id=group_id, auto_offset_reset="earliest",
                         enable_auto_commit=False, retry_backoff_ms=50, reconnect_backoff_ms=20,
                         session_timeout_ms=6000, heartbeat_interval_ms=500, **extra)


def _subscribe(c: KafkaConsumer, topic: str) -> None:
    """Subscribe once the topic's metadata is known: otherwise the first JoinGroup can race the
    first Metadata answer, the leader assigns nothing, and the rejoin that follows costs 5 s on
    the mock (its rebalance wait), which would dominate every row."""
    deadline = time.monotonic() + 30
    while not c.partitions_for_topic(topic):
        assert time.monotonic() < deadline, f"no metadata for {topic}"
    c.subscribe([topic])


def _read_all(c: KafkaConsumer, timeout_s: float = 30.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < RECORDS:
        assert time.monotonic() < deadline, f"read {len(got)} of {RECORDS} records"
        got += [r.value for rs in c.poll(100).values() for r in rs]
    return got


@pytest.mark.parametrize("row", MATRIX, ids=[_row_id(r) for r in MATRIX])
def test_injected_errors_are_survived_or_raised(mock_faults, fed_topic, group_id, row):
    api, errors, expected = row
    mock_faults.push_request_errors(api, errors)
    with _consumer(mock_faults, group_id) as c:
        _subscribe(c, fed_topic)
        if expected is None:
            assert _read_all(c) == [b"r%d" % i for i in range(RECORDS)]
        else:
            deadline = time.monotonic() + 30
            with pytest.raises(expected):
                while time.monotonic() < deadline:
                    c.poll(100)


def test_fetch_authorization_failure_is_raised_by_poll(mock_faults, fed_topic, group_id):
    """Partition-level TOPIC_AUTHORIZATION_FAILED (the mock's API-level injection sets Fetch's
    top-level error, a session-level code that is retried instead)."""
    mock_faults.partition_push_request_errors(fed_topic, 0, ApiKey.FETCH, [TOPIC_AUTHORIZATION_FAILED])
    with _consumer(mock_faults, group_id) as c:
        _subscribe(c, fed_topic)
        deadline = time.monotonic() + 30
        with pytest.raises(Errors.TopicAuthorizationFailedError):
            while time.monotonic() < deadline:
                c.poll(100)


def test_offset_commit_authorization_failure_is_raised_and_later_commits_work(mock_faults, fed_topic, group_id):
    """(A commit of a stale generation failing with CommitFailedError is tested on Apache Kafka
    in test_coordinator.py.)"""
    with _consumer(mock_faults, group_id) as c:
        _subscribe(c, fed_topic)
        _read_all(c)
        mock_faults.push_request_errors(ApiKey.OFFSET_COMMIT, [GROUP_AUTHORIZATION_FAILED])
        with pytest.raises(Errors.GroupAuthorizationFailedError):
            c.commit()
        c.commit()
        assert c.committed(next(iter(c.assignment()))) == RECORDS


def test_heartbeat_authorization_failure_is_raised_by_poll(mock_faults, fed_topic, group_id):
    with _consumer(mock_faults, group_id) as c:
        _subscribe(c, fed_topic)
        _read_all(c)
        mock_faults.push_request_errors(ApiKey.HEARTBEAT, [GROUP_AUTHORIZATION_FAILED])
        deadline = time.monotonic() + 30
        with pytest.raises(Errors.GroupAuthorizationFailedError):
            while time.monotonic() < deadline:
                c.poll(100)


def test_leave_group_errors_do_not_fail_close(mock_faults, fed_topic, group_id):
    c = _consumer(mock_faults, group_id)
    _subscribe(c, fed_topic)
    _read_all(c)
    mock_faults.push_request_errors(ApiKey.LEAVE_GROUP, [NOT_COORDINATOR])
    t0 = time.monotonic()
    c.close()                                                 # logs, does not raise
    assert time.monotonic() - t0 < 30


def test_slow_brokers_are_waited_for_not_abandoned(mock_faults, fed_topic, group_id):
    """Every answer 250 ms late (well under request.timeout.ms): slower, nothing lost."""
    mock_faults.broker_set_rtt(-1, 250)
    with _consumer(mock_faults, group_id) as c:
        _subscribe(c, fed_topic)
        assert _read_all(c, 60) == [b"r%d" % i for i in range(RECORDS)]
