"""``kclient share-groups`` refuses arguments that cannot work before connecting (exit 2)."""
from __future__ import annotations

import pytest

from kclient import cli

B = ["share-groups", "--bootstrap-server", "127.0.0.1:1"]


@pytest.mark.parametrize("argv, message", [
    (B, "one of --list, --describe, --reset-offsets, --delete-offsets, --delete is required"),
    (B + ["--describe"], "--describe needs a group"),
    (B + ["--describe", "g", "--group", "h"], "--describe takes one group"),
    (B + ["--list", "--group", "g"], "--list takes no group"),
    (B + ["--reset-offsets", "g", "--topic", "t"], "needs one of --to-earliest, --to-latest, --to-offset"),
    (B + ["--reset-offsets", "g", "--to-earliest"], "needs --topic TOPIC (repeatable) or --all-topics"),
    (B + ["--reset-offsets", "g", "--topic", "t", "--all-topics", "--to-latest"], "or --all-topics"),
    (B + ["--reset-offsets", "g", "--topic", "t", "--to-offset", "-1"], "--to-offset must be >= 0"),
    (B + ["--reset-offsets", "g", "--topic", "t:x", "--to-latest"], "partitions must be numbers"),
    (B + ["--reset-offsets", "g", "--topic", ":1", "--to-latest"], "no topic name"),
    (B + ["--describe", "g", "--to-earliest"], "--to-earliest applies to --reset-offsets only"),
    (B + ["--describe", "g", "--execute"], "--execute applies to --reset-offsets only"),
    (B + ["--delete", "g", "--topic", "t"], "--topic applies to --reset-offsets and --delete-offsets only"),
    (B + ["--delete", "g", "--members"], "apply to --describe"),
    (B + ["--delete-offsets", "g"], "--delete-offsets needs --topic"),
    (B + ["--delete-offsets", "g", "--topic", "t:0"], "whole topics"),
    (B + ["--list", "-X", "novalue"], "expected KEY=VALUE"),
])
def test_arguments_that_cannot_work_are_refused_before_connecting(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_two_actions_are_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(B + ["--list", "--delete", "g"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_it_is_a_command():
    assert cli.COMMANDS["share-groups"].module == "kclient.cli.share_groups"
