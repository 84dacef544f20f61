"""The device plugin meets the real kubelet's device manager: a kubelet built from k8s.io/kubernetes, on the
CRI fake runtime (no container runs), registered as a Node with a node identity. The kubelet dials our
plugin over its real gRPC, advertises what ListAndWatch sends, and on admitting a pod the extender bound
calls GetPreferredAllocation and Allocate; its PodResources API then says which devices each container got.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.e2e import objects
from tests.e2e.bed import Bed
from webhook.core import annotations as ann
from webhook.core import resources
from webhook.devcluster import kubelet as kubeletmod
from webhook.deviceplugin import inventory
from webhook.deviceplugin.podresources.v1 import api_pb2, api_pb2_grpc
from webhook.kube import rest

NODE = "kubelet-node-0"
GROUP = "real-kubelet"


@pytest.fixture(scope="module")
def kubelet(bed: Bed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeletmod.Kubelet]:
    reason = kubeletmod.available(bed.cp.bins)
    if reason is not None:
        pytest.skip(reason)  # a failure under CI (tests/e2e/conftest.py)
    real = kubeletmod.Kubelet(
        bed.cp.bins,
        bed.cp,
        tmp_path_factory.mktemp("kubelet"),
        node=NODE,
        labels={"e2e-group": GROUP, resources.ISOLATION_KEY: "false"},
        taints=(f"e2e-group={GROUP}:NoSchedule",),
    ).start()
    try:
        yield real
    finally:
        real.stop()


def _capacity(bed: Bed) -> str | None:
    node = bed.request("GET", rest.path("nodes", NODE))
    value = node.get("status", {}).get("capacity", {}).get(resources.GPU_MEMORY)
    return value if isinstance(value, str) else None


def _pod_resources(socket: Path) -> dict[tuple[str, str], list[str]]:
    """(pod, container) -> device IDs of aliyun.com/gpu-mem, as the kubelet's PodResources List says."""
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        reply = stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
    found: dict[tuple[str, str], list[str]] = {}
    for pod in reply.pod_resources:
        for container in pod.containers:
            for devices in container.devices:  # one entry per device (or NUMA group) given
                if devices.resource_name == resources.GPU_MEMORY:
                    found.setdefault((pod.name, container.name), []).extend(devices.device_ids)
    return found


def test_the_real_kubelet_advertises_the_plugins_memory_and_gives_each_pod_its_placed_gpu(
    bed: Bed, kubelet: kubeletmod.Kubelet
) -> None:
    plugin = bed.start_device_plugin(
        NODE,
        kubeletmod.DEVICE_PLUGIN_DIR,
        "0:16,1:16",
        extra=("--pod-resources-socket", str(kubelet.pod_resources_socket)),
    )
    try:
        # The kubelet's device manager registered the plugin and put its devices in the Node's capacity.
        assert bed.wait("gpu-mem capacity from the kubelet", lambda: _capacity(bed) == "32", timeout=60)
        ns = bed.namespace("e2e-real-kubelet")
        for name, gib in (("big", 12), ("small", 6)):
            body = objects.gpu_pod(name, gib)
            objects.in_group(body, GROUP)
            bed.request("POST", rest.path("pods", namespace=ns), body=body)

        def running() -> list[Any] | None:
            pods = bed.pods(ns)
            done = len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods)
            return pods if done else None

        # Bound by kube-scheduler through our extender, admitted by the kubelet (Allocate answered),
        # run by the fake runtime.
        pods = bed.wait("both pods Running on the real kubelet", running, timeout=90)
        given = _pod_resources(kubelet.pod_resources_socket)
        for pod in pods:
            name = pod["metadata"]["name"]
            placed = ann.decode(pod["metadata"]["annotations"])
            assert placed is not None and pod["spec"]["nodeName"] == NODE
            assert pod["metadata"]["annotations"][resources.ANN_MEM_ASSIGNED] == "true"
            devices = given[(name, "c0")]
            assert len(devices) == placed.pod_total
            # Every device the kubelet handed out lies on the GPU the extender's annotation names
            # (GetPreferredAllocation steered it there).
            (gpu,) = placed.gpu_indexes
            assert {d.split("-_-")[0] for d in devices} == {inventory.fake_uuid(gpu)}
        # 12 + 6 > 16: the two pods were placed, and given, different GPUs.
        assert len({ann.decode(p["metadata"]["annotations"]).gpu_indexes for p in pods}) == 2  # type: ignore[union-attr]
    finally:
        plugin.stop()
