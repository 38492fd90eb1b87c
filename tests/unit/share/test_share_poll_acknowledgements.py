"""What a share consumer's poll() remembers for the acknowledgements, with acquired answers
handed in directly (no broker): implicit mode accepts a poll's records a run of offsets at a
time, explicit mode tracks each record."""
from __future__ import annotations

import pytest

from kcore.records import encode_batch

from kclient import errors as Errors
from kclient.network.future import RequestFuture
from kclient.share.acknowledgements import AcknowledgeType
from kclient.share.consumer import KafkaShareConsumer
from kclient.share.fetcher import Acquired
from kclient.structs import TopicPartition

TP = TopicPartition("orders", 0)


def answer(base: int, n: int) -> bytes:
    return encode_batch([(None, 1000 + i, None, f"v{base + i}".encode(), []) for i in range(n)], base_offset=base)


@pytest.fixture
def make():
    made = []

    def make_consumer(mode, acquired, **settings):
        c = KafkaShareConsumer(bootstrap_servers="127.0.0.1:1", group_id="g",
                               share_acknowledgement_mode=mode, **settings)
        c._subscription = {"orders"}
        c._fetcher._acquired_from[TP] = (1, 0)     # node 1, its session's first generation
        pending = list(acquired)

        def hand_in(timer):
            if pending:
                c._buffer.append(pending.pop(0))
        c._wait_for_records = hand_in        # type: ignore[method-assign]
        made.append(c)
        return c
    yield make_consumer
    for c in made:
        c._closed = True
        c._client.close()


def wire(c):
    return {tp: a.batches() for tp, a in c._fetcher._acks.items()}


def test_implicit_mode_accepts_the_previous_poll_as_runs_of_offsets(make):
    data = answer(10, 4) + answer(15, 5)      # offset 14 holds no record (a marker, say)
    c = make("implicit", [Acquired(TP, data, ((10, 12, 1), (13, 14, 2), (15, 19, 1))),
                          Acquired(TP, answer(20, 2), ((20, 21, 1),))])
    recs = c.poll(0)[TP]
    assert [(r.offset, r.delivery_count) for r in recs] == [(10, 1), (11, 1), (12, 1), (13, 2),
                                                           (15, 1), (16, 1), (17, 1), (18, 1), (19, 1)]
    assert wire(c) == {TP: [{"first_offset": 14, "last_offset": 14, "acknowledge_types": [0]}]}
    assert c.poll(0)[TP][0].offset == 20
    # one batch per run, no entry per record: 10..13 and 15..19 accepted
    assert wire(c) == {TP: [{"first_offset": 10, "last_offset": 13, "acknowledge_types": [1]},
                            {"first_offset": 14, "last_offset": 14, "acknowledge_types": [0]},
                            {"first_offset": 15, "last_offset": 19, "acknowledge_types": [1]}]}
    assert c._fetcher._acks[TP].singles == {14: 0} and len(c._fetcher._acks[TP].runs) == 2
    assert c.metrics()["records-consumed-total"] == 11
    c._fetcher.counts.update({"fetch-total": 3, "fetch-answers-total": 2, "records-acquired-total": 15})
    assert {k: c.metrics()[k] for k in ("fetch-total", "acknowledge-request-total", "records-per-request-avg")} == {
        "fetch-total": 3, "acknowledge-request-total": 0, "records-per-request-avg": 7.5}
    with pytest.raises(Errors.IllegalStateError):
        c.acknowledge(recs[0])


def test_implicit_mode_with_deserializers(make):
    c = make("implicit", [Acquired(TP, answer(0, 3), ((0, 2, 1),))],
             value_deserializer=lambda b: b.decode().upper())
    assert [r.value for r in c.poll(0)[TP]] == ["V0", "V1", "V2"]
    c._accept_last_poll()
    assert wire(c) == {TP: [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [1]}]}


def test_explicit_mode_tracks_each_record(make):
    c = make("explicit", [Acquired(TP, answer(0, 3), ((0, 2, 1),)), Acquired(TP, answer(3, 1), ((3, 3, 1),))])
    recs = c.poll(0)[TP]
    c.acknowledge(recs[0], AcknowledgeType.ACCEPT)
    c.acknowledge(recs[2], AcknowledgeType.REJECT)
    with pytest.raises(Errors.IllegalStateError, match="already acknowledged"):
        c.acknowledge(recs[0])
    with pytest.raises(Errors.IllegalStateError, match="not acknowledged"):
        c.poll(0)
    c.acknowledge("orders", 0, 1, AcknowledgeType.RELEASE)
    assert c.poll(0)[TP][0].offset == 3
    assert wire(c) == {TP: [{"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]},
                            {"first_offset": 1, "last_offset": 1, "acknowledge_types": [2]},
                            {"first_offset": 2, "last_offset": 2, "acknowledge_types": [3]}]}


def test_a_pending_wakeup_does_not_cut_close_short():
    """wakeup() from a signal handler between two polls: the loop ends and close() must still
    wait for the fetch in flight and close the sessions, not raise WakeupError halfway."""
    from kclient.network.future import RequestFuture

    c = KafkaShareConsumer(bootstrap_servers="127.0.0.1:1", group_id="g")
    c._fetcher._in_flight[1] = RequestFuture()      # never answered: close waits out its timeout
    c.wakeup()
    c.close(200)
    assert c._closed and c._client.wakeup_disabled_count == 0


def test_records_whose_acquisition_was_voided_are_not_handed_out(make):
    """A poll hands out no record acquired through a session that was reset since (or from a
    leader that moved): the broker delivers them again, so handing them out would have them
    worked on twice. Nothing is remembered for them, so nothing is acknowledged."""
    c = make("implicit", [Acquired(TP, answer(0, 3), ((0, 2, 1),), (1, 0)),
                          Acquired(TP, answer(3, 2), ((3, 4, 1),), (1, 1))])
    c._fetcher._session(1).reset("connection to node 1 reset")          # generation 0 -> 1
    assert c.poll(0) == {}                                            # the voided answer
    assert [r.offset for r in c.poll(0)[TP]] == [3, 4]
    c._accept_last_poll()
    assert wire(c) == {TP: [{"first_offset": 3, "last_offset": 4, "acknowledge_types": [1]}]}


def test_commit_sync_names_a_partition_whose_acknowledgements_could_not_leave_by_its_timeout(make):
    """The leader's ShareFetch is still unanswered (one request per share session): the
    acknowledgements wait, and commit_sync returns at its timeout with a KafkaTimeoutError for
    their partition instead of raising; they are still waiting to leave afterwards."""
    c = make("explicit", [Acquired(TP, answer(10, 2), ((10, 11, 1),))])
    recs = c.poll(0)[TP]
    for r in recs:
        c.acknowledge(r)
    c._fetcher._in_flight[1] = RequestFuture()      # the leader's ShareFetch, never answered
    result = c.commit_sync(50)
    assert list(result) == [TP] and isinstance(result[TP], Errors.KafkaTimeoutError), result
    assert "not sent" in str(result[TP])
    assert c._fetcher.acknowledgements_waiting() == {TP}
