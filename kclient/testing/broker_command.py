"""``kclient broker``: a test broker in the foreground, for demos and manual testing.

Tansu by default (embedded, starts in milliseconds); ``--kafka [--brokers 3]`` for Apache Kafka;
``--mock N`` for librdkafka's mock cluster. ``--port`` fixes the client port (Tansu, or the
first Apache Kafka node), e.g. 9092 for code that reads ``localhost:9092``.

The bootstrap address is the first line on stdout (``BOOT=$(kclient broker | head -1)``
works); everything else goes to stderr. SIGINT or SIGTERM stops the broker cleanly.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading


def _topic_spec(text: str) -> tuple[str, int]:
    name, _, partitions = text.partition(":")
    try:
        count = int(partitions) if partitions else 1
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad partition count in {text!r}") from None
    if not name or count < 1:
        raise argparse.ArgumentTypeError(f"expected NAME[:PARTITIONS], got {text!r}")
    return name, count


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=0,
                        help="client port (with --kafka: the first node's; default: a free port)")
    parser.add_argument("--host", default="127.0.0.1", help="listen and advertised host (default: %(default)s)")
    parser.add_argument("--mock", type=int, metavar="N_BROKERS",
                        help="run librdkafka's mock cluster with N_BROKERS brokers instead of Tansu")
    parser.add_argument("--kafka", action="store_true",
                        help="run Apache Kafka (KRaft; Java 17 and, on first use, Maven to fetch its jars) "
                             "instead of Tansu")
    parser.add_argument("--brokers", type=int, default=1, metavar="N",
                        help="with --kafka: the number of nodes (3 gives replication factor 3, "
                             "min.insync.replicas 2; default: %(default)s)")
    parser.add_argument("--topic", type=_topic_spec, action="append", default=[], metavar="NAME[:PARTITIONS]",
                        help="create this topic once the broker is up (repeatable)")


def run(args: argparse.Namespace) -> int:
    from kclient.testing import HarnessError, KafkaCluster, MockCluster, TansuBroker

    if args.mock is not None and args.kafka:
        print("kclient broker: choose one of --mock and --kafka", file=sys.stderr)
        return 2
    if args.brokers != 1 and not args.kafka:
        print("kclient broker: --brokers applies to --kafka only (the mock cluster takes --mock N)",
              file=sys.stderr)
        return 2
    if args.kafka and args.brokers < 1:
        print("kclient broker: --brokers needs at least 1 node", file=sys.stderr)
        return 2
    if args.mock is not None and args.port:
        print("kclient broker: --port applies to Tansu and Apache Kafka only; the mock cluster picks "
              "free ports", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"kclient broker: --port must be between 1 and 65535, got {args.port}", file=sys.stderr)
        return 2
    if args.mock is not None and args.host != "127.0.0.1":
        print("kclient broker: --host applies to Tansu and Apache Kafka only", file=sys.stderr)
        return 2
    if args.mock is not None and args.mock < 1:
        print("kclient broker: --mock needs at least 1 broker", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    # Installed before the start, so a signal during start still ends in a clean stop.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker: KafkaCluster | MockCluster | TansuBroker
    if args.kafka:
        broker = KafkaCluster(args.brokers, host=args.host, port=args.port or None)
        what = f"Apache Kafka {broker.version} ({args.brokers} node{'s' if args.brokers > 1 else ''})"
    elif args.mock is not None:
        broker = MockCluster(args.mock)
        what = f"mock cluster ({args.mock} brokers)"
    else:
        broker = TansuBroker(port=args.port or None, host=args.host)
        what = "Tansu broker"
    try:
        try:
            broker.start()
            for name, partitions in args.topic:
                broker.create_topic(name, partitions)
                broker.wait_for_topic(name, partitions)
        except (HarnessError, OSError) as exc:
            print(f"kclient broker: {exc}", file=sys.stderr)
            return 1
        print(broker.bootstrap, flush=True)
        pids = getattr(broker, "pids", None) or {0: broker.pid}
        print(f"{what} listening on {broker.bootstrap}, pid {', '.join(str(p) for p in pids.values())}; "
              "Ctrl-C to stop", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            if not broker.running:
                print("kclient broker: the broker exited unexpectedly", file=sys.stderr)
                return 1
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("stopped", file=sys.stderr)
    return 0
