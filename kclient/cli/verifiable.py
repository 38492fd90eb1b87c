"""``kclient verifiable-consumer``: Kafka's VerifiableConsumer protocol, so that Kafka's own
system tests (and any harness written for the Java tool) can drive kclient.

One JSON object per line on standard output, each with ``timestamp`` (ms) and ``name``:
``startup_complete``; ``partitions_assigned`` / ``partitions_revoked`` with ``partitions``
([{topic, partition}]); ``records_consumed`` after each poll that returned records, with
``count`` and ``partitions`` ([{topic, partition, count, minOffset, maxOffset}]);
``record_data`` per record with ``--verbose`` (key, value, topic, partition, offset);
``offsets_committed`` after each commit unless auto-commit is on, with ``offsets``
([{topic, partition, offset}]), ``success`` and ``error``; ``shutdown_complete`` after close.
The options are the Java tool's. SIGTERM or SIGINT stop it cleanly (the last events follow).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

__all__ = ["configure", "run"]


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
    parser.add_argument("--reset-policy", default="earliest", choices=("earliest", "latest", "none"))
    parser.add_argument("--assignment-strategy", default=None,
                        help="partition.assignment.strategy (classic protocol only)")
    parser.add_argument("--consumer.config", dest="consumer_config", default=None,
                        help="a Java properties file of consumer settings (the options above win)")


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


class _Events:
    def __init__(self, stream) -> None:
        self._out = stream

    def emit(self, name: str, **fields: Any) -> None:
        self._out.write(json.dumps({"timestamp": int(time.time() * 1000), "name": name, **fields}) + "\n")
        self._out.flush()


def _parts(partitions) -> list[dict]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(partitions)]


def run(args: argparse.Namespace) -> int:
    from kclient import errors as Errors
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.consumer.listener import ConsumerRebalanceListener

    events = _Events(sys.stdout)
    settings: dict[str, Any] = _properties(args.consumer_config) if args.consumer_config else {}
    settings.update({"bootstrap.servers": args.bootstrap_server, "group.id": args.group_id,
                     "auto.offset.reset": args.reset_policy, "enable.auto.commit": args.enable_autocommit,
                     "group.protocol": args.group_protocol, "client.id": "kclient-verifiable-consumer"})
    if args.group_instance_id:
        settings["group.instance.id"] = args.group_instance_id
    if args.session_timeout is not None:
        settings["session.timeout.ms"] = args.session_timeout
    if args.assignment_strategy:
        settings["partition.assignment.strategy"] = args.assignment_strategy
    if args.group_remote_assignor:
        settings["group.remote.assignor"] = args.group_remote_assignor

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            events.emit("partitions_revoked", partitions=_parts(revoked))

        def on_partitions_assigned(self, assigned):
            events.emit("partitions_assigned", partitions=_parts(assigned))

    stopping = []

    def stop(_signum, _frame) -> None:
        stopping.append(True)
        consumer.wakeup()

    try:
        consumer = KafkaConsumer(settings)
    except Errors.KafkaError as exc:
        sys.stderr.write(f"kclient verifiable-consumer: {exc}\n")
        return 1
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumed = 0
    try:
        consumer.subscribe([args.topic], listener=Listener())
        events.emit("startup_complete")
        while not stopping and (args.max_messages < 0 or consumed < args.max_messages):
            try:
                polled = consumer.poll(100)
            except Errors.WakeupError:
                break
            if not polled:
                continue
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
                        events.emit("record_data", key=_text(r.key), value=_text(r.value), topic=r.topic,
                                    partition=r.partition, offset=r.offset)
            consumed += count
            events.emit("records_consumed", count=count, partitions=summaries)
            if not args.enable_autocommit:
                _commit(consumer, offsets, events, Errors)
    finally:
        try:
            consumer.close()
        finally:
            events.emit("shutdown_complete")
    return 0


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def _commit(consumer, offsets: dict, events: _Events, Errors) -> None:
    from kclient.structs import OffsetAndMetadata
    committed = [{"topic": tp.topic, "partition": tp.partition, "offset": off}
                 for tp, (off, _) in sorted(offsets.items())]
    try:
        consumer.commit({tp: OffsetAndMetadata(off, "", epoch) for tp, (off, epoch) in offsets.items()})
    except Errors.KafkaError as exc:
        events.emit("offsets_committed", offsets=committed, error=str(exc), success=False)
    else:
        events.emit("offsets_committed", offsets=committed, error=None, success=True)
