"""``kclient verifiable-consumer``: Kafka's VerifiableConsumer protocol, so that Kafka's own
system tests (and any harness written for the Java tool) can drive kclient.

One JSON object per line on standard output, each with ``timestamp`` (ms) and ``name``:
``startup_complete``; ``partitions_assigned`` / ``partitions_revoked`` with ``partitions``
([{topic, partition}]); ``records_consumed`` after each poll that returned records, with
``count`` and ``partitions`` ([{topic, partition, count, minOffset, maxOffset}]);
``record_data`` per record with ``--verbose`` (key, value, topic, partition, offset, and the
record's own timestamp); ``offsets_committed`` after each commit unless auto-commit is on, with
``offsets`` ([{topic, partition, offset}]), ``success``, and ``error`` only when it failed;
``shutdown_complete`` after close; ``shutdown_requested`` once, when SIGTERM or SIGINT asks it to
stop (the last events follow) or, as the Java tool's exit hook does, after ``shutdown_complete``
of a run that ended by itself. Keys and value types are the Java tool's; the options too.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

__all__ = ["configure", "run", "consumer_settings"]

_CLIENT_ID = "kclient-verifiable-consumer"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server", required=True,
                        help="HOST:PORT[,HOST:PORT...]")
    parser.add_argument("--topic", required=True, help="topic to consume")
    parser.add_argument("--group-id", required=True, help="the consumer group")
    parser.add_argument("--group-instance-id", default=None, help="static membership id")
    parser.add_argument("--group-protocol", default="classic", choices=("classic", "consumer"),
                        help="group protocol (classic by default)")
    parser.add_argument("--group-remote-assignor", default=None,
                        help="server-side assignor; only with --group-protocol consumer")
    parser.add_argument("--max-messages", type=int, default=-1,
                        help="stop after this many records (-1: until stopped)")
    parser.add_argument("--session-timeout", type=int, default=None, help="session.timeout.ms")
    parser.add_argument("--verbose", action="store_true", help="a record_data event per record")
    parser.add_argument("--enable-autocommit", action="store_true", help="auto-commit instead of committing per poll")
    parser.add_argument("--reset-policy", default="earliest",
                        help="auto.offset.reset: earliest (default), latest, none or by_duration:<ISO-8601 duration>")
    parser.add_argument("--assignment-strategy", default=None,
                        help="partition.assignment.strategy (classic protocol only)")
    parser.add_argument("--close-timeout", type=int, default=30000,
                        help="how long closing the consumer may take, in ms (default: 30000)")
    config = parser.add_mutually_exclusive_group()
    config.add_argument("--command-config", dest="consumer_config", default=None,
                        help="a Java properties file of consumer settings (the options above win)")
    config.add_argument("--consumer.config", dest="consumer_config",
                        help="the same as --command-config (the Java tool's older name)")


def _properties(path: str) -> dict[str, str]:
    """key=value / key: value lines; # and ! start comments (enough of Java's format for configs)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line or line[0] in "#!":
                continue
            sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
            if sep < 0:
                raise SystemExit(f"kclient verifiable-consumer: {path}: not key=value: {line!r}")
            out[line[:sep].strip()] = line[sep + 1:].strip()
    return out


def consumer_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The consumer's settings: the config file's, then the options' (which win, as in the Java
    tool); a ``client.id`` from the file is kept."""
    settings: dict[str, Any] = {"client.id": _CLIENT_ID,
                                **(_properties(args.consumer_config) if args.consumer_config else {})}
    settings.update({"bootstrap.servers": args.bootstrap_server, "group.id": args.group_id,
                     "auto.offset.reset": args.reset_policy, "enable.auto.commit": args.enable_autocommit,
                     "group.protocol": args.group_protocol})
    if args.group_instance_id:
        settings["group.instance.id"] = args.group_instance_id
    if args.session_timeout is not None:
        settings["session.timeout.ms"] = args.session_timeout
    if args.assignment_strategy:
        settings["partition.assignment.strategy"] = args.assignment_strategy
    if args.group_remote_assignor:
        settings["group.remote.assignor"] = args.group_remote_assignor
    return settings


class _Events:
    def __init__(self, stream) -> None:
        self._out = stream

    def emit(self, name: str, timestamp: int | None = None, **fields: Any) -> None:
        stamp = int(time.time() * 1000) if timestamp is None else timestamp
        self._out.write(json.dumps({"timestamp": stamp, "name": name, **fields}) + "\n")
        self._out.flush()


def _parts(partitions) -> list[dict]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(partitions)]


class _Shutdown:
    """SIGTERM/SIGINT only set a flag and wake the consumer up (writing the event from the
    handler could re-enter a write in progress); the loop reports ``shutdown_requested``."""

    def __init__(self, events: _Events) -> None:
        self._events = events
        self.requested = False
        self.reported = False

    def request(self, consumer) -> None:
        self.requested = True
        consumer.wakeup()

    def report(self) -> None:
        if not self.reported:
            self.reported = True
            self._events.emit("shutdown_requested")


def run(args: argparse.Namespace) -> int:
    from kclient import errors as Errors
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.subscription.listener import ConsumerRebalanceListener

    events = _Events(sys.stdout)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            events.emit("partitions_revoked", partitions=_parts(revoked))

        def on_partitions_assigned(self, assigned):
            events.emit("partitions_assigned", partitions=_parts(assigned))

    try:
        consumer = KafkaConsumer(consumer_settings(args))
    except Errors.KafkaError as exc:
        sys.stderr.write(f"kclient verifiable-consumer: {exc}\n")
        return 1
    shutdown = _Shutdown(events)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: shutdown.request(consumer))
    signal.signal(signal.SIGINT, lambda _signum, _frame: shutdown.request(consumer))
    consumed = 0
    try:
        consumer.subscribe([args.topic], listener=Listener())
        events.emit("startup_complete")
        while not shutdown.requested and (args.max_messages < 0 or consumed < args.max_messages):
            try:
                polled = consumer.poll(100)
            except Errors.WakeupError:
                break
            if not polled:
                continue
            consumed += _report_records(polled, args, consumed, events, consumer, shutdown, Errors)
    finally:
        if shutdown.requested:
            shutdown.report()
        try:
            consumer.close(timeout_ms=args.close_timeout)
        finally:
            events.emit("shutdown_complete")
            shutdown.report()
    return 0


def _report_records(polled, args, consumed: int, events: _Events, consumer, shutdown: _Shutdown, Errors) -> int:
    """records_consumed (and record_data) for one poll, then the commit; returns the count."""
    summaries, count, offsets = [], 0, {}
    for tp, records in sorted(polled.items()):
        if args.max_messages >= 0:
            records = records[:args.max_messages - consumed - count]
        if not records:
            continue
        count += len(records)
        summaries.append({"topic": tp.topic, "partition": tp.partition, "count": len(records),
                          "minOffset": records[0].offset, "maxOffset": records[-1].offset})
        offsets[tp] = (records[-1].offset + 1, records[-1].leader_epoch)
        if args.verbose:
            for r in records:
                events.emit("record_data", timestamp=r.timestamp, key=_text(r.key), value=_text(r.value),
                            topic=r.topic, partition=r.partition, offset=r.offset)
    events.emit("records_consumed", count=count, partitions=summaries)
    if not args.enable_autocommit:
        _commit(consumer, offsets, events, shutdown, Errors)
    return count


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def _commit(consumer, offsets: dict, events: _Events, shutdown: _Shutdown, Errors) -> None:
    """Commit what was consumed. A stop request that interrupts it is reported and the commit
    made again (the wake-up is used up), as the Java tool does, so a stopped run keeps its
    progress; a fenced static member stops at once."""
    from kclient.structs import OffsetAndMetadata
    committed = [{"topic": tp.topic, "partition": tp.partition, "offset": off}
                 for tp, (off, _) in sorted(offsets.items())]
    request = {tp: OffsetAndMetadata(off, "", epoch) for tp, (off, epoch) in offsets.items()}
    try:
        try:
            consumer.commit(request)
        except Errors.WakeupError:
            if shutdown.requested:
                shutdown.report()
            consumer.commit(request)
    except Errors.FencedInstanceIdError:
        raise
    except Errors.KafkaError as exc:
        events.emit("offsets_committed", offsets=committed, error=str(exc), success=False)
    else:
        events.emit("offsets_committed", offsets=committed, success=True)
