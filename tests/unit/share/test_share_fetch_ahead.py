"""A share consumer asks for the next records as soon as a poll hands out the last ones it
holds (so they arrive while the application works), with the acknowledgements already made;
not in the record_limit acquire mode. A scripted client stands in for the broker."""
from __future__ import annotations

import uuid

import pytest

from kcore.records import encode_batch

from kclient import errors as Errors
from kclient.network.future import RequestFuture
from kclient.network.metadata import Node
from kclient.protocol import ApiKey
from kclient.share.consumer import KafkaShareConsumer
from kclient.share.fetcher import Acquired
from kclient.structs import TopicPartition

TID = uuid.uuid4()
TP = TopicPartition("orders", 0)
LEADER = Node(1, "127.0.0.1", 9092)


class FakeCluster:
    def topic_id(self, topic):
        return TID if topic == "orders" else None

    def topic_name(self, tid):
        return "orders" if tid == TID else None

    def leader_for(self, tp):
        return LEADER


class FakeMetadata:
    cluster = FakeCluster()

    def request_update(self):
        pass


class FakeClient:
    def __init__(self):
        self.metadata = FakeMetadata()
        self.sent: list[tuple[int, int, dict, RequestFuture]] = []

    def send(self, node, api, body):
        f: RequestFuture = RequestFuture()
        self.sent.append((node, api, body, f))
        return f


def records(base: int, n: int) -> bytes:
    return encode_batch([(None, 1000 + i, None, f"v{base + i}".encode(), []) for i in range(n)], base_offset=base)


def answer(base: int, n: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": 15000,
            "node_endpoints": [], "responses": [{"topic_id": TID, "partitions": [
                {"partition_index": 0, "error_code": 0, "error_message": None, "acknowledge_error_code": 0,
                 "acknowledge_error_message": None, "current_leader": {"leader_id": 1, "leader_epoch": 0},
                 "records": records(base, n),
                 "acquired_records": [{"first_offset": base, "last_offset": base + n - 1, "delivery_count": 1}]}]}]}


@pytest.fixture
def make():
    made = []

    def make_consumer(**settings):
        c = KafkaShareConsumer(bootstrap_servers="127.0.0.1:1", group_id="g", **settings)
        c._subscription = {"orders"}
        fake = FakeClient()
        c._fetcher._client = fake
        c._coordinator.assignment = lambda: {TP}             # type: ignore[method-assign]
        c._client.poll_no_wakeup = lambda timeout_ms=0: None   # type: ignore[method-assign]

        def wait(timer):       # the network round of a poll: whatever the broker answered
            c._take_fetched()
            if not c._buffer and not c._fetcher.in_flight():
                c._fetcher.send_fetches({TP})
        c._wait_for_records = wait                            # type: ignore[method-assign]
        made.append(c)
        return c, fake
    yield make_consumer
    for c in made:
        c._closed = True
        c._client.close()


def fetches(fake):
    return [body for _, api, body, _ in fake.sent if api == int(ApiKey.SHARE_FETCH)]


def acks_of(body):
    return [(b["first_offset"], b["last_offset"], b["acknowledge_types"])
            for t in body["topics"] for p in t["partitions"] for b in p["acknowledgement_batches"]]


@pytest.mark.parametrize("columnar", [False, True])
def test_a_poll_that_hands_out_the_last_records_sends_the_next_fetch_at_once(make, columnar):
    c, fake = make()
    poll = c.poll_columnar if columnar else c.poll
    assert poll(0) == {} and len(fetches(fake)) == 1
    fake.sent[-1][3].complete(answer(0, 3))
    assert len(poll(0)[TP]) == 3
    # the next fetch left with the poll: nothing acknowledged yet (implicit mode accepts the
    # records at the next poll)
    assert len(fetches(fake)) == 2 and acks_of(fetches(fake)[-1]) == []
    fake.sent[-1][3].complete(answer(3, 2))
    assert [r.offset for r in (poll(0)[TP])] == [3, 4]
    # the fetch after it carries the acceptance of the first poll's records
    assert len(fetches(fake)) == 3 and acks_of(fetches(fake)[-1]) == [(0, 2, [1])]
    # a poll while that fetch is in flight waits for it; no second request to the broker
    assert poll(0) == {} and len(fetches(fake)) == 3
    fake.sent[-1][3].complete(answer(5, 1))
    assert [r.offset for r in (poll(0)[TP])] == [5]
    assert acks_of(fetches(fake)[-1]) == [(3, 4, [1])]


def test_records_left_for_the_next_poll_send_no_fetch(make):
    c, fake = make()
    c.poll(0)
    fake.sent[-1][3].complete(answer(0, 2))
    c._take_fetched()
    c._buffer.append(Acquired(TP, records(5, 1), ((5, 5, 1),)))     # a second answer held
    assert [r.offset for r in c.poll(0, max_records=1)[TP]] == [0, 1]   # a whole batch
    assert len(fetches(fake)) == 1           # records still held: no fetch yet
    assert [r.offset for r in c.poll(0, max_records=1)[TP]] == [5]
    assert len(fetches(fake)) == 2 and acks_of(fetches(fake)[-1]) == [(0, 1, [1])]


def test_record_limit_mode_does_not_fetch_ahead(make):
    c, fake = make(share_acquire_mode="record_limit")
    c.poll(0)
    fake.sent[-1][3].complete(answer(0, 3))
    assert len(c.poll(0)[TP]) == 3
    assert len(fetches(fake)) == 1           # the member holds no more than max.poll.records


def test_an_error_while_fetching_ahead_is_left_to_the_next_poll(make):
    c, fake = make()
    c.poll(0)
    fake.sent[-1][3].complete(answer(0, 3))
    send = fake.send

    def broken(node, api, body):
        raise Errors.KafkaConnectionError("gone")
    fake.send = broken
    assert [r.offset for r in c.poll(0)[TP]] == [0, 1, 2]      # the records still reach the application
    fake.send = send
    assert c.poll(0) == {}
    assert len(fetches(fake)) == 2 and acks_of(fetches(fake)[-1]) == [(0, 2, [1])]
