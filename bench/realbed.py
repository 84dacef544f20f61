"""The real control plane with the chart installed, for the benches that measure against it.

    with realbed.started("gpushare-placement-") as bed:
        bed.start_webhook()
        ...

etcd, kube-apiserver, kube-controller-manager (scripts/kube-bins) and the chart installed by Helm, as the
e2e tests' bed has them (`tests/e2e/bed.py`); every process is stopped on the way out, whatever happened.
`bed.cp.bins.name` names the binaries measured.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.bed import Bed, admin_api
from webhook.devcluster import binaries
from webhook.devcluster.controlplane import ControlPlane


@contextlib.contextmanager
def started(prefix: str) -> Iterator[Bed]:
    """A started control plane in a new temporary directory named `prefix...`, the chart installed."""
    bins = binaries.locate()
    if bins is None:
        raise SystemExit("run scripts/kube-bins first (needs Go)")
    cp = ControlPlane(bins, Path(tempfile.mkdtemp(prefix=prefix))).start()
    api = admin_api(cp)
    bed = Bed(cp, cp.workdir / "bed", api)
    bed.root.mkdir()
    try:
        bed.install()
        yield bed
    finally:
        bed.stop_all()
        cp.stop()
        api.close()  # type: ignore[no-untyped-call]
