"""``python -m bench chaos --minutes N [--seed S] [--members M] [--security SASL_SSL]``: the chaos soak.

Starts a 3-broker Apache Kafka cluster (replication 3, min.insync.replicas 2) with a fault
proxy in front of every broker, and runs kclient.testing.chaos for N minutes: a producer
writing numbered records with acks=all, M consumer members as child processes, and one fault
at a time (rolling broker restarts, SIGKILL of a partition leader and of the group coordinator,
proxy latency / resets / blackholes / slow reads, SIGKILL of members), then a quiet period and
the checker (Jepsen's Kafka criteria). Prints a table: duration, records produced /
acknowledged / checked, faults by kind, every criterion, and per member slot the min/max of
RSS, open fds and threads, sampled every second.

``--share``: share-group members instead (kclient.testing.share_chaos: KafkaShareConsumers in
explicit mode accepting, rejecting and releasing records; by default the faults are leader
kills and member kills), checked for every record accepted once or rejected, none lost, none
delivered again after its final acknowledgement.

Exit status 1 if any criterion is non-zero or a member's resources are out of bounds:
absolute caps (RSS 400 MB, 256 fds, 32 threads) and, for a member incarnation that lived at
least 2 minutes, no growth from the second to the last quarter of its samples beyond
x1.25 + 32 MB RSS, +16 fds, +4 threads (kclient.testing.chaos.RESOURCE_BOUNDS).

``--security SASL_SSL``: the producer and the members connect over TLS with SASL SCRAM-SHA-512
(the proxies relay the encrypted streams), so faults hit TLS handshakes, SASL logins and
re-authentications as well.
"""
from __future__ import annotations

import argparse
import logging
import sys
from collections import defaultdict

from kclient.testing.chaos import FAULT_KINDS, RESOURCE_BOUNDS, Chaos, ChaosConfig, ChaosResult, ResourceSample
from kclient.testing.share_chaos import SHARE_FAULT_KINDS, ShareChaos, ShareChaosResult


def table(result: ChaosResult, command: str) -> str:
    rows: list[tuple[str, str]] = [
        ("command", command),
        ("seed", str(result.seed)),
        ("duration (s, incl. start and quiet period)", f"{result.duration_s:.0f}"),
        ("records produced", str(result.produced)),
        ("records acknowledged (acks=all)", str(result.acknowledged)),
        ("records not acknowledged (send failed)", str(result.send_failures)),
        ("records checked (acknowledged)", str(result.report.acknowledged)),
        ("deliveries checked", str(result.deliveries)),
    ]
    for kind in FAULT_KINDS:
        rows.append((f"faults: {kind}", str(result.faults.get(kind, 0))))
    rows.append(("faults: total", str(sum(result.faults.values()))))
    if result.skipped_faults:
        rows.append(("faults skipped (cluster not fully replicated in time)",
                     ", ".join(f"{k} {v}" for k, v in sorted(result.skipped_faults.items()))))
    if isinstance(result, ShareChaosResult):
        rows.append(("records accepted / rejected / archived", f"{result.accepted} / {result.rejected} / "
                                                               f"{result.archived}"))
        rows.append(("releases / refused acknowledgements (informational)",
                     f"{result.released} / {result.failed_acknowledgements}"))
        rows.append(("members killed / poll errors (informational)", f"{len(result.killed)} / {result.poll_errors}"))
        # An acknowledgement whose answer never came (its leader or its member died): final
        # only once the broker's start offset has passed it, which the checker waited for.
        rows.append(("acknowledgements of unknown outcome (settled by the start offsets)", str(result.outcome_unknown)))
        if result.start_offsets:
            rows.append(("start offsets after the quiet period, by partition",
                         ", ".join(f"{p}: {o}" for p, o in sorted(result.start_offsets.items()))))
    else:
        rows.append(("members killed / fenced (may redeliver past their last commit)",
                     f"{len(result.killed)} / {len(result.fenced)}"))
        rows.append(("failed commits / poll errors (informational)",
                     f"{result.commit_failures} / {result.poll_errors}"))
    for name, count in result.criteria().items():
        rows.append((f"criterion: {name}", str(count)))
    for slot, ranges in result.resource_ranges().items():
        rss, fds, threads = ranges["rss_mb"], ranges["fds"], ranges["threads"]
        incarnations = sum(1 for name in result.resources if name.split(".")[0] == slot)
        rows.append((f"member {slot} ({incarnations} incarnations): RSS MB / fds / threads (min-max)",
                     f"{rss[0]:.0f}-{rss[1]:.0f} / {fds[0]:.0f}-{fds[1]:.0f} / {threads[0]:.0f}-{threads[1]:.0f}"))
    rows.append(("resource bounds violated", str(len(result.resource_violations))))
    rows.append(("verdict", "PASS" if result.ok else "FAIL"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def timeline(result: ChaosResult, buckets: int = 10) -> str:
    """Per member slot, the peak RSS MB / fds / threads in each of ``buckets`` time slices."""
    samples = [(name.split(".")[0], s) for name, ss in result.resources.items() for s in ss]
    if not samples:
        return "(no resource samples)"
    t0 = min(s.t for _, s in samples)
    span = max(max(s.t for _, s in samples) - t0, 1.0)
    width = span / buckets
    lines = ["resources over time, peak per slice: RSS MB / fds / threads"]
    header = "slot  " + " ".join(f"{f'+{int(i * width)}s':>13}" for i in range(buckets))
    lines.append(header)
    sliced: dict[tuple[str, int], list[ResourceSample]] = defaultdict(list)
    for slot, sample in samples:
        sliced[(slot, min(int((sample.t - t0) / width), buckets - 1))].append(sample)
    for slot in sorted({slot for slot, _ in samples}):
        cells = []
        for i in range(buckets):
            part = sliced.get((slot, i), [])
            cells.append(f"{max(s.rss_mb for s in part):.0f}/{max(s.fds for s in part)}/"
                         f"{max(s.threads for s in part)}" if part else "-")
        lines.append(f"{slot:<5} " + " ".join(f"{c:>13}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long faults are injected")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--rate", type=float, default=300.0, help="records per second")
    p.add_argument("--kinds", default=None,
                   help=f"comma-separated fault kinds (default: all; with --share: {','.join(SHARE_FAULT_KINDS)})")
    p.add_argument("--share", action="store_true", help="share-group members instead of consumer group members")
    p.add_argument("--security", choices=("PLAINTEXT", "SASL_SSL"), default="PLAINTEXT",
                   help="the clients' listener: SASL_SSL is TLS with SCRAM-SHA-512 through the proxies")
    p.add_argument("--verbose", action="store_true", help="log every fault")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    default_kinds = SHARE_FAULT_KINDS if args.share else FAULT_KINDS
    kinds = tuple(k for k in args.kinds.split(",") if k) if args.kinds else default_kinds
    unknown = set(kinds) - set(FAULT_KINDS)
    if unknown:
        p.error(f"unknown fault kinds {sorted(unknown)}; choose from {', '.join(FAULT_KINDS)}")
    from kclient.testing.kafka import KafkaCluster
    secured = args.security == "SASL_SSL"
    cluster = KafkaCluster(3, client_proxies=True, security=secured,
                           proxied_protocols=("PLAINTEXT", "SASL_SSL") if secured else ("PLAINTEXT",)).start()
    try:
        config = ChaosConfig(duration_s=args.minutes * 60, members=args.members, partitions=args.partitions,
                             rate=args.rate, seed=args.seed, kinds=kinds, security=args.security,
                             quiet_timeout_s=max(120.0, args.minutes * 10))
        result = (ShareChaos if args.share else Chaos)(cluster, config).run()
    finally:
        cluster.stop()
    command = "python -m bench chaos " + " ".join(argv if argv is not None else sys.argv[2:])
    print(table(result, command.strip()))
    print(timeline(result))
    for line in result.resource_violations:
        print(f"resource bound violated: {line}")
    if result.undelivered_at_deadline:
        print(f"undelivered at the quiet-period deadline, by partition: {result.undelivered_at_deadline}")
    if not result.ok:
        print(f"member logs: {result.workdir}")
        flagged = ((("lost", result.lost), ("accepted_twice", result.accepted_twice),
                    ("redelivered_after_final", result.redelivered_after_final))
                   if isinstance(result, ShareChaosResult) else ())
        for name, items in flagged:
            if items:
                print(f"{name} (first 10): {items[:10]}")
        for name, items in (("lost", result.report.lost), ("duplicated", result.report.duplicated),
                            ("nonmonotonic", result.report.nonmonotonic), ("skipped", result.report.skipped),
                            ("split_brain", result.report.split_brain)):
            if items:
                print(f"{name} (first 10): {items[:10]}")
        for line in result.explain:
            print(line)
    print(f"(resource bounds: {RESOURCE_BOUNDS})")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
