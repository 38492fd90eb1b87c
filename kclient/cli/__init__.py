"""The ``kclient`` command line.

Each subcommand lives in its own module, imported only when that subcommand runs, so
``kclient --help`` stays fast and a missing optional dependency only breaks its own
subcommand. A subcommand module defines::

    def configure(parser: argparse.ArgumentParser) -> None   # add its arguments
    def run(args: argparse.Namespace) -> int                 # do the work; exit status

Adding a subcommand is one line in COMMANDS (with, for a module that may be absent from an
installation, what to tell the user then).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import NamedTuple


class Command(NamedTuple):
    module: str            # defines configure() and run()
    help: str              # one line
    unavailable: str = ""  # what to tell the user when ``module``'s package is not installed


COMMANDS: dict[str, Command] = {
    "broker": Command("kclient.testing.broker_command",
                      "run a test broker (Tansu; --kafka: Apache Kafka; --mock N: librdkafka's mock cluster) until Ctrl-C"),
    "produce": Command("kclient.cli.produce", "send lines of stdin to a topic (like kcat -P)"),
    "consume": Command("kclient.cli.console", "print records of a topic (like kcat -C)"),
    "bench": Command("bench.runner", "benchmark kclient against other clients (from a source checkout)",
                     "the benchmark suite runs from a source checkout: python -m bench (in the "
                     "checkout's root); it is not part of the installed package"),
    "share-groups": Command("kclient.cli.share_groups",
                            "list, describe, reset and delete share groups (like kafka-share-groups.sh)"),
    "verifiable-consumer": Command("kclient.cli.verifiable",
                                   "Kafka's VerifiableConsumer: consume and print JSON events (for system tests)"),
    "demo": Command("kclient.cli.demo",
                    "the main job: seed a topic, read it with PySpark through kclient, aggregate to Parquet"),
}


class CommandUnavailable(Exception):
    """The selected subcommand's own module is not installed."""


def _import_command(name: str):
    command = COMMANDS[name]
    try:
        return importlib.import_module(command.module)
    except ModuleNotFoundError as exc:
        # Only the command's own package missing is "unavailable"; a missing dependency
        # inside it keeps its own message.
        own = exc.name is not None and (command.module == exc.name or command.module.startswith(exc.name + "."))
        if own and command.unavailable:
            raise CommandUnavailable(f"kclient {name}: {command.unavailable}") from exc
        raise


def _selected_command(argv: list[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The full parser; only the ``selected`` subcommand's module is imported."""
    from kclient import __version__

    parser = argparse.ArgumentParser(prog="kclient", description="kclient: a fast Kafka consumer for Python.")
    parser.add_argument("--version", action="version", version=f"kclient {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log to stderr (-v: info, -vv: debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        if name == selected:
            _import_command(name).configure(p)
            p.set_defaults(_module=command.module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser(_selected_command(argv))
    except CommandUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG if args.verbose > 1 else logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    else:
        # Warnings (a topic that does not exist, a setting without effect) reach the user even
        # without -v: the library's own NullHandler would otherwise keep them silent.
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s", stream=sys.stderr)
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
