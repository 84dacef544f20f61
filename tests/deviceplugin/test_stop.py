"""The whole plugin's stop: the GPU health watcher ends before the inventory shuts NVML down."""

from __future__ import annotations

from tests.deviceplugin.conftest import short_dir
from tests.gpus.stoporder import StopOrder
from tests.standins.kubelet import Kubelet
from webhook.deviceplugin import app
from webhook.deviceplugin.settings import DevicePluginSettings


def test_stop_waits_for_the_health_watcher_before_nvml_shuts_down(apiserver, tmp_path, monkeypatch):
    order = StopOrder()
    order.install(monkeypatch)
    apiserver.add_node("node-1")
    plugin_dir = short_dir(tmp_path)
    kubelet = Kubelet(plugin_dir).start()
    try:
        settings = DevicePluginSettings(
            node_name="node-1",
            api_host=apiserver.url,
            device_plugin_dir=plugin_dir,
            endpoint="gpushare.sock",
            pod_resources_socket=None,
            usage_interval_s=0,
        )
        app.Plugin(settings).start().stop()
    finally:
        kubelet.stop()
    assert order.closed_after_watcher is True
