"""`gpushare dra-driver`: flags to settings, exit 2 naming a bad flag, exit 1 on a failed start, and a
real run that serves its probes and stops on SIGTERM."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import urllib.request

import pytest

from tests.dra import kubelet
from tests.serving import scraped
from tests.standins.loopback import free_port, http_status
from webhook import __version__
from webhook.cli.serve import dra_driver as serve_dra_driver
from webhook.core.placement import modes


def test_flags_and_node_name_become_settings(short_root):
    argv = ["--memory-unit", "MiB", "--fake-gpus", "0:16", "--registry-dir", str(short_root), "--mps"]
    args = serve_dra_driver.build_parser().parse_args(argv)
    settings = serve_dra_driver.settings_from_args(args, {"NODE_NAME": "n1"})
    assert (settings.node_name, settings.granularity().label, settings.force_mps) == ("n1", "MiB", True)
    assert settings.registration_socket == short_root / "gpushare.aliyun.com-reg.sock"
    assert str(settings.dra_socket) == "/var/lib/kubelet/plugins/gpushare.aliyun.com/dra.sock"


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--fake-gpus", "0:16"], {}, "node name is required"),
        (["--cdi-spec-dirs", "etc/cdi"], {"NODE_NAME": "n"}, "--cdi-spec-dirs must be absolute"),
        (["--cdi-kind", "nvidia.com"], {"NODE_NAME": "n"}, "--cdi-kind: 'nvidia.com' is not a CDI kind"),
        (
            ["--driver-name", "GPU_share"],
            {"NODE_NAME": "n"},
            "--driver-name: driver name 'GPU_share' must be",
        ),
        (["--mib-per-device", "64"], {"NODE_NAME": "n"}, "applies to --memory-unit MiB only"),
        (["--fake-gpus", "0:1", "--inventory-file", "x.yaml"], {"NODE_NAME": "n"}, "exclusive"),
        (["--cdi-dir", "cdi"], {"NODE_NAME": "n"}, "--cdi-dir 'cdi' must be an absolute path"),
        (["--plugins-dir", "/" + "p" * 100], {"NODE_NAME": "n"}, "is longer than 107 characters"),
        (["--resync-period", "0"], {"NODE_NAME": "n"}, "must be > 0 seconds"),
        (["--health-port", "70000"], {"NODE_NAME": "n"}, "--health-port 70000 is not a port"),
        (["--mps-pipe-dir", "mps"], {"NODE_NAME": "n"}, "--mps-pipe-dir 'mps' must be an absolute"),
    ],
    ids=[
        "no-node",
        "relative-cdi-spec-dir",
        "cdi-kind",
        "driver-name",
        "block-with-gib",
        "two-inventories",
        "relative-cdi",
        "long-socket",
        "zero-resync",
        "bad-port",
        "relative-pipe",
    ],
)
def test_bad_settings_exit_2_with_the_reason(monkeypatch, capsys, argv, env, needle):
    monkeypatch.delenv("NODE_NAME", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert serve_dra_driver.main(argv) == 2
    assert needle in capsys.readouterr().err


@pytest.fixture
def quiet_root_logger(monkeypatch):
    # run() configures the root logger on this test's captured stderr: put it back afterwards.
    monkeypatch.setattr(logging.root, "handlers", list(logging.root.handlers))
    monkeypatch.setattr(logging.root, "level", logging.root.level)


def test_an_unusable_inventory_exits_1(monkeypatch, capsys, short_root, quiet_root_logger):
    monkeypatch.setenv("NODE_NAME", "n")
    assert serve_dra_driver.main(["--fake-gpus", "0:zero", "--plugins-dir", str(short_root)]) == 1
    assert "gpushare dra-driver: --fake-gpus '0:zero'" in capsys.readouterr().err


def test_an_unreachable_api_exits_1_naming_the_node(monkeypatch, capsys, short_root, quiet_root_logger):
    monkeypatch.setenv("NODE_NAME", "n")
    argv = ["--fake-gpus", "0:1", "--api-timeout", "1", "--api-host", f"http://127.0.0.1:{free_port()}"]
    argv += ["--plugins-dir", str(short_root / "p"), "--registry-dir", str(short_root / "r")]
    argv += ["--cdi-dir", str(short_root / "cdi"), "--log-level", "error"]
    assert serve_dra_driver.main(argv) == 1
    assert "cannot read node n from the API server within 1 s" in capsys.readouterr().err


def test_the_command_publishes_registers_serves_probes_and_stops_on_sigterm(apiserver, short_root):
    apiserver.add_node("n1", labels={modes.MODE_LABEL: "dra"})
    port = free_port()
    argv = [sys.executable, "-m", "webhook", "dra-driver", "--fake-gpus", "0:4", "--api-host", apiserver.url]
    argv += ["--plugins-dir", str(short_root / "p"), "--registry-dir", str(short_root / "r")]
    argv += ["--cdi-dir", str(short_root / "cdi"), "--health-port", str(port), "--log-format", "text"]
    proc = subprocess.Popen(
        argv, env={"NODE_NAME": "n1", "PATH": "/usr/bin:/bin"}, stderr=subprocess.PIPE, text=True
    )
    registration = short_root / "r" / "gpushare.aliyun.com-reg.sock"
    try:
        apiserver.wait_for(registration.exists, timeout=20, what="the registration socket")
        kubelet.register(registration)

        healthz = f"http://127.0.0.1:{port}/healthz"
        apiserver.wait_for(lambda: http_status(healthz) == 200, timeout=10, what="/healthz")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
            scrape = reply.read()
        assert b'gpushare_dra_claims_total{call="prepare",result="ok"}' in scrape
        assert scraped.build_info(scrape) == scraped.THIS_BUILD
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert f"gpushare {__version__}: DRA driver gpushare.aliyun.com running on node n1" in err
        assert not registration.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
