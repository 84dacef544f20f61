"""DevicePluginSettings: everything `run` needs, built by the CLI from flags and env, validated here."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from webhook.core.wire import resources
from webhook.nodeagent.settings import NodeAgentSettings, SettingsError

DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
DEFAULT_ENDPOINT = "aliyun-gpushare.sock"
DEFAULT_POD_RESOURCES = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_PROC_ROOT = Path("/proc")
MAX_SECONDS = 86400.0  # a day: the longest poll interval, grace or Event interval that makes sense


@dataclass(frozen=True, slots=True)
class DevicePluginSettings(NodeAgentSettings):
    # mib_per_device (MiB mode) defaults to devices.DEFAULT_MIB_PER_DEVICE; api_timeout_s bounds the first
    # list of this node's pods.
    device_plugin_dir: Path = DEFAULT_PLUGIN_DIR
    endpoint: str = DEFAULT_ENDPOINT
    resource_name: str = resources.GPU_MEMORY
    whole_card_resource: str = resources.NVIDIA_GPU  # served beside gpu-mem, on its own endpoint
    allocate_wait_s: float = 3.0  # how long Allocate waits for the pod watch to show the pod
    pod_resources_socket: Path | None = DEFAULT_POD_RESOURCES  # kubelet PodResources API; None = off
    reconcile_s: float = 30.0  # reconcile with PodResources this often (and right after Allocates)
    max_list_bytes: int = 2 * 1024 * 1024  # refuse to start above this ListAndWatch size (kubelet: 4 MB)
    # GPU usage (docs/device-plugin.md, "GPU usage and over-share"): poll every usage_interval_s (0 = off).
    usage_interval_s: float = 10.0
    proc_root: Path = DEFAULT_PROC_ROOT  # the host's /proc (NVML reports host PIDs)
    fake_processes: Path | None = None  # fake inventories: GPU processes from a file, re-read each poll
    overshare_grace_s: float = 60.0  # above its share this long before it counts as over-share
    overshare_event_interval_s: float = 600.0  # at most one Event per container this often
    overshare_evict: bool = False  # opt-in: evict pods over their share on nodes labelled share

    def validate(self) -> DevicePluginSettings:
        self.check_node()
        self.check_inventory()
        if "/" in self.endpoint or not self.endpoint.endswith(".sock"):
            raise SettingsError(f"--endpoint {self.endpoint!r} must be a socket file name ending in .sock")
        if self.allocate_wait_s < 0 or self.health_recovery_s <= 0:
            raise SettingsError("--allocate-wait must be >= 0 and --health-recovery > 0 seconds")
        if self.api_timeout_s <= 0 or self.reconcile_s <= 0:
            raise SettingsError("--api-timeout and --reconcile-period must be > 0 seconds")
        self.check_port()
        self.check_mps_dirs()
        try:
            resources.whole_card_resource(self.whole_card_resource)
        except ValueError as err:
            raise SettingsError(f"--whole-card-resource: {err}") from None
        if self.whole_card_resource == self.resource_name:
            raise SettingsError(f"--whole-card-resource must differ from {self.resource_name}")
        self._validate_usage()
        self.check_delivery()
        return self

    def _validate_usage(self) -> None:
        interval = self.usage_interval_s
        if not (interval == 0 or (math.isfinite(interval) and 1 <= interval <= MAX_SECONDS)):
            raise SettingsError(
                f"--usage-interval {interval:g} must be 0 (off) or 1 to {MAX_SECONDS:g} seconds"
            )
        if not (math.isfinite(self.overshare_grace_s) and 0 <= self.overshare_grace_s <= MAX_SECONDS):
            raise SettingsError(
                f"--overshare-grace {self.overshare_grace_s:g} must be 0 to {MAX_SECONDS:g} seconds"
            )
        event = self.overshare_event_interval_s
        if not (math.isfinite(event) and 1 <= event <= MAX_SECONDS):
            raise SettingsError(f"--overshare-event-interval {event:g} must be 1 to {MAX_SECONDS:g} seconds")
        if self.fake_processes and not (self.fake_gpus or self.inventory_file):
            raise SettingsError(
                "--fake-processes goes with --fake-gpus or --inventory-file (NVML reports the real ones)"
            )
        if self.overshare_evict and not interval:
            raise SettingsError("--overshare-evict needs GPU usage: --usage-interval must not be 0")

    def card_endpoint(self) -> str:
        """The whole-card endpoint's socket, named after `endpoint` (one endpoint per resource)."""
        return f"{self.endpoint.removesuffix('.sock')}-wholecard.sock"
