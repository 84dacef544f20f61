"""Whole cards beside shares with the real kube-scheduler: the chart's configuration sends pods asking
`nvidia.com/gpu` to the extender too, which keeps them off GPUs holding shares on shared nodes and passes
them through on `default` nodes (NVIDIA's plugin serves those)."""

from __future__ import annotations

from typing import Any

from tests.e2e import objects, placement
from tests.e2e.bed import Bed
from webhook.core.placement import annotations as ann
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.kube import rest

ISOLATION = {"cgpu.disable.isolation": "false"}


def _node(bed: Bed, name: str, group: str, labels: dict[str, str], *, cards: int, gpu_mem: int) -> None:
    """A node whose kubelet reports `cards` whole GPUs (nvidia.com/gpu) and `gpu_mem` GiB of shares."""
    bed.node(name, cards, 16, labels=labels, group=group)
    node = bed.request("GET", rest.path("nodes", name))
    for key in ("capacity", "allocatable"):
        node["status"][key][resources.NVIDIA_GPU] = str(cards)
        node["status"][key][resources.GPU_MEMORY] = str(gpu_mem)
    bed.request("PUT", rest.path("nodes", name) + "/status", body=node)


def _cards(name: str, count: int, group: str) -> dict[str, Any]:
    body = objects.pod(name, objects.container("train", limits={resources.NVIDIA_GPU: str(count)}))
    return objects.in_group(body, group)


def _share(name: str, gib: int, group: str) -> dict[str, Any]:
    return objects.in_group(objects.gpu_pod(name, gib), group)


def _create(bed: Bed, ns: str, body: dict[str, Any]) -> None:
    bed.request("POST", rest.path("pods", namespace=ns), body=body)


def _bound(bed: Bed, ns: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = bed.request("GET", rest.path("pods", name, ns))
    return pod if pod["spec"].get("nodeName") else None


def _gpus(pod: dict[str, Any]) -> set[int]:
    placed = ann.decode(pod["metadata"].get("annotations"))
    assert placed is not None, f"{pod['metadata']['name']} has no placement"
    return set(placed.allocation.gpus())


def test_whole_cards_and_shares_never_share_a_gpu_and_a_full_node_keeps_the_card_pending(bed: Bed) -> None:
    ns = bed.namespace("e2e-cards")
    _node(bed, "cards-node", "cards", ISOLATION, cards=2, gpu_mem=32)
    _create(bed, ns, _share("share-a", 4, "cards"))
    share_a = bed.wait("the first share bound", lambda: _bound(bed, ns, "share-a"))
    _create(bed, ns, _cards("card", 1, "cards"))
    card = bed.wait("the whole card bound", lambda: _bound(bed, ns, "card"))
    assert card["spec"]["schedulerName"] == "gpushare-scheduler"  # the webhook routed it to the extender
    notes = card["metadata"]["annotations"]
    assert notes[resources.ANN_MEM_POD] == "16" and notes[resources.ANN_MEM_ASSIGNED] == "false"
    assert _gpus(card).isdisjoint(_gpus(share_a))
    # A second share fits only beside the first: the card's GPU is full.
    _create(bed, ns, _share("share-b", 8, "cards"))
    share_b = bed.wait("the second share bound", lambda: _bound(bed, ns, "share-b"))
    assert _gpus(share_b) == _gpus(share_a)
    # The scheduler still counts one free nvidia.com/gpu, but no GPU holds nothing: only we can tell.
    _create(bed, ns, _cards("second-card", 1, "cards"))

    def failed() -> list[str]:
        return [e["message"] for e in bed.events(ns, "second-card") if e["reason"] == "FailedScheduling"]

    messages = bed.wait("a FailedScheduling event for the second card", failed)
    assert any("pod asks for 1 whole GPU, 0 of the node's 2 healthy GPUs hold nothing" in m for m in messages)
    assert _bound(bed, ns, "second-card") is None
    placement.check_invariant([p for p in bed.pods(ns) if p["spec"].get("nodeName")], {"cards-node": 16})


def test_a_whole_card_pod_on_a_default_node_binds_without_our_annotations(bed: Bed) -> None:
    ns = bed.namespace("e2e-cards-default")
    _node(bed, "nvidia-node", "nvidia", {modes.MODE_LABEL: "default"}, cards=2, gpu_mem=0)
    _create(bed, ns, _cards("train", 2, "nvidia"))
    pod = bed.wait("the pod bound", lambda: _bound(bed, ns, "train"))
    assert pod["spec"]["nodeName"] == "nvidia-node"
    notes = pod["metadata"].get("annotations") or {}
    assert ann.decode(notes) is None
    assert not any(key.startswith("ALIYUN_COM_GPU_MEM") for key in notes)
