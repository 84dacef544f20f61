"""Every flag of every `gpushare` subcommand is documented in the doc of its part (issue 2)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from webhook.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOCS = {
    "webhook": "docs/webhook.md",
    "certs": "docs/webhook.md",
    "extender": "docs/extender.md",
    "device-plugin": "docs/device-plugin.md",
    "dra-driver": "docs/dra.md",
    "check": "docs/cli.md",
    "inspect": "docs/cli.md",
    "demo": "docs/cli.md",
    "ensure-certs": "docs/install.md",
}


def test_every_command_has_a_doc() -> None:
    assert set(DOCS) == set(main.COMMANDS)


@pytest.mark.parametrize("command", sorted(DOCS), ids=sorted(DOCS))
def test_every_flag_of_the_command_is_in_its_doc(command: str) -> None:
    parser = importlib.import_module(f"webhook.cli.{main.COMMANDS[command][0]}").build_parser()
    doc = (ROOT / DOCS[command]).read_text(encoding="utf-8")
    flags = {o for action in parser._actions for o in action.option_strings if o.startswith("--")}
    missing = sorted(f for f in flags - {"--help"} if f"`{f}" not in doc)
    assert missing == [], f"{DOCS[command]} does not document {missing} of `gpushare {command}`"
