"""Allocate names each GPU it hands out as the CDI device of the node's NVIDIA toolkit spec: the whole plugin
(app.Plugin) against the API stand-in, the kubelet stand-in calling Allocate over the real gRPC, a
toolkit-shaped spec in a CDI folder of the test's own. Shares, whole cards, a pod split over GPUs, init
containers and MPS; the env fallback, the forced strategy's refusal, a spec that appears later, and what
the plugin shows on its Node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from tests.deviceplugin.conftest import CARDS, Start
from tests.deviceplugin.placed import card_pod, placed_pod
from tests.standins.kubelet import Kubelet
from webhook.core.node import mps
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.devcluster import toolkitcdi
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.deviceplugin import app
from webhook.deviceplugin.v1beta1 import api_pb2
from webhook.gpus import inventory
from webhook.gpus.toolkitspecs import DeliverySettings

V100 = ",".join(f"{i}:16:Tesla V100-SXM2-16GB:7.0" for i in range(3))
GPUS = inventory.parse_fake_gpus(V100).gpus()  # the UUIDs of whole_plugin's fake GPUs too


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "cdi"
    path.mkdir()
    return path


def _write_spec(folder: Path, names: tuple[str, ...] = ("index", "uuid")) -> None:
    spec = toolkitcdi.spec(GPUS, "/usr/lib/libnvidia-ml.so.1", names)
    (folder / toolkitcdi.FILE_NAME).write_text(yaml.safe_dump(spec))


def _cdi(response: api_pb2.ContainerAllocateResponse) -> list[str]:
    return [d.name for d in response.cdi_devices]


def _start(start: Start, folder: Path, strategy: str = "auto", **kw: Any) -> tuple[app.Plugin, Kubelet]:
    return start(delivery=DeliverySettings(strategy, (folder,)), **kw)


def _uuid(plugin: app.Plugin, index: int) -> str:
    return plugin.state.gpus[index].uuid


def _device_list(apiserver: ApiServer) -> str | None:
    notes = (apiserver.get("nodes", "node-1") or {})["metadata"].get("annotations") or {}
    found = notes.get(resources.NODE_DEVICE_LIST_ANNOTATION)
    return str(found) if found is not None else None


def _seen(apiserver: ApiServer, plugin: app.Plugin, count: int) -> None:
    apiserver.wait_for(lambda: len(plugin.pods.snapshot()[1]) == count, what="gpu-mem pods in the watch")


def test_a_share_gets_the_cdi_device_of_its_gpu_and_the_env_names_that_device(
    whole_plugin: Start, apiserver: ApiServer, folder: Path
) -> None:
    _write_spec(folder)
    plugin, kubelet = _start(whole_plugin, folder)
    pod = apiserver.put(placed_pod("share", [4], {0: {1: 4}}))
    _seen(apiserver, plugin, 1)
    (env,) = kubelet.admit(pod)
    assert _cdi(kubelet.responses[-1]) == [f"nvidia.com/gpu={_uuid(plugin, 1)}"]
    assert env[resources.ENV_VISIBLE_DEVICES] == f"nvidia.com/gpu={_uuid(plugin, 1)}"
    assert (env[resources.ENV_MEM_IDX], env[resources.ENV_MEM_CONTAINER]) == ("1", "4")
    apiserver.wait_for(lambda: _device_list(apiserver) == "cdi-cri", what="the Node's device-list annotation")
    assert plugin.metrics.registry.get_sample_value("gpushare_device_list", {"mode": "cdi-cri"}) == 1


def test_a_pod_split_over_two_gpus_and_its_init_container_get_their_gpus_devices(
    whole_plugin: Start, apiserver: ApiServer, folder: Path
) -> None:
    _write_spec(folder, names=("index",))
    plugin, kubelet = _start(whole_plugin, folder)
    pod = placed_pod("split", [8], {0: {0: 4, 2: 4}}, init_gpu_mem=[8])
    pod["metadata"]["labels"] = {resources.GPU_COUNT: "2"}
    apiserver.put(pod)
    _seen(apiserver, plugin, 1)
    init_env, app_env = kubelet.admit(pod)
    assert [_cdi(r) for r in kubelet.responses[-2:]] == [["nvidia.com/gpu=0", "nvidia.com/gpu=2"]] * 2
    assert init_env[resources.ENV_MEM_IDX] == app_env[resources.ENV_MEM_IDX] == "0,2"


def test_a_whole_card_gets_the_cdi_device_of_the_gpu_it_was_placed_on(
    whole_plugin: Start, apiserver: ApiServer, folder: Path
) -> None:
    _write_spec(folder)
    plugin, kubelet = _start(whole_plugin, folder)
    cards = kubelet.resource(CARDS)
    pod = apiserver.put(card_pod("card", {0: {2: 16}}))
    apiserver.wait_for(lambda: len(plugin.card_pods.snapshot()[1]) == 1, what="the card pod in the watch")
    (env,) = cards.admit(pod)
    assert _cdi(cards.responses[-1]) == [f"nvidia.com/gpu={_uuid(plugin, 2)}"]
    assert env[resources.ENV_MEM_IDX] == "2"
    assert env[resources.ENV_VISIBLE_DEVICES] == f"nvidia.com/gpu={_uuid(plugin, 2)}"


def test_an_mps_container_gets_its_gpu_device_beside_the_mps_env_and_folders(
    whole_plugin: Start, apiserver: ApiServer, folder: Path
) -> None:
    _write_spec(folder)
    plugin, kubelet = _start(whole_plugin, folder, labels={modes.MODE_LABEL: "mps"}, fake_gpus=V100)
    apiserver.wait_for(lambda: plugin.mode.mps_dirs() is not None, what="the mps mode read")
    pod = apiserver.put(placed_pod("mps", [6], {0: {0: 6}}))
    _seen(apiserver, plugin, 1)
    (env,) = kubelet.admit(pod)
    response = kubelet.responses[-1]
    assert _cdi(response) == [f"nvidia.com/gpu={_uuid(plugin, 0)}"]
    assert env[mps.ENV_MEM_LIMIT] == "0=6144MB"
    assert {m.container_path for m in response.mounts} == {
        mps.DEFAULT_PIPE_DIRECTORY,
        mps.DEFAULT_LOG_DIRECTORY,
    }


def test_without_a_spec_auto_hands_out_the_env_and_says_so_on_the_node(
    whole_plugin: Start, apiserver: ApiServer, folder: Path
) -> None:
    plugin, kubelet = _start(whole_plugin, folder)
    pod = apiserver.put(placed_pod("env", [4], {0: {0: 4}}))
    _seen(apiserver, plugin, 1)
    (env,) = kubelet.admit(pod)
    assert _cdi(kubelet.responses[-1]) == []
    assert env[resources.ENV_VISIBLE_DEVICES] == _uuid(plugin, 0)
    apiserver.wait_for(lambda: _device_list(apiserver) == "envvar", what="device-list envvar on the Node")


def test_a_spec_the_toolkit_writes_after_the_plugin_started_is_used_from_the_next_allocate(
    whole_plugin: Start, apiserver: ApiServer, folder: Path
) -> None:
    plugin, kubelet = _start(whole_plugin, folder)
    apiserver.wait_for(lambda: _device_list(apiserver) == "envvar", what="device-list envvar on the Node")
    _write_spec(folder, names=("uuid",))
    pod = apiserver.put(placed_pod("later", [4], {0: {1: 4}}))
    _seen(apiserver, plugin, 1)
    kubelet.admit(pod)
    assert _cdi(kubelet.responses[-1]) == [f"nvidia.com/gpu={_uuid(plugin, 1)}"]
    apiserver.wait_for(lambda: _device_list(apiserver) == "cdi-cri", what="device-list cdi-cri on the Node")


def test_forced_cdi_without_a_spec_refuses_the_pod_naming_gpu_kind_and_folder(
    whole_plugin: Start, apiserver: ApiServer, folder: Path
) -> None:
    plugin, kubelet = _start(whole_plugin, folder, strategy="cdi-cri")
    pod = apiserver.put(placed_pod("forced", [4], {0: {1: 4}}))
    _seen(apiserver, plugin, 1)
    with pytest.raises(grpc.RpcError) as caught:
        kubelet.admit(pod)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert str(caught.value.details()).startswith(
        "gpushare: cannot allocate 4 GiB of aliyun.com/gpu-mem on node node-1: "
        f"GPU 1 ({_uuid(plugin, 1)}) is not a CDI device of kind nvidia.com/gpu in the specs read from "
        f"{folder} (device-list strategy cdi-cri)"
    )
    # Refused, not half-done: the same pod is refused again rather than matched to a later request.
    assert plugin.allocator.book.progress.get("uid-forced", 0) == 0


def test_both_hands_out_the_env_and_the_devices(
    whole_plugin: Start, apiserver: ApiServer, folder: Path
) -> None:
    _write_spec(folder)
    plugin, kubelet = _start(whole_plugin, folder, strategy="both")
    pod = apiserver.put(placed_pod("both", [4], {0: {2: 4}}))
    _seen(apiserver, plugin, 1)
    (env,) = kubelet.admit(pod)
    assert _cdi(kubelet.responses[-1]) == [f"nvidia.com/gpu={_uuid(plugin, 2)}"]
    assert env[resources.ENV_VISIBLE_DEVICES] == _uuid(plugin, 2)
