"""The node's mode, MPS and isolation labels take effect live: the whole plugin (app.Plugin) against the API
stand-in, the kubelet stand-in reading ListAndWatch and calling Allocate over the real gRPC."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.deviceplugin.conftest import short_dir
from tests.standins.kubelet import Kubelet
from webhook.core.node import gpulabels, mps
from webhook.core.placement import annotations as ann
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.deviceplugin import app, nodemode
from webhook.deviceplugin.settings import DevicePluginSettings
from webhook.nodeagent import lifecycle

V100 = "0:16:Tesla V100-SXM2-16GB:7.0,1:16:Tesla V100-SXM2-16GB:7.0"
Start = Callable[..., tuple[app.Plugin, Kubelet]]


@pytest.fixture
def start(apiserver: ApiServer, tmp_path: Path) -> Iterator[Start]:
    running: list[tuple[app.Plugin, Kubelet]] = []

    def make(labels: dict[str, str], fake_gpus: str = V100, **settings: Any) -> tuple[app.Plugin, Kubelet]:
        apiserver.add_node("node-1", labels=labels)
        plugin_dir = short_dir(tmp_path)
        kubelet = Kubelet(plugin_dir).start()
        config = DevicePluginSettings(
            node_name="node-1",
            fake_gpus=fake_gpus,
            api_host=apiserver.url,
            device_plugin_dir=plugin_dir,
            endpoint="gpushare.sock",
            pod_resources_socket=None,
            **settings,
        )
        plugin = app.Plugin(config).start()
        running.append((plugin, kubelet))
        kubelet.wait(lambda k: k.messages >= 1, timeout=10)
        return plugin, kubelet

    yield make
    for plugin, kubelet in running:
        plugin.stop()
        kubelet.stop()


def _label(apiserver: ApiServer, **labels: str | None) -> None:
    apiserver.edit("nodes", "node-1", {"metadata": {"labels": labels}})


def _placed(
    apiserver: ApiServer, name: str, allocation: dict[int, dict[int, int]], **kw: Any
) -> dict[str, Any]:
    notes = {**ann.encode(ann.Placement(ann.Allocation(allocation), 16, 1)), **kw.pop("annotations", {})}
    units = [sum(gpus.values()) for _, gpus in sorted(allocation.items())]
    return apiserver.add_pod(name, gpu_mem=units, node_name="node-1", annotations=notes, **kw)


def _gpu_count(apiserver: ApiServer) -> tuple[str, str]:
    status = (apiserver.get("nodes", "node-1") or {}).get("status") or {}
    return (
        (status.get("capacity") or {}).get(resources.GPU_COUNT, ""),
        (status.get("allocatable") or {}).get(resources.GPU_COUNT, ""),
    )


def test_a_default_node_advertises_nothing_until_its_label_says_share(start, apiserver):
    _, kubelet = start({modes.MODE_LABEL: "default"})
    assert kubelet.devices == {}
    apiserver.wait_for(lambda: _gpu_count(apiserver) == ("0", "0"), what="gpu-count 0 on a default node")
    _label(apiserver, **{modes.MODE_LABEL: "share"})
    kubelet.wait(lambda k: len(k.healthy()) == 32)  # re-advertised, no restart
    apiserver.wait_for(lambda: _gpu_count(apiserver) == ("2", "2"), what="gpu-count back to 2")
    assert len(kubelet.registrations) == 1


def test_switching_to_default_stops_advertising_and_keeps_what_was_allocated(start, apiserver):
    plugin, kubelet = start({modes.MODE_LABEL: "cgpu"})
    kubelet.wait(lambda k: len(k.healthy()) == 32)
    pod = _placed(apiserver, "running", {0: {1: 4}})
    apiserver.wait_for(lambda: plugin.pods.snapshot()[1], what="the pod in the plugin's watch")
    (env,) = kubelet.admit(pod)
    assert env[resources.ENV_MEM_IDX] == "1"
    _label(apiserver, **{modes.MODE_LABEL: "default"})
    kubelet.wait(lambda k: k.devices == {})
    # The container keeps its GPU and the book its allocation: a switch back serves the same devices.
    assert plugin.allocator.book.progress[pod["metadata"]["uid"]] == 1
    _label(apiserver, **{modes.MODE_LABEL: "share"})
    kubelet.wait(lambda k: len(k.healthy()) == 32)
    assert kubelet.in_use[pod["metadata"]["uid"]]


def test_an_unknown_mode_advertises_nothing_and_says_why_in_the_log(start, apiserver, caplog):
    caplog.set_level(logging.WARNING, logger="webhook.deviceplugin.nodemode")
    _, kubelet = start({modes.MODE_LABEL: "shared"})
    assert kubelet.devices == {}
    assert any("ack.node.gpu.schedule='shared' is not a known mode" in r.getMessage() for r in caplog.records)


def test_mps_mode_gives_each_container_its_memory_limit_compute_share_and_mounts(start, apiserver):
    plugin, kubelet = start({modes.MODE_LABEL: "mps"})
    kubelet.wait(lambda k: len(k.healthy()) == 32)
    notes = {mps.COMPUTE_PERCENT_ANNOTATION: "30"}
    pod = _placed(apiserver, "mps", {0: {1: 4}, 1: {0: 2}}, annotations=notes)
    apiserver.wait_for(lambda: plugin.pods.snapshot()[1], what="the pod in the plugin's watch")
    first, second = kubelet.admit(pod)
    assert first[mps.ENV_MEM_LIMIT] == "0=4096MB"
    assert second[mps.ENV_MEM_LIMIT] == "0=2048MB"
    assert first[mps.ENV_THREAD_PERCENTAGE] == second[mps.ENV_THREAD_PERCENTAGE] == "30"
    assert first[mps.ENV_PIPE_DIRECTORY] == "/tmp/nvidia-mps"
    for response in kubelet.responses:
        assert [(m.container_path, m.host_path, m.read_only) for m in response.mounts] == [
            ("/tmp/nvidia-mps", "/tmp/nvidia-mps", False),
            ("/var/log/nvidia-mps", "/var/log/nvidia-mps", False),
        ]


def test_the_mps_flag_applies_mps_on_a_share_node_with_its_directories(start, apiserver):
    plugin, kubelet = start({}, force_mps=True, mps_pipe_dir="/run/mps", mps_log_dir="/run/mps-log")
    kubelet.wait(lambda k: len(k.healthy()) == 32)
    pod = _placed(apiserver, "flagged", {0: {0: 3}})
    apiserver.wait_for(lambda: plugin.pods.snapshot()[1], what="the pod in the plugin's watch")
    (env,) = kubelet.admit(pod)
    assert (env[mps.ENV_MEM_LIMIT], env[mps.ENV_PIPE_DIRECTORY]) == ("0=3072MB", "/run/mps")
    assert mps.ENV_THREAD_PERCENTAGE not in env  # no compute share asked: the MPS server's default
    assert [m.host_path for m in kubelet.responses[0].mounts] == ["/run/mps", "/run/mps-log"]


def test_a_wrong_compute_share_on_an_mps_node_fails_allocate_naming_the_annotation(start, apiserver):
    plugin, kubelet = start({modes.MODE_LABEL: "mps"})
    kubelet.wait(lambda k: len(k.healthy()) == 32)
    pod = _placed(apiserver, "greedy", {0: {0: 3}}, annotations={mps.COMPUTE_PERCENT_ANNOTATION: "150"})
    apiserver.wait_for(lambda: plugin.pods.snapshot()[1], what="the pod in the plugin's watch")
    with pytest.raises(grpc.RpcError) as caught:
        kubelet.admit(pod)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "gpushare.aliyun.com/compute-percent='150' must be a whole percent" in str(caught.value.details())


def test_mps_on_gpus_older_than_volta_advertises_nothing_and_share_still_works(start, apiserver, caplog):
    caplog.set_level(logging.WARNING, logger="webhook.deviceplugin.nodemode")
    _, kubelet = start({modes.MODE_LABEL: "mps"}, fake_gpus="0:16:Tesla P100-PCIE-16GB:6.0")
    assert kubelet.devices == {}
    assert any(
        "MPS needs Volta (compute capability 7.0) or newer: GPU 0 (Tesla P100-PCIE-16GB) has compute "
        "capability 6.0" in r.getMessage()
        for r in caplog.records
    )
    _label(apiserver, **{modes.MODE_LABEL: "share"})
    kubelet.wait(lambda k: len(k.healthy()) == 16)


def test_an_isolation_label_change_applies_to_the_next_container_without_restart(start, apiserver):
    plugin, kubelet = start({modes.MODE_LABEL: "cgpu", resources.ISOLATION_KEY: "false"})
    kubelet.wait(lambda k: len(k.healthy()) == 32)
    before = _placed(apiserver, "before", {0: {0: 2}})
    apiserver.wait_for(lambda: plugin.pods.snapshot()[1], what="the pod in the plugin's watch")
    (env_before,) = kubelet.admit(before)
    _label(apiserver, **{resources.ISOLATION_KEY: "true"})
    apiserver.wait_for(plugin.labels.isolation_disabled, what="the plugin to see the label")
    after = _placed(apiserver, "after", {0: {0: 2}})
    apiserver.wait_for(lambda: len(plugin.pods.snapshot()[1]) == 2, what="the second pod")
    (env_after,) = kubelet.admit(after)
    assert resources.CGPU_DISABLE_ENV not in env_before  # what it was given stays its own
    assert env_after[resources.CGPU_DISABLE_ENV] == "true"
    stored = ann.decode(apiserver.get("pods", "before", "default")["metadata"]["annotations"])
    assert stored is not None and stored.allocation == ann.Allocation({0: {0: 2}})


def test_the_plugin_labels_its_node_with_the_gpu_type_and_keeps_them_current(start, apiserver):
    _label_stale = {gpulabels.NVIDIA_NAME: "Tesla-P4", gpulabels.COMPUTE_CAPABILITY: "6.1"}
    start(_label_stale)
    expected = {
        gpulabels.NVIDIA_NAME: "Tesla-V100-SXM2-16GB",
        gpulabels.NVIDIA_MEM: "16384MiB",
        gpulabels.NVIDIA_COUNT: "2",
        gpulabels.ACCELERATOR: "nvidia-tesla-v100-sxm2-16gb",
        gpulabels.COMPUTE_CAPABILITY: "7.0",
    }

    def labels() -> dict[str, str]:
        found = apiserver.get("nodes", "node-1")["metadata"].get("labels") or {}
        return {k: v for k, v in found.items() if k in gpulabels.KEYS}

    apiserver.wait_for(lambda: labels() == expected, what="the GPU type labels rewritten")


def test_a_node_whose_gpus_are_gone_loses_its_gpu_type_labels(apiserver, tmp_path):
    apiserver.add_node("node-1", labels={gpulabels.NVIDIA_NAME: "Tesla-T4", "keep": "me"})
    inventory = tmp_path / "gpus.yaml"
    inventory.write_text("gpus: []\n")
    settings = DevicePluginSettings(node_name="node-1", inventory_file=inventory, api_host=apiserver.url)
    with pytest.raises(lifecycle.StartError, match="expected 'gpus:"):
        app.Plugin(settings)
    assert apiserver.get("nodes", "node-1")["metadata"]["labels"] == {"keep": "me"}


def test_a_dra_node_advertises_nothing_and_names_the_dra_driver():
    serving = nodemode.decide({modes.MODE_LABEL: "dra"}, (), force_mps=False)
    assert not serving.serves
    assert "our DRA driver serves the GPUs here" in serving.reason
