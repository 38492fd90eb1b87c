"""The liveness judge's request log (bench/tls_relay.py): frames split across reads, large
frames passed through unkept, the member epoch of a ConsumerGroupHeartbeat, what each request
means to the analysis (bench/liveness_kafka.py)."""
from __future__ import annotations

import io
import struct
import sys

from repo_paths import REPO

sys.path.insert(0, str(REPO))

import kcore.groupcodec as groupcodec  # noqa: E402
from bench.liveness_kafka import parse_security, relay_events  # noqa: E402
from bench.tls_relay import Request, RequestLog  # noqa: E402


def frame(api_key: int, body: bytes = b"", client_id: bytes = b"cli") -> bytes:
    rest = struct.pack(">hhih", api_key, 4, 1, len(client_id)) + client_id + body
    return struct.pack(">i", len(rest)) + rest


def logged(chunks: list[tuple[bytes, float]]) -> list[str]:
    out = io.StringIO()
    log = RequestLog(out, 7)
    for data, at in chunks:
        log.data(data, at)
    return out.getvalue().splitlines()


def test_a_frame_is_logged_once_its_header_is_in_at_the_time_of_that_read():
    hb = frame(12, b"x" * 30)
    assert logged([(hb[:5], 1.0), (hb[5:20], 2.0), (hb[20:], 3.0)]) == ["2.000000 12 7 -"]


def test_frames_in_one_read_are_each_logged_and_a_large_frame_passes_through_unkept():
    fetch, hb = frame(1, b"f" * 100_000), frame(12)
    data = fetch + hb + frame(13)
    lines = logged([(data[:1000], 1.0), (data[1000:50_000], 2.0), (data[50_000:], 3.0)])
    assert lines == ["1.000000 1 7 -", "3.000000 12 7 -", "3.000000 13 7 -"]


def test_the_member_epoch_of_a_consumer_group_heartbeat_is_read():
    cgh = groupcodec.encode_consumer_group_heartbeat_request(1, 9, "liveness", "group", "member-1", 42)
    join = groupcodec.encode_consumer_group_heartbeat_request(0, 10, None, "group", "", 0)
    leave = groupcodec.encode_consumer_group_heartbeat_request(1, 11, "c", "g", "m", -1)
    data = cgh + join + leave
    lines = logged([(data[i:i + 3], float(i)) for i in range(0, len(data), 3)])
    assert [line.split()[1:] for line in lines] == [["68", "7", "42"], ["68", "7", "0"], ["68", "7", "-1"]]


def test_requests_are_heartbeats_joins_leaves_or_authentications():
    reqs = [Request(1.0, 12, 1, None), Request(2.0, 11, 1, None), Request(3.0, 13, 1, None),
            Request(4.0, 17, 2, None), Request(4.5, 36, 2, None), Request(5.0, 68, 2, 5), Request(6.0, 68, 2, 0), Request(7.0, 68, 2, -2),
            Request(8.0, 1, 2, None)]
    assert relay_events(reqs) == [(1.0, "heartbeat"), (2.0, "join"), (3.0, "leave"), (4.0, "auth"),
                                  (5.0, "heartbeat"), (6.0, "join"), (7.0, "leave")]


def test_security_names_a_protocol_and_for_sasl_a_mechanism():
    assert parse_security("SSL") == ("SSL", None)
    assert parse_security("sasl_ssl") == ("SASL_SSL", "SCRAM-SHA-512")
    assert parse_security("SASL_SSL/OAUTHBEARER") == ("SASL_SSL", "OAUTHBEARER")
