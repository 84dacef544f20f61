"""NVIDIA MPS for shared GPUs: the per-container env and mounts that make a share enforceable, the per-pod
compute share, and the Volta check. Pure: the device plugin and the webhook's rules call it.

With MPS the GPU memory a container may allocate is capped by `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, a
comma-separated list of `<device ordinal>=<limit>` (NVIDIA's MPS guide, "0=1G,1=512MB"); the ordinals are
the container's own devices in the order of its NVIDIA_VISIBLE_DEVICES. The MPS server runs on the node
(not started by us); containers reach it through the pipe directory.

    container_env({1: 4}, Granularity("GiB", 1024), 30, MpsDirs())
    -> {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096MB", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps", "CUDA_MPS_LOG_DIRECTORY": "/var/log/nvidia-mps"}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.core.node import devices, gpulabels
from webhook.core.wire import resources

COMPUTE_PERCENT_ANNOTATION = resources.COMPUTE_PERCENT_ANNOTATION
ENV_MEM_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
ENV_THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
ENV_PIPE_DIRECTORY = "CUDA_MPS_PIPE_DIRECTORY"
ENV_LOG_DIRECTORY = "CUDA_MPS_LOG_DIRECTORY"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"  # NVIDIA's default
DEFAULT_LOG_DIRECTORY = "/var/log/nvidia-mps"  # NVIDIA's default
VOLTA = (7, 0)  # MPS memory limits and client isolation need Volta (compute capability 7.0) or newer


class MpsError(ValueError):
    """A compute share that cannot be used, or GPUs that cannot run MPS; the message says which and why."""


@dataclass(frozen=True, slots=True)
class MpsDirs:
    pipe: str = DEFAULT_PIPE_DIRECTORY
    log: str = DEFAULT_LOG_DIRECTORY


@dataclass(frozen=True, slots=True)
class Mount:
    """A host directory given to the container at the same path."""

    container_path: str
    host_path: str
    read_only: bool = False


def compute_percent(raw: object) -> int | None:
    """The pod annotation's value (core.wire.resources.compute_percent): None when absent; a whole number
    1..100, else MpsError."""
    try:
        return resources.compute_percent(raw)
    except ValueError as err:
        raise MpsError(str(err)) from None


def refusal(gpus: Sequence[devices.Gpu]) -> str | None:
    """Why MPS cannot run on these GPUs (older than Volta, or compute capability unknown); None if it can."""
    old = []
    for gpu in gpus:
        found = gpulabels.compute_capability(gpu.compute_capability)
        if found is None:
            old.append(f"GPU {gpu.index} ({gpu.model or 'unknown model'}) has an unknown compute capability")
        elif found < VOLTA:
            old.append(f"GPU {gpu.index} ({gpu.model}) has compute capability {found[0]}.{found[1]}")
    if not old:
        return None
    return (
        f"MPS needs Volta (compute capability 7.0) or newer: {'; '.join(old)}; "
        "use mode share or cgpu on this node"
    )


def container_env(
    gpus: Mapping[int, int], granularity: devices.Granularity, percent: int | None, dirs: MpsDirs
) -> dict[str, str]:
    """The MPS env of one container holding `gpus` ({GPU index: units}): its memory on each GPU in MiB."""
    limits = ",".join(
        f"{ordinal}={gpus[index] * granularity.mib_per_device}MB"
        for ordinal, index in enumerate(sorted(gpus))
    )
    env = {ENV_MEM_LIMIT: limits, ENV_PIPE_DIRECTORY: dirs.pipe, ENV_LOG_DIRECTORY: dirs.log}
    if percent is not None:
        env[ENV_THREAD_PERCENTAGE] = str(percent)
    return env


def mounts(dirs: MpsDirs) -> tuple[Mount, ...]:
    # The pipe directory holds the server's sockets: clients write to them.
    return (Mount(dirs.pipe, dirs.pipe), Mount(dirs.log, dirs.log))
