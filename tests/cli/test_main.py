"""The `gpushare` dispatcher: usage, version, unknown commands, and that every subcommand answers --help."""

from __future__ import annotations

import importlib

import pytest

from webhook import __version__
from webhook.cli import main


def test_no_arguments_prints_usage_with_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main([]) == 0
    out = capsys.readouterr().out
    for name in main.COMMANDS:
        assert name in out


def test_version_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == __version__


def test_unknown_command_exits_2_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


@pytest.mark.parametrize("command", list(main.COMMANDS), ids=list(main.COMMANDS))
def test_every_subcommand_module_exists_and_answers_help(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module(f"webhook.cli.{main.COMMANDS[command][0]}")
    assert callable(module.main)
    assert callable(module.build_parser)
    with pytest.raises(SystemExit) as exit_:
        main.main([command, "--help"])
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out
