"""The pins agree: every direct pin in pyproject.toml is the version constraints.txt installs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[=<>!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not pinned with =="
            pins[_name(name)] = version
    return pins


def test_every_direct_dependency_is_pinned_and_matches_the_constraints() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _constraints()
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        name, _, version = requirement.partition("==")
        assert version, f"pyproject.toml: {requirement!r} is not pinned with =="
        assert pins.get(_name(name)) == version, f"{requirement} vs constraints.txt {pins.get(_name(name))}"
