"""A pod whose placement annotations cannot be used is refused on its own: the pod store keeps every
other pod, the plugin stays ready, and no container gets a GPU or memory its placement does not hold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.deviceplugin.conftest import pod_resources_socket, short_dir
from tests.deviceplugin.placed import placed_pod
from tests.standins.kubelet import Kubelet
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.deviceplugin import app, podsource
from webhook.deviceplugin.settings import DevicePluginSettings

DEEP = "[" * 1500  # past the interpreter's recursion limit for json.loads


def _deep_pod(name: str) -> dict[str, Any]:
    pod = placed_pod(name, [1], None)
    pod["metadata"]["annotations"] = {resources.ANN_ALLOCATION: DEEP}
    return pod


def test_the_pod_store_keeps_every_pod_beside_one_nested_too_deeply():
    store = podsource.PodStore()
    good = [placed_pod("good1", [4], {0: {0: 4}}), placed_pod("good2", [4], {0: {1: 4}})]
    store.resync([good[0], _deep_pod("bad"), good[1]])
    assert store.synced.is_set()
    views = {v.name: v for v in store.snapshot()[1]}
    assert sorted(views) == ["bad", "good1", "good2"]
    assert views["good1"].problem is None and views["good2"].problem is None
    assert "malformed placement" in str(views["bad"].problem)
    assert "nested too deeply" in str(views["bad"].problem)


@pytest.fixture
def plugin_with(apiserver: ApiServer, tmp_path: Path) -> Iterator[tuple[app.Plugin, Kubelet]]:
    apiserver.add_node("node-1")
    apiserver.put(_deep_pod("bad"))
    apiserver.put(placed_pod("good", [4], {0: {1: 4}}))
    plugin_dir = short_dir(tmp_path)
    kubelet = Kubelet(plugin_dir, pod_resources=pod_resources_socket(tmp_path), also=(resources.NVIDIA_GPU,))
    kubelet.start()
    settings = DevicePluginSettings(
        node_name="node-1",
        fake_gpus="0:16,1:16",
        api_host=apiserver.url,
        device_plugin_dir=plugin_dir,
        endpoint="gpushare.sock",
        pod_resources_socket=pod_resources_socket(tmp_path),
        allocate_wait_s=0.3,
    )
    plugin = app.Plugin(settings).start()
    try:
        yield plugin, kubelet
    finally:
        plugin.stop()
        kubelet.stop()


def test_a_pod_nested_too_deeply_is_refused_and_the_plugin_serves_the_others(apiserver, plugin_with):
    plugin, kubelet = plugin_with
    kubelet.wait(lambda k: len(k.devices) == 32, timeout=10)
    apiserver.wait_for(plugin.ready, what="the plugin ready (registered, pods synced)")
    assert sorted(v.name for v in plugin.pods.snapshot()[1]) == ["bad", "good"]

    good = apiserver.get("pods", "good", namespace="default")
    assert kubelet.admit(good)[0][resources.ENV_MEM_IDX] == "1"
    with pytest.raises(grpc.RpcError) as caught:
        kubelet.admit(apiserver.get("pods", "bad", namespace="default"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "pod default/bad malformed placement" in str(caught.value.details())
    assert "nested too deeply" in str(caught.value.details())
    assert plugin.ready()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"0":{"0":4,"1":0}}', "gives container index 0 0 units on GPU 1"),
        ('{"0":{"0":4},"7":{"1":9}}', "entry for container index 7, but the pod has 1 container(s)"),
    ],
    ids=["zero-units", "unknown-container-index"],
)
def test_a_placement_entry_no_container_asks_for_is_refused_not_put_in_the_env(
    make_plugin, kubelet, text, needle
):
    plugin = make_plugin()
    kubelet.wait(lambda k: len(k.devices) == 32)
    pod = placed_pod("odd", [4], {0: {0: 4}})
    pod["metadata"]["annotations"][resources.ANN_ALLOCATION] = text
    good = placed_pod("good", [2], {0: {1: 2}}, assume=2)
    plugin.pods.set([pod, good])
    with pytest.raises(grpc.RpcError) as caught:
        kubelet.admit(pod)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "pod default/odd malformed placement" in str(caught.value.details())
    assert needle in str(caught.value.details())
    assert kubelet.admit(good) == [
        {
            resources.ENV_MEM_IDX: "1",
            resources.ENV_MEM_POD: "2",
            resources.ENV_MEM_CONTAINER: "2",
            resources.ENV_MEM_DEV: "16",
            resources.ENV_VISIBLE_DEVICES: plugin.state.gpus[1].uuid,
        }
    ]
