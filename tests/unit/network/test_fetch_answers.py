"""NetworkClient's Fetch answers: read from the scan of their frame when it holds all of it
(SCANNED_PARTITIONS, no protocol decode), else the protocol decoder's dict, as before.

The broker is test_network_client's scripted peer; the answers are real encoded frames.
"""
from __future__ import annotations

import pytest
from test_network_client import ScriptedCluster, connect, known_metadata, make_client, poll_until, Recorder, T0

from kclient.clock import FakeClock
from kclient.network.network_client import SCANNED_PARTITIONS, ClientRequest
from kcore import records as R

FETCH = 1


def _request_body() -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                       "last_fetched_epoch": -1, "log_start_offset": -1,
                                                       "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def _answer(records: bytes, **extra) -> dict:
    part = {"partition_index": 0, "error_code": 0, "high_watermark": 3, "last_stable_offset": 3,
            "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1, "records": records}
    part.update(extra)
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 5,
            "responses": [{"topic": "t", "partitions": [part]}]}


def _fetch(scan: bool, answer: dict):
    clock, cluster = FakeClock(T0), ScriptedCluster()
    client = make_client(clock, cluster, metadata=known_metadata(clock))
    try:
        if scan:
            client.scan_fetches(True, False)
        connect(client, cluster, 1)
        rec = Recorder()
        client.send(ClientRequest(1, FETCH, _request_body(), rec.cb(0), api_version=12))
        peer = cluster.peer(1)
        _api, version, corr, _, _ = peer.read_request()
        peer.respond(FETCH, version, corr, answer)
        poll_until(client, lambda: rec.calls)
        (_tag, response, error), = rec.calls
        assert error is None
        return response
    finally:
        client.close()
        cluster.close()


BLOB = R.encode_batch([(None, 1000 + i, None, b"v%d" % i, []) for i in range(3)], base_offset=0)


def test_a_plain_answer_is_read_from_its_scan():
    response = _fetch(True, _answer(BLOB))
    assert "responses" not in response
    assert (response["throttle_time_ms"], response["error_code"], response["session_id"]) == (0, 0, 5)
    (topic, index, err, hw, lso, start, replica, records, scanned), = response[SCANNED_PARTITIONS][4]
    assert (topic, index, err, hw, lso, start, replica, bytes(records)) == ("t", 0, 0, 3, 3, 0, -1, BLOB)


@pytest.mark.parametrize("extra", [{"diverging_epoch": {"epoch": 1, "end_offset": 2}},
                                   {"aborted_transactions": [{"producer_id": 1, "first_offset": 0}]}])
def test_what_the_scan_does_not_keep_is_decoded(extra):
    response = _fetch(True, _answer(BLOB, **extra))
    assert SCANNED_PARTITIONS not in response
    (part,) = response["responses"][0]["partitions"]
    assert bytes(part["records"]) == BLOB


def test_without_scans_answers_are_decoded():
    response = _fetch(False, _answer(BLOB))
    assert SCANNED_PARTITIONS not in response and response["responses"][0]["topic"] == "t"
