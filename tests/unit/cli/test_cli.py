"""The ``kclient`` command line's table of subcommands (kclient.cli)."""
from __future__ import annotations

import sys

import pytest

from kclient import cli


def test_bench_without_the_source_checkout_says_where_it_runs(monkeypatch, capsys):
    # An installed package has no top-level ``bench`` package: None in sys.modules makes
    # importing it fail exactly as it does there (ModuleNotFoundError naming 'bench').
    monkeypatch.setitem(sys.modules, "bench", None)
    monkeypatch.delitem(sys.modules, "bench.runner", raising=False)
    assert cli.main(["bench"]) == 2
    err = capsys.readouterr().err
    assert "kclient bench: the benchmark suite runs from a source checkout: python -m bench" in err
    assert "No module named" not in err


def test_a_missing_dependency_inside_a_command_keeps_its_own_error(monkeypatch, tmp_path):
    # Only the command's own module being absent is "unavailable"; a module it imports that
    # is missing (an optional dependency) surfaces as is, naming that dependency.
    (tmp_path / "kclient_cli_test_command.py").write_text("import kclient_cli_test_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.COMMANDS, "bench", cli.Command("kclient_cli_test_command", "x", "the hint"))
    with pytest.raises(ModuleNotFoundError, match="kclient_cli_test_missing_dependency"):
        cli.main(["bench"])


def test_every_command_has_a_module_and_help():
    for name, command in cli.COMMANDS.items():
        assert command.module and command.help, name
    assert cli.COMMANDS["bench"].unavailable


def test_produce_is_a_command():
    assert cli.COMMANDS["produce"].module == "kclient.cli.produce"
    parser = cli.build_parser("produce")
    args = parser.parse_args(["produce", "-t", "t", "-k", ":", "--partitions", "3"])
    assert (args.topic, args.key_separator, args.partitions, args.format) == ("t", ":", 3, "text")


@pytest.mark.parametrize("argv, message", [
    (["broker", "--mock", "1", "--port", "9092"], "--port applies to Tansu and Apache Kafka only"),
    (["broker", "--kafka", "--port", "70000"], "--port must be between 1 and 65535"),
    (["produce", "-t", "t", "--partitions", "0"], "--partitions must be at least 1"),
    (["produce", "-t", "t", "-f", "json", "-k", ":"], "--key-separator applies to the text format"),
    (["consume", "-t", "t", "-p", "0", "-o", "-3"], "--offset must be a number >= 0"),
    (["consume", "-t", "t", "-o", "5"], "--offset applies with --partition"),
])
def test_arguments_that_cannot_work_are_refused_before_connecting(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
