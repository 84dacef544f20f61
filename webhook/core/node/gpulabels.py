"""The GPU type labels the device plugin writes on its Node, so a pod selects a GPU model by nodeSelector.

ACK's keys (`aliyun.accelerator/nvidia_name`, `_mem`, `_count`) and one generic set: the Kubernetes GPU
guide's `accelerator` and our `gpushare.aliyun.com/compute-capability`. Values are made valid label values
(63 characters, alphanumerics and `-_.` inside). A node with GPUs of different models gets the model
`mixed` and the smallest memory and compute capability: a selector for one model must not land a pod on a
node whose other GPUs are another model. Pure: `node_labels(gpus)` gives every key, None for "remove".

    node_labels([Gpu(0, "GPU-a", 16160, "Tesla V100-SXM2-16GB", "7.0")])
    -> {"aliyun.accelerator/nvidia_name": "Tesla-V100-SXM2-16GB", "aliyun.accelerator/nvidia_mem": "16160MiB",
        "aliyun.accelerator/nvidia_count": "1", "accelerator": "nvidia-tesla-v100-sxm2-16gb",
        "gpushare.aliyun.com/compute-capability": "7.0"}
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from webhook.core.node import devices

NVIDIA_NAME = "aliyun.accelerator/nvidia_name"
NVIDIA_MEM = "aliyun.accelerator/nvidia_mem"  # MiB of one GPU, written "16160MiB" as ACK does
NVIDIA_COUNT = "aliyun.accelerator/nvidia_count"
ACCELERATOR = "accelerator"  # the Kubernetes GPU guide's label: "nvidia-tesla-p100"
COMPUTE_CAPABILITY = "gpushare.aliyun.com/compute-capability"  # "7.0": Volta and newer run MPS
KEYS: tuple[str, ...] = (NVIDIA_NAME, NVIDIA_MEM, NVIDIA_COUNT, ACCELERATOR, COMPUTE_CAPABILITY)
MIXED = "mixed"

_MAX = 63
_INVALID = re.compile(r"[^A-Za-z0-9_.-]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")
_CAPABILITY = re.compile(r"^([0-9]{1,2})\.([0-9]{1,2})$")


def label_value(text: str) -> str:
    """`text` as a valid label value: other characters become `-`, ends are alphanumeric, 63 at most;
    "" when nothing usable is left (the key is then removed)."""
    value = _INVALID.sub("-", text.strip())
    value = _EDGE.sub("", value[:_MAX])
    return _EDGE.sub("", value)


def compute_capability(text: str) -> tuple[int, int] | None:
    """`"7.5"` -> (7, 5); None when unknown or not of that form."""
    found = _CAPABILITY.match(text.strip())
    return (int(found[1]), int(found[2])) if found else None


def model(models: Iterable[str]) -> str:
    """The node's model as its label value: the one model of its GPUs, `mixed`, or "" when none is known."""
    found = {m.strip() for m in models}
    return label_value(found.pop()) if len(found) == 1 else (MIXED if found else "")


def node_labels(gpus: Sequence[devices.Gpu]) -> dict[str, str | None]:
    """Every key of KEYS with its value, or None where the key must be removed (no GPUs, unknown)."""
    if not gpus:
        return dict.fromkeys(KEYS)
    name = model(g.model for g in gpus)
    capabilities = [compute_capability(g.compute_capability) for g in gpus]
    known = [c for c in capabilities if c is not None]
    lowest = min(known) if len(known) == len(capabilities) else None
    generic = label_value(f"nvidia-{name}".lower()) if name else ""
    return {
        NVIDIA_NAME: name or None,
        NVIDIA_MEM: f"{min(g.memory_mib for g in gpus)}MiB",
        NVIDIA_COUNT: str(len(gpus)),
        ACCELERATOR: generic or None,
        COMPUTE_CAPABILITY: f"{lowest[0]}.{lowest[1]}" if lowest else None,
    }
