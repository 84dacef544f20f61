"""The Helm binary and this checkout's chart, for the end-to-end bed and `gpushare demo`.

`scripts/install-helm` puts Helm 3 (`helm`) and Helm 4 (`helm4`) into `.tools/bin`, built from their pinned
Go modules; one on PATH by the same name does as well. `GPUSHARE_HELM=4` makes Helm 4 the default. The
chart is read from the source tree (the wheel does not carry it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpushare"
NAMES = {3: "helm", 4: "helm4"}  # the file names scripts/install-helm gives each major version
SELECT = "GPUSHARE_HELM"


def default_major() -> int:
    """The major version `GPUSHARE_HELM` selects (3 when unset or empty)."""
    chosen = (os.environ.get(SELECT) or "3").strip()
    if chosen not in {str(major) for major in NAMES}:
        raise ValueError(f"{SELECT}={chosen!r}: expected one of {', '.join(map(str, NAMES))}")
    return int(chosen)


def binary(major: int | None = None) -> str | None:
    """Helm `major` (default: `default_major()`): `.tools/bin/<name>`, else `<name>` on PATH, else None.
    Links are resolved: Helm names its field manager after the file it runs as, and the built binaries
    are both called `helm`, as an operator's is."""
    name = NAMES[default_major() if major is None else major]
    local = ROOT / ".tools" / "bin" / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local.resolve())
    found = shutil.which(name)
    return None if found is None else str(Path(found).resolve())
