"""Fuzz: mutated frames through FrameSplitter + decode_response / decode_request.

Valid frames for several APIs and versions are mutated (bit flips, truncations, size-prefix
and inner length corruptions, varint garbage, inserted/deleted bytes), fed to a FrameSplitter
in random chunks, and every frame it yields is decoded. Each must decode or raise a
kclient.errors.KafkaError subclass: never another exception, never a crash or hang.
A fixed seed keeps the run reproducible.
"""
from __future__ import annotations

import random
import struct
import uuid

from kclient.errors import KafkaError
from kclient.protocol import decode_request, decode_response, encode_request, encode_response
from kcore.frames import FrameSplitter

N_FRAMES = 130_000       # mutated streams; >= 100,000 of them yield a frame to decode
SEED = 20251121
U = uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0)


def _fetch_body(v):
    parts = []
    for p in range(4):
        part = {"partition_index": p, "error_code": 0, "high_watermark": 10 * p,
                "last_stable_offset": 5, "log_start_offset": 0, "preferred_read_replica": -1,
                "aborted_transactions": [{"producer_id": 7, "first_offset": 3}] if p == 1 else None,
                "records": bytes(range(40 + p))}
        if v >= 12 and p == 2:
            part["current_leader"] = {"leader_id": 2, "leader_epoch": 9}
            part["diverging_epoch"] = {"epoch": 1, "end_offset": 77}
        parts.append(part)
    topic = {"topic_id": U, "partitions": parts} if v >= 13 else {"topic": "topic-a", "partitions": parts}
    body = {"throttle_time_ms": 0, "responses": [topic]}
    if v >= 7:
        body.update(error_code=0, session_id=11)
    if v >= 16:
        body["node_endpoints"] = [{"node_id": 2, "host": "h2", "port": 9092, "rack": None}]
    return body


def _metadata_body(v):
    topic = {"error_code": 0, "name": "orders", "is_internal": False, "partitions": [
        {"error_code": 0, "partition_index": i, "leader_id": 1, "replica_nodes": [1, 2, 3],
         "isr_nodes": [1, 2], **({"offline_replicas": [3]} if v >= 5 else {}),
         **({"leader_epoch": 4} if v >= 7 else {})} for i in range(3)]}
    if v >= 10:
        topic["topic_id"] = U
    body = {"brokers": [{"node_id": i, "host": f"broker{i}", "port": 9092 + i,
                         **({"rack": "r1"} if v >= 1 else {})} for i in range(3)],
            "topics": [topic]}
    if v >= 1:
        body["controller_id"] = 1
    if v >= 2:
        body["cluster_id"] = "cluster"
    return body


def _corpus():
    """(kind, api_key, version, frame with size prefix)."""
    out = []
    for v in (4, 11, 12, 13, 16):
        out.append(("response", 1, v, encode_response(1, v, 100 + v, _fetch_body(v))))
    for v in (1, 9, 12):
        out.append(("response", 3, v, encode_response(3, v, 7, _metadata_body(v))))
    api = {"error_code": 0, "api_keys": [{"api_key": k, "min_version": 0, "max_version": 9}
                                         for k in (0, 1, 3, 18)]}
    out.append(("response", 18, 0, encode_response(18, 0, 1, api)))
    out.append(("response", 18, 3, encode_response(18, 3, 1, dict(
        api, throttle_time_ms=0, finalized_features_epoch=3,
        supported_features=[{"name": "f", "min_version": 0, "max_version": 1}]))))
    out.append(("response", 18, 3, struct.pack(">ii", 17, 5) + bytes.fromhex(
        "0023" "01" "0012 0000 0002" "00000000")))   # librdkafka-mock style fallback
    join = {"generation_id": 3, "protocol_type": "consumer", "protocol_name": "range",
            "leader": "m1", "member_id": "m1", "members": [
                {"member_id": f"m{i}", "group_instance_id": None, "metadata": bytes(20 + i)}
                for i in range(3)]}
    out.append(("response", 11, 6, encode_response(11, 6, 4, join)))
    out.append(("response", 11, 9, encode_response(11, 9, 4, dict(join, skip_assignment=False))))
    out.append(("response", 9, 8, encode_response(9, 8, 6, {"groups": [
        {"group_id": "g", "error_code": 0, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 42,
                                          "committed_leader_epoch": 1, "metadata": "m",
                                          "error_code": 0}]}]}]})))
    out.append(("response", 2, 7, encode_response(2, 7, 8, {"topics": [
        {"name": "t", "partitions": [{"partition_index": p, "error_code": 0, "timestamp": -1,
                                      "offset": 100 * p, "leader_epoch": 0} for p in range(3)]}]})))
    out.append(("response", 68, 1, encode_response(68, 1, 9, {
        "error_code": 0, "member_id": "abc", "member_epoch": 5, "heartbeat_interval_ms": 3000,
        "assignment": {"topic_partitions": [{"topic_id": U, "partitions": [0, 1, 2]}]}})))
    out.append(("response", 0, 9, encode_response(0, 9, 10, {"responses": [
        {"name": "t", "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 5,
                                               "record_errors": [{"batch_index": 0,
                                                                  "batch_index_error_message": "x"}]}]}]})))
    out.append(("request", 1, 15, encode_request(1, 15, 12, "client", {
        "max_wait_ms": 500, "min_bytes": 1, "replica_state": {"replica_id": 3, "replica_epoch": 1},
        "topics": [{"topic_id": U, "partitions": [{"partition": 0, "fetch_offset": 9,
                                                   "partition_max_bytes": 1 << 20}]}]})))
    out.append(("request", 0, 9, encode_request(0, 9, 13, None, {
        "acks": -1, "timeout_ms": 30000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": bytes(60)}]}]})))
    return out


INTERESTING_INT32 = [-1, -2, 0, 1, 0x7FFFFFFF, -0x80000000, 0xFFFF, 0x10000, 0x7F, 0x80]


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    """One or more mutations of a whole frame (size prefix included)."""
    body = bytearray(frame[4:])
    fix_prefix = True
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        op = rng.randrange(8)
        if not body:
            body.append(rng.randrange(256))
        if op == 0:                                   # bit flips
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(body))
                body[i] ^= 1 << rng.randrange(8)
        elif op == 1:                                 # truncation
            del body[rng.randrange(len(body)):]
        elif op == 2:                                 # inner length / count corruption
            i = rng.randrange(len(body))
            v = rng.choice(INTERESTING_INT32 + [rng.randint(-(2**31), 2**31 - 1)])
            if rng.random() < 0.5:
                body[i:i + 4] = struct.pack(">i", v)
            else:
                body[i:i + 2] = struct.pack(">h", max(-32768, min(32767, v)))
        elif op == 3:                                 # varint garbage
            i = rng.randrange(len(body))
            body[i:i + 1] = bytes([rng.randrange(0x80, 0x100)]) * rng.randint(1, 12)
        elif op == 4:                                 # inserted bytes
            i = rng.randrange(len(body) + 1)
            body[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 5:                                 # deleted bytes
            i = rng.randrange(len(body))
            del body[i:i + rng.randint(1, 8)]
        elif op == 6:                                 # size prefix corruption
            fix_prefix = False
        else:                                         # random byte values
            for _ in range(rng.randint(1, 3)):
                body[rng.randrange(len(body))] = rng.randrange(256)
    if fix_prefix:
        prefix = struct.pack(">i", len(body))
    else:
        prefix = struct.pack(">i", rng.choice(INTERESTING_INT32 + [len(body) + rng.randint(-8, 8)]))
    return prefix + bytes(body)


def test_mutated_frames_decode_or_raise_kafka_errors():
    rng = random.Random(SEED)
    corpus = _corpus()
    for kind, key, v, frame in corpus:               # the unmutated corpus decodes
        (f,) = FrameSplitter(1 << 20).feed(frame)
        if kind == "response":
            decode_response(key, v, f)
        else:
            decode_request(f)

    decoded = rejected = incomplete = frames_seen = 0
    unexpected = []
    for i in range(N_FRAMES):
        kind, key, v, frame = corpus[i % len(corpus)]
        stream = _mutate(rng, frame)
        splitter = FrameSplitter(1 << 16)
        pos = 0
        seen_before = frames_seen
        try:
            while pos < len(stream):
                step = rng.choice((1, 3, 7, 64, len(stream)))
                for f in splitter.feed(stream[pos:pos + step]):
                    frames_seen += 1
                    try:
                        if kind == "response":
                            decode_response(key, v, f)
                        else:
                            decode_request(f)
                        decoded += 1
                    except KafkaError:
                        rejected += 1
                pos += step
            if frames_seen == seen_before:
                incomplete += 1                      # size prefix promises more than was sent
        except KafkaError:
            rejected += 1                            # the splitter refused the size prefix
        except Exception as exc:                     # noqa: BLE001 - exactly what we look for
            unexpected.append((i, kind, key, v, stream.hex(), repr(exc)))
            if len(unexpected) >= 5:
                break
    assert not unexpected, unexpected
    assert frames_seen >= 100_000, frames_seen
    assert decoded + rejected + incomplete >= N_FRAMES
    # the mutations exercise both outcomes substantially
    assert decoded > N_FRAMES // 20 and rejected > N_FRAMES // 5, (decoded, rejected)
