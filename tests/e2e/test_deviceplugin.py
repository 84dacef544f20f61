"""The device plugin (fake GPUs, the kubelet emulator speaking its gRPC) reads pods from the real API
server and gives each container the GPU the extender chose there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e import objects
from tests.e2e.bed import Bed
from tests.standins.kubelet import Kubelet
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.kube import rest


def test_allocate_follows_the_extenders_placement_and_annotations_end_as_documented(
    bed: Bed, tmp_path_factory: Any
) -> None:
    ns = bed.namespace("e2e-device")
    node = "dp-node-0"
    bed.node(node, 2, 16, labels={"cgpu.disable.isolation": "false"}, group="device")
    plugin_dir: Path = tmp_path_factory.mktemp("dp")
    kubelet = Kubelet(plugin_dir).start()
    try:
        bed.start_device_plugin(node, plugin_dir, "0:16,1:16")
        kubelet.wait(lambda k: len(k.healthy()) == 32, timeout=30)
        # The plugin publishes its GPUs on its own Node, with the chart's RBAC.
        stored = bed.wait(
            "the devices annotation",
            lambda: (
                bed.request("GET", rest.path("nodes", node))["metadata"]
                .get("annotations", {})
                .get(resources.NODE_DEVICES_ANNOTATION)
            ),
        )
        devices = ann.NodeDevices.from_json(stored)
        assert [(d.index, d.memory) for d in devices.devices] == [(0, 16), (1, 16)]

        bodies = []
        for name, gib in (("big", 12), ("small", 6)):
            body = objects.gpu_pod(name, gib)
            objects.in_group(body, "device")
            bodies.append(bed.request("POST", rest.path("pods", namespace=ns), body=body))
        pods = bed.wait(
            "both bound",
            lambda: all(p["spec"].get("nodeName") for p in bed.pods(ns)) and bed.pods(ns),
        )
        for pod in pods:
            placed = ann.decode(pod["metadata"]["annotations"])
            assert placed is not None
            (envs,) = kubelet.admit(pod)
            assert envs[resources.ENV_MEM_IDX] == str(placed.gpu_indexes[0])
            assert envs[resources.ENV_MEM_CONTAINER] == str(placed.pod_total)
            assert envs[resources.ENV_MEM_DEV] == "16"
        # 12 + 6 > 16: the two pods are on different GPUs, and each container was told its own.
        assert len({ann.decode(p["metadata"]["annotations"]).gpu_indexes for p in pods}) == 2  # type: ignore[union-attr]

        def assigned() -> bool:
            return all(
                p["metadata"]["annotations"].get(resources.ANN_MEM_ASSIGNED) == "true" for p in bed.pods(ns)
            )

        bed.wait("ALIYUN_COM_GPU_MEM_ASSIGNED=true on both", assigned)
        for pod in bed.pods(ns):
            allocation = json.loads(pod["metadata"]["annotations"][resources.ANN_ALLOCATION])
            assert allocation  # the per-container truth stays beside the legacy keys
    finally:
        kubelet.stop()
