"""Pods as the extender leaves them: bound to a node with a gpushare placement (test data builder)."""

from __future__ import annotations

from typing import Any

from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import pod_manifest


def placed_pod(
    name: str,
    gpu_mem: list[int],
    allocation: dict[int, dict[int, int]] | None,
    *,
    assume: int = 1,
    node: str = "node-1",
    dev: int = 16,
    labels: dict[str, str] | None = None,
    init_gpu_mem: list[int] | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    """`allocation` None: no annotations at all (the pod bypassed the extender)."""
    values: dict[str, str] = {}
    if allocation is not None:
        placement = ann.Placement(ann.Allocation(allocation), dev, assume)
        values = ann.encode(placement)
    pod = pod_manifest(
        name,
        gpu_mem=gpu_mem,
        node_name=node,
        annotations=values,
        labels=labels,
        uid=f"uid-{name}",
        phase=phase,
    )
    if init_gpu_mem:
        pod["spec"]["initContainers"] = [
            {"name": f"init{i}", "image": "busybox", "resources": {"limits": {"aliyun.com/gpu-mem": str(u)}}}
            for i, u in enumerate(init_gpu_mem)
        ]
    return pod


def card_pod(
    name: str, allocation: dict[int, dict[int, int]] | None, *counts: int, assume: int = 1
) -> dict[str, Any]:
    """A pod on node-1 asking `counts` whole cards (nvidia.com/gpu) per container (default one
    container, one card), placed by the extender (`allocation` None: it bypassed the extender)."""
    containers = [
        {"name": f"c{i}", "image": "busybox", "resources": {"limits": {resources.NVIDIA_GPU: str(n)}}}
        for i, n in enumerate(counts or (1,))
    ]
    values = (
        ann.encode(ann.Placement(ann.Allocation(allocation), 16, assume)) if allocation is not None else {}
    )
    return pod_manifest(
        name, containers=containers, node_name="node-1", annotations=values, uid=f"uid-{name}"
    )
