"""What the chaos harness's member processes (kclient.testing.chaos_member,
kclient.testing.share_chaos_member) have in common: their command line, logging, the JSON-lines
events on standard output, the poll loop and a clean stop on SIGTERM or SIGINT."""
from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from typing import Any, Callable

__all__ = ["MemberArgs", "parse_member_args", "emit", "record_value", "stop_on_signals", "poll_loop"]


class MemberArgs(argparse.Namespace):
    bootstrap: str
    topic: str
    group: str
    settings: dict[str, Any]


def parse_member_args(prog: str, what: str, defaults: dict[str, Any], argv: list[str] | None = None) -> MemberArgs:
    """``--bootstrap B --topic T --group G [--set key=value ...]``: the member's settings are
    ``defaults``, then bootstrap.servers and group.id, then every ``--set`` (Java-style keys).
    Also sets up logging: the client's own story (joins, evictions, session resets) goes to
    standard error, which the harness keeps per member for a post-mortem; connection churn is
    left out."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"a {what} setting (Java-style key)")
    args = parser.parse_args(argv, namespace=MemberArgs())
    args.settings = {**defaults, "bootstrap.servers": args.bootstrap, "group.id": args.group}
    for item in args.set:
        key, _, value = item.partition("=")
        args.settings[key] = value
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kclient.network").setLevel(logging.WARNING)
    return args


def emit(event: dict[str, Any]) -> None:
    """One event, one JSON line on standard output (flushed: the harness reads it at once)."""
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def record_value(v: bytes | None) -> int:
    """The producer's sequence number a record holds (-1 for anything else)."""
    try:
        return int(v) if v is not None else -1
    except ValueError:
        return -1


def stop_on_signals(wakeup: Callable[[], None]) -> list[bool]:
    """SIGTERM and SIGINT end the member's loop: the returned list becomes non-empty and the
    poll in progress is woken up."""
    stopping: list[bool] = []

    def stop(_signum: int, _frame: Any) -> None:
        stopping.append(True)
        wakeup()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return stopping


def poll_loop(consumer: Any, stopping: list[bool], handle: Callable[[dict], bool]) -> int:
    """Emit "start", then poll until ``stopping`` (or a wakeup) and hand every poll that returned
    records to ``handle`` (False: stop now); an error of poll() is emitted and the loop goes on.
    The consumer is closed, and "closed" emitted, however the loop ends."""
    from kclient import errors as Errors

    emit({"e": "start"})
    try:
        while not stopping:
            try:
                polled = consumer.poll(100)
            except Errors.WakeupError:
                break
            except Errors.KafkaError as exc:
                emit({"e": "error", "err": repr(exc)})
                continue
            if polled and not handle(polled):
                break
    finally:
        consumer.close()
        emit({"e": "closed"})
    return 0
