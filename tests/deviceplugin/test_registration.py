"""Serve, register, and register again when the kubelet restarts (sockets deleted, kubelet.sock anew)."""

from __future__ import annotations

import logging
import time

import pytest

from tests.deviceplugin.conftest import short_dir
from tests.deviceplugin.placed import placed_pod
from tests.standins.kubelet import Kubelet
from webhook.core.wire import resources
from webhook.deviceplugin import registration
from webhook.nodeagent import unixsockets


def test_plugin_started_before_the_kubelet_registers_once_it_appears(make_plugin, tmp_path):
    plugin = make_plugin("0:2")
    time.sleep(0.2)  # a few polls without kubelet.sock
    assert not plugin.server.registered.is_set()
    kubelet = Kubelet(short_dir(tmp_path)).start()
    try:
        kubelet.wait(lambda k: len(k.devices) == 2)
        assert len(kubelet.registrations) == 1
    finally:
        kubelet.stop()


def test_kubelet_restart_reregisters_and_loses_no_allocation(make_plugin, kubelet):
    plugin = make_plugin("0:8,1:8")
    kubelet.wait(lambda k: len(k.devices) == 16)
    first = placed_pod("first", [2, 2], {0: {0: 2}, 1: {1: 2}}, assume=1)
    second = placed_pod("second", [2], {0: {1: 2}}, assume=2)
    plugin.pods.set([first, second])
    # The kubelet restarts between the two containers of `first`.
    ids = kubelet.choose(2)
    env0 = dict(kubelet.allocate_ids(ids).container_responses[0].envs)
    kubelet.in_use["uid-first"] = set(ids)
    kubelet.restart()
    kubelet.wait(lambda k: len(k.registrations) == 2 and len(k.devices) == 16, timeout=10)
    assert plugin.server.registrations == 2
    env1 = dict(kubelet.allocate_ids(kubelet.choose(2)).container_responses[0].envs)
    assert (env0["ALIYUN_COM_GPU_MEM_IDX"], env1["ALIYUN_COM_GPU_MEM_IDX"]) == ("0", "1")
    assert plugin.marks.marked == ["default/first"]
    # The book still knows `first` is done: the next 2-unit container is `second`'s, not `first`'s again.
    assert kubelet.admit(second)[0]["ALIYUN_COM_GPU_MEM_IDX"] == "1"
    assert plugin.marks.marked == ["default/first", "default/second"]


def test_deleting_only_the_plugin_socket_makes_it_serve_and_register_again(make_plugin, kubelet):
    plugin = make_plugin("0:2")
    kubelet.wait(lambda k: len(k.registrations) == 1)
    (plugin.dir / "gpushare.sock").unlink()
    kubelet.wait(lambda k: len(k.registrations) == 2, timeout=10)
    kubelet.wait(lambda k: len(k.devices) == 2)
    assert (plugin.dir / "gpushare.sock").exists()


def test_register_refused_by_the_kubelet_is_retried_not_fatal(make_plugin, tmp_path):
    kubelet = Kubelet(short_dir(tmp_path), resource_name="example.com/other").start()
    try:
        plugin = make_plugin("0:2")
        time.sleep(0.3)
        assert not plugin.server.registered.is_set()
        assert kubelet.registrations == []
        kubelet.resource_name = "aliyun.com/gpu-mem"
        kubelet.wait(lambda k: len(k.registrations) == 1, timeout=10)
    finally:
        kubelet.stop()


def test_a_second_instance_is_refused_and_leaves_the_first_ones_socket(make_plugin, kubelet, tmp_path):
    plugin = make_plugin("0:2")
    kubelet.wait(lambda k: len(k.registrations) == 1)
    second = registration.PluginServer(
        plugin.service,
        registration.RegistrationSettings(plugin.dir, "gpushare.sock", resources.GPU_MEMORY, poll_s=0.05),
    )
    with pytest.raises(unixsockets.AlreadyRunning, match=r"another gpushare device plugin serves .*\.lock"):
        second.start()
    assert (plugin.dir / "gpushare.sock").exists()
    time.sleep(0.2)
    assert len(kubelet.registrations) == 1 and plugin.server.registered.is_set()


def test_missing_kubelet_socket_is_said_at_start(make_plugin, caplog):
    caplog.set_level(logging.WARNING, "webhook.deviceplugin.registration")
    plugin = make_plugin("0:2")
    assert f"the kubelet socket {plugin.dir / 'kubelet.sock'} does not exist" in caplog.text
    assert "--device-plugin-dir" in caplog.text


def test_socket_deleted_by_another_process_is_not_called_a_kubelet_restart(make_plugin, kubelet, caplog):
    caplog.set_level(logging.WARNING, "webhook.deviceplugin.registration")
    plugin = make_plugin("0:2")
    kubelet.wait(lambda k: len(k.registrations) == 1)
    (plugin.dir / "gpushare.sock").unlink()
    kubelet.wait(lambda k: len(k.registrations) == 2, timeout=10)
    assert "was deleted by another process while the kubelet kept running" in caplog.text
    assert "the kubelet restarted" not in caplog.text
    kubelet.wait(lambda k: plugin.server.registrations == 2)  # Register has returned on our side
    kubelet.restart()
    kubelet.wait(lambda k: len(k.registrations) == 3, timeout=10)
    # The plugin may poll while the sockets are gone ("stopped") or only after kubelet.sock is back
    # ("restarted"); either way a real restart is never taken for another process deleting our socket.
    assert (
        "the kubelet restarted (kubelet.sock was recreated)" in caplog.text
        or "the kubelet stopped" in caplog.text
    )
    assert caplog.text.count("was deleted by another process") == 1


def test_a_socket_path_too_long_for_unix_sockets_is_said_with_the_fix(make_plugin, tmp_path):
    plugin = make_plugin("0:2")
    deep = tmp_path / ("d" * 100)
    server = registration.PluginServer(
        plugin.service, registration.RegistrationSettings(deep, "gpushare.sock", resources.GPU_MEMORY)
    )
    with pytest.raises(OSError, match=r"holds at most 107\): use a shorter --device-plugin-dir"):
        server.start()
    server.stop()
