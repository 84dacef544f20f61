"""Fixtures of the high-availability suite: a cluster of three nodes that run real containers (a node
without GPUs for the system pods, two GPU nodes with different simulated GPUs), the node lifecycle
controller at work, and the chart installed with Helm as pods of our image, as tests/cluster installs it
but for two kube-scheduler replicas (leader-elected) and each node's own GPUs (simulation.nodes). A
fourth GPU node is listed there too: test_ha adds it while the cluster runs.

Started once for this package and stopped after its last test; the tests run in file order, each
leaving the cluster whole for the next (a lost node back, a drained node uncordoned)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.workloads import pytest_runtest_makereport, running_cluster, work
from webhook.core.wire import resources
from webhook.devcluster.cluster import Cluster, NodeSpec
from webhook.devcluster.podrelease import PodRelease

GPU_LABELS = {resources.ACK_SCHEDULE_LABEL: "share", resources.ISOLATION_KEY: "false"}
SYSTEM, GPU_A, GPU_B, GPU_C = "system", "gpu-a", "gpu-b", "gpu-c"
# Each GPU node's GPUs: two 16 GiB Voltas, three 24 GiB A10s; the node added later has one 16 GiB card.
GPUS = {
    GPU_A: "0:16:Tesla V100-SXM2-16GB:7.0,1:16:Tesla V100-SXM2-16GB:7.0",
    GPU_B: "0:24:NVIDIA A10:8.6,1:24:NVIDIA A10:8.6,2:24:NVIDIA A10:8.6",
    GPU_C: "0:16:Tesla V100-SXM2-16GB:7.0",
}
GIB_PER_GPU = {GPU_A: 16, GPU_B: 24, GPU_C: 16}
GIB_TOTAL = {GPU_A: 32, GPU_B: 72, GPU_C: 16}


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    nodes = (NodeSpec(SYSTEM), NodeSpec(GPU_A, GPU_LABELS), NodeSpec(GPU_B, GPU_LABELS))
    yield from running_cluster(tmp_path_factory, nodes=nodes)


@pytest.fixture(scope="package")
def chart(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> PodRelease:
    """The chart installed with Helm 3 and waited for, with the chart's defaults for replicas, affinity
    and budgets."""
    release = PodRelease(cluster, tmp_path_factory.mktemp("release"))
    release.install(major=3, **ha_values())
    return release


def ha_values() -> dict[str, Any]:
    return {"simulation": {"enabled": True, "gpus": "", "nodes": GPUS}, "scheduler": {"replicas": 2}}


__all__ = ["pytest_runtest_makereport", "work"]  # the suite's fixture and report hook (workloads.py)
