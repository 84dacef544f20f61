"""Our releases, for the test bed: which one came before this tree (CHANGELOG.md's newest section that says
"Released from commit `<sha>`"), that commit's tree, and scripts/release run against the bed's registry,
so the chart and the image a user would pull are the ones tested.

    version, commit = previous()                 -> ("0.1.0", "6d1739d...")
    tree = checkout(commit, workdir / "0.1.0")   -> the files of that commit (git archive)
    publish("10.255.1.1:40123", tree, version, workdir / "dist")  -> "oci://10.255.1.1:40123/gpushare"
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from webhook.devcluster import helm, scripts

_SECTION = re.compile(r"^## \[(\d+\.\d+\.\d+)\]", re.MULTILINE)
_COMMIT = re.compile(r"^Released from commit `([0-9a-f]{40})`\.", re.MULTILINE)


class ReleaseError(RuntimeError):
    """A release that cannot be found, checked out or built; the message says which step."""


def current(root: Path = helm.ROOT) -> str:
    """This tree's version: the chart's (the same as webhook.__version__, tests/test_version.py)."""
    for line in (root / "charts" / "gpushare" / "Chart.yaml").read_text().splitlines():
        if line.startswith("version:"):
            return line.split(":", 1)[1].strip()
    raise ReleaseError("charts/gpushare/Chart.yaml has no version")


def previous(root: Path = helm.ROOT) -> tuple[str, str]:
    """(version, commit) of the newest CHANGELOG.md release built from a past commit."""
    text = (root / "CHANGELOG.md").read_text()
    heads = list(_SECTION.finditer(text))
    for number, head in enumerate(heads):
        end = heads[number + 1].start() if number + 1 < len(heads) else len(text)
        found = _COMMIT.search(text, head.end(), end)
        if found is not None:
            return head.group(1), found.group(1)
    raise ReleaseError("CHANGELOG.md names no release commit (a line 'Released from commit `<sha>`.')")


def checkout(commit: str, where: Path, root: Path = helm.ROOT) -> Path:
    """The files of `commit` in `where` (made anew), from this repository's history."""
    if where.exists():
        subprocess.run(["rm", "-rf", str(where)], check=True)
    where.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", "--format=tar", commit], capture_output=True, check=False
    )
    if archive.returncode != 0:
        why = archive.stderr.decode(errors="replace").strip()
        raise ReleaseError(
            f"git archive {commit} failed: {why} (a shallow clone lacks the previous release's commit: "
            "fetch it, e.g. git fetch --unshallow)"
        )
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where


def publish(registry: str, source: Path, version: str, out: Path, timeout: float = 1800) -> str:
    """scripts/release of `source` as `version` to the plain-HTTP `registry` (host:port); the chart's
    oci:// reference."""
    args = ["--plain-http", "--source", str(source), "--version", version, "--out", str(out), registry]
    try:
        return scripts.last_line("release", *args, timeout=timeout)
    except RuntimeError as err:
        raise ReleaseError(f"releasing {version}: {err}") from None
