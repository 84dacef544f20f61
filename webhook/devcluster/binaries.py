"""Where the locally built programs are: the control plane's (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler; beside them the node's kubelet, kube-proxy and kubectl) and the test node's runtime
(containerd, the CNI plugins, CoreDNS, pause).

`scripts/kube-bins` and `scripts/runtime-bins` build them into cache folders keyed by version and print
them; the tests and `gpushare demo` take those folders from $GPUSHARE_KUBE_BINS and
$GPUSHARE_RUNTIME_BINS, or else the newest complete one in each cache.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
ENV = "GPUSHARE_KUBE_BINS"
NODE_NAMES = ("kubelet", "kube-proxy", "kubectl")  # beside the control plane's, for a node that runs pods

RUNTIME_ENV = "GPUSHARE_RUNTIME_BINS"
RUNTIME_NAMES = (
    "bin/containerd",
    "bin/containerd-shim-runc-v2",
    "bin/ctr",
    "bin/coredns",
    "bin/pause",
    "cni/bridge",
    "cni/host-local",
    "cni/loopback",
    "cni/portmap",
)


def _cache(variable: str, name: str) -> Path:
    explicit = os.environ.get(variable)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpushare" / name


def cache_root() -> Path:
    return _cache("KUBE_BINS_CACHE", "kube-bins")


def complete(folder: Path, names: Sequence[str] = NAMES) -> bool:
    return all(os.access(folder / name, os.X_OK) for name in names)


def _locate(variable: str, root: Path, names: Sequence[str]) -> Path | None:
    explicit = os.environ.get(variable)
    if explicit:
        return Path(explicit) if complete(Path(explicit), names) else None
    if not root.is_dir():
        return None
    built = [d for d in root.iterdir() if d.is_dir() and complete(d, names)]
    return max(built, key=lambda d: d.stat().st_mtime) if built else None


def locate() -> Path | None:
    """The binaries' folder, or None when none was built (run scripts/kube-bins)."""
    return _locate(ENV, cache_root(), NAMES)


def runtime() -> Path | None:
    """The test node's runtime folder, or None when none was built (run scripts/runtime-bins)."""
    return _locate(RUNTIME_ENV, _cache("RUNTIME_BINS_CACHE", "runtime-bins"), RUNTIME_NAMES)
