"""Membership through a GIL-holding C call on secured listeners of Apache Kafka.

The scenario of test_pacemaker_membership (member A, a child process, holds its GIL in a C
call for 12 s with a 6 s session; B, in the group all along, must never get A's partition),
with A connected over SASL_SSL SCRAM-SHA-512, mTLS, and SASL_SSL OAUTHBEARER, for the
classic and the consumer (KIP-848) protocols: the pacemaker secures its own coordinator
connection in C (TLS handshake, SASL exchange) and keeps A in the group. The harness's
secured cluster ends SASL sessions after 2 s (KIP-368), so during the stall the pacemaker
also re-establishes its session several times without the GIL.

The six scenarios share one broker and run at the same time (the stalls are sleeps). B uses
the cluster's plaintext listener: it only watches the group.
"""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from kclient.testing.pki import SCRAM_USER

from test_pacemaker_membership import STALL_S, _classic_scenario, _consumer_scenario  # noqa: E402

#: security id -> (listener, A's settings given the cluster)
SECURITY = {
    "sasl_ssl-scram-sha-512": ("SASL_SSL", lambda pki: {
        "security.protocol": "SASL_SSL", "ssl.cafile": str(pki.ca_file), "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.plain.username": SCRAM_USER[0], "sasl.plain.password": SCRAM_USER[1]}),
    "mtls": ("MTLS", lambda pki: {
        "security.protocol": "SSL", "ssl.cafile": str(pki.ca_file), "ssl.certfile": str(pki.client_cert),
        "ssl.keyfile": str(pki.client_key)}),
    "sasl_ssl-oauthbearer": ("SASL_SSL", lambda pki: {
        "security.protocol": "SASL_SSL", "ssl.cafile": str(pki.ca_file), "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                            'unsecuredLoginStringClaim_sub="stall-member";'}),
}
PROTOCOLS = ("classic", "consumer")
SCENARIOS = [(sec, proto) for sec in SECURITY for proto in PROTOCOLS]


@pytest.fixture(scope="module")
def stall_outcomes(secure_kafka):
    """(security, protocol) -> ("ok", observations) or ("error", exception), all run at once."""
    outcomes: dict = {}

    def run(sec, proto):
        listener, settings = SECURITY[sec]
        sid = f"{sec}-{proto}-{uuid.uuid4().hex[:8]}"
        topic, group = f"stall-{sid}", f"stall-{sid}"
        try:
            secure_kafka.create_topic(topic, 1)
            secure_kafka.wait_for_topic(topic, 1)
            # Six members start TLS (and SCRAM) at once on a shared machine: their first
            # metadata may take longer than the 2 s a consumer waits for it by default.
            bootstrap = secure_kafka.bootstrap_for(listener)
            a_settings = {**settings(secure_kafka.pki), "api.version.auto.timeout.ms": 30000}
            if proto == "consumer":
                outcomes[(sec, proto)] = ("ok", _consumer_scenario(secure_kafka, topic, group, bootstrap,
                                                                   a_settings))
            else:
                outcomes[(sec, proto)] = ("ok", _classic_scenario("kafka", secure_kafka, topic, group, 60000,
                                                                  bootstrap, a_settings))
        except BaseException as exc:   # reported by that scenario's test
            outcomes[(sec, proto)] = ("error", exc)

    threads = [threading.Thread(target=run, args=s, daemon=True) for s in SCENARIOS]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 280
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    for s in SCENARIOS:
        outcomes.setdefault(s, ("error", AssertionError(f"scenario {s} did not finish in time")))
    return outcomes


@pytest.mark.parametrize("security, protocol", SCENARIOS)
def test_a_secured_member_keeps_its_partitions_through_a_gil_holding_call(stall_outcomes, security, protocol):
    status, o = stall_outcomes[(security, protocol)]
    if status == "error":
        raise o
    stable, stalling, stalled, after = o["stable"], o["stalling"], o["stalled"], o["after"]
    assert stable["pacemaker"], "the pacemaker was not started on this security protocol"
    stats = after["stats"]
    # The pacemaker, not the Python thread, heartbeated: it connected (TLS, SASL) and was answered.
    assert stats["connects"] >= 1 and stats["received"] >= 1, stats
    if SECURITY[security][0] == "SASL_SSL":
        # Sessions last 2 s on this cluster: the pacemaker authenticated afresh during the stall.
        assert stats["authentications"] >= STALL_S // 2 // 2, stats
    assert after["member"] == stalling["member"]
    assert after["assignment"] == [0]
    assert not [e for e in after["events"] if e[0] in ("revoked", "lost") and e[1] > stalled["start"]]
    if protocol == "classic":
        # The broker saw no rebalance: same generation, and B never got the partition.
        assert after["generation"] == stalling["generation"]
        # (Read while A is still in the group after its stall: A's close hands B the partition.)
        assert o["b_got_at"] is None and o["b_after"] == (frozenset(), o["b_generation"])
    else:
        assert after["generation"] >= stalling["generation"] and stats["failed"] == 0, stats
        assert o["b_got_at"] is None or o["b_got_at"] > after["at"], "B got the partition before A left"
