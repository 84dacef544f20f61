"""Node modes and GPU type labels with the real kube-scheduler: each device plugin labels its Node with its
GPU model, a gpu-mem pod's model nodeSelector lands it on that model's node only, and the extender keeps
shares off a node labelled ack.node.gpu.schedule=default until the label says share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e import objects
from tests.e2e.bed import Bed
from webhook.core.node import gpulabels
from webhook.core.placement import modes
from webhook.kube import rest

GROUP = "models"


def _pod(name: str, gib: int, selector: dict[str, str] | None = None) -> dict[str, Any]:
    body = objects.in_group(objects.gpu_pod(name, gib), GROUP)
    body["spec"]["nodeSelector"].update(selector or {})
    return body


def _node_of(bed: Bed, ns: str, name: str) -> str:
    pod = bed.request("GET", rest.path("pods", name, ns))
    return str(pod["spec"].get("nodeName") or "")


def test_a_model_node_selector_lands_on_the_matching_node_and_default_nodes_take_no_shares(
    bed: Bed, tmp_path_factory: Any
) -> None:
    ns = bed.namespace("e2e-models")
    isolation = {"cgpu.disable.isolation": "false"}  # the webhook pins gpu-mem pods to one pool
    bed.node("m-t4", 1, 16, labels={**isolation, modes.MODE_LABEL: "share"}, group=GROUP)
    bed.node("m-v100", 1, 16, labels=isolation, group=GROUP)  # no mode label: the original gpushare node
    bed.node("m-whole", 1, 16, labels={**isolation, modes.MODE_LABEL: "default"}, group=GROUP)
    gpus = {"m-t4": "0:16:Tesla T4:7.5", "m-v100": "0:16:Tesla V100-SXM2-16GB:7.0"}
    for node, fake in gpus.items():
        plugin_dir: Path = tmp_path_factory.mktemp(f"dp-{node}")
        bed.start_device_plugin(node, plugin_dir, fake)

    def model_labels() -> bool:
        found = {
            node: bed.request("GET", rest.path("nodes", node))["metadata"].get("labels", {}) for node in gpus
        }
        return bool(
            found["m-t4"].get(gpulabels.NVIDIA_NAME) == "Tesla-T4"
            and found["m-v100"].get(gpulabels.ACCELERATOR) == "nvidia-tesla-v100-sxm2-16gb"
            and found["m-t4"].get(gpulabels.COMPUTE_CAPABILITY) == "7.5"
        )

    # Written by each plugin with the chart's RBAC, through its ValidatingAdmissionPolicy.
    bed.wait("the GPU type labels on both nodes", model_labels)
    create = rest.path("pods", namespace=ns)
    bed.request("POST", create, body=_pod("on-t4", 4, {gpulabels.NVIDIA_NAME: "Tesla-T4"}))
    bed.request(
        "POST", create, body=_pod("on-v100", 4, {gpulabels.ACCELERATOR: "nvidia-tesla-v100-sxm2-16gb"})
    )
    bed.wait("both model pods bound", lambda: _node_of(bed, ns, "on-t4") and _node_of(bed, ns, "on-v100"))
    assert (_node_of(bed, ns, "on-t4"), _node_of(bed, ns, "on-v100")) == ("m-t4", "m-v100")

    # 10 GiB fits each node's free 12 GiB once, and m-whole's 16, but m-whole serves whole cards only.
    for name in ("any-0", "any-1", "any-2"):
        bed.request("POST", create, body=_pod(name, 10))
    bed.wait("two pods bound", lambda: sum(bool(_node_of(bed, ns, f"any-{i}")) for i in range(3)) == 2)

    def refused() -> list[str]:
        waiting = next(f"any-{i}" for i in range(3) if not _node_of(bed, ns, f"any-{i}"))
        return [
            e["message"]
            for e in bed.events(ns, waiting)
            if e["reason"] == "FailedScheduling" and "ack.node.gpu.schedule=default" in e["message"]
        ]

    messages = bed.wait("a FailedScheduling event naming the mode label", refused)
    assert "the node serves whole GPUs only" in messages[0]
    assert {_node_of(bed, ns, f"any-{i}") for i in range(3)} == {"m-t4", "m-v100", ""}

    # The label changes: the extender re-accounts at once, and the pod is placed there.
    bed.request(
        "PATCH",
        rest.path("nodes", "m-whole"),
        body={"metadata": {"labels": {modes.MODE_LABEL: "share"}}},
        content_type=rest.MERGE_PATCH,
    )
    # kube-scheduler requeues a pod only on events its rejecting plugins care about: when its own
    # NodeResourcesFit also refused the two full nodes (it had assumed the other pods by then), a label
    # change is not one, and the pod waits for the 5-minute flush. A new pod of the same name is judged now.
    waiting = next((f"any-{i}" for i in range(3) if not _node_of(bed, ns, f"any-{i}")), None)
    if waiting is not None:  # else kube-scheduler's retry already placed it
        bed.request("DELETE", rest.path("pods", waiting, ns), body={"gracePeriodSeconds": 0})
        bed.wait("the pending pod gone", lambda: waiting not in {p["metadata"]["name"] for p in bed.pods(ns)})
        bed.request("POST", create, body=_pod(waiting, 10))
    bed.wait(
        "the last pod bound to m-whole",
        lambda: "m-whole" in {_node_of(bed, ns, f"any-{i}") for i in range(3)},
        timeout=90,
    )
