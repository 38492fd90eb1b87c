"""``kclient broker``: an embedded broker in the foreground, for demos and manual testing.

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
    parser.add_argument("--port", type=int, default=0, help="Tansu listen port (default: a free port)")
    parser.add_argument("--host", default="127.0.0.1", help="Tansu listen and advertised host (default: %(default)s)")
    parser.add_argument("--mock", type=int, metavar="N_BROKERS",
                        help="run librdkafka's mock cluster with N_BROKERS brokers instead of Tansu")
    parser.add_argument("--topic", type=_topic_spec, action="append", default=[], metavar="NAME[:PARTITIONS]",
                        help="create this topic once the broker is up (repeatable)")


def run(args: argparse.Namespace) -> int:
    from kclient.testing import HarnessError, MockCluster, TansuBroker

    if args.mock is not None and (args.port or args.host != "127.0.0.1"):
        print("kclient broker: --port/--host apply to Tansu only; the mock cluster picks its own ports",
              file=sys.stderr)
        return 2
    if args.mock is not None and args.mock < 1:
        print("kclient broker: --mock needs at least 1 broker", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    # Installed before the start, so a signal during start still ends in a clean stop.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = MockCluster(args.mock) if args.mock is not None else TansuBroker(port=args.port or None,
                                                                              host=args.host)
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
        what = f"mock cluster ({args.mock} brokers)" if args.mock is not None else "Tansu broker"
        print(f"{what} running, pid {broker.pid}; Ctrl-C to stop", file=sys.stderr, flush=True)
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
