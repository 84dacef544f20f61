"""GPU usage through the whole plugin (app.Plugin) against the API stand-in: fake GPU processes whose
cgroup files (tests/data/cgroups shapes) name a pod of the node; its series appear on /metrics and /usage
beside its share, an over-share becomes an Event on the pod, and the series go with the pod."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.deviceplugin.conftest import short_dir
from tests.deviceplugin.placed import placed_pod
from tests.standins.loopback import free_port
from webhook.core.placement import modes
from webhook.core.usage import overshare, usage, usagereport
from webhook.deviceplugin import app
from webhook.deviceplugin.settings import DevicePluginSettings
from webhook.gpus import inventory

GIB = 1 << 30
CID = "5f2c9a0e4b7d1c3a8e6f0b2d4c6a8e0f1b3d5c7a9e1f3b5d7c9a1e3f5b7d9c1a"


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _series(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = _get(port, "/metrics")
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def _named(series: dict[Any, float], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in series.items() if n == name}


@pytest.fixture
def node(apiserver, tmp_path):
    apiserver.add_node("node-1", labels={modes.MODE_LABEL: "share"})
    port = free_port()
    settings = DevicePluginSettings(
        node_name="node-1",
        fake_gpus="0:16,1:16",
        api_host=apiserver.url,
        device_plugin_dir=short_dir(tmp_path),
        endpoint="gpushare.sock",
        pod_resources_socket=None,
        health_port=port,
        usage_interval_s=3600,  # the test polls itself
        proc_root=tmp_path / "proc",
        fake_processes=tmp_path / "processes.yaml",
        overshare_grace_s=0,
    )
    plugin = app.Plugin(settings).start()
    try:
        yield apiserver, plugin, port, tmp_path
    finally:
        plugin.stop()


def _process(tmp_path, pid: int, gpu: int, memory: str, cgroup: str, *, utilization: float = 0.0) -> None:
    (tmp_path / "proc" / str(pid)).mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc" / str(pid) / "cgroup").write_text(cgroup)
    path = tmp_path / "processes.yaml"
    listed = path.read_text() if path.exists() else "processes:\n"
    path.write_text(
        listed + f"  - {{gpu: {gpu}, pid: {pid}, memory: {memory}, utilization: {utilization}}}\n"
    )


def _running(apiserver, name: str, container_id: str, **placed: Any) -> Any:
    pod = placed_pod(name, *placed["args"], phase="Running")
    pod["metadata"]["uid"] = str(uuid.uuid4())  # the kubelet names pod cgroups after real UIDs
    pod["status"]["containerStatuses"] = [{"name": "c0", "containerID": f"containerd://{container_id}"}]
    return apiserver.put(pod)


def _wait_pods(apiserver, plugin, count: int) -> None:
    apiserver.wait_for(lambda: len(plugin.usage.pods.snapshot()) == count, what="the plugin's pod watch")


def test_a_pods_series_appear_beside_its_share_and_go_with_the_pod(node):
    apiserver, plugin, port, tmp_path = node
    pod = _running(apiserver, "train", CID, args=([4], {0: {0: 4}}))
    uid = pod["metadata"]["uid"].replace("-", "_")
    _process(
        tmp_path,
        4242,
        0,
        "3GiB",
        f"0::/kubepods.slice/kubepods-pod{uid}.slice/cri-containerd-{CID}.scope",
        utilization=0.25,
    )
    _wait_pods(apiserver, plugin, 1)
    plugin.usage.poller.poll_once()
    series = _series(port)
    labels = (
        ("container", "c0"),
        ("gpu", "0"),
        ("namespace", "default"),
        ("node", "node-1"),
        ("pod", "train"),
        ("uuid", inventory.fake_uuid(0)),
    )
    assert _named(series, "gpushare_container_gpu_memory_share_bytes") == {labels: 4 * GIB}
    assert _named(series, "gpushare_container_gpu_memory_used_bytes") == {labels: 3 * GIB}
    assert _named(series, "gpushare_container_gpu_utilization_ratio") == {labels: 0.25}
    assert _named(series, "gpushare_container_gpu_memory_over_share") == {labels: 0}
    gpu0 = (("gpu", "0"), ("node", "node-1"), ("uuid", inventory.fake_uuid(0)))
    assert _named(series, "gpushare_gpu_memory_allocated_bytes")[gpu0] == 4 * GIB
    assert _named(series, "gpushare_gpu_memory_used_bytes")[gpu0] == 3 * GIB
    assert _named(series, "gpushare_gpu_memory_total_bytes")[gpu0] == 16 * GIB
    assert _named(series, "gpushare_gpu_healthy")[gpu0] == 1
    # The same on /usage, as gpushare inspect reads it.
    status, body = _get(port, "/usage")
    report = usagereport.loads(body)
    assert status == 200 and [(c.pod, c.used_bytes, c.share_bytes) for c in report.containers] == [
        ("train", 3 * GIB, 4 * GIB)
    ]
    apiserver.remove("pods", "train", "default")
    _wait_pods(apiserver, plugin, 0)
    plugin.usage.poller.poll_once()
    series = _series(port)
    assert not [n for n, _ in series if n.startswith("gpushare_container_")]
    # Its process, were it still running, is no longer blamed on anyone.
    unattributed = _named(series, "gpushare_gpu_unattributed_memory_used_bytes")
    assert unattributed[(*gpu0[:2], ("reason", usage.OTHER_POD), gpu0[2])] == 3 * GIB


def test_a_container_over_its_share_gets_a_warning_event_on_its_pod(node):
    apiserver, plugin, port, tmp_path = node
    pod = _running(apiserver, "greedy", CID, args=([2], {0: {1: 2}}))
    _process(tmp_path, 7, 1, "5GiB", f"0::/kubepods/besteffort/pod{pod['metadata']['uid']}/{CID}")
    _wait_pods(apiserver, plugin, 1)
    report = plugin.usage.poller.poll_once()
    assert [c.pod for c in report.over_share()] == ["greedy"]

    def events() -> list[dict[str, Any]]:
        return [e for e in apiserver.objects("events", "default") if e["reason"] == overshare.REASON]

    (event,) = apiserver.wait_for(events, what="the over-share Event")
    assert event["type"] == "Warning" and event["involvedObject"]["uid"] == pod["metadata"]["uid"]
    assert "container 'c0' uses 5.0 GiB of GPU 1" in event["message"]
    assert "above its share of 2.0 GiB" in event["message"]
    plugin.usage.poller.poll_once()  # still over, within the event interval: no second Event
    assert len(events()) == 1
    series = _series(port)
    assert list(_named(series, "gpushare_container_gpu_memory_over_share").values()) == [1]
    assert series[("gpushare_device_plugin_overshare_events_total", (("result", "ok"),))] == 1


def test_a_host_process_is_reported_as_such_and_blamed_on_no_pod(node):
    apiserver, plugin, _, tmp_path = node
    _running(apiserver, "idle", CID, args=([4], {0: {0: 4}}))
    _process(tmp_path, 99, 0, "1GiB", "0::/system.slice/nvidia-persistenced.service")
    _wait_pods(apiserver, plugin, 1)
    report = plugin.usage.poller.poll_once()
    assert report.gpus[0].unattributed[usage.HOST] == GIB
    assert [(c.pod, c.used_bytes, c.over_share) for c in report.containers] == [("idle", 0, False)]


def test_usage_off_serves_no_usage_series_and_says_so_on_usage(apiserver, tmp_path):
    apiserver.add_node("node-1")
    port = free_port()
    settings = DevicePluginSettings(
        node_name="node-1",
        fake_gpus="0:16",
        api_host=apiserver.url,
        device_plugin_dir=short_dir(tmp_path),
        endpoint="gpushare.sock",
        pod_resources_socket=None,
        health_port=port,
        usage_interval_s=0,
    )
    plugin = app.Plugin(settings).start()
    try:
        status, body = _get(port, "/usage")
        assert status == 404 and "--usage-interval 0" in json.loads(body)["message"]
        assert not [n for n, _ in _series(port) if n.startswith(("gpushare_gpu_", "gpushare_container_"))]
    finally:
        plugin.stop()
