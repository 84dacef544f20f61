"""The exit codes are defined once (webhook/cli/exitcodes.py) and docs/cli.md's table lists exactly them."""

from __future__ import annotations

import re
from pathlib import Path

from webhook.cli import exitcodes

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def documented_codes() -> set[int]:
    section = DOC.read_text(encoding="utf-8").split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    return {int(code) for code in re.findall(r"^\| (\d+) \|", section, flags=re.MULTILINE)}


def defined_codes() -> dict[str, int]:
    names = vars(exitcodes).items()
    return {name: value for name, value in names if name.isupper() and isinstance(value, int)}


def test_the_docs_table_lists_every_exit_code_and_no_other() -> None:
    assert documented_codes() == set(defined_codes().values())


def test_the_codes_follow_the_shell_conventions() -> None:
    assert defined_codes() == {
        "OK": 0,
        "FAILURE": 1,
        "USAGE": 2,  # what argparse exits with on bad arguments
        "INTERRUPTED": 128 + 2,  # SIGINT
        "BROKEN_PIPE": 128 + 13,  # SIGPIPE
    }
