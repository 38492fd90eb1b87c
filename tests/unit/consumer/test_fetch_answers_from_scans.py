"""The fetcher given Fetch answers read from their scans (kcore.fetchscan.ScannedFetch.answer,
as the network client hands them over) instead of the protocol decoder's dicts.

The reference is the same answer as the decoder's dict (test_fetcher's scripted answers):
records, positions, end offsets, partition errors, read replicas and topic ids must come out
the same either way.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_fetcher import (TID, TP0, TP1, TP2, ScriptedClient, assign, batch, drain, fetch_response,
                          make_metadata, partition_data)

from kclient.clock import FakeClock
from kclient.config import ConsumerConfig
from kclient.consumer.fetch_config import FetchConfig
from kclient.consumer.fetcher import Fetcher
from kclient.network.network_client import SCANNED_PARTITIONS, fetch_response_from_scan
from kclient.protocol import encode_response
from kclient.subscription.state import SubscriptionState
from kcore.fetchscan import scan_fetch_response

FETCH = 1


def _via_scan(answer: dict, version: int) -> dict:
    """answer as the network client hands it over when the scan of its frame reads it."""
    for topic in answer["responses"]:
        for p in topic["partitions"]:
            if p["records"] is not None:
                p["records"] = bytes(p["records"])
    frame = encode_response(FETCH, version, 7, answer)[4:]
    scanned = scan_fetch_response(frame, version)
    got = scanned.answer(frame)
    assert got is not None
    response = fetch_response_from_scan(got)
    assert "responses" not in response and SCANNED_PARTITIONS in response
    return response


def _env(version: int):
    clock = FakeClock()
    md = make_metadata()
    client = ScriptedClient(md, fetch_version=version)
    subs = SubscriptionState("earliest")
    cfg = ConsumerConfig({"bootstrap.servers": "h1:9092", "max.poll.records": 500, "client.rack": "rack-2"})
    return clock, client, subs, Fetcher(client, subs, FetchConfig.of(cfg), clock=clock)


def _run(version: int, scanned: bool, make_answer) -> tuple:
    clock, client, subs, fetcher = _env(version)

    assign(SimpleNamespace(subs=subs), [TP0, TP1, TP2])
    fetcher.send_fetches()
    (req,) = client.take()
    answer = make_answer()
    req.future.complete(_via_scan(answer, version) if scanned else answer)
    recs = drain(fetcher)
    fetcher.send_fetches()
    nodes = {}
    for r in client.take():
        for t in r.body["topics"]:
            for p in t["partitions"]:
                nodes[p["partition"]] = (r.node, p["fetch_offset"])
    return ({tp: [(r.offset, r.key, r.value, r.headers, r.leader_epoch) for r in rs] for tp, rs in recs.items()},
            {tp: (subs.position(tp).offset, subs.high_watermark(tp)) for tp in (TP0, TP1, TP2)
             if subs.position(tp) is not None},
            {tp: fetcher.preferred_read_replica(tp) for tp in (TP0, TP1, TP2)},
            nodes, {tp: subs.is_offset_reset_needed(tp) for tp in (TP0, TP1, TP2)})


@pytest.mark.parametrize("version", [11, 12, 13, 16])
def test_records_positions_and_end_offsets_are_the_decoders(version):
    def answer():
        parts = [partition_data(0, batch(0, 3), hw=3), partition_data(1, batch(0, 2) + batch(2, 4)[:-5], hw=9),
                 partition_data(2, None, hw=0)]
        return fetch_response(parts, topic_id=TID) if version >= 13 else fetch_response(parts)
    assert _run(version, True, answer) == _run(version, False, answer)


@pytest.mark.parametrize("version", [11, 12])
@pytest.mark.parametrize("error", [1, 6, 29])  # OFFSET_OUT_OF_RANGE, NOT_LEADER_OR_FOLLOWER, TOPIC_AUTHORIZATION_FAILED
def test_partition_errors_are_the_decoders(version, error):
    def answer():
        return fetch_response([partition_data(0, batch(0, 2), hw=2), partition_data(1, None, error=error, hw=-1)])
    if error == 1:
        assert _run(version, True, answer)[4][TP1]      # out of range at the position: reset
    try:
        want = _run(version, False, answer)
    except Exception as exc:
        with pytest.raises(type(exc)):
            _run(version, True, answer)
    else:
        assert _run(version, True, answer) == want


@pytest.mark.parametrize("version", [11, 12, 13])
def test_a_read_replica_named_in_the_answer_is_the_decoders(version):
    def answer():
        parts = [partition_data(0, None), partition_data(1, batch(0, 3))]
        parts[0]["preferred_read_replica"] = 2
        return fetch_response(parts, topic_id=TID) if version >= 13 else fetch_response(parts)
    got = _run(version, True, answer)
    assert got == _run(version, False, answer)
    assert got[2][TP0] == 2


def test_an_answer_for_a_topic_id_the_request_did_not_name_is_ignored():
    import uuid

    def answer():
        return fetch_response([partition_data(0, batch(0, 3))], topic_id=uuid.UUID(int=99))
    got = _run(13, True, answer)
    assert got == _run(13, False, answer)
    assert got[0] == {}
