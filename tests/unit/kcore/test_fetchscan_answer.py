"""kcore.fetchscan.ScannedFetch.answer: a Fetch answer read from its scan, against the decoder.

The reference is kclient.protocol.decode_response of the same frame: every field answer()
hands out must be the decoder's, with each partition's records the very bytes the decoder
slices (and their scan). Whatever answer() cannot stand in for (tagged fields, aborted
transactions, a structure not wholly parsed, bytes after it, another frame) must give None,
so that the decoder reads it; hostile frames must neither crash nor be read past their end.
"""
from __future__ import annotations

import random
import struct
import uuid

import pytest

from kclient.protocol import decode_response, encode_response
from kcore import records as R
from kcore.fetchscan import scan_fetch_response

FETCH = 1
VERSIONS = [4, 5, 7, 11, 12, 13, 15, 16, 18]


def _blob(base: int, n: int) -> bytes:
    return R.encode_batch([(None, 1_700_000_000_000 + i, None, b"v%d" % i, []) for i in range(n)],
                          base_offset=base, partition_leader_epoch=4)


def _part(version: int, i: int, records, **fields) -> dict:
    p = {"partition_index": i, "error_code": 0, "high_watermark": 1000 + i, "last_stable_offset": 900 + i,
         "log_start_offset": 7 + i, "aborted_transactions": None, "records": records}
    if version >= 11:
        p["preferred_read_replica"] = -1
    p.update(fields)
    return p


def _frame(version: int, topics: list, **top) -> bytes:
    """topics: [(name, partitions)]; from v13 the name picks a topic id."""
    body = {"throttle_time_ms": 17, "responses": []}
    for name, parts in topics:
        topic = {"partitions": parts}
        if version >= 13:
            topic["topic_id"] = uuid.uuid5(uuid.NAMESPACE_DNS, name)
        else:
            topic["topic"] = name
        body["responses"].append(topic)
    if version >= 7:
        body.update(error_code=0, session_id=123456)
    body.update(top)
    return encode_response(FETCH, version, 42, body)[4:]


def _reference(frame: bytes, version: int):
    """What answer() must give, from the protocol decoder (records as bytes)."""
    d = decode_response(FETCH, version, frame)
    parts = []
    for topic in d["responses"]:
        key = topic["topic_id"] if version >= 13 else topic["topic"]
        for p in topic["partitions"]:
            raw = p["records"]
            parts.append((key, p["partition_index"], p["error_code"], p["high_watermark"],
                          p["last_stable_offset"], p.get("log_start_offset", -1),
                          p.get("preferred_read_replica", -1), None if raw is None else bytes(raw)))
    return d["throttle_time_ms"], d.get("error_code", 0), d.get("session_id", 0), parts


def _answer(frame: bytes, version: int, **scan):
    scanned = scan_fetch_response(frame, version, **scan)
    got = scanned.answer(frame)
    if got is None:
        return scanned, None
    throttle, code, session, array_bytes, parts = got
    assert array_bytes >= 0
    plain = []
    for *fields, records, sr in parts:
        if records is None:
            assert sr is None
        else:
            assert records.obj is frame or bytes(records.obj) == frame
            assert sr is not None           # the records' scan, handed out with them
            try:
                want = R.decode_columnar(records).num_records
            except Exception as exc:
                with pytest.raises(type(exc)):
                    R.decode_columnar(records, scanned=sr)
            else:
                assert R.decode_columnar(records, scanned=sr).num_records == want
        plain.append((*fields, None if records is None else bytes(records)))
    return scanned, (throttle, code, session, plain)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_answer_is_the_decoders(version):
    frame = _frame(version, [
        ("alpha", [_part(version, 0, _blob(0, 3)), _part(version, 1, None), _part(version, 2, b""),
                   _part(version, 5, _blob(40, 2), error_code=0, high_watermark=-1,
                         **({"preferred_read_replica": 3} if version >= 11 else {}))]),
        ("beta", []),
        ("gamma", [_part(version, 3, _blob(9, 1), error_code=1, high_watermark=-1, last_stable_offset=-1,
                         aborted_transactions=[])])])
    scanned, got = _answer(frame, version)
    assert got == _reference(frame, version)
    assert scanned.answer(frame) is None                # the records' scans were handed out


@pytest.mark.parametrize("chunk,budget", [(1, -1), (7, 0), (333, 100), (50_000, 1)])
def test_however_the_frame_arrived_the_answer_is_the_same(chunk, budget):
    frame = _frame(13, [("t", [_part(13, i, _blob(i * 10, 3)) for i in range(6)])])
    assert _answer(frame, 13, chunk=chunk, budget=budget)[1] == _reference(frame, 13)


@pytest.mark.parametrize("version", [12, 13, 16])
@pytest.mark.parametrize("tag", ["diverging_epoch", "current_leader", "snapshot_id"])
def test_a_partition_with_tagged_fields_is_left_to_the_decoder(version, tag):
    value = {"diverging_epoch": {"epoch": 2, "end_offset": 5}, "current_leader": {"leader_id": 1, "leader_epoch": 3},
             "snapshot_id": {"end_offset": 5, "epoch": 1}}[tag]
    frame = _frame(version, [("t", [_part(version, 0, _blob(0, 2)), _part(version, 1, None, **{tag: value})])])
    scanned, got = _answer(frame, version)
    assert got is None
    assert scanned.records_for(decode_response(FETCH, version, frame)["responses"][0]["partitions"][0]["records"]) \
        is not None                                     # nothing was handed out


def test_node_endpoints_and_aborted_transactions_are_left_to_the_decoder():
    frame = _frame(16, [("t", [_part(16, 0, _blob(0, 2))])],
                   node_endpoints=[{"node_id": 1, "host": "h", "port": 9092, "rack": None}])
    assert _answer(frame, 16)[1] is None
    frame = _frame(11, [("t", [_part(11, 0, _blob(0, 2),
                                     aborted_transactions=[{"producer_id": 7, "first_offset": 1}])])])
    assert _answer(frame, 11)[1] is None


def test_another_frame_a_longer_one_or_one_cut_short_is_left_to_the_decoder():
    frame = _frame(12, [("t", [_part(12, 0, _blob(0, 2))])])
    scanned = scan_fetch_response(frame, 12)
    assert scanned.answer(bytearray(frame)) is None     # the same bytes elsewhere
    assert scanned.answer(frame[:-1]) is None
    longer = frame + b"\x00"
    assert scan_fetch_response(longer, 12).answer(longer) is None
    assert scan_fetch_response(frame[:-1], 12).answer(frame[:-1]) is None
    frame11 = _frame(11, [("t", [_part(11, 0, _blob(0, 2))])])
    longer = frame11 + b"\x00"
    assert scan_fetch_response(longer, 11).answer(longer) is None


def test_a_topic_name_that_is_not_utf8_is_left_to_the_decoder():
    frame = bytearray(_frame(11, [("tq", [_part(11, 0, _blob(0, 2))])]))
    at = frame.index(b"tq")
    frame[at] = 0xFF
    frame = bytes(frame)
    assert _answer(frame, 11)[1] is None


@pytest.mark.parametrize("version", [11, 12, 13])
def test_every_truncation_gives_no_answer_and_reads_nothing_past_it(version):
    frame = _frame(version, [("t", [_part(version, 0, _blob(0, 2)), _part(version, 1, None)])])
    for cut in range(len(frame)):
        part = frame[:cut]
        assert scan_fetch_response(part, version).answer(part) is None


@pytest.mark.parametrize("field,value", [
    ("records_len", 0x7FFFFFF0), ("records_len", -5), ("topics", -3), ("topics", 0x7FFFFFFF),
    ("partitions", 0x7FFFFFFF), ("partitions", -2), ("aborted", 0x40000000), ("aborted", -9),
    ("name_len", -1), ("name_len", 0x7FFF)])
def test_hostile_lengths_and_counts_give_the_decoders_answer_or_none(field, value):
    version = 11
    blob = _blob(0, 2)
    frame = bytearray(_frame(version, [("tt", [_part(version, 0, blob)])]))
    at = frame.index(blob)
    name = frame.index(b"tt") - 2
    where = {"records_len": (at - 4, 4), "topics": (4 + 4 + 2 + 4, 4), "partitions": (name + 4, 4),
             "aborted": (at - 4 - 4 - 4, 4), "name_len": (name, 2)}[field]
    frame[where[0]:where[0] + where[1]] = struct.pack(">i" if where[1] == 4 else ">h", value)
    frame = bytes(frame)
    got = _answer(frame, version)[1]
    if got is not None:
        assert got == _reference(frame, version)


def test_flipped_bytes_give_the_decoders_answer_or_none():
    rng = random.Random(4321)
    for version in (11, 12, 13):
        base = _frame(version, [("topic", [_part(version, 0, _blob(0, 2)), _part(version, 1, _blob(5, 1)),
                                           _part(version, 2, None)])])
        for _ in range(150):
            frame = bytearray(base)
            for _ in range(rng.randint(1, 3)):
                frame[rng.randrange(len(frame))] = rng.randrange(256)
            frame = bytes(frame)
            got = _answer(frame, version, chunk=rng.choice((0, 13, 200)))[1]
            if got is not None:             # then the decoder takes it too, and reads the same
                assert got == _reference(frame, version)


def test_without_scans_the_records_come_alone_and_their_scans_stay():
    frame = _frame(13, [("t", [_part(13, 0, _blob(0, 2)), _part(13, 1, None)])])
    scanned = scan_fetch_response(frame, 13, budget=0)
    got = scanned.answer(frame, False)
    assert got is not None and got[3] == 0
    assert [(p[:7], None if p[7] is None else bytes(p[7]), p[8]) for p in got[4]] == \
        [(p[:7], p[7], None) for p in _reference(frame, 13)[3]]
    assert scanned.answer(frame) is not None            # nothing was handed out
