"""One version: the installed package's metadata, `webhook.__version__`, the chart's version and
appVersion (the image tag it installs) and the newest release in CHANGELOG.md are the same string."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import yaml

from webhook import __version__

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "gpushare" / "Chart.yaml"
CHANGELOG = ROOT / "CHANGELOG.md"
SECTION = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?$", re.M)
RELEASED_FROM = re.compile(r"^Released from commit `(?P<sha>[0-9a-f]+)`\.$", re.M)


def _releases() -> list[tuple[str, str, str]]:
    """(version, date, text) of each released section of CHANGELOG.md, newest first."""
    text = CHANGELOG.read_text(encoding="utf-8")
    heads = list(SECTION.finditer(text))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    return [
        (h["version"], h["date"] or "", text[h.end() : end])
        for h, end in zip(heads, ends, strict=True)
        if h["version"] != "Unreleased"
    ]


def test_the_installed_package_is_the_version_in_webhook_init() -> None:
    # A stale editable install fails here: reinstall with `pip install -e .` after a version change.
    assert importlib.metadata.version("gpushare-webhook") == __version__


def test_pyproject_takes_its_version_from_webhook_init_only() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["name"] == "gpushare-webhook"
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "webhook.__version__"}


def test_the_chart_version_and_app_version_are_the_package_version() -> None:
    chart = yaml.safe_load(CHART.read_text(encoding="utf-8"))
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)


def test_the_newest_release_in_the_changelog_is_the_package_version() -> None:
    version, date, _ = _releases()[0]
    assert version == __version__
    assert date, f"CHANGELOG.md: the section of {version} has no release date"


def test_every_changelog_release_is_dated_and_newest_first() -> None:
    releases = _releases()
    keys = [tuple(int(part) for part in version.split(".")) for version, _, _ in releases]
    assert keys == sorted(keys, reverse=True)
    assert [date for _, date, _ in releases] == sorted((date for _, date, _ in releases), reverse=True)


def test_the_newest_section_that_names_its_commit_names_it_in_full() -> None:
    # The test bed builds the previous release from the first such line of the newest section with one.
    shas = [m["sha"] for _, _, text in _releases() if (m := RELEASED_FROM.search(text))]
    assert shas, "CHANGELOG.md: no release says 'Released from commit `<sha>`.'"
    assert re.fullmatch(r"[0-9a-f]{40}", shas[0]), shas[0]
