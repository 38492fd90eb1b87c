"""The ``kclient`` command line.

Each subcommand lives in its own module, imported only when that subcommand runs, so
``kclient --help`` stays fast and a missing optional dependency only breaks its own
subcommand. A subcommand module defines::

    def configure(parser: argparse.ArgumentParser) -> None   # add its arguments
    def run(args: argparse.Namespace) -> int                 # do the work; exit status

Adding a subcommand is one line in COMMANDS.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

# name: (module with configure()/run(), one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("kclient.testing.broker_command",
               "run an embedded Kafka broker (Tansu, or librdkafka's mock cluster) until Ctrl-C"),
    "consume": ("kclient.console", "print records of a topic (like kcat -C)"),
    "bench": ("bench.runner", "benchmark kclient against other clients (needs a source checkout: run from its root)"),
    "demo": ("kclient.demo", "the main job: seed a topic, read it with PySpark through kclient, aggregate to Parquet"),
}


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
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            importlib.import_module(module).configure(p)
            p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_selected_command(argv))
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG if args.verbose > 1 else logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
