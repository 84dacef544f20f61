"""NodeAgentSettings: the settings both node agents have (node, GPUs and health, API, probes, MPS, how GPUs
reach containers, logs), the checks they share, worded by the flag; each agent's settings extend it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from webhook.core.node import devices, mps
from webhook.gpus import toolkitspecs


class SettingsError(ValueError):
    """A setting that cannot work; the message names the flag."""


@dataclass(frozen=True, slots=True)
class NodeAgentSettings:
    node_name: str
    memory_unit: str = "GiB"
    mib_per_device: int | None = None  # MiB mode: the step in MiB; each agent has its default
    fake_gpus: str = ""  # "0:16,1:16,2:24"
    inventory_file: Path | None = None  # YAML/JSON fake inventory
    health_file: Path | None = None  # unhealthy GPU indexes, e.g. "0,2" (fake inventories)
    health_recovery_s: float = 60.0  # NVML: healthy again after this long without XID and a good probe
    kubeconfig: str = ""
    api_host: str = ""  # explicit API URL (tests, local runs); wins over kubeconfig
    health_port: int = 0  # /healthz and /metrics on every address (IPv6 and IPv4), this port; 0 = off
    api_timeout_s: float = 30.0  # exit 1 when the node cannot be read from the API this long at start
    force_mps: bool = False  # --mps: MPS env and mounts in every mode that shares, not only the MPS one
    mps_pipe_dir: str = mps.DEFAULT_PIPE_DIRECTORY
    mps_log_dir: str = mps.DEFAULT_LOG_DIRECTORY
    # How GPUs reach containers: NVIDIA_VISIBLE_DEVICES and/or the toolkit's CDI devices (docs/cdi.md).
    delivery: toolkitspecs.DeliverySettings = field(default_factory=toolkitspecs.DeliverySettings)
    log_level: str = "info"
    log_format: str = "json"

    def block_mib(self) -> int | None:
        """The MiB step `granularity` parses in MiB mode (None: the default of `devices.Granularity`)."""
        return self.mib_per_device

    def granularity(self) -> devices.Granularity:
        try:
            return devices.Granularity.parse(self.memory_unit, self.block_mib())
        except devices.DeviceError as err:
            raise SettingsError(f"--memory-unit/--mib-per-device: {err}") from None

    def mps_dirs(self) -> mps.MpsDirs:
        return mps.MpsDirs(self.mps_pipe_dir, self.mps_log_dir)

    def check_node(self) -> None:
        if not self.node_name:
            raise SettingsError("the node name is required: set NODE_NAME (downward API spec.nodeName)")

    def check_inventory(self) -> None:
        if self.fake_gpus and self.inventory_file:
            raise SettingsError("--fake-gpus and --inventory-file are exclusive")

    def check_port(self) -> None:
        if not 0 <= self.health_port <= 65535:
            raise SettingsError(f"--health-port {self.health_port} is not a port")

    def check_mps_dirs(self) -> None:
        for flag, value in (("--mps-pipe-dir", self.mps_pipe_dir), ("--mps-log-dir", self.mps_log_dir)):
            if not value.startswith("/") or ":" in value or "," in value:
                raise SettingsError(f"{flag} {value!r} must be an absolute host path without ':' or ','")

    def check_delivery(self) -> None:
        """How GPUs reach containers, then the memory unit: the last checks of both agents."""
        try:
            self.delivery.check()
        except ValueError as err:
            raise SettingsError(str(err)) from None
        self.granularity()
