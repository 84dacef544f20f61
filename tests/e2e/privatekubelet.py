"""A real kubelet (fake CRI) for the device plugin's e2e tests, with a device-plugin folder of its own.

Another kubelet on this machine (another run of the suite, the demo) keeps its own folder, and neither
replaces the other's kubelet.sock.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.bed import Bed
from webhook.core.wire import resources
from webhook.devcluster import kubelet as kubeletmod
from webhook.devcluster import process


@contextlib.contextmanager
def running(bed: Bed, workdir: Path, node: str, group: str) -> Iterator[kubeletmod.Kubelet]:
    """The kubelet of `node`, labelled and tainted for the test group `group`, isolation on; skips the
    test where no private kubelet can run here."""
    reason = kubeletmod.private_available(bed.cp.bins)
    if reason is not None:
        pytest.skip(reason)  # a failure under CI (tests/e2e/conftest.py)
    plugin_dir = process.socket_dir(node)
    real = kubeletmod.Kubelet(
        bed.cp.bins,
        bed.cp,
        workdir,
        node=node,
        labels={"e2e-group": group, resources.ISOLATION_KEY: "false"},
        taints=(f"e2e-group={group}:NoSchedule",),
        plugin_dir=plugin_dir,
    ).start()
    try:
        yield real
    finally:
        real.stop()
        shutil.rmtree(plugin_dir, ignore_errors=True)
