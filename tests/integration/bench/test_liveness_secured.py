"""The liveness benchmark on a secured listener (``python -m bench liveness --security``), short:
kclient's member, SASL_SSL (SCRAM-SHA-512) through the relay the shared secured broker
advertises, a 3 s GIL-holding call with a 2 s session. The relay, outside the client, must
see the member's heartbeats during the stall, on schedule, and no rejoin."""
from __future__ import annotations

import argparse
import sys

from repo_paths import REPO

sys.path.insert(0, str(REPO))

from bench import liveness_kafka, runner  # noqa: E402
from kclient.testing.kafka import SASL_SESSION_MS  # noqa: E402

ARGS = ["liveness", "--security", "SASL_SSL", "--liveness-clients", "kclient-records",
        "--scenarios", "gil-held-c-call", "--gil-s", "3", "--session-timeout-ms", "2000",
        "--heartbeat-interval-ms", "500", "--steady-s", "1", "--after-s", "1",
        "--reauth-ms", str(SASL_SESSION_MS)]


def test_the_relay_sees_a_secured_members_heartbeats_through_a_gil_holding_call(secure_kafka, tmp_path):
    parser = argparse.ArgumentParser()
    runner.configure(parser)
    args = parser.parse_args(ARGS)
    args.command_line = "python -m bench " + " ".join(ARGS)
    report = liveness_kafka.measure(args, secure_kafka, tmp_path)
    (r,) = report["results"]
    assert r["ok"], r.get("traceback") or r
    assert r["security"] == "SASL_SSL/SCRAM-SHA-512"
    assert r["stall_s"] >= 3
    # Every 500 ms in a 3 s stall: 6 expected; a loaded machine may lose one at either edge.
    assert r["heartbeats_during_stall"] >= 4, r
    assert r["longest_heartbeat_silence_s"] < 2.0, r   # never a session without a heartbeat
    assert r["kept_partitions"] and r["join_group_after_stable"] == 0, r
    assert r["assignment_after"] == r["assignment_before"] == [0, 1, 2, 3]
    # 2 s SASL sessions: the pacemaker authenticated afresh during the stall, past the relay.
    assert r["sasl_logins_during_stall"] >= 1, r
    assert "| kclient" in liveness_kafka.markdown(report)
