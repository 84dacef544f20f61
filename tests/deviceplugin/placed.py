"""Pods as the extender leaves them: bound to a node with a gpushare placement (test data builder)."""

from __future__ import annotations

from typing import Any

from webhook.core import annotations as ann
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
