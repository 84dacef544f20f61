"""A bad memory unit on any command says what a unit may be, not argparse's `invalid memory_unit value`."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("check", ["--memory-unit", "KiB", "x.yaml"]),
        ("inspect.command", ["--unit", "KiB"]),
        ("serve.extender", ["--memory-unit", "KiB"]),
    ],
    ids=["check", "inspect", "extender"],
)
def test_a_bad_memory_unit_flag_says_what_is_allowed(
    capsys: pytest.CaptureFixture[str], module: str, argv: list[str]
) -> None:
    parser = importlib.import_module(f"webhook.cli.{module}").build_parser()
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(argv)
    assert exc.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.endswith(
        f"error: argument {argv[0]}: memory unit 'KiB' is not GiB, MiB or <N>MiB (e.g. 128MiB)"
    )
