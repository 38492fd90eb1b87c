"""ParallelConsumer on a share group (Apache Kafka 4.4): several workers handle the records of
one partition at once; each handler's outcome acknowledges its record (ACCEPT, RELEASE,
REJECT), and nothing is accepted twice or lost."""
from __future__ import annotations

import collections
import threading
import time

import pytest

from kclient import errors as Errors
from kclient.admin import KafkaAdminClient
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.parallel import HandlerError, ParallelConsumer
from kclient.parallel.share_driver import ShareParallelConsumer
from kclient.producer import KafkaProducer
from kclient.share.consumer import KafkaShareConsumer

DEADLINE = 90.0


def earliest(bootstrap: str, group_id: str) -> None:
    with KafkaAdminClient(bootstrap_servers=bootstrap) as admin:
        admin.alter_group_configs(group_id, {"share.auto.offset.reset": "earliest"})
        deadline = time.monotonic() + 10
        while admin.describe_group_configs(group_id)["share.auto.offset.reset"].value != "earliest":
            assert time.monotonic() < deadline, "the group config did not apply"
            time.sleep(0.05)        # a check interval, not a wait for the condition


def produce(bootstrap: str, topic: str, values: list[bytes], batches: int) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        size = max(1, len(values) // batches)
        for i in range(0, len(values), size):
            for v in values[i:i + size]:
                p.send(topic, value=v, partition=0)
            p.flush(10)


def share_consumer(bootstrap: str, topic: str, group_id: str, **kw) -> KafkaShareConsumer:
    return KafkaShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group_id,
                              share_acknowledgement_mode="explicit", **kw)


def test_workers_share_one_partition_accept_once_release_and_reject(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    earliest(kafka.bootstrap, group_id)
    values = [b"%d" % i for i in range(300)]
    produce(kafka.bootstrap, topic_name, values + [b"fail-once", b"poison"], batches=6)
    want = set(values) | {b"fail-once"}

    lock = threading.Lock()
    accepted: collections.Counter = collections.Counter()
    attempts: collections.Counter = collections.Counter()
    delivery_counts: dict[bytes, list[int]] = collections.defaultdict(list)
    all_in = threading.Event()
    gate = threading.Barrier(4, timeout=30)      # 4 handlers of one partition run at the same time

    def handle(record):
        with lock:
            attempts[record.value] += 1
            delivery_counts[record.value].append(record.delivery_count)
        if record.value in (b"0", b"1", b"2", b"3"):
            gate.wait()
        if record.value == b"poison":
            raise ValueError("never handled")
        if record.value == b"fail-once" and record.delivery_count == 1:
            raise RuntimeError("transient")
        time.sleep(0.002)
        with lock:
            accepted[record.value] += 1
            if set(accepted) >= want and attempts[b"poison"]:
                all_in.set()

    def on_error(record, exc):
        return "reject" if record.value == b"poison" else "release"

    with share_consumer(kafka.bootstrap, topic_name, group_id, max_poll_records=500) as consumer:
        pc = ParallelConsumer(consumer, max_workers=8, on_error=on_error, commit_interval_ms=200)
        assert isinstance(pc, ShareParallelConsumer)
        runner = threading.Thread(target=pc.run, args=(handle,), kwargs={"stop": all_in})
        runner.start()
        runner.join(DEADLINE)
        assert not runner.is_alive(), f"not every record was handled: {len(accepted)} of {len(want)}"
        m = pc.metrics()
        assert set(accepted) == want and set(accepted.values()) == {1}, "a record was accepted twice"
        assert delivery_counts[b"fail-once"] == [1, 2]            # released, then delivered again
        assert attempts[b"poison"] == 1
        assert m.accepted == len(want) and m.released == 1 and m.rejected == 1, m
        assert m.max_in_flight >= 4 and m.outstanding == 0 and m.acknowledgement_failures == 0, m
        # everything accepted or rejected: nothing comes back, to this member or another
        assert not consumer.poll(1500)


def test_raise_stops_and_releases_what_was_not_handled(kafka, create_topic, topic_name, group_id):
    create_topic(kafka, topic_name, 1)
    earliest(kafka.bootstrap, group_id)
    values = [b"%d" % i for i in range(20)]
    produce(kafka.bootstrap, topic_name, values, batches=1)

    def handle(record):
        if record.value == b"5":
            raise KeyError("bad")

    with share_consumer(kafka.bootstrap, topic_name, group_id) as consumer:
        pc = ParallelConsumer(consumer, max_workers=1, on_error="raise")
        with pytest.raises(HandlerError) as info:
            pc.run(handle)
        assert info.value.offset == 5 and isinstance(info.value.__cause__, KeyError)
        m = pc.metrics()
        assert m.outstanding == 0 and m.accepted + m.released == 20 and m.released >= 1, m
    # the failed record and those not handled come back (delivery count 2), to a new member
    again: dict[bytes, int] = {}
    with share_consumer(kafka.bootstrap, topic_name, group_id) as consumer:
        deadline = time.monotonic() + 30
        while len(again) < m.released and time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                for r in records:
                    again[r.value] = r.delivery_count
                    consumer.acknowledge(r)
        assert b"5" in again and set(again.values()) == {2} and len(again) == m.released


def test_settings_that_do_not_fit_a_share_group_are_refused(kafka, topic_name, group_id):
    with KafkaShareConsumer(topic_name, bootstrap_servers=kafka.bootstrap, group_id=group_id) as implicit:
        with pytest.raises(Errors.IllegalArgumentError, match="share_acknowledgement_mode='explicit'"):
            ParallelConsumer(implicit)
    with share_consumer(kafka.bootstrap, topic_name, group_id) as consumer:
        with pytest.raises(Errors.ConfigurationError, match="keeps no order"):
            ParallelConsumer(consumer, ordering="key")
        with pytest.raises(Errors.ConfigurationError, match="'release', 'reject', 'raise'"):
            ParallelConsumer(consumer, on_error="skip")
        with pytest.raises(TypeError, match="max_queued_records"):
            ParallelConsumer(consumer, max_queued_records=5)
    with KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group_id, enable_auto_commit=False) as plain:
        assert type(ParallelConsumer(plain)) is ParallelConsumer
