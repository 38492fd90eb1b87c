"""``kclient share-groups``: list, describe, reset and delete share groups, in the shape of
Kafka's kafka-share-groups.sh.

  --list                                   every share group (with --state: and its state)
  --describe GROUP [--offsets|--members|--state]
                                           start offset and lag per partition (the default),
                                           the members and their partitions, or the group's state
  --reset-offsets GROUP --topic T[:P,P...] (--to-earliest|--to-latest|--to-offset N)
                                           [--dry-run|--execute]: the group must have no members;
                                           without --execute the new offsets are only shown
  --delete-offsets GROUP --topic T         forget the group's state of a topic
  --delete GROUP                           delete the group (it must have no members)

A group may also be given with ``--group``. Exit status: 0 done, 1 the cluster refused or
failed (the reason on stderr), 2 bad arguments.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Iterable, Sequence

PROG = "kclient share-groups"
_ACTIONS = ("list", "describe", "reset_offsets", "delete_offsets", "delete")


class UsageError(ValueError):
    """Arguments that do not make a command."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", "-b", required=True, help="host:port[,host:port...]")
    actions = parser.add_mutually_exclusive_group()
    actions.add_argument("--list", action="store_true", help="list the share groups")
    actions.add_argument("--describe", nargs="?", const="", metavar="GROUP", help="describe a share group")
    actions.add_argument("--reset-offsets", nargs="?", const="", metavar="GROUP",
                         help="set the start offsets of an empty share group")
    actions.add_argument("--delete-offsets", nargs="?", const="", metavar="GROUP",
                         help="delete a share group's state of topics")
    actions.add_argument("--delete", nargs="?", const="", metavar="GROUP", help="delete a share group")
    parser.add_argument("--group", action="append", default=[], help="the group (repeatable with --delete)")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="--describe: start offset and lag (default)")
    view.add_argument("--members", action="store_true", help="--describe: the members")
    view.add_argument("--state", action="store_true", help="--describe/--list: the group's state")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                        help="--reset-offsets/--delete-offsets: a topic, optionally some of its partitions")
    parser.add_argument("--all-topics", action="store_true",
                        help="--reset-offsets: every topic the group has state for")
    to = parser.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true", help="--reset-offsets: the partition's first offset")
    to.add_argument("--to-latest", action="store_true", help="--reset-offsets: the partition's end")
    to.add_argument("--to-offset", type=int, metavar="N", help="--reset-offsets: offset N")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="--reset-offsets: show the new offsets only (default)")
    mode.add_argument("--execute", action="store_true", help="--reset-offsets: apply them")
    parser.add_argument("-X", "--property", action="append", default=[], metavar="KEY=VALUE",
                        help="an admin client setting in Java dotted form (repeatable)")
    parser.add_argument("--timeout", type=int, default=None, metavar="MS",
                        help="bound on each call to the cluster (default: the admin client's "
                             "default.api.timeout.ms)")


def _action(args: argparse.Namespace) -> str:
    chosen = [a for a in _ACTIONS if (getattr(args, a) is not None and getattr(args, a) is not False)]
    if not chosen:
        raise UsageError("one of --list, --describe, --reset-offsets, --delete-offsets, --delete is required")
    return chosen[0]


def _groups(args: argparse.Namespace, action: str) -> list[str]:
    given = getattr(args, action)
    groups = ([given] if given else []) + list(args.group)
    if not groups:
        raise UsageError(f"--{action.replace('_', '-')} needs a group (--{action.replace('_', '-')} GROUP "
                         "or --group GROUP)")
    if len(groups) > 1 and action != "delete":
        raise UsageError(f"--{action.replace('_', '-')} takes one group, got {', '.join(groups)}")
    return groups


def _topics(specs: Iterable[str]) -> dict[str, list[int] | None]:
    """``topic`` or ``topic:0,1`` -> {topic: None (all partitions) or [partitions]}."""
    out: dict[str, list[int] | None] = {}
    for spec in specs:
        name, sep, parts = spec.partition(":")
        if not name:
            raise UsageError(f"--topic {spec!r}: no topic name")
        if not sep:
            out[name] = None
            continue
        try:
            numbers = sorted({int(p) for p in parts.split(",") if p.strip()})
        except ValueError:
            raise UsageError(f"--topic {spec!r}: partitions must be numbers, as in topic:0,1") from None
        if not numbers or any(n < 0 for n in numbers):
            raise UsageError(f"--topic {spec!r}: partitions must be numbers >= 0, as in topic:0,1")
        out[name] = sorted(set(out.get(name) or []) | set(numbers))
    return out


def _check(args: argparse.Namespace, action: str) -> None:
    if action != "reset_offsets":
        for flag, on in (("--to-earliest", args.to_earliest), ("--to-latest", args.to_latest),
                         ("--to-offset", args.to_offset is not None), ("--execute", args.execute),
                         ("--dry-run", args.dry_run), ("--all-topics", args.all_topics)):
            if on:
                raise UsageError(f"{flag} applies to --reset-offsets only")
    if action not in ("reset_offsets", "delete_offsets") and args.topic:
        raise UsageError("--topic applies to --reset-offsets and --delete-offsets only")
    if action != "describe" and (args.offsets or args.members or (args.state and action != "list")):
        raise UsageError("--offsets, --members and --state apply to --describe (--state also to --list)")
    if action == "reset_offsets":
        if not (args.to_earliest or args.to_latest or args.to_offset is not None):
            raise UsageError("--reset-offsets needs one of --to-earliest, --to-latest, --to-offset N")
        if args.to_offset is not None and args.to_offset < 0:
            raise UsageError(f"--to-offset must be >= 0, got {args.to_offset}")
        if bool(args.topic) == bool(args.all_topics):
            raise UsageError("--reset-offsets needs --topic TOPIC (repeatable) or --all-topics")
    if action == "delete_offsets" and not args.topic:
        raise UsageError("--delete-offsets needs --topic TOPIC (repeatable)")
    if action == "delete_offsets" and any(":" in t for t in args.topic):
        raise UsageError("--delete-offsets works on whole topics: --topic TOPIC without partitions")


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    configs: dict[str, Any] = {}
    for item in args.property:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"-X {item!r}: expected KEY=VALUE")
        configs[key] = value
    configs["bootstrap.servers"] = args.bootstrap_server
    if args.timeout is not None:
        configs["default.api.timeout.ms"] = args.timeout
    return configs


def _table(rows: Sequence[Sequence[Any]], out: Any) -> None:
    text = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in text) for i in range(len(text[0]))]
    for row in text:
        out.write(" ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n")


# ---------------------------------------------------------------------- actions
def _list(admin: Any, args: argparse.Namespace, out: Any) -> int:
    groups = admin.list_share_groups()
    if args.state:
        _table([("GROUP", "STATE")] + [(g.group_id, g.state) for g in groups], out)
    else:
        for g in groups:
            out.write(g.group_id + "\n")
    return 0


def _describe(admin: Any, group: str, args: argparse.Namespace, out: Any) -> int:
    from kclient import errors as Errors

    try:
        (desc,) = admin.describe_share_groups([group])
    except Errors.GroupIdNotFoundError:
        sys.stderr.write(f"{PROG}: share group {group!r} does not exist\n")
        return 1
    if args.state:
        _table([("GROUP", "COORDINATOR-ID", "STATE", "#MEMBERS"),
                (group, desc.coordinator_id, desc.state, len(desc.members))], out)
        return 0
    if args.members:
        if not desc.members:
            out.write(f"Share group '{group}' has no active members.\n")
            return 0
        rows: list[tuple[Any, ...]] = [("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")]
        for m in sorted(desc.members, key=lambda m: m.member_id):
            by_topic: dict[str, list[int]] = {}
            for tp in m.assignment:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            assignment = ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(by_topic.items()))
            rows.append((group, m.member_id, m.client_host, m.client_id, len(m.assignment), assignment or "-"))
        _table(rows, out)
        return 0
    offsets = admin.list_share_group_offsets(group)
    if not desc.members:
        out.write(f"Share group '{group}' has no active members.\n")
    if not offsets:
        out.write(f"Share group '{group}' has no offsets.\n")
        return 0
    _table([("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG")]
           + [(group, tp.topic, tp.partition, info.start_offset, info.lag)
              for tp, info in sorted(offsets.items())], out)
    return 0


def _reset(admin: Any, group: str, args: argparse.Namespace, out: Any) -> int:
    from kclient.admin import OffsetSpec
    from kclient.structs import TopicPartition

    if args.all_topics:
        partitions = sorted(admin.list_share_group_offsets(group))
        if not partitions:
            sys.stderr.write(f"{PROG}: share group {group!r} has no offsets to reset\n")
            return 1
    else:
        wanted = _topics(args.topic)
        described = admin.describe_topics(sorted(wanted))
        partitions = []
        for topic, parts in wanted.items():
            known = sorted(p.partition for p in described.get(topic) or [])
            if not known:
                sys.stderr.write(f"{PROG}: topic {topic!r} does not exist\n")
                return 1
            missing = sorted(set(parts or ()) - set(known))
            if missing:
                sys.stderr.write(f"{PROG}: topic {topic!r} has no partition {', '.join(map(str, missing))} "
                                 f"(it has {len(known)})\n")
                return 1
            partitions += [TopicPartition(topic, p) for p in (parts if parts is not None else known)]
    if args.to_offset is not None:
        target = {tp: args.to_offset for tp in partitions}
    else:
        spec = OffsetSpec.EARLIEST if args.to_earliest else OffsetSpec.LATEST
        found = admin.list_offsets({tp: spec for tp in partitions})
        target = {tp: found[tp].offset for tp in partitions}
    if args.execute:
        admin.alter_share_group_offsets(group, target)
    _table([("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
           + [(group, tp.topic, tp.partition, off) for tp, off in sorted(target.items())], out)
    if not args.execute:
        out.write("(dry run: nothing changed; add --execute to apply)\n")
    return 0


def _delete_offsets(admin: Any, group: str, args: argparse.Namespace, out: Any) -> int:
    topics = sorted(_topics(args.topic))
    admin.delete_share_group_offsets(group, topics)
    _table([("TOPIC", "STATUS")] + [(t, "Successful") for t in topics], out)
    return 0


def _delete(admin: Any, groups: list[str], out: Any) -> int:
    from kclient import errors as Errors

    results = admin.delete_share_groups(groups, raise_errors=False)
    status = 0
    for gid, err in results.items():
        if err is None:
            out.write(f"Deletion of share group '{gid}' was successful.\n")
            continue
        status = 1
        reason = "it does not exist" if isinstance(err, Errors.GroupIdNotFoundError) else str(err)
        sys.stderr.write(f"{PROG}: share group {gid!r} was not deleted: {reason}\n")
    return status


def run(args: argparse.Namespace) -> int:
    from kclient import errors as Errors
    from kclient.admin import KafkaAdminClient

    try:
        action = _action(args)
        _check(args, action)
        groups = _groups(args, action) if action != "list" else []
        if action == "list" and args.group:
            raise UsageError("--list takes no group")
        configs = _settings(args)
        if action in ("reset_offsets", "delete_offsets"):
            _topics(args.topic)
    except UsageError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    out = sys.stdout
    try:
        with KafkaAdminClient(configs) as admin:
            if action == "list":
                return _list(admin, args, out)
            if action == "describe":
                return _describe(admin, groups[0], args, out)
            if action == "reset_offsets":
                return _reset(admin, groups[0], args, out)
            if action == "delete_offsets":
                return _delete_offsets(admin, groups[0], args, out)
            return _delete(admin, groups, out)
    except Errors.KafkaError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130
