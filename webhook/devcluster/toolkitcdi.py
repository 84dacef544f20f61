"""A CDI spec shaped as the NVIDIA Container Toolkit writes it (`nvidia-ctk cdi generate`: kind
nvidia.com/gpu, each GPU named by index and by UUID, plus `all`; /dev/nvidiactl, the driver library and
NVIDIA_VISIBLE_DEVICES=void in the common edits), for simulated GPUs: each GPU's device node is the host's
/dev/null at /dev/nvidia<index>, and its own env var names it, so a container shows which GPUs it got.

    spec(gpus, library="/tmp/x/libnvidia-ml.so.1")  -> the document, to write as /var/run/cdi/nvidia.yaml
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webhook.core.node import cdidevices, devices

FILE_NAME = "nvidia.yaml"  # what the toolkit's nvidia-cdi-refresh unit writes in /var/run/cdi
LIBRARY_PATH = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
STAND_IN_NODE = "/dev/null"  # a character device every host has


def gpu_env(index: int) -> str:
    """The env var the device of GPU `index` sets: present in a container exactly when it got that GPU."""
    return f"GPUSHARE_CDI_GPU_{index}"


def device_node(index: int) -> str:
    return f"/dev/nvidia{index}"


def _edits(gpus: Sequence[devices.Gpu]) -> dict[str, Any]:
    return {
        "deviceNodes": [{"path": device_node(g.index), "hostPath": STAND_IN_NODE} for g in gpus],
        "env": [f"{gpu_env(g.index)}={g.uuid}" for g in gpus],
    }


def spec(
    gpus: Sequence[devices.Gpu], library: str, names: Sequence[str] = ("index", "uuid")
) -> dict[str, Any]:
    """The spec of `gpus`, each named as `names` says ("index", "uuid"), with `library` (a host file) mounted
    as the NVML library."""
    named = []
    for strategy in names:
        for gpu in gpus:
            name = str(gpu.index) if strategy == "index" else gpu.uuid
            named.append({"name": name, "containerEdits": _edits([gpu])})
    named.append({"name": "all", "containerEdits": _edits(gpus)})
    return {
        "cdiVersion": "0.5.0",
        "kind": cdidevices.NVIDIA_KIND,
        "devices": named,
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": STAND_IN_NODE}],
            "mounts": [
                {
                    "hostPath": library,
                    "containerPath": LIBRARY_PATH,
                    "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"],
                }
            ],
        },
    }
