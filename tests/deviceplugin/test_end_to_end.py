"""The whole plugin (app.Plugin) against the API stand-in and the kubelet stand-in, with pods bound by
the extender's binder: each container gets the GPU its pod was placed on."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.deviceplugin.conftest import short_dir
from tests.standins.kubelet import Kubelet
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.deviceplugin import app
from webhook.deviceplugin.settings import DevicePluginSettings
from webhook.extender.service import Extender
from webhook.extender.settings import ExtenderSettings
from webhook.extender.wire import BindingArgs
from webhook.kube import rest, watch


@pytest.fixture
def cluster(apiserver, tmp_path):
    apiserver.add_node("node-1", labels={"cgpu.disable.isolation": "false"})
    plugin_dir = short_dir(tmp_path)
    kubelet = Kubelet(plugin_dir).start()
    settings = DevicePluginSettings(
        node_name="node-1",
        fake_gpus="0:24,1:24,2:16",
        api_host=apiserver.url,
        device_plugin_dir=plugin_dir,
        endpoint="gpushare.sock",
        health_file=tmp_path / "unhealthy",
    )
    plugin = app.Plugin(settings).start()
    extender = Extender(ExtenderSettings(host="127.0.0.1", port=0), apiserver.api)
    binder = extender.binder
    # The kubelet admits pods in the order its watch of the node shows them: record that order.
    arrivals: list[str] = []
    seen_lock = threading.Lock()

    def on_pod(event):
        with seen_lock:
            for obj in event.objects if event.type == watch.RESYNC else [event.object]:
                if event.type in (watch.ADDED, watch.RESYNC) and obj["metadata"]["name"] not in arrivals:
                    arrivals.append(obj["metadata"]["name"])

    kubelet_watch = watch.Watcher(
        apiserver.new_client(), rest.path("pods"), on_pod, field_selector="spec.nodeName=node-1"
    )
    try:
        extender.start()
        kubelet_watch.start()
        assert kubelet_watch.wait_synced(10)
        kubelet.wait(lambda k: len(k.devices) == 64)
        apiserver.wait_for(
            lambda: (
                resources.NODE_DEVICES_ANNOTATION
                in apiserver.get("nodes", "node-1")["metadata"]["annotations"]
            )
        )
        assert extender.wait_synced()
        yield apiserver, plugin, kubelet, binder, arrivals, tmp_path
    finally:
        kubelet_watch.stop()
        kubelet_watch.api.close()
        extender.stop()
        plugin.stop()
        kubelet.stop()


def _admit_in_arrival_order(apiserver, kubelet, arrivals, count):
    apiserver.wait_for(lambda: len(arrivals) >= count, what="the kubelet watch to see the pods")
    envs = {}
    for name in list(arrivals):
        envs[name] = kubelet.admit(apiserver.get("pods", name, "default"))
    return envs


def _expected(pod):
    placement = ann.decode(pod["metadata"]["annotations"])
    assert placement is not None
    alloc = placement.allocation
    return [",".join(str(g) for g in sorted(alloc.for_container(c))) for c in sorted(alloc.containers)]


def test_pods_bound_by_the_extender_get_their_own_gpu_per_container(cluster):
    apiserver, plugin, kubelet, binder, arrivals, _ = cluster
    specs: dict[str, dict[str, Any]] = {f"eq{i}": dict(gpu_mem=[4]) for i in range(6)}
    specs["multi"] = dict(gpu_mem=[2, 0, 3])
    specs["split"] = dict(gpu_mem=[8], labels={"aliyun.com/gpu-count": "2"})
    for name, kw in specs.items():
        apiserver.add_pod(name, **kw)
    pods = {name: apiserver.get("pods", name, "default") for name in specs}

    def bind(name):
        return binder.bind(BindingArgs(name, "default", pods[name]["metadata"]["uid"], "node-1"))

    with ThreadPoolExecutor(8) as pool:  # created and bound concurrently, equal requests included
        assert list(pool.map(bind, specs)) == [""] * len(specs)
    envs = _admit_in_arrival_order(apiserver, kubelet, arrivals, len(specs))
    for name in specs:
        stored = apiserver.get("pods", name, "default")
        assert [e["ALIYUN_COM_GPU_MEM_IDX"] for e in envs[name]] == _expected(stored), name
        assert all(
            e["ALIYUN_COM_GPU_MEM_POD"] == stored["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_POD"]
            for e in envs[name]
        )
    assert [e["ALIYUN_COM_GPU_MEM_CONTAINER"] for e in envs["multi"]] == ["2", "3"]
    assert envs["split"][0]["ALIYUN_COM_GPU_MEM_CONTAINER"] == "4"
    plugin.marker.join()
    apiserver.wait_for(
        lambda: all(
            apiserver.get("pods", n, "default")["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGNED"]
            == "true"
            for n in specs
        ),
        what="every pod marked assigned",
    )


def test_node_publishes_gpu_count_and_devices_and_follows_health(cluster):
    apiserver, _plugin, kubelet, _, _, tmp_path = cluster
    node = apiserver.get("nodes", "node-1")
    assert node["status"]["capacity"]["aliyun.com/gpu-count"] == "3"
    published = ann.NodeDevices.from_json(node["metadata"]["annotations"][resources.NODE_DEVICES_ANNOTATION])
    assert [(d.index, d.memory, d.healthy) for d in published.devices] == [
        (0, 24, True),
        (1, 24, True),
        (2, 16, True),
    ]
    (tmp_path / "unhealthy").write_text("2\n")
    kubelet.wait(lambda k: len(k.healthy()) == 48)

    def gpu2_unhealthy():
        node = apiserver.get("nodes", "node-1")
        raw = json.loads(node["metadata"]["annotations"][resources.NODE_DEVICES_ANNOTATION])
        return (
            not raw["devices"][2]["healthy"] and node["status"]["allocatable"]["aliyun.com/gpu-count"] == "2"
        )

    apiserver.wait_for(gpu2_unhealthy, what="GPU 2 published unhealthy")
    (tmp_path / "unhealthy").write_text("")
    kubelet.wait(lambda k: len(k.healthy()) == 64)


def test_isolation_label_reaches_the_env(cluster):
    apiserver, plugin, kubelet, binder, arrivals, _ = cluster
    apiserver.edit("nodes", "node-1", {"metadata": {"labels": {"cgpu.disable.isolation": "true"}}})
    apiserver.wait_for(plugin.labels.isolation_disabled, what="the node label")
    pod = apiserver.add_pod("iso", gpu_mem=[1])
    assert binder.bind(BindingArgs("iso", "default", pod["metadata"]["uid"], "node-1")) == ""
    envs = _admit_in_arrival_order(apiserver, kubelet, arrivals, 1)
    assert envs["iso"][0]["CGPU_DISABLE"] == "true"


def test_pods_are_read_from_the_watch_not_listed_per_allocate(cluster):
    apiserver, _plugin, kubelet, binder, arrivals, _ = cluster
    for i in range(5):
        pod = apiserver.add_pod(f"w{i}", gpu_mem=[1])
        assert binder.bind(BindingArgs(f"w{i}", "default", pod["metadata"]["uid"], "node-1")) == ""
    apiserver.wait_for(lambda: len(arrivals) == 5)
    apiserver.reset_counts()
    _admit_in_arrival_order(apiserver, kubelet, arrivals, 5)
    assert apiserver.requests[("list", "pods")] == 0


@pytest.mark.parametrize("status", [409, 500], ids=["conflict", "server-error"])
def test_api_errors_when_marking_assigned_are_retried_and_never_fail_allocate(cluster, status):
    apiserver, plugin, kubelet, binder, arrivals, _ = cluster
    pod = apiserver.add_pod("m", gpu_mem=[2])
    assert binder.bind(BindingArgs("m", "default", pod["metadata"]["uid"], "node-1")) == ""
    apiserver.fail_next("patch", "pods", status=status, count=2)
    envs = _admit_in_arrival_order(apiserver, kubelet, arrivals, 1)
    assert envs["m"][0]["ALIYUN_COM_GPU_MEM_CONTAINER"] == "2"
    assert plugin.marker.join()
    assert (
        apiserver.get("pods", "m", "default")["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGNED"]
        == "true"
    )
    assert plugin.marker.failed == []


def test_kubelet_restart_midway_loses_no_allocation(cluster):
    apiserver, _plugin, kubelet, binder, arrivals, _ = cluster
    for name in ("r1", "r2"):
        pod = apiserver.add_pod(name, gpu_mem=[3])
        assert binder.bind(BindingArgs(name, "default", pod["metadata"]["uid"], "node-1")) == ""
    apiserver.wait_for(lambda: len(arrivals) == 2)
    first = kubelet.admit(apiserver.get("pods", arrivals[0], "default"))
    kubelet.restart()
    kubelet.wait(lambda k: len(k.registrations) == 2 and len(k.devices) == 64, timeout=10)
    second = kubelet.admit(apiserver.get("pods", arrivals[1], "default"))
    for name, env in zip(arrivals, (first, second), strict=True):
        assert [e["ALIYUN_COM_GPU_MEM_IDX"] for e in env] == _expected(apiserver.get("pods", name, "default"))
