"""Session fixtures of the end-to-end suite: real etcd, kube-apiserver, kube-controller-manager and
kube-scheduler (built by
scripts/kube-bins), the chart installed by Helm, our parts on this host. Without the binaries the suite
skips, except in CI (CI=true), where it fails: there it must run."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.e2e.bed import Bed, admin_api
from webhook.devcluster import binaries
from webhook.devcluster.controlplane import ControlPlane

_current: list[Bed] = []


@pytest.fixture(scope="session")
def kube_bins() -> Path:
    folder = binaries.locate()
    if folder is None:
        message = (
            "kube-apiserver, kube-controller-manager, kube-scheduler and etcd are not built: "
            "run `bash scripts/kube-bins` (needs Go)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return folder


@pytest.fixture(scope="session")
def control_plane(kube_bins: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(kube_bins, tmp_path_factory.mktemp("controlplane")).start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def bed(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    """The release installed, and the webhook, the extender and kube-scheduler running."""
    api = admin_api(control_plane)
    bed = Bed(control_plane, tmp_path_factory.mktemp("bed"), api)
    _current.append(bed)
    try:
        bed.install()
        bed.start_webhook()
        bed.start_extender()
        bed.start_scheduler()
        yield bed
    finally:
        _current.remove(bed)
        bed.stop_all()
        api.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed end-to-end test's report says where the logs are and shows each one's tail (a skip
    under CI is a failure: tests/conftest.py)."""
    report = yield
    if report.failed and _current:
        bed = _current[-1]
        tails = [f"logs of every process: {bed.cp.logs}"]
        for process in [*bed.cp.processes, *bed.processes]:
            tails.append(f"--- {process.name} (last lines)\n{process.tail(15)}")
        report.sections.append(("end-to-end logs", "\n".join(tails)))
    return report
