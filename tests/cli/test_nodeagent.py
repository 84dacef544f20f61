"""The node agents' shared run: settings errors exit 2, start errors exit 1, both named by the command."""

from __future__ import annotations

import argparse

import pytest

from webhook.cli import nodeagent


class BadSetting(ValueError):
    pass


class CannotStart(Exception):
    pass


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpushare agent")
    p.add_argument("--value", default="ok")
    return p


def to_settings(args: argparse.Namespace, environ: dict[str, str]) -> str:
    if args.value == "bad":
        raise BadSetting("--value bad is not a value")
    return str(args.value)


def run(settings: str) -> int:
    if settings == "fails":
        raise CannotStart("no GPUs found on this node")
    return 0


@pytest.mark.parametrize(
    ("value", "code", "message"),
    [
        ("ok", 0, ""),
        ("bad", 2, "gpushare agent: --value bad is not a value\n"),
        ("fails", 1, "gpushare agent: no GPUs found on this node\n"),
    ],
    ids=["runs", "bad-setting", "cannot-start"],
)
def test_exit_codes_and_messages(
    capsys: pytest.CaptureFixture[str], value: str, code: int, message: str
) -> None:
    got = nodeagent.main(
        parser(),
        ["--value", value],
        settings_from_args=to_settings,
        run=run,
        settings_error=BadSetting,
        start_error=CannotStart,
    )
    assert (got, capsys.readouterr().err) == (code, message)
