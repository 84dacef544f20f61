"""The `gpushare` dispatcher: usage, version, unknown commands, Ctrl-C and closed pipes, and that every
subcommand answers --help."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from webhook import __version__
from webhook.cli import exitcodes, main


def test_no_arguments_prints_usage_on_stderr_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main([]) == exitcodes.USAGE == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    for name in main.COMMANDS:
        assert name in captured.err


@pytest.mark.parametrize("flag", ["--help", "-h", "help"])
def test_asking_for_help_prints_usage_and_exits_0(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main([flag]) == 0
    assert "usage: gpushare <command>" in capsys.readouterr().out


@pytest.mark.parametrize("command", list(main.COMMANDS), ids=list(main.COMMANDS))
def test_ctrl_c_in_any_command_exits_130_with_one_line(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(argv: list[str]) -> int:
        raise KeyboardInterrupt

    module = importlib.import_module(f"webhook.cli.{main.COMMANDS[command][0]}")
    monkeypatch.setattr(module, "main", interrupted)
    assert main.main([command, "-"]) == exitcodes.INTERRUPTED == 130
    assert capsys.readouterr().err == f"gpushare {command}: interrupted\n"


def test_a_closed_pipe_exits_141_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def reader_went_away(argv: list[str]) -> int:
        raise BrokenPipeError

    monkeypatch.setattr(importlib.import_module("webhook.cli.inspect.command"), "main", reader_went_away)
    assert main.main(["inspect"]) == exitcodes.BROKEN_PIPE == 141
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("flag", ["--version", "version"])
def test_version_prints_the_program_and_its_release_and_exits_0(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main.main([flag]) == 0
    assert capsys.readouterr().out == f"gpushare {__version__}\n"


def test_the_gpushare_command_prints_its_version() -> None:
    # The installed entry point, as a user runs it.
    gpushare = Path(sys.executable).with_name("gpushare")
    done = subprocess.run([gpushare, "--version"], capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"gpushare {__version__}\n", "")


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
