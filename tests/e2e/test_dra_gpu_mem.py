"""What a user sees when an `aliyun.com/gpu-mem` pod can only go to a DRA node (docs/dra.md): a DRA node
advertises no gpu-mem, so kube-scheduler's own NodeResourcesFit refuses it and never asks the extender;
the extender's reason, naming the claim to write, shows only on a DRA node that still advertises gpu-mem."""

from __future__ import annotations

from tests.e2e import objects
from tests.e2e.bed import Bed
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.kube import rest

ISOLATION = {"cgpu.disable.isolation": "false"}  # the webhook pins every gpu-mem pod to this pool
DRA = {modes.MODE_LABEL: "dra"}


def _refusal(bed: Bed, ns: str, pod: str) -> str:
    def found() -> str:
        return next((e["message"] for e in bed.events(ns, pod) if e["reason"] == "FailedScheduling"), "")

    message: str = bed.wait(f"a FailedScheduling event of {pod}", found)
    return message


def test_a_gpu_mem_pod_aimed_at_dra_nodes_gets_kube_schedulers_reason_or_ours(bed: Bed) -> None:
    ns = bed.namespace("e2e-dra-gpu-mem")
    # As a DRA node is: no device plugin of ours, so no aliyun.com/gpu-mem (0) and no GPU count.
    bed.node("dramem-none", 0, 0, labels={**DRA, **ISOLATION}, group="dramem-none")
    # A DRA node without the isolation pool's label, as one labelled only for DRA would be.
    bed.node("dramem-nopool", 0, 0, labels=DRA, group="dramem-nopool")
    # A DRA node whose status still advertises gpu-mem (as before the kubelet reports the plugin gone).
    bed.node("dramem-stale", 1, 16, labels={**DRA, **ISOLATION}, group="dramem-stale")
    for group in ("dramem-none", "dramem-nopool", "dramem-stale"):
        body = objects.in_group(objects.gpu_pod(group, 3), group)
        bed.request("POST", rest.path("pods", namespace=ns), body=body)

    none = _refusal(bed, ns, "dramem-none")
    assert f"1 Insufficient {resources.GPU_MEMORY}" in none, none
    assert "ResourceClaim" not in none

    nopool = _refusal(bed, ns, "dramem-nopool")
    assert "didn't match Pod's node affinity/selector" in nopool, nopool
    assert "Insufficient" not in nopool and "ResourceClaim" not in nopool

    stale = _refusal(bed, ns, "dramem-stale")
    assert "1 node label ack.node.gpu.schedule=dra: the node's GPUs are shared through DRA" in stale, stale
    # One reason for every such node (kube-scheduler counts nodes per distinct reason): <N>, not the pod's 3.
    assert "deviceClassName: gpushare-memory, capacity: {requests: {memory: <N>Gi}}" in stale, stale
