"""``kclient consume``: print records of a topic, like ``kcat -C`` / kafka-console-consumer.

Without ``--group`` every partition of the topic is read (from the end, or the beginning with
``--from-beginning``); with ``--group`` the group's committed offsets are used and progress
is committed. Stops after ``--count`` records, after ``--idle-timeout-ms`` without a record,
or on Ctrl-C.

Formats: ``text`` (the value as UTF-8, one per line; ``--print-key`` prefixes the key),
``json`` (one object per line: topic, partition, offset, timestamp, key, value, headers;
bytes that are not UTF-8 are given base64-encoded with ``"<field>_encoding": "base64"``),
``raw`` (the value bytes exactly, followed by ``--delimiter`` if given).
"""
from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-b", "--bootstrap-server", default="localhost:9092",
                        help="host:port[,host:port...] (default localhost:9092)")
    parser.add_argument("-t", "--topic", required=True, help="topic to read")
    parser.add_argument("-g", "--group", default=None, help="consumer group (commits progress)")
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the earliest offset when there is no committed one")
    parser.add_argument("-p", "--partition", type=int, action="append", default=None,
                        help="read only this partition (repeatable; not with --group)")
    parser.add_argument("-o", "--offset", default=None,
                        help="start offset for --partition: a number, 'beginning' or 'end'")
    parser.add_argument("-c", "--count", type=int, default=None, help="exit after this many records")
    parser.add_argument("--idle-timeout-ms", type=int, default=None,
                        help="exit after this long without a record")
    parser.add_argument("-f", "--format", choices=("text", "json", "raw"), default="text")
    parser.add_argument("--print-key", action="store_true", help="text format: print 'key<sep>value'")
    parser.add_argument("--key-separator", default="\t", help="text format: between key and value (tab)")
    parser.add_argument("-D", "--delimiter", default=None,
                        help="after each record (text/json: newline; raw: nothing)")
    parser.add_argument("-X", "--property", action="append", default=[], metavar="KEY=VALUE",
                        help="a consumer setting in Java dotted form (repeatable)")


def _text(b: bytes | None) -> str:
    return "" if b is None else b.decode("utf-8", "replace")


def _json_field(out: dict, name: str, b: bytes | None) -> None:
    if b is None:
        out[name] = None
        return
    try:
        out[name] = b.decode("utf-8")
    except UnicodeDecodeError:
        out[name] = base64.b64encode(b).decode("ascii")
        out[f"{name}_encoding"] = "base64"


def format_record(record, fmt: str, print_key: bool = False, key_separator: str = "\t") -> bytes:
    """One record in the chosen format (without the delimiter)."""
    if fmt == "raw":
        return record.value or b""
    if fmt == "json":
        out = {"topic": record.topic, "partition": record.partition, "offset": record.offset,
               "timestamp": record.timestamp}
        _json_field(out, "key", record.key)
        _json_field(out, "value", record.value)
        headers = []
        for k, v in record.headers or ():
            h = {"key": k}
            _json_field(h, "value", v)
            headers.append(h)
        out["headers"] = headers
        return json.dumps(out, separators=(",", ":")).encode("utf-8")
    text = _text(record.value)
    if print_key:
        text = _text(record.key) + key_separator + text
    return text.encode("utf-8")


def _settings(args: argparse.Namespace) -> dict:
    configs: dict = {"bootstrap.servers": args.bootstrap_server,
                     "auto.offset.reset": "earliest" if args.from_beginning else "latest",
                     "client.id": "kclient-console-consumer"}
    if args.group:
        configs["group.id"] = args.group
    if args.idle_timeout_ms is not None:
        configs["consumer.timeout.ms"] = args.idle_timeout_ms
    for prop in args.property:
        key, sep, value = prop.partition("=")
        if not sep:
            raise SystemExit(f"kclient consume: -X needs KEY=VALUE, got {prop!r}")
        configs[key.strip()] = value
    return configs


def _start_offset(text: str | None) -> str | int | None:
    if text is None or text in ("beginning", "end"):
        return text
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise ValueError(f"--offset must be a number >= 0, 'beginning' or 'end', got {text!r}")
    return offset


def _check_partitions(consumer, topic: str, wanted: list[int]) -> str | None:
    """Why ``wanted`` cannot be read from ``topic``, or None."""
    existing = consumer.partitions_for_topic(topic)
    if not existing:
        return f"topic {topic!r} does not exist"
    absent = sorted(set(wanted) - existing)
    if absent:
        have = f"partitions 0-{max(existing)}" if existing == set(range(len(existing))) \
            else f"partitions {sorted(existing)}"
        return (f"topic {topic!r} has {have}; no partition {', '.join(str(p) for p in absent)}")
    return None


def _seek(consumer, parts: list, start: str | int | None) -> str | None:
    """Position ``parts`` at ``start``; why it cannot be done, or None."""
    if start == "beginning":
        consumer.seek_to_beginning(*parts)
    elif start == "end":
        consumer.seek_to_end(*parts)
    elif isinstance(start, int):
        # A seek outside the log would be reset silently by auto.offset.reset: say so instead.
        ends = consumer.end_offsets(parts)
        starts = consumer.beginning_offsets(parts)
        for tp in parts:
            if start > ends[tp]:
                return (f"offset {start} is past the end of {tp.topic}-{tp.partition} "
                        f"(its next offset is {ends[tp]}; use -o end to wait for new records)")
            if start < starts[tp]:
                return (f"offset {start} is before the beginning of {tp.topic}-{tp.partition} "
                        f"(its first offset is {starts[tp]}; use -o beginning)")
            consumer.seek(tp, start)
    return None


def _flush_quietly(out) -> None:
    try:
        out.flush()
    except BrokenPipeError:
        _silence_stdout()


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's final flush must not fail on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except OSError:
        pass


def run(args: argparse.Namespace) -> int:
    from kclient import errors as Errors
    from kclient.consumer.kafka_consumer import KafkaConsumer
    from kclient.structs import TopicPartition

    if args.partition and args.group:
        sys.stderr.write("kclient consume: --partition and --group exclude each other\n")
        return 2
    if args.count is not None and args.count <= 0:
        return 0
    try:
        start = _start_offset(args.offset)
    except ValueError as exc:
        sys.stderr.write(f"kclient consume: {exc}\n")
        return 2
    if start is not None and not args.partition:
        sys.stderr.write("kclient consume: --offset applies with --partition (use --from-beginning otherwise)\n")
        return 2
    out = sys.stdout.buffer
    delimiter = (args.delimiter.encode().decode("unicode_escape").encode("utf-8") if args.delimiter is not None
                 else (b"" if args.format == "raw" else b"\n"))
    try:
        consumer = KafkaConsumer(_settings(args))
    except Errors.KafkaError as exc:
        sys.stderr.write(f"kclient consume: {exc}\n")
        return 1
    n = 0
    try:
        if args.partition:
            parts = [TopicPartition(args.topic, p) for p in args.partition]
            problem = _check_partitions(consumer, args.topic, args.partition)
            if problem is None:
                consumer.assign(parts)
                problem = _seek(consumer, parts, start)
            if problem is not None:
                sys.stderr.write(f"kclient consume: {problem}\n")
                return 1
        else:
            consumer.subscribe([args.topic])
        for record in consumer:
            out.write(format_record(record, args.format, args.print_key, args.key_separator))
            out.write(delimiter)
            n += 1
            if args.count is not None and n >= args.count:
                break
        out.flush()
        return 0
    except BrokenPipeError:
        # The reader went away (``| head``): a normal end for a command in a pipeline.
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        _flush_quietly(out)
        return 0
    except Errors.KafkaError as exc:
        _flush_quietly(out)
        sys.stderr.write(f"kclient consume: {exc}\n")
        return 1
    finally:
        log.info("consumed %d records", n)
        consumer.close()
