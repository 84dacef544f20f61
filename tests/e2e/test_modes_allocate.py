"""Each sharing mode end to end: nodes labelled `share`, `cgpu` and `mps`, each with its own device plugin
(fake GPUs, the kubelet emulator speaking its gRPC); pods placed by the real kube-scheduler and our
extender through the real API server, then admitted: each container's Allocate answer carries what its
node's mode promises (docs/modes.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e import objects
from tests.e2e.bed import Bed
from tests.standins.kubelet import Kubelet
from webhook.core.node import mps
from webhook.core.placement import annotations as ann
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.kube import rest

GROUP = "modes-allocate"
NODE_KEY = "e2e-modes-node"
# Volta (7.0) so MPS may run; the same cards everywhere, so only the mode differs.
GPUS = "0:16:Tesla V100-SXM2-16GB:7.0,1:16:Tesla V100-SXM2-16GB:7.0"


def _pod(name: str, node: str, gib: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    body = objects.gpu_pod(name, gib, annotations=annotations)
    objects.in_group(body, GROUP)
    body["spec"]["nodeSelector"][NODE_KEY] = node
    return body


def test_share_cgpu_and_mps_nodes_each_give_what_their_mode_promises(
    bed: Bed, tmp_path_factory: pytest.TempPathFactory
) -> None:
    ns = bed.namespace("e2e-modes-allocate")
    kubelets: dict[str, Kubelet] = {}
    try:
        for mode in (modes.Mode.SHARE, modes.Mode.CGPU, modes.Mode.MPS):
            node = f"mode-{mode.value}"
            labels = {modes.MODE_LABEL: mode.value, resources.ISOLATION_KEY: "false", NODE_KEY: node}
            bed.node(node, 2, 16, labels=labels, group=GROUP)
            plugin_dir: Path = tmp_path_factory.mktemp(f"dp-{mode.value}")
            kubelets[node] = Kubelet(plugin_dir).start()
            bed.start_device_plugin(node, plugin_dir, GPUS)
        for kubelet in kubelets.values():
            kubelet.wait(lambda k: len(k.healthy()) == 32, timeout=30)

        percent = {mps.COMPUTE_PERCENT_ANNOTATION: "30"}
        for body in (
            _pod("on-share", "mode-share", 6),
            _pod("on-cgpu", "mode-cgpu", 6),
            _pod("on-mps", "mode-mps", 6, annotations=percent),
        ):
            bed.request("POST", rest.path("pods", namespace=ns), body=body)

        def bound() -> list[dict[str, Any]] | None:
            found = bed.pods(ns)
            return found if len(found) == 3 and all(p["spec"].get("nodeName") for p in found) else None

        pods = bed.wait("all three bound by kube-scheduler and the extender", bound)
        answers: dict[str, tuple[dict[str, str], Any]] = {}
        for pod in pods:
            node = pod["spec"]["nodeName"]
            kubelet = kubelets[node]
            (envs,) = kubelet.admit(pod)
            answers[node] = (envs, kubelet.responses[-1])
            placed = ann.decode(pod["metadata"]["annotations"])
            assert placed is not None
            assert envs[resources.ENV_MEM_IDX] == str(placed.gpu_indexes[0])
            assert envs[resources.ENV_MEM_CONTAINER] == "6"

        for node in ("mode-share", "mode-cgpu"):
            envs, response = answers[node]
            assert not any(key.startswith("CUDA_MPS_") for key in envs), node
            assert not response.mounts, node
        # cgpu with the node's isolation on: the container is not told to turn it off.
        assert answers["mode-cgpu"][0].get(resources.CGPU_DISABLE_ENV, "false") == "false"

        envs, response = answers["mode-mps"]
        # 6 GiB pinned on the container's only GPU (ordinal 0 of what it sees), 30% of the SMs.
        assert envs[mps.ENV_MEM_LIMIT] == "0=6144MB"
        assert envs[mps.ENV_THREAD_PERCENTAGE] == "30"
        assert envs[mps.ENV_PIPE_DIRECTORY] == mps.DEFAULT_PIPE_DIRECTORY
        assert {m.container_path for m in response.mounts} == {
            mps.DEFAULT_PIPE_DIRECTORY,
            mps.DEFAULT_LOG_DIRECTORY,
        }
    finally:
        for kubelet in kubelets.values():
            kubelet.stop()
