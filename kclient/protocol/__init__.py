"""Kafka protocol frames for kclient: encode requests, decode responses.

Bodies are dicts with snake_case keys (nested structs are dicts, arrays are lists; see
kclient.protocol.messages for every field). The work is done by the compiled codec in
kcore.messages; this module picks the message declaration, the header version and the
cached compiled program for each (api key, version).

Header versions: requests use header v2 (tagged fields) at flexible versions, else v1;
responses use header v1 at flexible versions, else v0, except ApiVersions, whose response
header is always v0 so that a client can read it before it knows what the broker speaks.
"""
from __future__ import annotations

import enum

from kclient.errors import ProtocolError, UnsupportedVersionError
from kclient.protocol.messages import REQUESTS, RESPONSES
from kcore import messages as _codec
from kcore.frames import peek_request_api as _peek_request_api
from kcore.frames import response_correlation_id as _response_correlation_id
from kcore.wire import Reader as _Reader

__all__ = [
    "ApiKey", "CLIENT_VERSIONS", "encode_request", "decode_response", "response_correlation_id",
    "encode_response", "decode_request", "negotiate",
]


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    OFFSET_FOR_LEADER_EPOCH = 23
    SASL_AUTHENTICATE = 36
    DESCRIBE_CONFIGS = 32
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    CONSUMER_GROUP_HEARTBEAT = 68
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


#: (min, max) version this client implements, per api key.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    key: (msg.versions()[0], msg.versions()[-1]) for key, msg in sorted(REQUESTS.items())
}

_UNSUPPORTED_VERSION = 35

# (api_key, version) -> (compiled program, header version)
_requests: dict[tuple[int, int], tuple[_codec.Program, int]] = {}
_responses: dict[tuple[int, int], tuple[_codec.Program, int]] = {}


def _request_program(api_key: int, version: int) -> tuple[_codec.Program, int]:
    hit = _requests.get((api_key, version))
    if hit is None:
        msg = REQUESTS.get(api_key)
        if msg is None:
            raise UnsupportedVersionError(f"api key {api_key} is not implemented by this client")
        prog = _codec.compile_message(msg, version)
        hit = (prog, 2 if msg.is_flexible(version) else 1)
        _requests[(int(api_key), int(version))] = hit
    return hit


def _response_program(api_key: int, version: int) -> tuple[_codec.Program, int]:
    hit = _responses.get((api_key, version))
    if hit is None:
        msg = RESPONSES.get(api_key)
        if msg is None:
            raise UnsupportedVersionError(f"api key {api_key} is not implemented by this client")
        prog = _codec.compile_message(msg, version)
        flexible_header = msg.is_flexible(version) and api_key != ApiKey.API_VERSIONS
        hit = (prog, 1 if flexible_header else 0)
        _responses[(int(api_key), int(version))] = hit
    return hit


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: dict | None) -> bytes:
    """The whole request frame, 4-byte size prefix included."""
    prog, header_version = _request_program(api_key, version)
    return _codec.encode_request_frame(prog, api_key, version, correlation_id, client_id,
                                       body, header_version)


def decode_response(api_key: int, version: int, frame) -> dict:
    """Body dict of a response frame given WITHOUT its size prefix (starting at the header).

    "records" fields are zero-copy memoryview slices of ``frame`` (or None).
    """
    prog, header_version = _response_program(api_key, version)
    if api_key == ApiKey.API_VERSIONS:
        return _decode_api_versions(prog, version, frame)
    return _codec.decode_response_frame(prog, frame, header_version)


def response_correlation_id(frame) -> int:
    """Correlation id of a response frame given without its size prefix."""
    return _response_correlation_id(frame)


def encode_response(api_key: int, version: int, correlation_id: int, body: dict | None) -> bytes:
    """The whole response frame, size prefix included (for scripted peers and tests)."""
    prog, header_version = _response_program(api_key, version)
    return _codec.encode_response_frame(prog, correlation_id, body, header_version)


def decode_request(frame):
    """(api_key, version, correlation_id, client_id, body) of a request frame given without
    its size prefix (for scripted peers and tests)."""
    api_key, version = _peek_request_api(frame)
    prog, header_version = _request_program(api_key, version)
    return _codec.decode_request_frame(prog, frame, header_version)


def negotiate(broker_ranges: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Highest version both sides support, per api key; keys without overlap are absent."""
    out: dict[int, int] = {}
    for key, (lo, hi) in broker_ranges.items():
        ours = CLIENT_VERSIONS.get(key)
        if ours is None:
            continue
        top = min(hi, ours[1])
        if top >= max(lo, ours[0]):
            out[key] = top
    return out


# ------------------------------------------------------------------ ApiVersions fallback
def _decode_api_versions(prog, version: int, frame) -> dict:
    """A broker that does not support the requested ApiVersions version answers
    UNSUPPORTED_VERSION with the versions it does support, not in the requested format:
    Apache Kafka in v0 form; librdkafka's mock cluster with a one-byte raw count, untagged
    entries and a throttle time. Both are recognised (they must parse exactly) so the
    caller can retry with a version the broker offers."""
    error_code = int.from_bytes(bytes(frame[4:6]), "big", signed=True) if len(frame) >= 6 else 0
    if error_code == _UNSUPPORTED_VERSION:
        for parse in (_parse_v0_form, _parse_one_byte_count_form):
            try:
                partial = parse(frame)
            except ProtocolError:
                continue
            body = prog.default()
            body.update((k, v) for k, v in partial.items() if k in body)
            return body
    return _codec.decode_response_frame(prog, frame, 0)


def _parse_v0_form(frame) -> dict:
    prog, _ = _response_program(ApiKey.API_VERSIONS, 0)
    return _codec.decode_response_frame(prog, frame, 0, True)


def _parse_one_byte_count_form(frame) -> dict:
    # Only the shape librdkafka's mock sends: exactly one entry, for ApiVersions itself,
    # then the throttle time; anything else is not this form.
    r = _Reader(frame)
    r.int32()                                   # correlation id
    error_code = r.int16()
    if r.int8() != 1 or r.remaining_bytes != 10:
        raise ProtocolError("not the one-byte-count ApiVersions form")
    entry = {"api_key": r.int16(), "min_version": r.int16(), "max_version": r.int16()}
    if entry["api_key"] != ApiKey.API_VERSIONS:
        raise ProtocolError("not the one-byte-count ApiVersions form")
    return {"error_code": error_code, "api_keys": [entry], "throttle_time_ms": r.int32()}
