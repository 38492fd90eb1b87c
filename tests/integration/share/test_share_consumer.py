"""KafkaShareConsumer against Apache Kafka 4.4: delivery, acknowledgement modes, several members
on one partition."""
from __future__ import annotations

import threading
import time

import pytest

from kclient import errors as Errors
from kclient.producer import KafkaProducer
from kclient.share.consumer import AcknowledgeType, KafkaShareConsumer
from kclient.structs import TopicPartition


def wait_for(predicate, timeout_s: float, step=None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if step is not None:
            step()
        if predicate():
            return True
        if step is None:
            time.sleep(0.01)        # a check interval, not a wait for the condition
    return predicate()


def ready(consumer: KafkaShareConsumer, timeout_s: float = 60) -> None:
    """Poll until the broker answered a fetch for the member's partitions: from then on the share
    partitions exist, and records produced afterwards are delivered (share.auto.offset.reset is
    'latest' by default)."""
    assert wait_for(lambda: consumer.acquisition_lock_timeout_ms() is not None
                    and consumer.metrics()["assigned-partitions"] > 0, timeout_s,
                    step=lambda: consumer.poll(100)), "the share consumer got no assignment"
    got = consumer.poll(500)
    assert not got, f"records before any were produced: {got}"


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, batches: int = 1) -> None:
    """``values`` in ``batches`` producer batches (the broker hands out whole batches)."""
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        size = max(1, len(values) // batches)
        for i in range(0, len(values), size):
            for v in values[i:i + size]:
                p.send(topic, value=v, partition=partition)
            p.flush()


def collect(consumer: KafkaShareConsumer, want: int, timeout_s: float = 30, *, ack=None):
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for records in consumer.poll(200).values():
            for r in records:
                got.append(r)
                if ack is not None:
                    consumer.acknowledge(r, type=ack(r))
    return got


def test_implicit_mode_delivers_each_record_once_and_commit_reports_success(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id) as c:
        assert c.subscription() == {topic_name}
        ready(c)
        assert 1000 <= c.acquisition_lock_timeout_ms() <= 60000
        values = [f"m{i}".encode() for i in range(20)]
        produce(kafka.bootstrap, topic_name, values)
        got = collect(c, 20)
        assert [r.value for r in got] == values
        assert {r.delivery_count for r in got} == {1}
        assert all(r.topic == topic_name and r.partition == 0 for r in got)
        assert c.commit_sync(10000) == {TopicPartition(topic_name, 0): None}
        # accepted: nothing comes back
        assert not c.poll(1500)


def test_explicit_release_redelivers_with_delivery_count_plus_one_and_reject_never(kafka, create_topic,
                                                                                 topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                            share_acknowledgement_mode="explicit") as c:
        ready(c)
        results = []
        c.set_acknowledgement_commit_callback(lambda offsets, exc: results.append((offsets, exc)))
        produce(kafka.bootstrap, topic_name, [b"release-me", b"reject-me", b"accept-me"])
        kinds = {b"release-me": AcknowledgeType.RELEASE, b"reject-me": AcknowledgeType.REJECT,
                 b"accept-me": AcknowledgeType.ACCEPT}
        first = collect(c, 3, ack=lambda r: kinds[r.value])
        assert sorted((r.value, r.delivery_count) for r in first) == [
            (b"accept-me", 1), (b"reject-me", 1), (b"release-me", 1)]
        assert c.commit_sync(10000) == {TopicPartition(topic_name, 0): None}
        assert results and all(exc is None for _, exc in results)
        again = collect(c, 1, ack=lambda r: AcknowledgeType.ACCEPT)
        assert [(r.value, r.delivery_count, r.offset) for r in again] == [
            (b"release-me", 2, first[[r.value for r in first].index(b"release-me")].offset)]
        c.commit_sync(10000)
        assert not c.poll(1500)            # the rejected record never comes back


def test_explicit_mode_refuses_a_poll_with_records_unacknowledged_and_bad_acknowledgements(
        kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                            share_acknowledgement_mode="explicit") as c:
        ready(c)
        produce(kafka.bootstrap, topic_name, [b"a", b"b"])
        got = collect(c, 2, ack=None)
        assert len(got) == 2
        with pytest.raises(Errors.IllegalStateError, match="not acknowledged"):
            c.poll(0)
        c.acknowledge(got[0])
        with pytest.raises(Errors.IllegalStateError, match="already acknowledged"):
            c.acknowledge(got[0])
        with pytest.raises(Errors.IllegalStateError, match="not returned"):
            c.acknowledge(topic_name, 0, 12345, AcknowledgeType.ACCEPT)
        c.acknowledge(topic_name, 0, got[1].offset, AcknowledgeType.ACCEPT)
        assert not c.poll(500)
    with pytest.raises(Errors.IllegalStateError, match="closed"):
        c.acknowledge(got[0])


def test_implicit_mode_refuses_acknowledge(kafka, group_id, topic_name, create_topic):
    create_topic(kafka, topic_name, 1)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id) as c:
        with pytest.raises(Errors.IllegalStateError, match="explicit"):
            c.acknowledge(topic_name, 0, 0)


def test_several_members_on_one_partition_accept_every_record_exactly_once(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    members = [KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                                  share_acquire_mode="record_limit", max_poll_records=5) for _ in range(3)]
    try:
        for m in members:
            ready(m)
        total = 300
        values = [f"r{i}".encode() for i in range(total)]
        got: list[list[bytes]] = [[] for _ in members]
        stop = threading.Event()
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                while not stop.is_set():
                    for records in members[i].poll(200).values():
                        got[i].extend(r.value for r in records)
                        time.sleep(0.005 * len(records))      # a slow handler
            except BaseException as exc:   # reported by the test thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(members))]
        for t in threads:
            t.start()
        produce(kafka.bootstrap, topic_name, values, batches=60)
        assert wait_for(lambda: sum(len(g) for g in got) >= total or errors, 90, step=lambda: time.sleep(0.05))
        stop.set()
        for t in threads:
            t.join(10)
        assert not errors, errors
        every = [v for g in got for v in g]
        assert sorted(every) == sorted(values)            # each record once: no loss, no duplicate
        assert sum(1 for g in got if g) >= 2, [len(g) for g in got]
    finally:
        for m in members:
            m.close()


def test_renew_keeps_the_record_and_returns_it_with_the_same_delivery_count(kafka, create_topic, topic_name,
                                                                           group_id):
    create_topic(kafka, topic_name, 1)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                            share_acknowledgement_mode="explicit") as c:
        ready(c)
        results = []
        c.set_acknowledgement_commit_callback(lambda offsets, exc: results.append((offsets, exc)))
        produce(kafka.bootstrap, topic_name, [b"slow"])
        [first] = collect(c, 1, ack=lambda r: AcknowledgeType.RENEW)
        again = c.poll(5000)
        assert [(r.value, r.offset, r.delivery_count) for r in again[TopicPartition(topic_name, 0)]] == [
            (b"slow", first.offset, 1)]
        assert wait_for(lambda: results, 10, step=lambda: c.commit_sync(1000))
        assert [exc for _, exc in results] == [None] * len(results)
        c.acknowledge(again[TopicPartition(topic_name, 0)][0], type=AcknowledgeType.ACCEPT)
        assert c.commit_sync(10000) == {TopicPartition(topic_name, 0): None}
        assert not c.poll(1500)


def test_close_releases_unacknowledged_records_to_another_member(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    first = KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                               share_acknowledgement_mode="explicit")
    try:
        ready(first)
        produce(kafka.bootstrap, topic_name, [b"x", b"y"])
        got = collect(first, 2)
        first.acknowledge(got[0], type=AcknowledgeType.ACCEPT)    # sent by close; y is released
    finally:
        first.close()
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id) as second:
        again = collect(second, 1, timeout_s=60)
        assert [(r.value, r.delivery_count) for r in again] == [(b"y", 2)]


def test_close_releases_records_fetched_ahead_and_never_handed_out(kafka, create_topic, topic_name, group_id):
    # an application that works between polls gets the next records fetched ahead: the poll that
    # hands out y sends the next fetch at once, which acquires z for this member; close releases
    # z: the next member gets it long before its lock (30 s) runs out
    create_topic(kafka, topic_name, 1)
    first = KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                               share_acknowledgement_mode="explicit", max_poll_records=1)
    try:
        ready(first)
        produce(kafka.bootstrap, topic_name, [b"x", b"y", b"z"], batches=3)
        started = time.monotonic()
        [x] = collect(first, 1)
        first.acknowledge(x)
        # The application's work on x (not a wait for anything). The consumer fetches ahead when
        # that work is at least half of what a poll waits for its records: twice the wait for x,
        # so the premise holds on a slow machine too.
        time.sleep(min(max(0.5, 2 * (time.monotonic() - started)), 10.0))
        [y] = collect(first, 1)
        first.acknowledge(y)
        assert (x.value, y.value) == (b"x", b"y")
    finally:
        first.close()
    closed = time.monotonic()
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id) as second:
        again = collect(second, 1, timeout_s=20)
        assert [(r.value, r.delivery_count) for r in again] == [(b"z", 2)]
        assert time.monotonic() - closed < 20


def test_wakeup_interrupts_poll_and_iteration_yields_records(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id) as c:
        ready(c)
        c.wakeup()
        with pytest.raises(Errors.WakeupError):
            c.poll(10000)
        produce(kafka.bootstrap, topic_name, [b"i0", b"i1"])
        seen = []
        for record in c:
            seen.append(record.value)
            if len(seen) == 2:
                break
        assert seen == [b"i0", b"i1"]


def test_a_broker_without_share_groups_fails_at_subscribe_naming_the_feature(tansu, topic_name, group_id):
    # Tansu serves consumer groups but not share groups (no ShareGroupHeartbeat in ApiVersions)
    with pytest.raises(Errors.UnsupportedVersionError, match=r"share\.version") as info:
        KafkaShareConsumer(topic_name, bootstrap_servers=tansu.bootstrap, group_id=group_id)
    assert "Apache Kafka 4.2" in str(info.value) and "ShareGroupHeartbeat" in str(info.value)
    c = KafkaShareConsumer(bootstrap_servers=tansu.bootstrap, group_id=group_id)
    try:
        with pytest.raises(Errors.UnsupportedVersionError, match=r"share\.version"):
            c.subscribe([topic_name])
        assert c.subscription() == set()
    finally:
        c.close(5000)


def test_the_delivery_count_limit_archives_a_record_released_every_time(kafka, create_topic, topic_name, group_id):
    # share.delivery.count.limit is 5 by default: the fifth delivery is the last
    create_topic(kafka, topic_name, 1)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                            share_acknowledgement_mode="explicit") as c:
        ready(c)
        produce(kafka.bootstrap, topic_name, [b"poison"])
        counts = []
        for _ in range(5):
            [r] = collect(c, 1, ack=lambda r: AcknowledgeType.RELEASE)
            counts.append(r.delivery_count)
            c.commit_sync(10000)
        assert counts == [1, 2, 3, 4, 5]
        assert not c.poll(2000)


def test_unsubscribe_releases_what_the_member_holds_and_subscribe_joins_again(kafka, create_topic, topic_name,
                                                                              group_id):
    create_topic(kafka, topic_name, 1)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id,
                            share_acknowledgement_mode="explicit") as c:
        ready(c)
        produce(kafka.bootstrap, topic_name, [b"held"])
        [held] = collect(c, 1)
        c.unsubscribe()                                  # held was not acknowledged: released
        assert c.subscription() == set()
        with pytest.raises(Errors.IllegalStateError, match="not subscribed"):
            c.poll(0)
        c.subscribe([topic_name])
        [again] = collect(c, 1, timeout_s=60, ack=lambda r: AcknowledgeType.ACCEPT)
        assert (again.value, again.offset, again.delivery_count) == (b"held", held.offset, 2)


def test_a_partition_moving_to_a_new_member_is_forgotten_and_nothing_is_lost(kafka, create_topic, topic_name,
                                                                           group_id):
    create_topic(kafka, topic_name, 2)
    every = {TopicPartition(topic_name, p) for p in range(2)}
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id) as a:
        ready(a)
        assert a._coordinator.assignment() == every
        with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id) as b:
            # the assignor splits two partitions between two members
            assert wait_for(lambda: len(a._coordinator.assignment()) == 1 and len(b._coordinator.assignment()) == 1,
                            60, step=lambda: (a.poll(50), b.poll(50)))
            moved = next(iter(b._coordinator.assignment()))
            # a's session with the leader drops the partition it lost
            assert wait_for(lambda: all((a._client.metadata.cluster.topic_id(topic_name), moved.partition)
                                        not in s.partitions for s in a._fetcher.sessions.values()),
                            10, step=lambda: a.poll(50))
            values = {p: [f"p{p}-{i}".encode() for i in range(10)] for p in range(2)}
            for p in range(2):
                produce(kafka.bootstrap, topic_name, values[p], partition=p)
            got: dict[str, list] = {"a": [], "b": []}
            assert wait_for(lambda: len(got["a"]) + len(got["b"]) >= 20, 30,
                            step=lambda: [got[n].extend(rs) for n, c in (("a", a), ("b", b))
                                          for rs in c.poll(100).values()])
            assert sorted(r.value for r in got["a"] + got["b"]) == sorted(values[0] + values[1])
            # each member reads only the partition it is assigned now
            assert {r.partition for r in got["b"]} == {moved.partition}
            assert {r.partition for r in got["a"]} == {1 - moved.partition}


def test_a_second_thread_gets_concurrent_access_error(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id) as c:
        ready(c)
        inside = threading.Event()
        outcome: list = []

        def long_poll() -> None:
            inside.set()
            try:
                outcome.append(c.poll(30000))
            except BaseException as exc:      # reported by the test thread
                outcome.append(exc)

        t = threading.Thread(target=long_poll, daemon=True)
        t.start()
        assert inside.wait(10)
        assert wait_for(lambda: c._owner is not None, 10)
        with pytest.raises(Errors.ConcurrentAccessError):
            c.poll(0)
        c.wakeup()                                 # the one call other threads may make
        t.join(10)
        assert len(outcome) == 1 and isinstance(outcome[0], Errors.WakeupError)
