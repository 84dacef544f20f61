"""An OCI registry for the test bed: the CNCF distribution registry built by scripts/registry-bins, serving
plain HTTP on an address the test node reaches (the host's end of the node's link), its storage in the
bed's workdir. scripts/release pushes the chart and the image there, Helm installs from `oci://`, and the
node's containerd pulls from it (`hosts.toml` in containerd's registry config folder, as on any node with a
private registry).

    reg = Registry(build(), workdir, host="10.255.1.1").start()
    reg.address        -> "10.255.1.1:40123"
    reg.stop()
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from webhook.devcluster import scripts
from webhook.devcluster.process import Process, child_env


def build(timeout: float = 1800) -> Path:
    """scripts/registry-bins: the folder of the built `registry` (a warm cache answers at once)."""
    return Path(scripts.last_line("registry-bins", timeout=timeout))


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def hosts_toml(address: str) -> str:
    """containerd's registry host config for a plain-HTTP registry at `address` (host:port)."""
    return f'server = "http://{address}"\n\n[host."http://{address}"]\n  capabilities = ["pull", "resolve"]\n'


@dataclass
class Registry:
    bins: Path  # scripts/registry-bins' folder
    workdir: Path
    host: str = "127.0.0.1"
    port: int = 0
    process: Process | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def config(self) -> str:
        storage = self.workdir / "storage"
        return (
            "version: 0.1\n"
            "log:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.address}\n"
        )

    def serving(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def start(self, timeout: float = 30) -> Registry:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = _free_port(self.host)
        config = self.workdir / "config.yml"
        config.write_text(self.config())
        # The registry reads OTEL_* and REGISTRY_* from its environment: ours only.
        env = child_env({"OTEL_TRACES_EXPORTER": "none"})
        self.process = Process(
            "registry",
            [str(self.bins / "registry"), "serve", str(config)],
            self.workdir / "registry.log",
            env,
        ).start()
        self.process.wait_until(self.serving, timeout, f"serving on {self.address}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=5)
            self.process = None
