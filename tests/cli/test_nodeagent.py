"""The node agents' shared run: settings errors exit 2, start errors exit 1, both named by the command."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from webhook.cli.serve import device_plugin as serve_device_plugin
from webhook.cli.serve import dra_driver as serve_dra_driver
from webhook.cli.serve import nodeagent


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


@pytest.mark.parametrize(
    "command", [serve_device_plugin, serve_dra_driver], ids=["device-plugin", "dra-driver"]
)
def test_how_gpus_reach_containers_comes_from_the_same_three_flags_for_both_agents(command: Any) -> None:
    parser = command.build_parser()
    default = command.settings_from_args(parser.parse_args([]), {"NODE_NAME": "n"}).delivery
    assert (default.strategy, default.folders, default.kind) == (
        "auto",
        (Path("/etc/cdi"), Path("/var/run/cdi")),
        "nvidia.com/gpu",
    )
    argv = ["--device-list-strategy", "cdi-cri", "--cdi-spec-dirs", "/a, /b", "--cdi-kind", "x.com/gpu"]
    found = command.settings_from_args(parser.parse_args(argv), {"NODE_NAME": "n"}).delivery
    assert (found.strategy, found.folders, found.kind) == ("cdi-cri", (Path("/a"), Path("/b")), "x.com/gpu")
    with pytest.raises(SystemExit):
        parser.parse_args(["--device-list-strategy", "cdi"])
