"""The GPU-level best fit decides placement through the real kube-scheduler with the chart's profile,
whatever kube-scheduler's own score plugins (which know nothing of GPUs) would prefer (issue 20)."""

from __future__ import annotations

from typing import Any

from tests.e2e import objects, placement
from tests.e2e.bed import Bed
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.kube import rest

ISOLATION = {"cgpu.disable.isolation": "false"}


def _place(bed: Bed, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create the pod and wait until kube-scheduler has bound it (one at a time, so the order is ours)."""
    name = body["metadata"]["name"]
    bed.request("POST", rest.path("pods", namespace=ns), body=body)

    def bound() -> dict[str, Any] | None:
        pod: dict[str, Any] = bed.request("GET", rest.path("pods", name, ns))
        return pod if pod["spec"].get("nodeName") else None

    return dict(bed.wait(f"pod {name} bound", bound))


def _gpu(pod: dict[str, Any]) -> tuple[str, int]:
    placed = ann.decode(pod["metadata"]["annotations"])
    assert placed is not None
    (index,) = placed.allocation.per_gpu()
    return pod["spec"]["nodeName"], index


def test_pods_of_16_16_and_24_gib_fill_gpus_of_16_16_and_24_exactly(bed: Bed) -> None:
    # The demo's cluster: placing by node fullness sent the first 16 GiB pod to the 24 GiB GPU, and
    # the 24 GiB pod then fit nowhere.
    ns = bed.namespace("e2e-bestfit-demo")
    bed.node("bestfit-a", 2, 16, labels=ISOLATION, group="bestfit-demo")
    bed.node("bestfit-b", 1, 24, labels=ISOLATION, group="bestfit-demo")
    pods = [
        _place(bed, ns, objects.in_group(objects.gpu_pod(name, gib), "bestfit-demo"))
        for name, gib in (("first", 16), ("second", 16), ("third", 24))
    ]
    assert [_gpu(p) for p in pods] == [("bestfit-a", 0), ("bestfit-a", 1), ("bestfit-b", 0)]
    placement.check_invariant(bed.pods(ns), {"bestfit-a": 16, "bestfit-b": 24})


def test_the_tightest_gpu_wins_over_kube_schedulers_preference_for_the_emptier_node(bed: Bed) -> None:
    # NodeResourcesFit (LeastAllocated) and BalancedAllocation both prefer the node with less CPU in use:
    # the empty one. The second pod fits the half-used GPU of the first pod's node more tightly, and goes
    # there.
    ns = bed.namespace("e2e-bestfit-cpu")
    group = "bestfit-cpu"
    bed.node("bestfit-c1", 1, 16, labels=ISOLATION, group=group)
    bed.node("bestfit-c2", 1, 16, labels=ISOLATION, group=group)

    def pod(name: str) -> dict[str, Any]:
        limits = {resources.GPU_MEMORY: "8", "cpu": "32"}
        return objects.in_group(objects.pod(name, objects.container(limits=limits)), group)

    first = _place(bed, ns, pod("heavy"))
    second = _place(bed, ns, pod("next"))
    assert _gpu(second) == _gpu(first)
    placement.check_invariant(bed.pods(ns), {"bestfit-c1": 16, "bestfit-c2": 16})


SPREAD = {resources.PLACEMENT_POLICY_ANNOTATION: "spread"}


def test_spread_puts_pods_on_gpus_of_16_16_and_24_gib_each_on_a_gpu_of_its_own(bed: Bed) -> None:
    # The case, as a new user tries it: the most free memory alone put the second pod on the
    # 24 GiB GPU too (20 free against 16) and left a 16 GiB GPU empty.
    ns = bed.namespace("e2e-bestfit-spread")
    group = "bestfit-spread"
    bed.node("bestfit-s1", 2, 16, labels=ISOLATION, group=group)
    bed.node("bestfit-s2", 1, 24, labels=ISOLATION, group=group)
    pods = [
        _place(bed, ns, objects.in_group(objects.gpu_pod(f"s{i}", 4, annotations=SPREAD), group))
        for i in range(3)
    ]
    # All empty: the most free memory (the 24 GiB GPU); then the GPUs holding no pod, first by index.
    assert [_gpu(p) for p in pods] == [("bestfit-s2", 0), ("bestfit-s1", 0), ("bestfit-s1", 1)]
    placement.check_invariant(bed.pods(ns), {"bestfit-s1": 16, "bestfit-s2": 24})


def test_a_node_of_an_80_and_a_16_gib_gpu_takes_its_first_two_spread_pods_on_different_gpus(bed: Bed) -> None:
    ns = bed.namespace("e2e-bestfit-spread-mixed")
    group = "bestfit-spread-mixed"
    sizes = ann.NodeDevices("GiB", (ann.GpuDevice(0, "GPU-big", 80), ann.GpuDevice(1, "GPU-small", 16)))
    devices = {resources.NODE_DEVICES_ANNOTATION: sizes.to_json()}
    bed.node("bestfit-m", 2, 48, labels=ISOLATION, group=group, annotations=devices)  # 96 GiB in all
    pods = [
        _place(bed, ns, objects.in_group(objects.gpu_pod(f"m{i}", 4, annotations=SPREAD), group))
        for i in range(3)
    ]
    assert [_gpu(p) for p in pods] == [("bestfit-m", 0), ("bestfit-m", 1), ("bestfit-m", 0)]
    # The GPUs' own sizes, as the device plugin would publish them, not the capacity split evenly.
    memory = [placed.device_memory for p in pods if (placed := ann.decode(p["metadata"]["annotations"]))]
    assert memory == [80, 16, 80]
    # Each pod placed once, bound with its annotations (the 80 GiB bound; the 16 GiB GPU's is checked here).
    used = placement.check_invariant(bed.pods(ns), {"bestfit-m": 80})
    assert used == {("bestfit-m", 0): 8, ("bestfit-m", 1): 4}
