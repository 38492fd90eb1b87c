"""Property tests (hypothesis, short): every decoder that reads bytes from a broker either
decodes them or raises a KafkaError subclass, for any input; valid inputs round-trip. The
long mutation fuzzers are tests/test_fuzz_*.py; these search the input space by shape."""
from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings, strategies as st

from kclient.errors import KafkaError
from kclient.protocol import decode_response, encode_response
from kclient.protocol.messages import RESPONSES
from kcore import records as R
from kcore.frames import FrameSplitter

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
API_VERSIONS = [(key, v) for key, msg in sorted(RESPONSES.items()) for v in msg.versions()]


@FAST
@given(st.sampled_from(API_VERSIONS), st.binary(max_size=300))
def test_any_response_bytes_decode_or_raise_a_kafka_error(api_version, payload):
    api_key, version = api_version
    frame = struct.pack(">i", 7) + payload
    try:
        decode_response(api_key, version, frame)
    except KafkaError:
        pass


@FAST
@given(st.sampled_from(API_VERSIONS), st.data())
def test_truncated_valid_responses_raise_a_kafka_error(api_version, data):
    api_key, version = api_version
    frame = encode_response(api_key, version, 9, {})[4:]          # every field at its default
    assert isinstance(decode_response(api_key, version, frame), dict)
    cut = data.draw(st.integers(min_value=4, max_value=max(len(frame) - 1, 4)))
    if cut < len(frame):
        try:
            decode_response(api_key, version, frame[:cut])
        except KafkaError:
            pass


records = st.lists(st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=60),
                             st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=8)),
                                      max_size=2)),
                   min_size=1, max_size=8)


@FAST
@given(records, st.integers(min_value=0, max_value=2**40), st.sampled_from([0, 1, 2, 3, 4]))
def test_encoded_batches_decode_to_what_was_written(recs, base, codec):
    batch = R.encode_batch([(i, 1_700_000_000_000 + i, k, v, h) for i, (k, v, h) in enumerate(recs)],
                           base_offset=base, codec=codec)
    out = R.decode_records(batch)
    assert [(r.offset, r.key, r.value) for r in out.records] == [(base + i, k, v) for i, (k, v, _) in enumerate(recs)]
    cols = R.decode_columnar(batch)
    assert cols.num_records == len(recs)


@FAST
@given(records, st.data())
def test_corrupted_batches_decode_or_raise_a_kafka_error(recs, data):
    batch = bytearray(R.encode_batch([(i, 1, k, v, h) for i, (k, v, h) in enumerate(recs)]))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        pos = data.draw(st.integers(min_value=0, max_value=len(batch) - 1))
        batch[pos] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(batch)))
    for check in (True, False):
        try:
            R.decode_records(bytes(batch[:cut]), check_crcs=check)
        except KafkaError:
            pass
        try:
            R.decode_columnar(bytes(batch[:cut]), check_crcs=check)
        except KafkaError:
            pass


@FAST
@given(st.lists(st.binary(max_size=50), max_size=6), st.data())
def test_frame_splitting_is_independent_of_chunk_boundaries(frames, data):
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    cuts = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=5)))
    splitter = FrameSplitter(1000)
    got = []
    prev = 0
    for c in cuts + [len(stream)]:
        got += [bytes(f) for f in splitter.feed(stream[prev:c])]
        prev = c
    assert got == frames and splitter.buffered_bytes == 0


@FAST
@given(st.integers(min_value=-2**31, max_value=-1) | st.integers(min_value=1001, max_value=2**31 - 1))
def test_hostile_frame_lengths_raise_before_allocating(length):
    splitter = FrameSplitter(1000)
    try:
        splitter.feed(struct.pack(">i", length) + b"x")
    except KafkaError:
        return
    raise AssertionError(f"length {length} accepted")
