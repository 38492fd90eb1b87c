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
