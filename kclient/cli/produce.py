"""``kclient produce``: send lines from stdin as records, like ``kcat -P`` / kafka-console-producer.

Formats: ``text`` (each line is a value; with ``--key-separator SEP`` a line is ``key<SEP>value``)
and ``json`` (each line an object: ``value``, optional ``key``, ``headers``, ``partition``;
the shape ``kclient consume -f json`` prints, so its output can be produced again: strings are
sent as UTF-8, ``"value_encoding": "base64"`` marks base64 bytes, other JSON values are sent as
their JSON text, ``null`` as no value; headers as ``[{"key": k, "value": v}, ...]`` or
``{k: v}``).

A topic that does not exist is created first (``--partitions``, default 1) through the admin
client, so the records do not depend on the broker's auto-create setting. The count of records
sent is reported on stderr once every one has been acknowledged.
"""
from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
from typing import Any, Iterable

log = logging.getLogger(__name__)

PROG = "kclient produce"


class InputError(ValueError):
    """A line of input that cannot be made into a record."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-b", "--bootstrap-server", default="localhost:9092",
                        help="host:port[,host:port...] (default localhost:9092)")
    parser.add_argument("-t", "--topic", required=True, help="topic to write to")
    parser.add_argument("--partitions", type=int, default=None,
                        help="partitions of the topic if it has to be created (default 1)")
    parser.add_argument("--replication-factor", type=int, default=-1,
                        help="replication factor of a created topic (default: the broker's)")
    parser.add_argument("-f", "--format", choices=("text", "json"), default="text")
    parser.add_argument("-k", "--key-separator", default=None, metavar="SEP",
                        help="text format: each line is KEY<SEP>VALUE (without it: the line is the value)")
    parser.add_argument("-X", "--property", action="append", default=[], metavar="KEY=VALUE",
                        help="a producer setting in Java dotted form (repeatable)")


def _bytes(obj: dict, name: str) -> bytes | None:
    value = obj.get(name)
    encoding = obj.get(f"{name}_encoding")
    if value is None:
        return None
    if encoding is not None:
        if encoding != "base64" or not isinstance(value, str):
            raise InputError(f"{name}_encoding must be \"base64\" with a string {name}")
        try:
            return base64.b64decode(value, validate=True)
        except ValueError as exc:
            raise InputError(f"{name} is not valid base64: {exc}") from None
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _headers(raw: Any) -> list[tuple[str, bytes | None]]:
    if raw is None:
        return []
    if isinstance(raw, dict):
        raw = [{"key": k, "value": v} for k, v in raw.items()]
    if not isinstance(raw, list):
        raise InputError("headers must be a list of {\"key\": ..., \"value\": ...} or an object")
    out = []
    for h in raw:
        if not isinstance(h, dict) or not isinstance(h.get("key"), str):
            raise InputError(f"a header needs a string \"key\": {h!r}")
        out.append((h["key"], _bytes(h, "value")))
    return out


def parse_json(line: bytes) -> dict:
    """The send() arguments of one JSON line."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise InputError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InputError(f"expected a JSON object with \"value\", got {type(obj).__name__}")
    partition = obj.get("partition")
    if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int) or partition < 0):
        raise InputError(f"partition must be a non-negative integer, got {partition!r}")
    return {"value": _bytes(obj, "value"), "key": _bytes(obj, "key"), "headers": _headers(obj.get("headers")),
            "partition": partition}


def parse_text(line: bytes, key_separator: bytes | None) -> dict:
    if key_separator is None:
        return {"value": line}
    key, sep, value = line.partition(key_separator)
    if not sep:
        raise InputError(f"no key separator {key_separator.decode('utf-8', 'replace')!r} in the line")
    return {"key": key, "value": value}


def _lines(stream) -> Iterable[bytes]:
    for line in stream:
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield line


def _settings(args: argparse.Namespace) -> dict:
    # linger.ms=5 (librdkafka's default): lines read in a burst share batches (200,000 lines:
    # 13.5 s with 0, 4.9 s with 5), and a line typed by hand still leaves at once to the eye.
    configs: dict = {"bootstrap.servers": args.bootstrap_server, "client.id": "kclient-console-producer",
                     "linger.ms": 5}
    for prop in args.property:
        key, sep, value = prop.partition("=")
        if not sep:
            raise InputError(f"-X needs KEY=VALUE, got {prop!r}")
        configs[key.strip()] = value
    return configs


def ensure_topic(configs: dict, topic: str, partitions: int | None, replication_factor: int) -> None:
    """Create ``topic`` unless it exists; say so when it exists with another partition count.
    The admin client takes the producer's settings that clients share (the address, TLS, SASL,
    timeouts given with -X), so it reaches the cluster the way the producer does."""
    from kclient import errors as Errors
    from kclient.admin import KafkaAdminClient, NewTopic
    from kclient.config import AdminClientConfig

    table = AdminClientConfig.table()
    shared = {k: v for k, v in configs.items() if table.find(k) is not None}
    # The producer's bound on waiting for the cluster bounds the admin client's calls too.
    if "max.block.ms" in configs and "default.api.timeout.ms" not in shared:
        shared["default.api.timeout.ms"] = configs["max.block.ms"]
    with KafkaAdminClient(shared) as admin:
        existing = admin.describe_topics([topic]).get(topic) or []
        if existing:
            if partitions is not None and partitions != len(existing):
                log.warning("topic %r exists with %d partitions; --partitions %d is not applied",
                            topic, len(existing), partitions)
            return
        try:
            admin.create_topics([NewTopic(topic, partitions or 1, replication_factor)])
        except Errors.TopicAlreadyExistsError:
            return
        log.info("created topic %r with %d partition(s)", topic, partitions or 1)


def run(args: argparse.Namespace) -> int:
    from kclient import errors as Errors
    from kclient.producer import KafkaProducer

    if args.partitions is not None and args.partitions < 1:
        sys.stderr.write(f"{PROG}: --partitions must be at least 1, got {args.partitions}\n")
        return 2
    if args.key_separator is not None and args.format != "text":
        sys.stderr.write(f"{PROG}: --key-separator applies to the text format (json lines carry \"key\")\n")
        return 2
    if args.key_separator == "":
        sys.stderr.write(f"{PROG}: --key-separator must not be empty\n")
        return 2
    separator = args.key_separator.encode("utf-8") if args.key_separator is not None else None
    try:
        configs = _settings(args)
        producer = KafkaProducer(configs)
    except (InputError, Errors.KafkaError) as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 1
    failures: list[BaseException] = []
    sent = 0
    status = 0
    try:
        ensure_topic(configs, args.topic, args.partitions, args.replication_factor)
        for number, line in enumerate(_lines(sys.stdin.buffer), 1):
            try:
                record = parse_json(line) if args.format == "json" else parse_text(line, separator)
            except InputError as exc:
                sys.stderr.write(f"{PROG}: line {number}: {exc}\n")
                status = 1
                break
            try:
                future = producer.send(args.topic, **record)
            except Errors.KafkaError as exc:
                sys.stderr.write(f"{PROG}: line {number}: {exc}\n")
                status = 1
                break
            future.add_errback(failures.append)
            sent += 1
        producer.flush()
    except KeyboardInterrupt:
        status = 130
    except Errors.KafkaError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        status = 1
    finally:
        producer.close(timeout=5)
    delivered = sent - len(failures)
    if failures:
        sys.stderr.write(f"{PROG}: {len(failures)} of {sent} records were not delivered to {args.topic!r}: "
                         f"{failures[0]}\n")
        status = status or 1
    sys.stderr.write(f"{PROG}: {delivered} record{'' if delivered == 1 else 's'} sent to {args.topic!r}\n")
    return status
