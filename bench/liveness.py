"""Liveness benchmark: does a group member keep its partitions while the application stalls?

``python -m bench liveness`` runs each client as the only member of a fresh group on
librdkafka's mock cluster (session.timeout.ms=6000 by default), in its own process:

1. join, poll until it owns partitions, poll normally for a few seconds;
2. stall between two polls, one of:
   - ``python-compute``: pure-Python computation for 20 s (the interpreter still switches
     threads every ``sys.getswitchinterval()``, so a Python heartbeat thread can run);
   - ``gil-held-c-call``: a 12 s C call that keeps the GIL (libc ``sleep`` through
     ``ctypes.PyDLL``, which unlike ``ctypes.CDLL`` does not release it): no Python thread
     runs, only threads written in C (librdkafka's) do;
3. poll again for a while, so an evicted member finds out and rejoins; close.

The broker's side is the judge. The mock cluster records every request it receives
(request tracking: api key and CLOCK_MONOTONIC time, the clock of ``time.monotonic()``), so
the report shows, client-independently: the Heartbeat send times (gaps, jitter, how many
were sent during the stall) and whether a JoinGroup followed the stall. A member that was
evicted (no heartbeat for a session timeout) must rejoin: its partitions were revoked and,
had a second member been in the group, handed to it (with the records since the last
commit delivered twice). The member's own rebalance callbacks (revoked / lost / assigned
after it was stable) are reported as well.

``--security SSL,SASL_SSL,SASL_PLAINTEXT`` runs the same scenarios on Apache Kafka's secured
listeners instead (bench/liveness_kafka.py): there the judge is a request-timing relay in its
own process between the client and the broker (bench/tls_relay.py), and the consumer protocol
(KIP-848, ``--group-protocols``) can be measured too.

Expected (and checked by this benchmark, not assumed): a Python heartbeat thread survives
the pure-Python stall but not the GIL-holding call; librdkafka's C threads survive both;
aiokafka's heartbeat is a task on the event loop, which does not run while the application
blocks the loop.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from kclient.protocol import ApiKey

CLIENTS = ["kclient-records", "kafka-python", "aiokafka", "confluent-default"]
SCENARIOS = ["python-compute", "gil-held-c-call"]
HEARTBEAT, JOIN_GROUP, SYNC_GROUP, LEAVE_GROUP = (
    int(k) for k in (ApiKey.HEARTBEAT, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.LEAVE_GROUP))
PARTITIONS = 4
RECORDS = 20_000


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- stalls
def python_compute(seconds: float) -> int:
    """Busy pure-Python arithmetic for ``seconds`` (the GIL is passed around as usual)."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for i in range(10_000):
            x = (x + i * i) % 1_000_003
    return x


def gil_held_c_call(seconds: float) -> None:
    """A C call that keeps the GIL for ``seconds``: ctypes.PyDLL calls without releasing it."""
    libc = ctypes.PyDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.sleep.argtypes = [ctypes.c_uint]
    libc.sleep.restype = ctypes.c_uint
    remaining = int(round(seconds))
    while remaining > 0:  # sleep() returns early (the time left) only when a signal arrives
        remaining = libc.sleep(remaining)


# ---------------------------------------------------------------------------- member child
@dataclasses.dataclass
class MemberJob:
    driver: str
    scenario: str
    bootstrap: str
    topic: str
    group_id: str
    session_timeout_ms: int | None
    heartbeat_interval_ms: int | None
    stall_s: float
    steady_s: float
    after_s: float
    join_timeout_s: float = 60.0
    # More consumer settings for the driver's member (security, group protocol); the
    # consumer protocol's session and interval are the broker's (both None then).
    settings: dict = dataclasses.field(default_factory=dict)


def member_child(job: MemberJob) -> dict:
    from bench.drivers import load

    events: list[tuple[float, str, list[int]]] = []

    def event(kind: str, partitions: list[int]) -> None:
        events.append((time.monotonic(), kind, list(partitions)))

    out: dict = {"driver": job.driver, "scenario": job.scenario, "events": events}
    module = load(job.driver)
    out["label"], out["version"] = module.LABEL, module.version()
    out["created_at"] = time.monotonic()
    extra = {"settings": job.settings} if job.settings else {}
    m = module.member(job.bootstrap, job.topic, job.group_id, job.session_timeout_ms,
                      job.heartbeat_interval_ms, event, **extra)
    records = 0
    deadline = time.monotonic() + job.join_timeout_s
    while not m.assignment():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no partitions assigned within {job.join_timeout_s} s")
        records += m.poll(0.2)
    out["stable_at"] = time.monotonic()
    out["assignment_before"] = m.assignment()
    end = time.monotonic() + job.steady_s
    while time.monotonic() < end:
        records += m.poll(0.2)
    out["stall_start"] = time.monotonic()
    if job.scenario == "python-compute":
        python_compute(job.stall_s)
    else:
        gil_held_c_call(job.stall_s)
    out["stall_end"] = time.monotonic()
    end = time.monotonic() + job.after_s
    while time.monotonic() < end:
        records += m.poll(0.2)
    out["assignment_after"] = m.assignment()
    out["records"] = records
    out["close_at"] = time.monotonic()
    m.close()
    out["closed_at"] = time.monotonic()
    return out


def _child_main(argv: list[str]) -> int:
    job_json, result_path = argv
    job = MemberJob(**json.loads(job_json))
    try:
        result = member_child(job)
        result["ok"] = True
    except Exception as exc:
        import traceback
        result = {"driver": job.driver, "scenario": job.scenario, "ok": False,
                  "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    with open(result_path, "w") as f:
        json.dump(result, f)
    return 0 if result["ok"] else 1


# ---------------------------------------------------------------------------- analysis
#: What a request means to the judge, by api key (classic protocol).
KINDS = {HEARTBEAT: "heartbeat", JOIN_GROUP: "join", LEAVE_GROUP: "leave"}


def mock_events(requests: list) -> list[tuple[float, str]]:
    """(time.monotonic() seconds, kind) of the mock cluster's tracked requests."""
    return [(r.timestamp_us / 1e6, KINDS[r.api_key]) for r in requests if r.api_key in KINDS]


def analyse(res: dict, requests: list[tuple[float, str]], job: MemberJob,
            interval_ms: int | None = None, session_ms: int | None = None) -> dict:
    """What the judge saw of this member: ``requests`` are (time.monotonic() seconds, kind),
    kind one of heartbeat, join, leave, auth; those before its creation or after its close
    are left out. ``interval_ms``, ``session_ms``: the timing in force (default the job's; the
    broker's with group.protocol=consumer)."""
    if not res.get("ok"):
        return {"ok": False, "error": res.get("error")}
    t0, stable, s0, s1 = res["created_at"], res["stable_at"], res["stall_start"], res["stall_end"]
    close = res["close_at"]
    reqs = [(t, k) for t, k in requests if t0 <= t <= close]
    hb = sorted(t for t, k in reqs if k == "heartbeat" and t >= stable)
    joins_after = [t for t, k in reqs if k == "join" and t > stable]
    leaves = [t for t, k in reqs if k == "leave" and t > stable]
    auths_in_stall = [t for t, k in reqs if k == "auth" and s0 <= t <= s1]
    callbacks_after = [(round(t - s0, 2), kind, parts) for t, kind, parts in res["events"]
                       if stable < t < close]
    lost_or_revoked = [c for c in callbacks_after if c[1] in ("lost", "revoked")]
    gaps = [(b - a, a, b) for a, b in zip(hb, hb[1:])]
    # Longest silence overlapping the stall (from the member being stable to its close when
    # no heartbeat at all came on one side).
    points = [stable] + hb + [close]
    silence = max((b - a for a, b in zip(points, points[1:]) if a < s1 and b > s0), default=0.0)
    during = [t for t in hb if s0 <= t <= s1]
    normal = [g for g, a, b in gaps if b < s0 or a > s1 + 1.0]
    in_stall = [g for g, a, b in gaps if a >= s0 and b <= s1]
    interval = (interval_ms or job.heartbeat_interval_ms or 0) / 1000
    kept = not joins_after and not lost_or_revoked
    return {
        "ok": True, "kept_partitions": kept,
        "assignment_before": res["assignment_before"], "assignment_after": res["assignment_after"],
        "join_group_after_stable": len(joins_after),
        "first_rejoin_after_stall_s": round(joins_after[0] - s0, 2) if joins_after else None,
        "leave_group_after_stable": len(leaves),
        "heartbeats_total": len(hb), "heartbeats_during_stall": len(during),
        "heartbeats_during_stall_at_s": [round(t - s0, 3) for t in during],
        # Every interval: (its start in s after the stall began, its length in ms).
        "heartbeat_intervals": [(round(a - s0, 3), round(g * 1000, 1)) for g, a, b in gaps],
        "stall_s": round(s1 - s0, 2),
        "longest_heartbeat_silence_s": round(silence, 3),
        "session_timeout_s": (session_ms or job.session_timeout_ms or 0) / 1000,
        "sasl_logins_during_stall": len(auths_in_stall),
        "sasl_logins_at_s": [round(t - s0, 3) for t, k in reqs if k == "auth" and t >= stable],
        "interval_s": interval,
        "normal_interval_median_s": round(statistics.median(normal), 4) if normal else None,
        "normal_interval_stdev_ms": round(statistics.pstdev(normal) * 1000, 2) if len(normal) > 1 else None,
        "normal_interval_max_dev_ms": round(max(abs(g - interval) for g in normal) * 1000, 1) if normal else None,
        "normal_intervals": len(normal),
        "stall_interval_max_dev_ms": (round(max(abs(g - interval) for g in in_stall) * 1000, 1)
                                      if in_stall else None),
        "callbacks_after_stable": callbacks_after,
        "records": res.get("records"),
        "label": res.get("label"), "version": res.get("version"),
    }


# ---------------------------------------------------------------------------- orchestration
def run_member(job: MemberJob) -> dict:
    fd, path = tempfile.mkstemp(prefix=f"liveness-{job.driver}-", suffix=".json")
    os.close(fd)
    repo = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([repo] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    cmd = [sys.executable, "-m", "bench.liveness", json.dumps(dataclasses.asdict(job)), path]
    limit = job.join_timeout_s + job.steady_s + job.stall_s + job.after_s + 60
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdin=subprocess.DEVNULL)
    try:
        proc.wait(limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"ok": False, "error": f"member process exited with {proc.returncode} without a result"}
    finally:
        os.unlink(path)


def check_clients(clients: list[str]) -> None:
    from bench.drivers import DRIVERS

    for c in clients:
        if c not in DRIVERS or not hasattr(__import__(DRIVERS[c], fromlist=["member"]), "member"):
            raise SystemExit(f"client {c!r} has no group member for the liveness benchmark")


def run(args: argparse.Namespace) -> int:
    if args.security:
        from bench import liveness_kafka
        return liveness_kafka.run(args)
    from bench import runner
    from kclient.testing.mock_cluster import MockCluster

    if args.group_protocols not in (None, ["classic"]):
        raise SystemExit("--group-protocols: the mock cluster's judge sees the classic protocol only; "
                         "the consumer protocol needs --security (Apache Kafka)")
    clients = args.liveness_clients or CLIENTS
    scenarios = args.scenarios or SCENARIOS
    check_clients(clients)
    stall = {"python-compute": args.compute_s, "gil-held-c-call": args.gil_s}
    report = {"environment": runner.environment(), "command": args.command_line,
              "loadavg_start": os.getloadavg(), "session_timeout_ms": args.session_timeout_ms,
              "heartbeat_interval_ms": args.heartbeat_interval_ms, "results": []}
    with MockCluster(1) as mock:
        report["broker"] = {"kind": "librdkafka mock cluster", "version": mock.librdkafka_version}
        if "group_initial_rebalance_delay_ms" in mock.ops:
            mock.group_initial_rebalance_delay_ms(0)
        topic = f"liveness-{uuid.uuid4().hex[:8]}"
        mock.create_topic(topic, PARTITIONS)
        mock.wait_for_topic(topic, PARTITIONS, timeout=30)
        runner.produce(mock.bootstrap, topic, runner.Config(PARTITIONS, 100, "none", RECORDS))
        for client in clients:
            for scenario in scenarios:
                job = MemberJob(driver=client, scenario=scenario, bootstrap=mock.bootstrap, topic=topic,
                                group_id=f"liveness-{client}-{uuid.uuid4().hex[:8]}",
                                session_timeout_ms=args.session_timeout_ms,
                                heartbeat_interval_ms=args.heartbeat_interval_ms,
                                stall_s=stall[scenario], steady_s=args.steady_s, after_s=args.after_s)
                log(f"liveness: {client}, {scenario} ({stall[scenario]:.0f} s stall, session timeout "
                    f"{args.session_timeout_ms} ms) ...")
                mock.start_request_tracking()
                res = run_member(job)
                requests = mock_events(mock.get_requests())
                mock.stop_request_tracking()
                out = analyse(res, requests, job)
                out.update(client=client, scenario=scenario)
                if not out["ok"]:
                    out["traceback"] = res.get("traceback")
                report["results"].append(out)
                log(f"liveness:   {_one_line(out)}")
    report["loadavg_end"] = os.getloadavg()
    return write_report(report, markdown(report), args)


def write_report(report: dict, text: str, args: argparse.Namespace) -> int:
    """Print the table, write it and the JSON to bench/results/ (and --out); 1 if a run failed."""
    from bench import runner

    print(text)
    results_dir = runner.RESULTS_DIR
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = report["environment"]["date"].replace(":", "").replace("-", "")[:15]
    paths = [results_dir / f"liveness-{stamp}.json", results_dir / f"liveness-{stamp}.md"]
    paths[0].write_text(json.dumps(report, indent=1, default=str))
    paths[1].write_text(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        for p in list(paths):
            (args.out / p.name).write_text(p.read_text())
            paths.append(args.out / p.name)
    for p in paths:
        log(f"liveness: wrote {p}")
    return 0 if all(r["ok"] for r in report["results"]) else 1


def _one_line(r: dict) -> str:
    if not r["ok"]:
        return f"FAILED: {r['error']}"
    return (f"kept partitions: {'yes' if r['kept_partitions'] else 'NO'}; heartbeats during the stall "
            f"{r['heartbeats_during_stall']}, longest silence {r['longest_heartbeat_silence_s']:.1f} s, "
            f"JoinGroup after stable {r['join_group_after_stable']}")


TABLE_HEADER = [
    "client", "stall", "kept its partitions", "JoinGroup after the stall", "heartbeats sent during the stall",
    "longest heartbeat silence (s)", "heartbeat interval otherwise: median (s), stdev (ms), max deviation (ms)",
    "heartbeat interval during the stall: max deviation (ms)",
    "rebalance callbacks after it was stable (s after stall start)"]
TABLE_ALIGN = ["---", "---", "---", "---:", "---:", "---:", "---", "---:", "---"]


def row_cells(r: dict) -> list[str]:
    """One result's cells under TABLE_HEADER."""
    if not r["ok"]:
        return [r["client"], r["scenario"], f"failed: {r['error']}"] + [""] * (len(TABLE_HEADER) - 3)
    label = f"{r['label']} {r['version']}"
    stall = f"{r['scenario']} {r['stall_s']:.0f} s"
    joins = str(r["join_group_after_stable"])
    if r["first_rejoin_after_stall_s"] is not None:
        joins += f" (first at +{r['first_rejoin_after_stall_s']:.1f} s)"
    normal = (f"{r['normal_interval_median_s']}, {r['normal_interval_stdev_ms']}, {r['normal_interval_max_dev_ms']}"
              if r["normal_interval_median_s"] is not None else "–")
    stall_dev = "–" if r.get("stall_interval_max_dev_ms") is None else f"{r['stall_interval_max_dev_ms']}"
    cbs = "; ".join(f"{t:+.1f} {kind} {parts}" for t, kind, parts in r["callbacks_after_stable"]) or "none"
    return [label, stall, "yes" if r["kept_partitions"] else "**no**", joins, str(r["heartbeats_during_stall"]),
            f"{r['longest_heartbeat_silence_s']:.2f}", normal, stall_dev, cbs]


def table_line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"Date: {env['date']}; {env['cpu_count']} cores; broker: {report['broker']['kind']} "
        f"(librdkafka {report['broker']['version']}); session.timeout.ms={report['session_timeout_ms']}, "
        f"heartbeat.interval.ms={report['heartbeat_interval_ms']}.",
        f"Command: `{report['command']}`; load average at start "
        f"{'/'.join(f'{x:.2f}' for x in report['loadavg_start'])}.",
        "",
        table_line(TABLE_HEADER),
        "|" + "|".join(TABLE_ALIGN) + "|",
    ]
    for r in report["results"]:
        lines.append(table_line(row_cells(r)))
    lines.append("")
    return "\n".join(lines)


def configure(group) -> None:
    group.add_argument("--liveness-clients", type=lambda s: [x for x in s.split(",") if x],
                       help=f"comma list (default {','.join(CLIENTS)})")
    group.add_argument("--scenarios", type=lambda s: [x for x in s.split(",") if x],
                       help=f"comma list of {','.join(SCENARIOS)} (default both)")
    group.add_argument("--session-timeout-ms", type=int, default=6000)
    group.add_argument("--heartbeat-interval-ms", type=int, default=2000)
    group.add_argument("--compute-s", type=float, default=20.0, help="pure-Python stall (s)")
    group.add_argument("--gil-s", type=float, default=12.0, help="GIL-holding C call (s)")
    group.add_argument("--steady-s", type=float, default=4.0, help="normal polling before the stall (s)")
    group.add_argument("--after-s", type=float, default=10.0, help="polling after the stall (s)")
    group.add_argument("--security", type=lambda s: [x for x in s.split(",") if x], metavar="PROTOCOL[,...]",
                       help="run on Apache Kafka's listeners with these security protocols instead of the mock "
                            "cluster, each behind a request-timing relay (bench/tls_relay.py): PLAINTEXT, SSL "
                            "(mTLS), SASL_PLAINTEXT, SASL_SSL (SCRAM-SHA-512; SASL_SSL/OAUTHBEARER or "
                            "SASL_PLAINTEXT/PLAIN name another mechanism)")
    group.add_argument("--group-protocols", type=lambda s: [x for x in s.split(",") if x],
                       help="with --security: classic (default), consumer (KIP-848) or both")
    group.add_argument("--reauth-ms", type=int, default=10_000,
                       help="with --security: the SASL listeners' connections.max.reauth.ms (KIP-368 "
                            "re-authentication; 0: never; default 10000)")


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
