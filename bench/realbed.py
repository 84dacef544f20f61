"""The real control plane, alone or with the chart installed, for the benches that measure against it.

    with realbed.started("gpushare-placement-") as bed:
        bed.start_webhook()
        ...

etcd, kube-apiserver, kube-controller-manager (scripts/kube-bins) and the chart installed by Helm, as the
e2e tests' bed has them (`tests/e2e/bed.py`); every process is stopped on the way out, whatever happened.
`bed.cp.bins.name` names the binaries measured. Used by bench/admission_apiserver.py, controlplane.py,
dra.py and placement.py (`started`), and bench/extender_invariant.py --devcluster (`control_plane`).
`webhook_metrics` and `extender_metrics` read our parts' /metrics through the bed's certificates.
"""

from __future__ import annotations

import contextlib
import shutil
import ssl
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.bed import Bed, admin_api
from webhook.devcluster import binaries
from webhook.devcluster.controlplane import ControlPlane


@contextlib.contextmanager
def control_plane(prefix: str, *, keep: bool = True) -> Iterator[ControlPlane]:
    """A started control plane in a new temporary directory named `prefix...`, stopped on the way out;
    the directory (its logs) is kept unless `keep` is false."""
    bins = binaries.locate()
    if bins is None:
        raise SystemExit("run scripts/kube-bins first (needs Go)")
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        cp = ControlPlane(bins, folder).start()
        try:
            yield cp
        finally:
            cp.stop()
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def started(prefix: str) -> Iterator[Bed]:
    """A started control plane in a new temporary directory named `prefix...`, the chart installed."""
    with control_plane(prefix) as cp:
        api = admin_api(cp)
        bed = Bed(cp, cp.workdir / "bed", api)
        bed.root.mkdir()
        try:
            bed.install()
            yield bed
        finally:
            bed.stop_all()
            api.close()  # type: ignore[no-untyped-call]


def webhook_metrics(bed: Bed) -> str:
    """The text of the webhook's /metrics (`bed.start_webhook()`), over HTTPS trusting the bed's CA."""
    assert bed.cp.pki is not None
    context = ssl.create_default_context(cafile=str(bed.cp.pki.ca_crt))
    with urllib.request.urlopen(
        f"https://127.0.0.1:{bed.webhook_port}/metrics", context=context, timeout=10
    ) as reply:
        return str(reply.read().decode())


def extender_metrics(bed: Bed) -> str:
    """The text of the extender's /metrics (`bed.start_extender()`), where the kubelet would probe it."""
    url, context = bed.extender_probe_url("/metrics")
    with urllib.request.urlopen(url, context=context, timeout=10) as reply:
        return str(reply.read().decode())
