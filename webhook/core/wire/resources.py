"""Names on the wire: GPU resource names, labels, annotations and env vars of the gpushare protocol.

Every other module takes these names from here (or from a `GpuResourceNames` passed in), so a key is
spelled once. Values are the original gpushare project's, byte for byte (wire compatibility).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# Extended resources.
GPU_MEMORY = "aliyun.com/gpu-mem"
GPU_COUNT = "aliyun.com/gpu-count"
NVIDIA_GPU = "nvidia.com/gpu"
WHOLE_DEVICE_DEFAULTS: tuple[str, ...] = (
    NVIDIA_GPU,
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "gpu.intel.com/xe",
)
WHOLE_DEVICE_PREFIX_DEFAULTS: tuple[str, ...] = ("nvidia.com/mig-",)

# The chart's DRA DeviceClasses (dra.deviceClasses): shares of one GPU's memory, and whole GPUs.
DRA_SHARE_CLASS = "gpushare-memory"
DRA_WHOLE_CLASS = "gpushare-gpu"

# Pod label asking for the pod's gpu-mem to be split evenly over several GPUs of one node.
GPU_COUNT_LABEL = "aliyun.com/gpu-count"

# Node labels.
GPUSHARE_NODE_LABEL = "gpushare"
CGPU_NODE_LABEL = "cgpu"
ISOLATION_KEY = "cgpu.disable.isolation"
ACK_SCHEDULE_LABEL = "ack.node.gpu.schedule"

# Container env switch and the env protocol of an allocated container.
CGPU_DISABLE_ENV = "CGPU_DISABLE"
ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
ENV_MEM_IDX = "ALIYUN_COM_GPU_MEM_IDX"
ENV_MEM_POD = "ALIYUN_COM_GPU_MEM_POD"
ENV_MEM_CONTAINER = "ALIYUN_COM_GPU_MEM_CONTAINER"
ENV_MEM_DEV = "ALIYUN_COM_GPU_MEM_DEV"

# Pod annotations written by the extender at bind time and by the device plugin in Allocate.
ANN_MEM_IDX = "ALIYUN_COM_GPU_MEM_IDX"
ANN_MEM_POD = "ALIYUN_COM_GPU_MEM_POD"
ANN_MEM_DEV = "ALIYUN_COM_GPU_MEM_DEV"
ANN_MEM_ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"
ANN_MEM_ASSUME_TIME = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
ANN_ALLOCATION = "scheduler.framework.gpushare.allocation"

# Ours (not in the original protocol). The device plugin publishes each GPU of its node here, so the
# extender can account GPUs of different sizes and skip unhealthy ones; see
# webhook/core/placement/annotations.py.
NODE_DEVICES_ANNOTATION = "gpushare.aliyun.com/devices"
# How the device plugin hands this node's GPUs to containers: envvar, cdi-cri or both
# (webhook/core/node/devicelist.py); `gpushare inspect` shows it.
NODE_DEVICE_LIST_ANNOTATION = "gpushare.aliyun.com/device-list"
# Per-pod placement policy for prioritize: "binpack" (default) or "spread".
PLACEMENT_POLICY_ANNOTATION = "gpushare.aliyun.com/placement-policy"
# Per pod, for MPS nodes: the share of each GPU's streaming multiprocessors its containers may use, 1..100.
# Its grammar lives here, beside the name: the webhook's rules judge it where the pod is read, the device
# plugin (core/node/mps.py) where it hands the share out.
COMPUTE_PERCENT_ANNOTATION = "gpushare.aliyun.com/compute-percent"


def compute_percent(raw: object) -> int | None:
    """The compute-percent annotation's value: None when absent; a whole number 1..100, else ValueError."""
    if raw is None:
        return None
    text = raw.strip() if isinstance(raw, str) else ""
    if text.isascii() and text.isdigit() and len(text) <= 3 and 1 <= int(text) <= 100:
        return int(text)
    shown = str(raw)[:20]
    raise ValueError(
        f"annotation {COMPUTE_PERCENT_ANNOTATION}={shown!r} must be a whole percent of the GPU's compute "
        'between 1 and 100, e.g. "30"'
    )


@dataclass(frozen=True, slots=True)
class GpuResourceNames:
    """Which resource names count as GPUs. Configurable; the defaults are the common device plugins."""

    whole_device: frozenset[str] = field(default_factory=lambda: frozenset(WHOLE_DEVICE_DEFAULTS))
    whole_device_prefixes: tuple[str, ...] = WHOLE_DEVICE_PREFIX_DEFAULTS
    memory: str = GPU_MEMORY
    count: str = GPU_COUNT
    # The whole cards our device plugin serves beside shares on shared nodes
    # (webhook/core/placement/wholecards.py); list it in whole_device too, so the rules check its values.
    whole_card: str = NVIDIA_GPU
    # The exact GPU names, for is_gpu and gpu_names: every resource name of every container is looked up.
    _exact: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_exact", frozenset((*self.whole_device, self.memory, self.count)))

    def is_whole_device(self, name: str) -> bool:
        return name in self.whole_device or name.startswith(self.whole_device_prefixes)

    def is_gpu(self, name: str) -> bool:
        return name in self._exact or name.startswith(self.whole_device_prefixes)

    def gpu_names(self, keys: Iterable[object]) -> list[str]:
        """The GPU names among `keys` (resource names as decoded: maybe no strings), sorted."""
        exact = self._exact
        prefixes = self.whole_device_prefixes
        return sorted([k for k in keys if k in exact or (isinstance(k, str) and k.startswith(prefixes))])


# An extended resource name (pkg/apis/core/validation: IsExtendedResourceName): a DNS-1123 subdomain
# prefix, a "/", and a qualified name; the kubelet refuses to register anything else.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def whole_card_resource(text: str) -> str:
    """`text` when it can name the whole-card resource (`--whole-card-resource`); ValueError saying why
    not."""
    domain, slash, name = text.partition("/")
    if not slash or not _QUALIFIED.match(name) or len(domain) > 253 or not _DNS_SUBDOMAIN.match(domain):
        raise ValueError(f"{text!r} is not an extended resource name (<domain>/<name>, e.g. nvidia.com/gpu)")
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        raise ValueError(f"{text!r} is in the kubernetes.io domain, which device plugins cannot serve")
    if text in (GPU_MEMORY, GPU_COUNT):
        raise ValueError(f"{text!r} is the GPU memory protocol's own resource, not whole cards")
    return text
