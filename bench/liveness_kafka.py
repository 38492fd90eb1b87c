"""The liveness benchmark on Apache Kafka's secured listeners: ``python -m bench liveness --security ...``.

The scenarios of bench/liveness.py (join, poll, stall between two polls in pure Python or in
a C call that holds the GIL, poll again), on the harness's Apache Kafka (one KRaft node, the
test certificates and SASL users of kclient.testing.pki) instead of librdkafka's mock cluster,
which has no TLS. Each member connects, with every connection it opens, through a relay
(bench/tls_relay.py, a process of its own) that speaks the security protocol under test to
the client and forwards the bytes to a broker listener the harness advertises at the relay's
address (``KafkaCluster(relayed_protocols=...)``), so Metadata and FindCoordinator send the
member's coordinator connection (the pacemaker's too) back through it:

- ``SSL``: the relay terminates TLS with the broker's test certificate and requires the
  client's (mTLS), then forwards to a PLAINTEXT listener;
- ``SASL_SSL``: it terminates TLS and forwards to a SASL_PLAINTEXT listener: the SASL exchange
  (SCRAM-SHA-512 by default, ``SASL_SSL/OAUTHBEARER`` for unsecured JWTs, ``/PLAIN``) passes
  through unchanged to the broker, which authenticates;
- ``SASL_PLAINTEXT`` and ``PLAINTEXT``: it forwards without TLS (the same judge, for
  comparison).

The relay is the judge: it times each request frame a client sends (``time.monotonic()``
when it arrived, decrypted; what that includes is in bench/tls_relay.py) and reads its api
key: Heartbeat, JoinGroup and LeaveGroup for the classic protocol; ConsumerGroupHeartbeat for
the consumer protocol (KIP-848), whose member epoch tells a rejoin (0) and a leave (< 0) from
a heartbeat; SaslHandshake, to count SASL logins during the stall (KIP-368: the SASL
listeners end sessions after ``--reauth-ms``). The figures are those of the mock-cluster run,
per security protocol.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import uuid
from pathlib import Path

from bench.liveness import (HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, PARTITIONS, RECORDS, SCENARIOS, TABLE_ALIGN,
                            TABLE_HEADER, MemberJob, analyse, check_clients, log, row_cells, run_member,
                            table_line, write_report, _one_line)
from bench.tls_relay import Relay, Request
from kclient.protocol import ApiKey

#: Clients that speak every protocol here (the mock run's others are left to the mock).
CLIENTS = ["kclient-records", "confluent-default"]
GROUP_PROTOCOLS = ("classic", "consumer")
DEFAULT_MECHANISM = "SCRAM-SHA-512"
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER")
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# A SASL login (first or KIP-368 re-authentication) starts with one SaslHandshake; SCRAM then
# takes two SaslAuthenticate round trips, PLAIN and OAUTHBEARER one.
CONSUMER_GROUP_HEARTBEAT, SASL_HANDSHAKE = int(ApiKey.CONSUMER_GROUP_HEARTBEAT), int(ApiKey.SASL_HANDSHAKE)


def parse_security(text: str) -> tuple[str, str | None]:
    """``PROTOCOL[/MECHANISM]`` -> (protocol, SASL mechanism or None)."""
    protocol, _, mechanism = text.upper().partition("/")
    if protocol not in PROTOCOLS:
        raise SystemExit(f"--security: {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    if not protocol.startswith("SASL_"):
        if mechanism:
            raise SystemExit(f"--security: {protocol} has no SASL mechanism ({text!r})")
        return protocol, None
    mechanism = mechanism or DEFAULT_MECHANISM
    if mechanism not in MECHANISMS:
        raise SystemExit(f"--security: SASL mechanism {mechanism!r} is not one of {', '.join(MECHANISMS)}")
    return protocol, mechanism


def client_settings(client: str, protocol: str, mechanism: str | None, pki, group_protocol: str) -> dict:
    """The settings that make ``client``'s member speak ``protocol`` to the relay."""
    from kclient.testing.pki import PLAIN_USER, SCRAM_USER

    user = PLAIN_USER if mechanism == "PLAIN" else SCRAM_USER
    tls = protocol in ("SSL", "SASL_SSL")
    if client.startswith("confluent"):
        out: dict = {"security.protocol": protocol.lower()}
        if tls:
            out["ssl.ca.location"] = str(pki.ca_file)
        if protocol == "SSL":
            out |= {"ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)}
        if mechanism == "OAUTHBEARER":
            out |= {"sasl.mechanism": mechanism, "enable.sasl.oauthbearer.unsecure.jwt": True,
                    "sasl.oauthbearer.config": "principal=liveness-member"}
        elif mechanism:
            out |= {"sasl.mechanism": mechanism, "sasl.username": user[0], "sasl.password": user[1]}
        if group_protocol == "consumer":
            out["group.protocol"] = "consumer"
        return out
    out = {"security.protocol": protocol}
    if tls:
        out["ssl.cafile"] = str(pki.ca_file)
    if protocol == "SSL":
        out |= {"ssl.certfile": str(pki.client_cert), "ssl.keyfile": str(pki.client_key)}
    if mechanism == "OAUTHBEARER":
        out |= {"sasl.mechanism": mechanism, "sasl.jaas.config":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                'unsecuredLoginStringClaim_sub="liveness-member";'}
    elif mechanism:
        out |= {"sasl.mechanism": mechanism, "sasl.plain.username": user[0], "sasl.plain.password": user[1]}
    if group_protocol == "consumer":
        out["group.protocol"] = "consumer"
    return out


def relay_events(requests: list[Request]) -> list[tuple[float, str]]:
    """(time, kind) of the relay's requests, as bench.liveness.analyse takes them."""
    out = []
    for r in requests:
        if r.api_key == HEARTBEAT:
            out.append((r.at, "heartbeat"))
        elif r.api_key == JOIN_GROUP:
            out.append((r.at, "join"))
        elif r.api_key == LEAVE_GROUP:
            out.append((r.at, "leave"))
        elif r.api_key == SASL_HANDSHAKE:
            out.append((r.at, "auth"))
        elif r.api_key == CONSUMER_GROUP_HEARTBEAT:
            epoch = r.epoch
            out.append((r.at, "join" if epoch == 0 else "leave" if epoch is not None and epoch < 0 else "heartbeat"))
    return out


def start_relays(cluster, protocols: list[str], work: Path) -> dict[str, Relay]:
    """One relay per relayed protocol (the cluster has one node)."""
    pki = cluster.pki
    relays: dict[str, Relay] = {}
    try:
        for protocol in protocols:
            (relay_port, broker_port), = cluster.relay_ports_for(protocol).values()
            tls = protocol in ("SSL", "SASL_SSL")
            relays[protocol] = Relay(
                (cluster.host, relay_port), (cluster.host, broker_port), work / f"relay-{protocol}.log",
                cert=pki.broker_pem if tls else None, ca=pki.ca_file if protocol == "SSL" else None,
                require_client_cert=protocol == "SSL").start()
    except BaseException:
        for relay in relays.values():
            relay.stop()
        raise
    return relays


def run(args: argparse.Namespace, profile: str = "throughput") -> int:
    """Start Apache Kafka with a relayed listener per protocol, measure, write the report."""
    from kclient.testing import KafkaCluster

    securities = [parse_security(s) for s in args.security]
    relayed = sorted({p for p, _ in securities}, key=PROTOCOLS.index)
    broker_config = {
        # The consumer protocol's session and heartbeat interval are the broker's.
        "group.consumer.session.timeout.ms": str(args.session_timeout_ms),
        "group.consumer.heartbeat.interval.ms": str(args.heartbeat_interval_ms),
        "group.consumer.min.heartbeat.interval.ms": str(min(args.heartbeat_interval_ms, 100)),
    }
    for protocol in relayed:
        if protocol.startswith("SASL_"):
            broker_config[f"listener.name.relayed_{protocol.lower()}.connections.max.reauth.ms"] = str(args.reauth_ms)
    with tempfile.TemporaryDirectory(prefix="liveness-relay-") as tmp, \
            KafkaCluster(security=True, relayed_protocols=tuple(relayed), broker_config=broker_config,
                         profile=profile) as cluster:
        report = measure(args, cluster, Path(tmp))
    return write_report(report, markdown(report), args)


def measure(args: argparse.Namespace, cluster, work: Path) -> dict:
    """The report of every member run on a started cluster that relays ``args.security``'s
    protocols (with SASL sessions of ``args.reauth_ms`` and, for the consumer protocol, the
    broker's session and interval equal to ``args``')."""
    from bench import runner

    securities = [parse_security(s) for s in args.security]
    group_protocols = args.group_protocols or ["classic"]
    unknown = [g for g in group_protocols if g not in GROUP_PROTOCOLS]
    if unknown:
        raise SystemExit(f"--group-protocols: {unknown} not among {', '.join(GROUP_PROTOCOLS)}")
    clients = args.liveness_clients or CLIENTS
    check_clients(clients)
    scenarios = args.scenarios or SCENARIOS
    stall = {"python-compute": args.compute_s, "gil-held-c-call": args.gil_s}
    relayed = sorted({p for p, _ in securities}, key=PROTOCOLS.index)
    report = {"environment": runner.environment(), "command": args.command_line,
              "loadavg_start": os.getloadavg(), "session_timeout_ms": args.session_timeout_ms,
              "heartbeat_interval_ms": args.heartbeat_interval_ms, "reauth_ms": args.reauth_ms,
              "broker": {"kind": "Apache Kafka", "version": cluster.version,
                         "judge": "request-timing relay (bench/tls_relay.py)"},
              "results": []}
    relays = start_relays(cluster, relayed, work)
    try:
        topic = f"liveness-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, PARTITIONS)
        cluster.wait_for_topic(topic, PARTITIONS, timeout=30)
        runner.produce(cluster.bootstrap, topic, runner.Config(PARTITIONS, 100, "none", RECORDS))
        for protocol, mechanism in securities:
            relay = relays[protocol]
            bootstrap = f"{relay.listen[0]}:{relay.listen[1]}"
            for group_protocol in group_protocols:
                for client in clients:
                    for scenario in scenarios:
                        report["results"].append(run_one(
                            args, client, scenario, group_protocol, protocol, mechanism, cluster, relay,
                            bootstrap, topic, stall[scenario]))
    finally:
        for relay in relays.values():
            relay.stop()
    report["loadavg_end"] = os.getloadavg()
    return report


def run_one(args, client: str, scenario: str, group_protocol: str, protocol: str, mechanism: str | None,
            cluster, relay: Relay, bootstrap: str, topic: str, stall_s: float) -> dict:
    consumer = group_protocol == "consumer"
    job = MemberJob(driver=client, scenario=scenario, bootstrap=bootstrap, topic=topic,
                    group_id=f"liveness-{client}-{uuid.uuid4().hex[:8]}",
                    session_timeout_ms=None if consumer else args.session_timeout_ms,
                    heartbeat_interval_ms=None if consumer else args.heartbeat_interval_ms,
                    stall_s=stall_s, steady_s=args.steady_s, after_s=args.after_s,
                    settings=client_settings(client, protocol, mechanism, cluster.pki, group_protocol))
    security = protocol + (f"/{mechanism}" if mechanism else "")
    log(f"liveness: {security}, {client} ({group_protocol} protocol), {scenario} ({stall_s:.0f} s stall, "
        f"session timeout {args.session_timeout_ms} ms) ...")
    res = run_member(job)
    out = analyse(res, relay_events(relay.requests()), job, interval_ms=args.heartbeat_interval_ms,
                  session_ms=args.session_timeout_ms)
    out.update(client=client, scenario=scenario, security=security, group_protocol=group_protocol)
    if not out["ok"]:
        out["traceback"] = res.get("traceback")
    log(f"liveness:   {_one_line(out)}; SASL logins during the stall "
        f"{out.get('sasl_logins_during_stall', '-')}")
    return out


_TLS_NOTE = {
    "PLAINTEXT": "no TLS, no SASL: the relay forwards to a PLAINTEXT listener",
    "SSL": "mTLS: the relay terminates TLS (client certificate required) and forwards to a PLAINTEXT listener",
    "SASL_PLAINTEXT": "no TLS: the relay forwards to a SASL_PLAINTEXT listener, which authenticates",
    "SASL_SSL": "the relay terminates TLS and forwards to a SASL_PLAINTEXT listener, which authenticates",
}


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"Date: {env['date']}; {env['cpu_count']} cores; broker: Apache Kafka {report['broker']['version']} "
        f"(one KRaft node); judge: the request-timing relay (bench/tls_relay.py), one process per protocol; "
        f"session.timeout.ms={report['session_timeout_ms']}, heartbeat.interval.ms="
        f"{report['heartbeat_interval_ms']} (the broker's for the consumer protocol); SASL sessions end after "
        f"{report['reauth_ms']} ms (KIP-368).",
        f"Command: `{report['command']}`; load average at start "
        f"{'/'.join(f'{x:.2f}' for x in report['loadavg_start'])}, at the end "
        f"{'/'.join(f'{x:.2f}' for x in report.get('loadavg_end', ()))}.",
    ]
    header = TABLE_HEADER[:1] + ["group protocol"] + TABLE_HEADER[1:] + ["SASL logins during the stall"]
    align = TABLE_ALIGN[:1] + ["---"] + TABLE_ALIGN[1:] + ["---:"]
    seen: list[str] = []
    for r in report["results"]:
        if r["security"] not in seen:
            seen.append(r["security"])
    for security in seen:
        protocol = security.partition("/")[0]
        lines += ["", f"{security}: {_TLS_NOTE[protocol]}.", "", table_line(header), "|" + "|".join(align) + "|"]
        for r in report["results"]:
            if r["security"] != security:
                continue
            cells = row_cells(r)
            auths = str(r.get("sasl_logins_during_stall", "")) if r["ok"] and protocol.startswith("SASL_") else "–"
            lines.append(table_line(cells[:1] + [r["group_protocol"]] + cells[1:] + [auths]))
    lines.append("")
    return "\n".join(lines)
