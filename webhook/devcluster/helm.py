"""The Helm binary and this checkout's chart, for the end-to-end bed and `gpushare demo`.

`scripts/install-helm` puts Helm into `.tools/bin`; one on PATH does as well. The chart is read from the
source tree (the wheel does not carry it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpushare"


def binary() -> str | None:
    """The Helm to run, or None when neither `.tools/bin/helm` nor one on PATH exists."""
    local = ROOT / ".tools" / "bin" / "helm"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("helm")
