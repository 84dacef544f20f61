"""DraSettings: everything the DRA driver needs, built by the CLI from flags and env, validated here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from webhook.core.node import devices, draslice, mps
from webhook.gpus import toolkitspecs

# The kubelet's defaults (pluginmanager watches <root-dir>/plugins_registry; plugins keep their sockets
# in <root-dir>/plugins/<name>/ by convention).
DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
# Read by containerd and CRI-O; a tmpfs on most hosts, so specs vanish at reboot (the checkpoint keeps them).
DEFAULT_CDI_DIR = Path("/var/run/cdi")
MAX_SOCKET_PATH = 107  # sizeof(sockaddr_un.sun_path) on Linux, less the terminating NUL


class SettingsError(ValueError):
    """A setting that cannot work; the message names the flag."""


@dataclass(frozen=True, slots=True)
class DraSettings:
    node_name: str
    driver_name: str = draslice.DEFAULT_DRIVER
    memory_unit: str = "GiB"
    # MiB mode: the request step in MiB. Default 1: a slice has no device-count limit, unlike the device
    # plugin's fake devices.
    mib_per_device: int | None = None
    fake_gpus: str = ""
    inventory_file: Path | None = None
    health_file: Path | None = None
    health_recovery_s: float = 60.0
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    cdi_dir: Path = DEFAULT_CDI_DIR
    kubeconfig: str = ""
    api_host: str = ""
    health_port: int = 0
    api_timeout_s: float = 30.0
    resync_s: float = 60.0  # re-check the published slice this often (besides its watch)
    force_mps: bool = False
    mps_pipe_dir: str = mps.DEFAULT_PIPE_DIRECTORY
    mps_log_dir: str = mps.DEFAULT_LOG_DIRECTORY
    # How GPUs reach containers: NVIDIA_VISIBLE_DEVICES and/or the toolkit's CDI devices (docs/cdi.md).
    delivery: toolkitspecs.DeliverySettings = field(default_factory=toolkitspecs.DeliverySettings)
    log_level: str = "info"
    log_format: str = "json"

    def granularity(self) -> devices.Granularity:
        block = self.mib_per_device
        if block is None and self.memory_unit == "MiB":
            block = 1
        try:
            return devices.Granularity.parse(self.memory_unit, block)
        except devices.DeviceError as err:
            raise SettingsError(f"--memory-unit/--mib-per-device: {err}") from None

    @property
    def plugin_dir(self) -> Path:
        """The driver's own folder: its DRA socket and the checkpoint of prepared claims."""
        return self.plugins_dir / self.driver_name

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver_name}-reg.sock"

    @property
    def checkpoint(self) -> Path:
        return self.plugin_dir / "checkpoint.json"

    def mps_dirs(self) -> mps.MpsDirs:
        return mps.MpsDirs(self.mps_pipe_dir, self.mps_log_dir)

    def validate(self) -> DraSettings:
        if not self.node_name:
            raise SettingsError("the node name is required: set NODE_NAME (downward API spec.nodeName)")
        try:
            draslice.driver_name(self.driver_name)
        except draslice.SliceError as err:
            raise SettingsError(f"--driver-name: {err}") from None
        if self.fake_gpus and self.inventory_file:
            raise SettingsError("--fake-gpus and --inventory-file are exclusive")
        if self.health_recovery_s <= 0 or self.api_timeout_s <= 0 or self.resync_s <= 0:
            raise SettingsError("--health-recovery, --api-timeout and --resync-period must be > 0 seconds")
        if not 0 <= self.health_port <= 65535:
            raise SettingsError(f"--health-port {self.health_port} is not a port")
        for flag, folder in (
            ("--registry-dir", self.registry_dir),
            ("--plugins-dir", self.plugins_dir),
            ("--cdi-dir", self.cdi_dir),
        ):
            if not folder.is_absolute():
                raise SettingsError(f"{flag} {str(folder)!r} must be an absolute path")
        for socket in (self.dra_socket, self.registration_socket):
            if len(str(socket)) > MAX_SOCKET_PATH:
                raise SettingsError(
                    f"socket path {socket} is longer than {MAX_SOCKET_PATH} characters (unix sockets "
                    "allow no more); use shorter --registry-dir/--plugins-dir or --driver-name"
                )
        for flag, value in (("--mps-pipe-dir", self.mps_pipe_dir), ("--mps-log-dir", self.mps_log_dir)):
            if not value.startswith("/") or ":" in value or "," in value:
                raise SettingsError(f"{flag} {value!r} must be an absolute host path without ':' or ','")
        try:
            self.delivery.check()
        except ValueError as err:
            raise SettingsError(str(err)) from None
        self.granularity()
        return self
