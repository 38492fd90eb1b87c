"""Share-group messages (KIP-932): declarations, known vectors, hostile input.

Every declared message at every version is also covered by the schema-driven checks of
test_messages_roundtrip.py (reference codec, truncations, defaults). Here:
* the versions and field facts of Apache Kafka 4.4.0 (ShareGroupHeartbeat v1, ShareFetch and
  ShareAcknowledge v1-2, the admin messages), the ones a share consumer depends on;
* body bytes written by Apache Kafka 4.4.0's own generated message classes (kafka-clients
  4.4.0, serialized at the version named), pasted as hex, encoded and decoded by the codec;
* the hostile frames a fetch response is held to, applied to the share responses.
"""
from __future__ import annotations

import struct
import sys
import uuid

import pytest

from kclient.errors import ProtocolError
from kclient.protocol import (CLIENT_VERSIONS, ApiKey, decode_request, decode_response,
                              encode_request, encode_response)
from kclient.protocol.messages import API_NAMES, REQUESTS, RESPONSES, response_header_version
import repo_paths

TOPIC_ID = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")

SHARE_KEYS = {
    ApiKey.SHARE_GROUP_HEARTBEAT: ("ShareGroupHeartbeat", (1, 1)),
    ApiKey.SHARE_GROUP_DESCRIBE: ("ShareGroupDescribe", (1, 1)),
    ApiKey.SHARE_FETCH: ("ShareFetch", (1, 2)),
    ApiKey.SHARE_ACKNOWLEDGE: ("ShareAcknowledge", (1, 2)),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: ("DescribeShareGroupOffsets", (0, 1)),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: ("AlterShareGroupOffsets", (0, 0)),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: ("DeleteShareGroupOffsets", (0, 0)),
}


def _fields(msg, version):
    return {f.name: f for f in msg.fields if f.in_version(version)}


def test_share_apis_declared_with_kafka_4_4_versions():
    for key, (name, versions) in SHARE_KEYS.items():
        assert API_NAMES[key] == name
        assert CLIENT_VERSIONS[key] == versions
        # every share message is flexible from its first version: header v2 / v1
        assert REQUESTS[key].flexible_versions == "0+" and RESPONSES[key].flexible_versions == "0+"
        assert response_header_version(key, versions[0]) == 1


def test_share_field_facts():
    hb = _fields(REQUESTS[76], 1)
    assert list(hb) == ["group_id", "member_id", "member_epoch", "rack_id", "subscribed_topic_names"]
    assert hb["subscribed_topic_names"].nullable_versions == "0+"      # null: unchanged
    hbr = _fields(RESPONSES[76], 1)
    assign = hbr["assignment"]
    assert assign.nullable_versions == "0+" and assign.default is None
    assert [f.name for f in assign.fields[0].fields] == ["topic_id", "partitions"]
    fetch1, fetch2 = _fields(REQUESTS[78], 1), _fields(REQUESTS[78], 2)
    assert "share_acquire_mode" not in fetch1 and "is_renew_ack" not in fetch1
    assert list(fetch2)[-4:] == ["share_acquire_mode", "is_renew_ack", "topics", "forgotten_topics_data"]
    assert fetch2["max_bytes"].default == 0x7FFFFFFF
    assert fetch2["member_id"].default == ""               # nullable, Kafka's default is not null
    part = {f.name: f for f in fetch2["topics"].fields[1].fields}
    assert "partition_max_bytes" not in part                # version 0 only, gone since 4.1
    ack1, ack2 = _fields(RESPONSES[79], 1), _fields(RESPONSES[79], 2)
    assert "acquisition_lock_timeout_ms" not in ack1 and ack2["acquisition_lock_timeout_ms"].ignorable
    resp = _fields(RESPONSES[78], 1)
    pdata = {f.name: f for f in resp["responses"].fields[1].fields}
    assert pdata["records"].type == "records" and pdata["records"].nullable_versions == "0+"
    assert [f.name for f in pdata["acquired_records"].fields] == ["first_offset", "last_offset",
                                                                  "delivery_count"]
    assert pdata["acquired_records"].fields[2].type == "int16"
    desc = _fields(RESPONSES[77], 1)["groups"]
    assert {f.name: f for f in desc.fields}["authorized_operations"].default == -2147483648
    offs = _fields(RESPONSES[90], 1)["groups"].fields[1].fields[2]
    lag = {f.name: f for f in offs.fields}["lag"]
    assert lag.versions == "1+" and lag.default == -1 and lag.ignorable


# ---------------------------------------------------------------------------------------------
# known vectors: bodies as kafka-clients 4.4.0 serializes them (MessageUtil, version as named)

def _request_frame(key: int, version: int, corr: int, client_id: str, body_hex: str) -> bytes:
    cid = client_id.encode()
    payload = (struct.pack(">hhih", key, version, corr, len(cid)) + cid + b"\x00"
               + bytes.fromhex(body_hex))
    return struct.pack(">i", len(payload)) + payload


def _response_frame(corr: int, body_hex: str) -> bytes:
    payload = struct.pack(">i", corr) + b"\x00" + bytes.fromhex(body_hex)
    return struct.pack(">i", len(payload)) + payload


# ShareGroupHeartbeat v1: join (epoch 0) of member "m1" to group "g", subscribed to "t"
SGH_REQ_V1 = "0267036d31000000000002027400"
# its answer: epoch 3, heartbeat every 1000 ms, partitions 0 and 1 of TOPIC_ID
SGH_RESP_V1 = ("00000000000000036d3100000003000003e801020102030405060708090a0b0c0d0e0f10030000000000"
               "000001000000")
# ShareFetch v2, session epoch 1, record_limit acquire mode, offsets 10-12 of partition 2
# acknowledged ACCEPT / RELEASE / REJECT, partition 5 forgotten
SF_REQ_V2 = ("0267036d3100000001000001f40000000100100000000001f4000001f40100020102030405060708090a0b0c"
             "0d0e0f10020000000202000000000000000a000000000000000c04010203000000020102030405060708090a"
             "0b0c0d0e0f1002000000050000")
# ShareFetch v1 answer: lock 15000 ms, partition 2 led by node 1, offsets 10-12 acquired on their
# second delivery, empty records
SF_RESP_V1 = ("0000000000000000003a98020102030405060708090a0b0c0d0e0f1002000000020000000000000000000100"
              "000000000102000000000000000a000000000000000c00020000000100")
# ShareAcknowledge v2: RENEW of offset 7 of partition 0, is_renew_ack set
SA_REQ_V2 = ("0267036d310000000201020102030405060708090a0b0c0d0e0f1002000000000200000000000000070000"
             "000000000007020400000000")
SA_RESP_V2 = "0000000000000000007530010100"
SA_RESP_V1 = "00000000000000010100"


def test_share_group_heartbeat_v1_vectors():
    body = {"group_id": "g", "member_id": "m1", "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": ["t"]}
    vec = _request_frame(76, 1, 5, "kclient", SGH_REQ_V1)
    assert encode_request(76, 1, 5, "kclient", body) == vec
    assert decode_request(vec[4:]) == (76, 1, 5, "kclient", body)
    got = decode_response(76, 1, _response_frame(9, SGH_RESP_V1)[4:])
    assert got == {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": "m1",
                   "member_epoch": 3, "heartbeat_interval_ms": 1000,
                   "assignment": {"topic_partitions": [{"topic_id": TOPIC_ID, "partitions": [0, 1]}]}}
    assert encode_response(76, 1, 9, got) == _response_frame(9, SGH_RESP_V1)
    # a heartbeat that changes nothing: assignment null (one 0xff byte)
    unchanged = dict(got, assignment=None)
    frame = encode_response(76, 1, 9, unchanged)
    assert frame[-2:] == b"\xff\x00" and decode_response(76, 1, frame[4:]) == unchanged


def test_share_fetch_v2_request_vector():
    body = {"group_id": "g", "member_id": "m1", "share_session_epoch": 1, "max_wait_ms": 500,
            "min_bytes": 1, "max_bytes": 1048576, "max_records": 500, "batch_size": 500,
            "share_acquire_mode": 1, "is_renew_ack": False,
            "topics": [{"topic_id": TOPIC_ID, "partitions": [{"partition_index": 2,
                        "acknowledgement_batches": [{"first_offset": 10, "last_offset": 12,
                                                     "acknowledge_types": [1, 2, 3]}]}]}],
            "forgotten_topics_data": [{"topic_id": TOPIC_ID, "partitions": [5]}]}
    vec = _request_frame(78, 2, 7, "c", SF_REQ_V2)
    assert encode_request(78, 2, 7, "c", body) == vec
    assert decode_request(vec[4:]) == (78, 2, 7, "c", body)


def test_share_fetch_v1_request_refuses_v2_fields():
    body = {"group_id": "g", "member_id": "m1", "share_session_epoch": 0, "max_wait_ms": 500,
            "min_bytes": 1, "max_records": 500, "batch_size": 500, "share_acquire_mode": 1}
    with pytest.raises(Exception, match="share_acquire_mode"):
        encode_request(78, 1, 1, "c", body)
    # the default (batch_optimized = 0) is dropped silently at v1
    body["share_acquire_mode"] = 0
    assert decode_request(encode_request(78, 1, 1, "c", body)[4:])[4]["max_records"] == 500


def test_share_fetch_v1_response_vector():
    buf = _response_frame(3, SF_RESP_V1)[4:]
    got = decode_response(78, 1, buf)
    part = got["responses"][0]["partitions"][0]
    records = part.pop("records")
    assert isinstance(records, memoryview) and records.obj is buf and bytes(records) == b""
    assert got == {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                   "acquisition_lock_timeout_ms": 15000, "node_endpoints": [],
                   "responses": [{"topic_id": TOPIC_ID, "partitions": [{
                       "partition_index": 2, "error_code": 0, "error_message": None,
                       "acknowledge_error_code": 0, "acknowledge_error_message": None,
                       "current_leader": {"leader_id": 1, "leader_epoch": 0},
                       "acquired_records": [{"first_offset": 10, "last_offset": 12,
                                             "delivery_count": 2}]}]}]}
    part["records"] = b""
    assert encode_response(78, 1, 3, got) == _response_frame(3, SF_RESP_V1)


def test_share_acknowledge_vectors():
    body = {"group_id": "g", "member_id": "m1", "share_session_epoch": 2, "is_renew_ack": True,
            "topics": [{"topic_id": TOPIC_ID, "partitions": [{"partition_index": 0,
                        "acknowledgement_batches": [{"first_offset": 7, "last_offset": 7,
                                                     "acknowledge_types": [4]}]}]}]}
    vec = _request_frame(79, 2, 11, "c", SA_REQ_V2)
    assert encode_request(79, 2, 11, "c", body) == vec
    assert decode_request(vec[4:])[4] == body
    v2 = decode_response(79, 2, _response_frame(1, SA_RESP_V2)[4:])
    assert v2 == {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                  "acquisition_lock_timeout_ms": 30000, "responses": [], "node_endpoints": []}
    v1 = decode_response(79, 1, _response_frame(1, SA_RESP_V1)[4:])
    assert "acquisition_lock_timeout_ms" not in v1 and v1["error_code"] == 0


# ---------------------------------------------------------------------------------------------
# hostile input

_SF_BODY = bytes.fromhex(SF_RESP_V1)
_RECORDS_AT = _SF_BODY.index(bytes.fromhex("0000000100000000")) + 9   # after current_leader


HOSTILE = [
    # ShareFetch v1: records compact length 2**28 with nothing behind it
    (78, 1, _SF_BODY[:_RECORDS_AT] + b"\x81\x80\x80\x80\x01"),
    # ShareFetch v1: acquired_records count claims 2**21 entries, one follows
    (78, 1, _SF_BODY[:_RECORDS_AT + 1] + b"\x81\x80\x80\x01" + _SF_BODY[_RECORDS_AT + 2:]),
    # ShareFetch v1: responses count as an over-long varint
    (78, 1, _SF_BODY[:10] + b"\xff\xff\xff\xff\xff\x01"),
    # ShareFetch v1: error_message claims 100 bytes, 3 follow
    (78, 1, _SF_BODY[:6] + bytes([101]) + b"abc"),
    # ShareGroupHeartbeat v1: member_id length over the frame
    (76, 1, bytes.fromhex(SGH_RESP_V1)[:7] + b"\x7f" + b"m1"),
    # ShareGroupHeartbeat v1: assigned partitions count 2**31-1 (must not allocate)
    (76, 1, bytes.fromhex(SGH_RESP_V1)[:36] + b"\xff\xff\xff\xff\x07"),
    # ShareAcknowledge v2: tagged field claims 100 bytes, 1 follows
    (79, 2, bytes.fromhex(SA_RESP_V2)[:-1] + b"\x01\x05\x64x"),
]


@pytest.mark.parametrize("api_key,version,payload", HOSTILE)
def test_hostile_share_responses_raise_protocol_error(api_key, version, payload):
    with pytest.raises(ProtocolError):
        decode_response(api_key, version, struct.pack(">i", 1) + b"\x00" + payload)


@pytest.mark.parametrize("api_key,version,hexbody", [
    (76, 1, SGH_RESP_V1), (78, 1, SF_RESP_V1), (79, 2, SA_RESP_V2), (79, 1, SA_RESP_V1)])
def test_share_responses_cut_short_at_every_byte(api_key, version, hexbody):
    frame = _response_frame(1, hexbody)[4:]
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_response(api_key, version, frame[:cut])


# ---------------------------------------------------------------------------------------------
# the generator: the module declares exactly the generator's API list

def test_generator_api_list_matches_module():
    sys.path.insert(0, str(repo_paths.REPO / "tools"))
    try:
        import gen_messages
    finally:
        sys.path.remove(str(repo_paths.REPO / "tools"))
    assert list(API_NAMES.values()) == gen_messages.API_LIST
    assert set(API_NAMES) <= set(gen_messages.BROKER_MAX)
