"""`gpushare check`'s flags as a user meets them: a missing --config named once, -q's help as documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli import check, report

DOCS = Path(__file__).parent.parent.parent / "docs" / "cli.md"


def test_a_missing_config_file_is_named_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert check.main(["--config", str(missing), str(tmp_path)]) == report.UNREADABLE
    assert (
        capsys.readouterr().err
        == f"gpushare check: cannot read config file {missing}: No such file or directory\n"
    )


def test_the_quiet_help_says_what_the_docs_say_it_shows() -> None:
    [documented] = [
        line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith("| `-q`")
    ]
    shows = documented.split("|")[2].strip().removeprefix("text: ")  # "only denied objects, ..."
    [quiet] = [a for a in check.build_parser()._actions if "--quiet" in a.option_strings]
    assert quiet.help is not None and quiet.help.endswith(shows)
