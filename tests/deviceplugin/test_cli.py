"""`gpushare device-plugin`: flags to settings, clear exits on bad input, and a real run to SIGTERM."""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from tests.deviceplugin.conftest import short_dir
from tests.serving import scraped
from tests.standins.kubelet import Kubelet
from tests.standins.loopback import free_port, http_status
from webhook import __version__
from webhook.cli.serve import device_plugin as serve_device_plugin
from webhook.core.wire import resources
from webhook.deviceplugin import app
from webhook.deviceplugin.settings import DevicePluginSettings
from webhook.nodeagent import lifecycle


def test_flags_and_node_name_become_settings():
    args = serve_device_plugin.build_parser().parse_args(
        ["--memory-unit", "MiB", "--mib-per-device", "64", "--fake-gpus", "0:16"]
    )
    settings = serve_device_plugin.settings_from_args(args, {"NODE_NAME": "n1"})
    assert (settings.node_name, settings.granularity().label, settings.fake_gpus) == ("n1", "64MiB", "0:16")


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--fake-gpus", "0:16"], {}, "node name is required"),
        (["--cdi-spec-dirs", "etc/cdi"], {"NODE_NAME": "n"}, "--cdi-spec-dirs must be absolute"),
        (["--cdi-kind", "nvidia.com"], {"NODE_NAME": "n"}, "--cdi-kind: 'nvidia.com' is not a CDI kind"),
        (["--mib-per-device", "64"], {"NODE_NAME": "n"}, "applies to --memory-unit MiB only"),
        (["--fake-gpus", "0:1", "--inventory-file", "x.yaml"], {"NODE_NAME": "n"}, "exclusive"),
        (["--endpoint", "a/b.sock"], {"NODE_NAME": "n"}, "socket file name"),
        (
            ["--mps-pipe-dir", "nvidia-mps"],
            {"NODE_NAME": "n"},
            "--mps-pipe-dir 'nvidia-mps' must be an absolute",
        ),
        (
            ["--mps-log-dir", "/a:/b"],
            {"NODE_NAME": "n"},
            "--mps-log-dir '/a:/b' must be an absolute host path",
        ),
    ],
    ids=[
        "no-node-name",
        "relative-cdi-dir",
        "cdi-kind",
        "block-with-gib",
        "two-inventories",
        "bad-endpoint",
        "relative-pipe",
        "colon-log",
    ],
)
def test_bad_settings_exit_2_with_the_reason(monkeypatch, capsys, argv, env, needle):
    monkeypatch.delenv("NODE_NAME", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert serve_device_plugin.main(argv) == 2
    assert needle in capsys.readouterr().err


def test_unusable_inventory_exits_1(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("NODE_NAME", "n")
    # run() configures the root logger on this test's captured stderr: put it back afterwards.
    monkeypatch.setattr(logging.root, "handlers", list(logging.root.handlers))
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    assert serve_device_plugin.main(["--fake-gpus", "0:zero", "--device-plugin-dir", str(tmp_path)]) == 1
    assert "--fake-gpus" in capsys.readouterr().err


def test_no_kubeconfig_exits_1_with_one_line_without_a_class_name(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("NODE_NAME", "n")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config there
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(logging.root, "handlers", list(logging.root.handlers))
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    assert serve_device_plugin.main(["--fake-gpus", "0:16", "--device-plugin-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert (
        "gpushare device-plugin: cannot configure the Kubernetes client: no kubeconfig at ~/.kube/config"
        in err
    )
    assert not any("ConfigError" in line for line in err)


def test_a_busy_health_port_exits_1_before_anything_is_registered_or_left_behind(
    apiserver, monkeypatch, capsys, tmp_path
):
    monkeypatch.setenv("NODE_NAME", "n1")
    monkeypatch.setattr(logging.root, "handlers", list(logging.root.handlers))
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    apiserver.add_node("n1")
    plugin_dir = short_dir(tmp_path)
    with socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True) as busy:
        port = busy.getsockname()[1]
        argv = ["--fake-gpus", "0:16", "--device-plugin-dir", str(plugin_dir), "--api-host", apiserver.url]
        assert serve_device_plugin.main([*argv, "--health-port", str(port)]) == 1
    assert f"cannot listen on [::]:{port}: Address already in use" in capsys.readouterr().err
    assert list(plugin_dir.glob("*.sock")) == []


def test_a_fake_gpu_with_a_wrong_compute_capability_exits_1_naming_it(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("NODE_NAME", "n")
    monkeypatch.setattr(logging.root, "handlers", list(logging.root.handlers))
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    argv = [
        "--fake-gpus",
        "0:16:Tesla V100:seven",
        "--device-plugin-dir",
        str(tmp_path),
        "--api-host",
        "http://127.0.0.1:9",
    ]
    assert serve_device_plugin.main(argv) == 1
    assert "compute capability 'seven' is not <major>.<minor>, e.g. 7.0" in capsys.readouterr().err


def test_unreachable_api_exits_1_as_documented(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("NODE_NAME", "n")
    monkeypatch.setattr(logging.root, "handlers", list(logging.root.handlers))
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    argv = ["--fake-gpus", "0:1", "--device-plugin-dir", str(short_dir(tmp_path)), "--api-timeout", "1"]
    argv += ["--api-host", f"http://127.0.0.1:{free_port()}", "--log-level", "error"]
    assert serve_device_plugin.main(argv) == 1
    assert "cannot list the pods of node n from the API server within 1 s" in capsys.readouterr().err


def test_second_instance_exits_1_naming_the_first(apiserver, tmp_path):
    apiserver.add_node("n1")
    settings = DevicePluginSettings(
        node_name="n1",
        fake_gpus="0:1",
        api_host=apiserver.url,
        device_plugin_dir=short_dir(tmp_path),
        endpoint="gpushare.sock",
        pod_resources_socket=None,
    )
    first = app.Plugin(settings).start()
    try:
        with pytest.raises(lifecycle.StartError, match="another gpushare device plugin serves"):
            app.Plugin(settings).start()
        assert (short_dir(tmp_path) / "gpushare.sock").exists()
    finally:
        first.stop()


def test_device_plugin_command_registers_serves_probes_and_stops_on_sigterm(apiserver, tmp_path):
    apiserver.add_node("n1")
    plugin_dir = short_dir(tmp_path)
    kubelet = Kubelet(plugin_dir, also=(resources.NVIDIA_GPU,)).start()  # ready once both registered
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "webhook",
        "device-plugin",
        "--fake-gpus",
        "0:4,1:2",
        "--api-host",
        apiserver.url,
    ]
    argv += ["--device-plugin-dir", str(plugin_dir), "--health-port", str(port), "--log-format", "text"]
    proc = subprocess.Popen(
        argv, env={"NODE_NAME": "n1", "PATH": "/usr/bin:/bin"}, stderr=subprocess.PIPE, text=True
    )
    try:
        kubelet.wait(lambda k: len(k.devices) == 6, timeout=20)

        healthz = f"http://127.0.0.1:{port}/healthz"
        apiserver.wait_for(lambda: http_status(healthz) == 200, timeout=10, what="/healthz")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            scrape = reply.read()
        assert b"gpushare_device_plugin_list_bytes" in scrape
        assert scraped.build_info(scrape) == scraped.THIS_BUILD
        # The kubelet probes the pod's IP, IPv6 in IPv6-only clusters.
        with urllib.request.urlopen(f"http://[::1]:{port}/healthz", timeout=2) as reply:
            assert reply.status == 200
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert f"gpushare {__version__}: device plugin for aliyun.com/gpu-mem running on node n1" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        kubelet.stop()
