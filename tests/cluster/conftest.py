"""Fixtures of the suite that runs the chart as users run it: a one-node cluster whose node runs real
containers (containerd, runc, CNI, kube-proxy, CoreDNS; webhook/devcluster/cluster.py), every image built
on this machine (scripts/node-images), and the chart installed into it with Helm as pods of our image
(webhook/devcluster/podrelease.py). Started once for this package and stopped after its last test, so
the rest of the suite never shares the machine with it. Without root or the binaries the package skips
with the reason in one line; under CI=true that skip fails (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.workloads import pytest_runtest_makereport, running_cluster, work
from webhook.core.wire import resources
from webhook.devcluster.cluster import Cluster
from webhook.devcluster.podrelease import PodRelease

# What a user's GPU node carries (the chart's NOTES): its mode and the isolation pool gpu-mem pods ask for.
NODE_LABELS = {resources.ACK_SCHEDULE_LABEL: "share", resources.ISOLATION_KEY: "false"}


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from running_cluster(tmp_path_factory, labels=NODE_LABELS)


@pytest.fixture(scope="package")
def chart(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> PodRelease:
    """The chart installed with Helm 3 and waited for, as a user's `helm install --wait` does."""
    release = PodRelease(cluster, tmp_path_factory.mktemp("release"))
    release.install(major=3)
    return release


__all__ = ["pytest_runtest_makereport", "work"]  # the suite's fixture and report hook (workloads.py)
