"""Whole cards end to end: kube-scheduler and the extender place a card pod beside a share on the real API
server, and the device plugin's whole-card endpoint (the kubelet emulator speaking its gRPC, with the
PodResources API) gives the container exactly the GPU its placement names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e import objects
from tests.e2e.bed import Bed
from tests.standins.kubelet import Kubelet
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.kube import rest

NODE = "cards-dp-node"
GROUP = "cards-dp"


def _bound(bed: Bed, ns: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = bed.request("GET", rest.path("pods", name, ns))
    return pod if pod["spec"].get("nodeName") else None


def _create(bed: Bed, ns: str, body: dict[str, Any]) -> None:
    bed.request("POST", rest.path("pods", namespace=ns), body=objects.in_group(body, GROUP))


def test_the_plugin_gives_a_scheduled_whole_card_pod_its_placed_gpu_beside_a_share(
    bed: Bed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ns = bed.namespace("e2e-device-cards")
    bed.node(NODE, 2, 16, labels={resources.ISOLATION_KEY: "false"}, group=GROUP)
    # The emulator reports nothing to the API server: write the capacity a kubelet would from our lists.
    node = bed.request("GET", rest.path("nodes", NODE))
    for key in ("capacity", "allocatable"):
        node["status"][key][resources.NVIDIA_GPU] = "2"
    bed.request("PUT", rest.path("nodes", NODE) + "/status", body=node)
    folder: Path = tmp_path_factory.mktemp("dpc")
    kubelet = Kubelet(folder / "dp", pod_resources=folder / "pr.sock", also=(resources.NVIDIA_GPU,)).start()
    cards = kubelet.resource(resources.NVIDIA_GPU)
    try:
        bed.start_device_plugin(
            NODE, folder / "dp", "0:16,1:16", extra=("--pod-resources-socket", str(folder / "pr.sock"))
        )
        kubelet.wait(lambda k: len(k.healthy()) == 32 and len(cards.healthy()) == 2, timeout=30)
        stored = bed.wait(
            "the devices annotation",
            lambda: (
                bed.request("GET", rest.path("nodes", NODE))["metadata"]
                .get("annotations", {})
                .get(resources.NODE_DEVICES_ANNOTATION)
            ),
        )
        uuids = {d.index: d.uuid for d in ann.NodeDevices.from_json(stored).devices}
        assert sorted(cards.healthy()) == sorted(uuids.values())  # one card per GPU, named by its UUID

        _create(bed, ns, objects.gpu_pod("share", 4))
        share = bed.wait("the share bound", lambda: _bound(bed, ns, "share"))
        kubelet.admit(share)
        card_body = objects.pod("card", objects.container("train", limits={resources.NVIDIA_GPU: "1"}))
        _create(bed, ns, card_body)
        card = bed.wait("the card bound", lambda: _bound(bed, ns, "card"))
        placed = ann.decode(card["metadata"]["annotations"])
        assert placed is not None
        (gpu,) = placed.gpu_indexes
        share_placed = ann.decode(share["metadata"]["annotations"])
        assert share_placed is not None and gpu not in share_placed.gpu_indexes

        (env,) = cards.admit(card)
        assert env[resources.ENV_VISIBLE_DEVICES] == uuids[gpu]
        assert env[resources.ENV_MEM_IDX] == str(gpu)
        assert cards.in_use[card["metadata"]["uid"]] == {uuids[gpu]}  # the kubelet took our advice
        bed.wait(
            "ALIYUN_COM_GPU_MEM_ASSIGNED=true on the card pod",
            lambda: (
                bed.request("GET", rest.path("pods", "card", ns))["metadata"]["annotations"].get(
                    resources.ANN_MEM_ASSIGNED
                )
                == "true"
            ),
        )
    finally:
        kubelet.stop()
