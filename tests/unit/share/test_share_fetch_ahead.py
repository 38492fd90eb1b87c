"""A share consumer whose application works long enough between polls asks for the next
records as soon as a poll takes the last ones it holds (so they arrive while the application
works), with the acknowledgements already made; a fast application's polls fetch after taking
their records, as do those in the record_limit acquire mode. A scripted client stands in for
the broker, a fake clock for time."""
from __future__ import annotations

import pytest

from kclient import errors as Errors
from kclient.clock import FakeClock
from kclient.protocol import ApiKey
from kclient.share.consumer import KafkaShareConsumer
from kclient.share.fetcher import Acquired
from kclient.structs import TopicPartition
from share_fakes import FakeClient, fetch_answer, part, records_bytes

TP = TopicPartition("orders", 0)


def answer(base: int, n: int) -> dict:
    return fetch_answer([part(0, records_bytes(base, n), [(base, base + n - 1, 1)])])


@pytest.fixture
def make():
    made = []

    def make_consumer(**settings):
        clock = FakeClock()
        c = KafkaShareConsumer(bootstrap_servers="127.0.0.1:1", group_id="g", clock=clock, **settings)
        c._subscription = {"orders"}
        fake = FakeClient()
        fake.clock = clock
        fake.rtt_ms = 0
        c._fetcher._client = fake
        c._coordinator.assignment = lambda: {TP}             # type: ignore[method-assign]
        c._client.send_queued = lambda: None   # type: ignore[method-assign]

        def wait(timer):       # the network round of a poll: whatever the broker answered
            if fake.rtt_ms:     # the poll waits this long for the answer
                clock.advance(fake.rtt_ms)
                fake.rtt_ms = 0
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


def answered(fake, base, n, *, waited_ms=0):
    """The last request is answered with records base..base+n-1; the next poll waits
    ``waited_ms`` for the answer (0: it is there when the poll begins)."""
    fake.sent[-1][3].complete(answer(base, n))
    fake.rtt_ms = waited_ms


def slow_start(c, fake, poll):
    """Two rounds of an application working 100 ms between polls on a broker answering in
    5 ms: the first poll with records has nothing to go by, the next one fetches ahead."""
    assert poll(0) == {} and len(fetches(fake)) == 1
    answered(fake, 0, 3, waited_ms=5)
    assert len(poll(0)[TP]) == 3 and len(fetches(fake)) == 1
    fake.clock.advance(100)
    assert poll(0) == {} and len(fetches(fake)) == 2 and acks_of(fetches(fake)[-1]) == [(0, 2, [1])]
    answered(fake, 3, 2, waited_ms=5)


@pytest.mark.parametrize("columnar", [False, True])
def test_a_slow_application_gets_the_next_records_fetched_ahead(make, columnar):
    c, fake = make()
    poll = c.poll_columnar if columnar else c.poll
    slow_start(c, fake, poll)
    got = poll(0)[TP]
    assert [r.offset for r in got] == [3, 4]
    # the next fetch left with the poll: nothing new acknowledged yet (implicit mode accepts
    # the records at the next poll), and not parked at the broker
    assert len(fetches(fake)) == 3 and acks_of(fetches(fake)[-1]) == []
    assert fetches(fake)[-1]["max_wait_ms"] == 0 and fetches(fake)[-2]["max_wait_ms"] == 500
    fake.clock.advance(100)
    answered(fake, 5, 1)                     # there when the application comes back
    assert [r.offset for r in (poll(0)[TP])] == [5]
    # the fetch after it carries the acceptance of the records before
    assert len(fetches(fake)) == 4 and acks_of(fetches(fake)[-1]) == [(3, 4, [1])]
    # a poll while that fetch is in flight waits for it; no second request to the broker
    fake.clock.advance(100)
    assert poll(0) == {} and len(fetches(fake)) == 4


def test_a_fetch_sent_ahead_is_handed_to_its_connection_without_a_network_poll(make):
    # the next poll's network poll reads the answer: the poll returning records only hands
    # the request to the connection (no select, no timeouts, no completions of its own)
    c, fake = make()
    slow_start(c, fake, c.poll)
    handed: list[int] = []
    polled: list[tuple] = []
    c._client.send_queued = lambda: handed.append(len(fetches(fake)))   # type: ignore[method-assign]
    c._client.poll = lambda *a, **kw: polled.append(a)                  # type: ignore[method-assign]
    c._client.poll_no_wakeup = lambda *a, **kw: polled.append(a)        # type: ignore[method-assign]
    assert [r.offset for r in c.poll(0)[TP]] == [3, 4]
    assert handed == [3] and polled == []


def test_a_fast_application_fetches_after_taking_its_records(make):
    c, fake = make()
    assert c.poll(0) == {}
    answered(fake, 0, 3, waited_ms=5)
    assert len(c.poll(0)[TP]) == 3
    assert c.poll(0) == {} and len(fetches(fake)) == 2
    answered(fake, 3, 2, waited_ms=5)
    # no time between the polls against 5 ms waited: fetching ahead would hide nothing
    assert [r.offset for r in c.poll(0)[TP]] == [3, 4] and len(fetches(fake)) == 2
    assert c.poll(0) == {} and acks_of(fetches(fake)[-1]) == [(3, 4, [1])]


def test_records_left_for_the_next_poll_send_no_fetch(make):
    c, fake = make()
    slow_start(c, fake, c.poll)
    c._take_fetched()
    c._buffer.append(Acquired(TP, records_bytes(8, 1), ((8, 8, 1),)))     # a second answer held
    assert [r.offset for r in c.poll(0, max_records=1)[TP]] == [3, 4]   # a whole batch
    assert len(fetches(fake)) == 2           # records still held: no fetch yet
    fake.clock.advance(100)
    assert [r.offset for r in c.poll(0, max_records=1)[TP]] == [8]
    assert len(fetches(fake)) == 3 and acks_of(fetches(fake)[-1]) == [(3, 4, [1])]


def test_record_limit_mode_does_not_fetch_ahead(make):
    c, fake = make(share_acquire_mode="record_limit")
    assert c.poll(0) == {}
    answered(fake, 0, 3, waited_ms=5)
    assert len(c.poll(0)[TP]) == 3
    fake.clock.advance(100)
    assert c.poll(0) == {} and len(fetches(fake)) == 2
    answered(fake, 3, 2, waited_ms=5)
    assert len(c.poll(0)[TP]) == 2
    assert len(fetches(fake)) == 2           # the member holds no more than max.poll.records


def test_an_error_while_fetching_ahead_is_left_to_the_next_poll(make):
    c, fake = make()
    slow_start(c, fake, c.poll)
    send = fake.send

    def broken(node, api, body):
        raise Errors.KafkaConnectionError("gone")
    fake.send = broken
    assert [r.offset for r in c.poll(0)[TP]] == [3, 4]      # the records still reach the application
    fake.send = send
    fake.clock.advance(100)
    assert c.poll(0) == {}
    assert len(fetches(fake)) == 3 and acks_of(fetches(fake)[-1]) == [(3, 4, [1])]


def test_a_fetch_ahead_with_acknowledgements_waits_a_moment_for_the_room_they_free(make):
    """The broker frees acknowledged records' locks only once it has written their state:
    answered at once, a fetch carrying acknowledgements would find no room for the records
    they free. It waits a moment for them, not the whole fetch.max.wait.ms."""
    c, fake = make()
    slow_start(c, fake, c.poll)
    assert [r.offset for r in c.poll(0)[TP]] == [3, 4]
    assert fetches(fake)[-1]["max_wait_ms"] == 0          # nothing acknowledged in it
    fake.clock.advance(100)
    answered(fake, 5, 2)
    assert [r.offset for r in c.poll(0)[TP]] == [5, 6]
    ahead = fetches(fake)[-1]
    assert acks_of(ahead) == [(3, 4, [1])] and ahead["max_wait_ms"] == 100
    # never longer than fetch.max.wait.ms
    c2, fake2 = make(fetch_max_wait_ms=40)
    slow_start(c2, fake2, c2.poll)
    assert [r.offset for r in c2.poll(0)[TP]] == [3, 4]
    fake2.clock.advance(100)
    answered(fake2, 5, 2)
    c2.poll(0)
    assert acks_of(fetches(fake2)[-1]) == [(3, 4, [1])] and fetches(fake2)[-1]["max_wait_ms"] == 40


def test_fetches_ahead_that_bring_nothing_are_skipped_more_and_more(make):
    """While the records in hand fill the partitions' in-flight limits, a fetch sent ahead
    brings (almost) nothing: after such an answer the next 1, then 2, 4, ... fetches ahead are
    skipped (those polls fetch after taking their records); an answer with records ends it."""
    c, fake = make()
    slow_start(c, fake, c.poll)
    base = 3

    def round_trip(ahead_brings: int) -> bool:
        """One poll of a slow application: takes what is held, answers the fetch it sent (if
        it sent one ahead) with ``ahead_brings`` records; whether it fetched ahead."""
        nonlocal base
        sent = len(fetches(fake))
        got = c.poll(0)
        if not got:        # nothing held: this poll fetched; its answer comes at the next one
            answered(fake, base, 4, waited_ms=5)
            base += 4
            return False
        ahead = len(fetches(fake)) > sent
        if ahead:
            answered(fake, base, ahead_brings) if ahead_brings else fake.sent[-1][3].complete(
                fetch_answer([part(0)]))
            base += ahead_brings
        fake.clock.advance(100)
        return ahead

    pattern = [round_trip(0) for _ in range(21)]
    # each empty answer to a fetch ahead doubles the fetches ahead skipped after it: skipping
    # k of them takes 2k polls (one fetching, one taking the records) and the poll after them
    aheads = [k for k, a in enumerate(pattern) if a]
    assert [b - a for a, b in zip(aheads, aheads[1:])] == [4, 6, 10], pattern
    # a fetch ahead with records brings them back to every poll that takes the last ones
    while not round_trip(4):
        pass
    assert all(round_trip(4) for _ in range(4))
