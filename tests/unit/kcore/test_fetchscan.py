"""kcore.fetchscan: Fetch responses scanned as they arrive, against decode_columnar.

The reference is kcore.records.decode_columnar of the same records bytes: whatever way the
response is cut into arrivals, and however much of it the receive thread got to scan, the
ColumnarBatch made from the scan must equal the decode's (arrays, batch metadata, offsets,
partial trailing batch), and bytes the scan cannot stand in for must be decoded (and fail)
exactly as without it. Hostile frames (truncated, oversized or negative lengths, flipped
bytes) must neither crash nor be read past their end.
"""
from __future__ import annotations

import random
import struct
import uuid

import pytest

from kclient.protocol import decode_response, encode_response
from kcore import records as R
from kcore.errors import CorruptRecordError, CrcMismatchError
from kcore.fetchscan import scan_fetch_response

FETCH = 1
COLUMNS = ("offsets", "timestamps", "timestamp_types", "key_offsets", "key_lengths", "value_offsets",
           "value_lengths", "header_starts", "header_key_offsets", "header_key_lengths",
           "header_value_offsets", "header_value_lengths")
BATCH_FIELDS = ("base_offset", "last_offset", "partition_leader_epoch", "magic", "crc", "attributes",
                "codec", "timestamp_type", "is_transactional", "is_control", "control_type",
                "producer_id", "producer_epoch", "base_sequence", "first_timestamp", "max_timestamp",
                "delete_horizon_ms", "record_count", "position", "size_in_bytes", "record_start",
                "record_end", "aborted")


def _records(base: int, n: int, *, keyed: bool = False, headers: bool = False, size: int = 20) -> list:
    return [(None, 1_700_000_000_000 + i, (b"k%d" % i) if keyed else None, bytes([65 + i % 26]) * size,
             [("h", b"v%d" % i), ("e", None)] if headers and i % 3 == 0 else [])
            for i in range(n)]


def _blob(base: int, batches: int, per: int, **kw) -> bytes:
    out = b""
    for b in range(batches):
        out += R.encode_batch(_records(b, per, **{k: v for k, v in kw.items() if k != "ts"}),
                              base_offset=base + b * per, timestamp_type=kw.get("ts", 0),
                              partition_leader_epoch=3)
    return out


def _response(version: int, parts: list, *, tagged: bool = True) -> bytes:
    """A Fetch response frame (without its size prefix) with one topic holding ``parts``
    (records bytes or None), and a second topic with one empty partition."""
    def part(i, records):
        p = {"partition_index": i, "error_code": 0, "high_watermark": 10_000, "last_stable_offset": 10_000,
             "log_start_offset": 0, "aborted_transactions": [{"producer_id": 7, "first_offset": 1}] if i == 1 else None,
             "records": records}
        if version >= 11:
            p["preferred_read_replica"] = 2
        if version >= 12 and tagged and i == 0:
            p["diverging_epoch"] = {"epoch": 2, "end_offset": 5}
            p["current_leader"] = {"leader_id": 1, "leader_epoch": 3}
        return p
    topics = []
    for t, ps in (("a", parts), ("b", [b""])):
        topic = {"partitions": [part(i, r) for i, r in enumerate(ps)]}
        if version >= 13:
            topic["topic_id"] = uuid.UUID(int=len(topics) + 1)
        else:
            topic["topic"] = t
        topics.append(topic)
    body = {"throttle_time_ms": 0, "responses": topics}
    if version >= 7:
        body.update(error_code=0, session_id=9)
    if version >= 16 and tagged:
        body["node_endpoints"] = [{"node_id": 1, "host": "h", "port": 9092, "rack": None}]
    return encode_response(FETCH, version, 42, body)[4:]


def _same(a, b) -> None:
    assert a.num_records == b.num_records and a.num_headers == b.num_headers
    for name in COLUMNS:
        assert bytes(getattr(a, name)) == bytes(getattr(b, name)), name
    assert (a.next_offset, a.bytes_consumed, a.partial_trailing_bytes, a.incomplete_batch_size, a.zero_copy) == \
        (b.next_offset, b.bytes_consumed, b.partial_trailing_bytes, b.incomplete_batch_size, b.zero_copy)
    assert len(a.batches) == len(b.batches)
    for x, y in zip(a.batches, b.batches):
        assert [getattr(x, f) for f in BATCH_FIELDS] == [getattr(y, f) for f in BATCH_FIELDS]


def _check_response(frame: bytes, version: int, **scan) -> int:
    """Every partition's batch from the scan equals the decode's; returns how many came from
    a usable scan."""
    scanned = scan_fetch_response(frame, version, **scan)
    used = 0
    for topic in decode_response(FETCH, version, frame)["responses"]:
        for p in topic["partitions"]:
            raw = p["records"]
            sr = scanned.records_for(raw)
            if raw is None:
                assert sr is None
                continue
            assert sr is not None
            used += sr.state in ("done", "scanning")
            _same(R.decode_columnar(raw), R.decode_columnar(raw, scanned=sr))
            assert scanned.records_for(raw) is None       # handed out once
    return used


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16, 18])
def test_every_version_scans_to_the_decodes_columns(version):
    parts = [_blob(0, 3, 40), _blob(100, 2, 25, keyed=True, headers=True, ts=1), None, b"",
             _blob(5, 1, 7)[:-9]]            # the last: a batch cut off by the fetch size
    frame = _response(version, parts)
    assert _check_response(frame, version) == 5
    assert scan_fetch_response(frame, version).complete


@pytest.mark.parametrize("chunk,budget", [(1, -1), (7, 0), (333, 100), (4096, -1), (50_000, 1)])
def test_however_the_frame_arrives_and_whatever_was_scanned_the_columns_are_the_same(chunk, budget):
    frame = _response(13, [_blob(0, 4, 60, headers=True), _blob(10, 3, 33, keyed=True)])
    assert _check_response(frame, 13, chunk=chunk, budget=budget) == 3   # and topic b's empty one


def test_a_partial_trailing_batch_and_a_short_tail_are_reported_as_the_decode_does():
    whole = _blob(0, 2, 10)
    for cut in (len(whole) - 1, len(whole) - 40, len(whole) - (len(whole) // 2) + 5, 3, 11, 12, 13):
        frame = _response(12, [whole[:cut]])
        _check_response(frame, 12, chunk=64)


def test_what_the_scan_cannot_stand_in_for_is_decoded_as_before():
    plain = _blob(0, 1, 10)
    compressed = R.encode_batch(_records(0, 10), base_offset=10, codec=1)
    control = R.encode_batch([(None, 1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [])],
                             base_offset=20, control=True, producer_id=5, transactional=True)
    frame = _response(12, [plain + compressed, plain + control, compressed])
    scanned = scan_fetch_response(frame, 12)
    states = []
    for p in decode_response(FETCH, 12, frame)["responses"][0]["partitions"]:
        sr = scanned.records_for(p["records"])
        states.append(sr.state)
        _same(R.decode_columnar(p["records"]), R.decode_columnar(p["records"], scanned=sr))
    assert states == ["fallback"] * 3


def test_a_crc_mismatch_raises_the_decodes_error():
    blob = bytearray(_blob(0, 2, 10))
    blob[-3] ^= 0xFF
    frame = _response(12, [bytes(blob)])
    raw = decode_response(FETCH, 12, frame)["responses"][0]["partitions"][0]["records"]
    sr = scan_fetch_response(frame, 12).records_for(raw)
    assert sr.state == "fallback"
    with pytest.raises(CrcMismatchError) as plain:
        R.decode_columnar(raw)
    with pytest.raises(CrcMismatchError) as via_scan:
        R.decode_columnar(raw, scanned=sr)
    assert str(plain.value) == str(via_scan.value)
    # Scanned without the check: a decode that asks for it checks itself.
    sr = scan_fetch_response(frame, 12, check_crcs=False).records_for(raw)
    with pytest.raises(CrcMismatchError):
        R.decode_columnar(raw, scanned=sr)
    assert sr.state == "taken"          # used up, whether it stood in or not
    sr = scan_fetch_response(frame, 12, check_crcs=False).records_for(raw)
    assert sr.state == "done"
    _same(R.decode_columnar(raw, check_crcs=False), R.decode_columnar(raw, check_crcs=False, scanned=sr))


def test_records_before_the_fetch_offset_are_dropped_as_the_decode_drops_them():
    frame = _response(12, [_blob(0, 3, 10)])
    raw = decode_response(FETCH, 12, frame)["responses"][0]["partitions"][0]["records"]
    for offset in (-1, 0, 5, 10, 11, 29, 30, 40):
        sr = scan_fetch_response(frame, 12).records_for(raw)
        _same(R.decode_columnar(raw, fetch_offset=offset), R.decode_columnar(raw, fetch_offset=offset, scanned=sr))


def test_a_scan_is_only_used_for_the_bytes_it_scanned():
    frame = _response(12, [_blob(0, 1, 10)])
    raw = decode_response(FETCH, 12, frame)["responses"][0]["partitions"][0]["records"]
    assert scan_fetch_response(frame, 12).records_for(bytes(raw)) is None     # a copy: elsewhere
    sr = scan_fetch_response(frame, 12).records_for(raw)
    copy = bytes(raw)
    _same(R.decode_columnar(copy), R.decode_columnar(copy, scanned=sr))
    sr = scan_fetch_response(frame, 12).records_for(raw)
    _same(R.decode_columnar(raw, aborted_transactions=[]),
          R.decode_columnar(raw, aborted_transactions=[], scanned=sr))


def test_versions_outside_the_known_layouts_are_refused():
    for version in (3, 19):
        with pytest.raises(ValueError):
            scan_fetch_response(b"\x00" * 64, version)


# ---------------------------------------------------------------------------- hostile frames
def _scan_all_ways(frame: bytes, version: int) -> None:
    for chunk, budget in ((0, -1), (5, 3), (97, 0)):
        scanned = scan_fetch_response(frame, version, chunk=chunk, budget=budget)
        len(scanned)


@pytest.mark.parametrize("version", [11, 12, 13])
def test_every_truncation_of_a_response_is_scanned_without_reading_past_it(version):
    frame = _response(version, [_blob(0, 2, 3, headers=True), None, _blob(9, 1, 2)])
    for cut in range(len(frame) + 1):
        part = frame[:cut]      # a bytes object of exactly this size: nothing after it to read
        scanned = scan_fetch_response(part, version)
        # complete once every partition was read (the top-level tagged fields, one byte here, are not)
        assert not scanned.complete or cut >= len(frame) - (1 if version >= 12 else 0)


@pytest.mark.parametrize("field,value", [
    ("records_len", 0x7FFFFFF0), ("records_len", -5), ("topics", -3), ("topics", 0x7FFFFFFF),
    ("partitions", 0x7FFFFFFF), ("aborted", 0x40000000), ("batch_len", -7), ("batch_len", 0x7FFFFFFF),
    ("record_count", -1), ("record_count", 0x7FFFFFFF), ("record_len", 0x7FFF)])
def test_hostile_lengths_and_counts_neither_crash_nor_allocate_from_them(field, value):
    version = 11                                   # fixed-width lengths: easy to overwrite
    blob = _blob(0, 1, 3)
    frame = bytearray(_response(version, [blob], tagged=False))
    at = frame.index(blob)
    where = {"records_len": at - 4, "topics": 4 + 4 + 2 + 4, "partitions": 4 + 4 + 2 + 4 + 4 + 2 + 1,
             "aborted": at - 4 - 4 - 4, "batch_len": at + 8, "record_count": at + 57}
    if field == "record_len":
        frame[at + 61] = 0xFE                      # the first record's length varint
    else:
        frame[where[field]:where[field] + 4] = struct.pack(">i", value)
    _decodes_alike(bytes(frame), version, 0, CorruptRecordError)


def _decodes_alike(frame: bytes, version: int, chunk: int, errors: type[BaseException]) -> None:
    """A frame the protocol decoder takes gives, through its scan, the columns the decode gives
    from the records alone, or the same error (one of ``errors``); a frame it refuses is never
    scanned for records."""
    _scan_all_ways(frame, version)
    try:
        response = decode_response(FETCH, version, frame)
    except Exception:
        return
    scanned = scan_fetch_response(frame, version, chunk=chunk)
    for topic in response["responses"]:
        for p in topic["partitions"]:
            raw = p["records"]
            if raw is None:
                continue
            sr = scanned.records_for(raw)
            try:
                want = R.decode_columnar(raw)
            except errors as exc:
                with pytest.raises(type(exc)):
                    R.decode_columnar(raw, scanned=sr)
            else:
                _same(want, R.decode_columnar(raw, scanned=sr))


def test_flipped_bytes_give_the_decodes_result_or_its_error():
    rng = random.Random(1234)
    base = _response(12, [_blob(0, 2, 6, headers=True, keyed=True), _blob(50, 1, 4)])
    for _ in range(300):
        frame = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            frame[rng.randrange(len(frame))] = rng.randrange(256)
        _decodes_alike(bytes(frame), 12, rng.choice((0, 13, 200)), Exception)
