"""poll_columnar's last step: when its drain emptied the buffer and a Fetch answer completed
on a receive thread meanwhile, the answer is taken and the next fetch sent before the poll
returns (the broker would otherwise wait until the application polls again). Per-record
polls, and columnar polls that leave answers buffered, do not look.

No broker: answers are put into the consumer's FetchBuffer as a Fetch would; the network
client's calls are recorded.
"""
from __future__ import annotations

from kcore import records as R

from kclient.clock import FakeClock
from kclient.consumer.fetch_buffer import CompletedFetch
from kclient.consumer.kafka_consumer import KafkaConsumer
from kclient.structs import TopicPartition
from lock_holder import held_by_another_thread

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)


def consumer_with_answers(calls: list, waiting: list, per_partition: int = 100) -> KafkaConsumer:
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9", api_version=(3, 0), enable_auto_commit=False,
                             clock=FakeClock())
    consumer.assign([TP0, TP1])
    for tp in (TP0, TP1):
        consumer.seek(tp, 0)
    fetcher = consumer._fetcher
    fetcher.send_fetches = lambda: calls.append("send_fetches") or 0
    client = consumer._client
    client.frames_waiting = lambda: calls.append("frames_waiting") or bool(waiting and waiting.pop())
    client.transmit_sends = lambda: calls.append("transmit_sends")
    client.send_queued = lambda: calls.append("send_queued")
    buffer = fetcher.buffer
    buffer.check_assignment()
    raw = R.encode_batch([(None, 1_700_000_000_000, None, b"%d" % i, []) for i in range(per_partition)],
                         base_offset=0)
    for tp in (TP0, TP1):
        pipe = buffer.pipe(tp)
        buffer.add(CompletedFetch(tp, 0, pipe.epoch, consumer.subscription_state.assignment_id,
                                  memoryview(raw), None, buffer.new_frame(len(raw))), pipe)
    return consumer


def test_an_answer_waiting_after_the_drain_is_taken_and_followed_before_the_poll_returns():
    calls: list = []
    consumer = consumer_with_answers(calls, waiting=[True])
    try:
        polled = consumer.poll_columnar(max_records=1_000)
        assert {tp: len(cols) for tp, cols in polled.items()} == {TP0: 100, TP1: 100}
        assert calls == ["send_fetches", "send_queued", "frames_waiting",
                         "transmit_sends", "send_fetches", "send_queued"]
        assert consumer.position(TP0) == 100 and consumer.position(TP1) == 100
    finally:
        consumer.close(autocommit=False)


def test_nothing_waiting_costs_one_look():
    calls: list = []
    consumer = consumer_with_answers(calls, waiting=[])
    try:
        assert sum(len(c) for c in consumer.poll_columnar(max_records=1_000).values()) == 200
        assert calls == ["send_fetches", "send_queued", "frames_waiting"]
    finally:
        consumer.close(autocommit=False)


def test_a_poll_that_leaves_answers_buffered_does_not_look():
    calls: list = []
    consumer = consumer_with_answers(calls, waiting=[True])
    try:
        assert sum(len(c) for c in consumer.poll_columnar(max_records=150).values()) == 150
        assert calls == ["send_fetches", "send_queued"]
    finally:
        consumer.close(autocommit=False)


def test_per_record_polls_do_not_look():
    calls: list = []
    consumer = consumer_with_answers(calls, waiting=[True])
    try:
        assert sum(len(r) for r in consumer.poll(max_records=1_000).values()) == 200
        assert calls == ["send_fetches", "send_queued"]
    finally:
        consumer.close(autocommit=False)


def test_the_look_defers_to_a_poll_running_in_another_thread():
    """The network client's connections belong to whoever holds its poll lock: while another
    thread polls (a heartbeat thread, say), the look says nothing waits, and that poll takes
    the responses."""
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:9", api_version=(3, 0), enable_auto_commit=False)
    try:
        client = consumer._client
        client.client.frames_waiting = lambda: True
        assert client.frames_waiting()
        with held_by_another_thread(client._lock):
            assert not client.frames_waiting()
        assert client.frames_waiting()
    finally:
        consumer.close(autocommit=False)
