"""DraSettings: everything the DRA driver needs, built by the CLI from flags and env, validated here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from webhook.core.node import draslice
from webhook.nodeagent.settings import NodeAgentSettings, SettingsError
from webhook.nodeagent.unixsockets import MAX_SOCKET_PATH

# The kubelet's defaults (pluginmanager watches <root-dir>/plugins_registry; plugins keep their sockets
# in <root-dir>/plugins/<name>/ by convention).
DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
# Read by containerd and CRI-O; a tmpfs on most hosts, so specs vanish at reboot (the checkpoint keeps them).
DEFAULT_CDI_DIR = Path("/var/run/cdi")


@dataclass(frozen=True, slots=True)
class DraSettings(NodeAgentSettings):
    driver_name: str = draslice.DEFAULT_DRIVER
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    cdi_dir: Path = DEFAULT_CDI_DIR
    resync_s: float = 60.0  # re-check the published slice this often (besides its watch)

    def block_mib(self) -> int | None:
        # MiB mode: the request step in MiB. Default 1: a slice has no device-count limit, unlike the
        # device plugin's fake devices.
        if self.mib_per_device is None and self.memory_unit == "MiB":
            return 1
        return self.mib_per_device

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

    def validate(self) -> DraSettings:
        self.check_node()
        try:
            draslice.driver_name(self.driver_name)
        except draslice.SliceError as err:
            raise SettingsError(f"--driver-name: {err}") from None
        self.check_inventory()
        if self.health_recovery_s <= 0 or self.api_timeout_s <= 0 or self.resync_s <= 0:
            raise SettingsError("--health-recovery, --api-timeout and --resync-period must be > 0 seconds")
        self.check_port()
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
        self.check_mps_dirs()
        self.check_delivery()
        return self
