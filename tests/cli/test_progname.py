"""The name the program was started under decides what its usage lines call it."""

from __future__ import annotations

import pytest

from webhook.cli import progname

CASES = [
    ("/usr/local/bin/gpushare", "check", "gpushare", "gpushare check"),
    ("/opt/gpushare/bin/gpushare", "inspect", "gpushare", "gpushare inspect"),
    ("/usr/local/bin/kubectl-gpushare", "inspect", "kubectl gpushare", "kubectl gpushare inspect"),
    ("kubectl-gpushare", "check", "kubectl gpushare", "kubectl gpushare check"),
    ("/usr/local/bin/kubectl-inspect-gpushare", "inspect", "kubectl gpushare", "kubectl inspect gpushare"),
    ("/repo/webhook/cli/main.py", "demo", "gpushare", "gpushare demo"),  # python -m webhook.cli.main
    ("/repo/webhook/__main__.py", "webhook", "gpushare", "gpushare webhook"),  # python -m webhook
]


@pytest.mark.parametrize(
    ("argv0", "name", "program", "command"), CASES, ids=[f"{c[0]} {c[1]}" for c in CASES]
)
def test_the_program_and_command_are_named_as_the_user_typed_them(
    argv0: str, name: str, program: str, command: str
) -> None:
    assert progname.program(argv0) == program
    assert progname.command(name, argv0) == command


def test_without_an_argument_the_name_comes_from_sys_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["/home/me/.local/bin/kubectl-gpushare", "check"])
    assert progname.command("check") == "kubectl gpushare check"
    monkeypatch.setattr("sys.argv", ["/home/me/.local/bin/gpushare", "check"])
    assert progname.command("check") == "gpushare check"
