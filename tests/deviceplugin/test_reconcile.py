"""Reconciling with the kubelet's PodResources List: when a container got another pod's GPU (the
kubelet admitted equal-count pods out of arrival order while PodResources was unreachable), the
annotations are corrected to the GPU the container really uses, and counted by resource: gpu-mem
and whole cards alike."""

from __future__ import annotations

import json

import pytest

from tests.deviceplugin.conftest import pod_resources_socket, short_dir
from tests.deviceplugin.placed import card_pod, placed_pod
from tests.standins.kubelet import Kubelet
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.deviceplugin import app
from webhook.deviceplugin.settings import DevicePluginSettings


@pytest.fixture
def node(apiserver, tmp_path):
    apiserver.add_node("node-1")
    kubelet = Kubelet(short_dir(tmp_path), also=(CARDS,)).start()  # PodResources not served yet
    settings = DevicePluginSettings(
        node_name="node-1",
        fake_gpus="0:16,1:16",
        api_host=apiserver.url,
        device_plugin_dir=short_dir(tmp_path),
        endpoint="gpushare.sock",
        pod_resources_socket=pod_resources_socket(tmp_path),
        reconcile_s=3600,
    )
    plugin = app.Plugin(settings).start()
    try:
        kubelet.wait(lambda k: len(k.devices) == 32 and len(k.resource(CARDS).devices) == 2)
        yield apiserver, plugin, kubelet, tmp_path
    finally:
        plugin.stop()
        kubelet.stop()


CARDS = resources.NVIDIA_GPU


def _metric(plugin, name, **labels):
    return plugin.metrics.registry.get_sample_value(f"gpushare_device_plugin_{name}", labels)


def _idx(apiserver, name):
    return apiserver.get("pods", name, "default")["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"]


def test_a_swapped_container_gets_its_annotations_corrected_and_counted(node):
    apiserver, plugin, kubelet, tmp_path = node
    a = apiserver.put(placed_pod("a", [4], {0: {0: 4}}, assume=1))
    b = apiserver.put(placed_pod("b", [4], {0: {1: 4}}, assume=2))
    apiserver.wait_for(lambda: len(plugin.pods.snapshot()[1]) == 2, what="the plugin's watch")
    env_b = kubelet.admit(b)[0]  # out of arrival order, and the plugin cannot ask the kubelet
    env_a = kubelet.admit(a)[0]
    assert (env_a["ALIYUN_COM_GPU_MEM_IDX"], env_b["ALIYUN_COM_GPU_MEM_IDX"]) == ("1", "0")
    assert plugin.reconciler is not None
    assert not plugin.reconciler.run_once()  # PodResources still unreachable: nothing to compare
    kubelet.serve_pod_resources(pod_resources_socket(tmp_path))
    assert plugin.reconciler.run_once()
    assert (_idx(apiserver, "a"), _idx(apiserver, "b")) == ("1", "0")
    stored = apiserver.get("pods", "b", "default")["metadata"]["annotations"]
    assert json.loads(stored["scheduler.framework.gpushare.allocation"]) == {"0": {"0": 4}}
    placement = ann.decode(stored)
    assert placement is not None and placement.device_memory == 16
    assert plugin.reconciler.corrections == 2
    assert _metric(plugin, "annotation_corrections_total", resource=resources.GPU_MEMORY) == 2
    assert _metric(plugin, "annotation_corrections_total", resource=CARDS) == 0
    # Once the watch shows the corrected annotations, there is nothing left to correct.
    apiserver.wait_for(
        lambda: all(
            v.placement is not None and v.placement.gpu_indexes == ((1,) if v.name == "a" else (0,))
            for v in plugin.pods.snapshot()[1]
        ),
        what="the corrected annotations in the watch",
    )
    assert plugin.reconciler.run_once()
    assert plugin.reconciler.corrections == 2


def test_with_pod_resources_the_batch_needs_no_correction(node):
    apiserver, plugin, kubelet, tmp_path = node
    kubelet.serve_pod_resources(pod_resources_socket(tmp_path))
    a = apiserver.put(placed_pod("a", [4], {0: {0: 4}}, assume=1))
    b = apiserver.put(placed_pod("b", [4], {0: {1: 4}}, assume=2))
    apiserver.wait_for(lambda: len(plugin.pods.snapshot()[1]) == 2, what="the plugin's watch")
    env_b, env_a = kubelet.admit(b)[0], kubelet.admit(a)[0]
    assert (env_a["ALIYUN_COM_GPU_MEM_IDX"], env_b["ALIYUN_COM_GPU_MEM_IDX"]) == ("0", "1")
    assert plugin.reconciler is not None and plugin.reconciler.run_once()
    assert plugin.reconciler.corrections == 0
    assert (_idx(apiserver, "a"), _idx(apiserver, "b")) == ("0", "1")


def test_a_swapped_whole_card_container_gets_its_annotations_corrected_and_counted_as_cards(node):
    apiserver, plugin, kubelet, tmp_path = node
    a = apiserver.put(card_pod("a", {0: {0: 16}}, assume=1))
    b = apiserver.put(card_pod("b", {0: {1: 16}}, assume=2))
    apiserver.wait_for(lambda: len(plugin.card_pods.snapshot()[1]) == 2, what="the plugin's watch")
    cards = kubelet.resource(CARDS)
    env_b = cards.admit(b)[0]  # out of arrival order, and the plugin cannot ask the kubelet
    env_a = cards.admit(a)[0]
    assert (env_a[resources.ENV_MEM_IDX], env_b[resources.ENV_MEM_IDX]) == ("1", "0")
    assert plugin.reconciler is not None
    kubelet.serve_pod_resources(pod_resources_socket(tmp_path))
    assert plugin.reconciler.run_once()
    assert (_idx(apiserver, "a"), _idx(apiserver, "b")) == ("1", "0")
    stored = apiserver.get("pods", "b", "default")["metadata"]["annotations"]
    assert json.loads(stored["scheduler.framework.gpushare.allocation"]) == {"0": {"0": 16}}
    assert _metric(plugin, "annotation_corrections_total", resource=CARDS) == 2
    assert _metric(plugin, "annotation_corrections_total", resource=resources.GPU_MEMORY) == 0
    assert _metric(plugin, "allocations_total", resource=CARDS, result="ok") == 2
    assert _metric(plugin, "allocations_total", resource=resources.GPU_MEMORY, result="ok") == 0
    assert _metric(plugin, "allocate_seconds_count", resource=CARDS) == 2
