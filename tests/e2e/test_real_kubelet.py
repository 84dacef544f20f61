"""The device plugin meets the real kubelet's device manager: a kubelet built from k8s.io/kubernetes, on the
CRI fake runtime (no container runs), registered as a Node with a node identity. The kubelet dials our
plugin over its real gRPC, advertises what ListAndWatch sends, and on admitting a pod the extender bound
calls GetPreferredAllocation and Allocate; its PodResources API then says which devices each container got.
Both of our endpoints meet it: gpu-mem and whole cards (nvidia.com/gpu).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import objects, podresources, privatekubelet
from tests.e2e.bed import Bed
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.devcluster import kubelet as kubeletmod
from webhook.gpus import inventory
from webhook.kube import rest

NODE = "kubelet-node-0"
GROUP = "real-kubelet"


@pytest.fixture(scope="module")
def kubelet(bed: Bed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeletmod.Kubelet]:
    with privatekubelet.running(bed, tmp_path_factory.mktemp("kubelet"), NODE, GROUP) as real:
        yield real


@pytest.fixture
def plugin(bed: Bed, kubelet: kubeletmod.Kubelet) -> Iterator[None]:
    """Our device plugin beside the kubelet, two fake GPUs of 16 GiB. Afterwards the test's pods are
    deleted and gone from the kubelet, so the next test finds both GPUs (and all devices) free."""
    process = bed.start_device_plugin(
        NODE,
        kubelet.device_plugin_dir,
        "0:16,1:16",
        extra=("--pod-resources-socket", str(kubelet.pod_resources_socket)),
    )
    try:
        yield
    finally:
        try:
            _delete_pods(bed, kubelet)
        finally:
            process.stop()
        # The kubelet keeps the capacity of a plugin gone for a grace period, its devices unhealthy:
        # wait until the Node says so, so that the next test's wait for healthy devices means its plugin.
        bed.wait("the kubelet to see the plugin gone", lambda: _allocatable(bed) == ("0", "0"))


def _delete_pods(bed: Bed, kubelet: kubeletmod.Kubelet) -> None:
    on_node = {"fieldSelector": f"spec.nodeName={NODE}"}
    for pod in rest.list_all(bed.api, rest.path("pods"), query=on_node):
        meta = pod["metadata"]
        bed.request(
            "DELETE", rest.path("pods", meta["name"], meta["namespace"]), query={"gracePeriodSeconds": 0}
        )
    bed.wait(
        "the kubelet to let go of the deleted pods",
        lambda: (
            not podresources.devices(kubelet.pod_resources_socket, resources.GPU_MEMORY)
            and not podresources.devices(kubelet.pod_resources_socket, resources.NVIDIA_GPU)
        ),
    )


def _allocatable(bed: Bed) -> tuple[str | None, str | None]:
    """The Node's healthy (allocatable) whole cards and gpu-mem devices, as the kubelet last posted."""
    allocatable = bed.request("GET", rest.path("nodes", NODE)).get("status", {}).get("allocatable", {})
    return allocatable.get(resources.NVIDIA_GPU), allocatable.get(resources.GPU_MEMORY)


def _create_and_run(bed: Bed, ns: str, *bodies: dict[str, Any]) -> list[Any]:
    """Bound by kube-scheduler through our extender, admitted by the kubelet (Allocate answered), run
    by the fake runtime."""
    for body in bodies:
        objects.in_group(body, GROUP)
        bed.request("POST", rest.path("pods", namespace=ns), body=body)

    def running() -> list[Any] | None:
        pods = bed.pods(ns)
        done = len(pods) == len(bodies) and all(p.get("status", {}).get("phase") == "Running" for p in pods)
        return pods if done else None

    pods: list[Any] = bed.wait(f"{len(bodies)} pods Running on the real kubelet", running, timeout=90)
    return pods


def _placed(pod: dict[str, Any]) -> ann.Placement:
    placed = ann.decode(pod["metadata"]["annotations"])
    assert placed is not None and pod["spec"]["nodeName"] == NODE
    assert pod["metadata"]["annotations"][resources.ANN_MEM_ASSIGNED] == "true"
    return placed


def test_the_real_kubelet_advertises_the_plugins_memory_and_gives_each_pod_its_placed_gpu(
    bed: Bed, kubelet: kubeletmod.Kubelet, plugin: None
) -> None:
    # The kubelet's device manager registered the plugin and put its healthy devices on the Node.
    assert bed.wait("gpu-mem from the kubelet", lambda: _allocatable(bed)[1] == "32", timeout=60)
    ns = bed.namespace("e2e-real-kubelet")
    pods = _create_and_run(bed, ns, objects.gpu_pod("big", 12), objects.gpu_pod("small", 6))
    given = podresources.devices(kubelet.pod_resources_socket, resources.GPU_MEMORY)
    for pod in pods:
        placed = _placed(pod)
        devices = given[(pod["metadata"]["name"], "c0")]
        assert len(devices) == placed.pod_total
        # Every device the kubelet handed out lies on the GPU the extender's annotation names
        # (GetPreferredAllocation steered it there).
        (gpu,) = placed.gpu_indexes
        assert {d.split("-_-")[0] for d in devices} == {inventory.fake_uuid(gpu)}
    # 12 + 6 > 16: the two pods were placed, and given, different GPUs.
    assert len({_placed(p).gpu_indexes for p in pods}) == 2


def test_the_real_kubelet_gives_a_whole_card_pod_the_card_its_placement_names_beside_a_share(
    bed: Bed, kubelet: kubeletmod.Kubelet, plugin: None
) -> None:
    # Both endpoints registered: the Node has the cards and the memory from the kubelet, no write of ours.
    assert bed.wait(
        "whole cards and gpu-mem from the kubelet", lambda: _allocatable(bed) == ("2", "32"), timeout=60
    )
    ns = bed.namespace("e2e-real-kubelet-cards")
    card = objects.pod("card", objects.container("train", limits={resources.NVIDIA_GPU: "1"}))
    pods = {p["metadata"]["name"]: p for p in _create_and_run(bed, ns, objects.gpu_pod("share", 4), card)}
    (card_gpu,) = _placed(pods["card"]).gpu_indexes
    (share_gpu,) = _placed(pods["share"]).gpu_indexes
    assert card_gpu != share_gpu  # a whole card never shares its GPU
    # The kubelet's own record: the card container holds exactly the card its placement names ...
    cards = podresources.devices(kubelet.pod_resources_socket, resources.NVIDIA_GPU)
    assert cards == {("card", "train"): [inventory.fake_uuid(card_gpu)]}
    # ... and every gpu-mem device of the share lies on the other GPU.
    memory = podresources.devices(kubelet.pod_resources_socket, resources.GPU_MEMORY)
    assert len(memory[("share", "c0")]) == 4
    assert {d.split("-_-")[0] for d in memory[("share", "c0")]} == {inventory.fake_uuid(share_gpu)}
