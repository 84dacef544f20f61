"""Where the locally built kube-apiserver, kube-controller-manager, kube-scheduler and etcd are.

`scripts/kube-bins` builds them into a cache folder keyed by version and prints it; the tests and
`gpushare demo` take that folder from $GPUSHARE_KUBE_BINS, or else the newest complete one in the cache.
"""

from __future__ import annotations

import os
from pathlib import Path

NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
ENV = "GPUSHARE_KUBE_BINS"


def cache_root() -> Path:
    explicit = os.environ.get("KUBE_BINS_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpushare" / "kube-bins"


def complete(folder: Path) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in NAMES)


def locate() -> Path | None:
    """The binaries' folder, or None when none was built (run scripts/kube-bins)."""
    explicit = os.environ.get(ENV)
    if explicit:
        return Path(explicit) if complete(Path(explicit)) else None
    root = cache_root()
    if not root.is_dir():
        return None
    built = [d for d in root.iterdir() if d.is_dir() and complete(d)]
    return max(built, key=lambda d: d.stat().st_mtime) if built else None
