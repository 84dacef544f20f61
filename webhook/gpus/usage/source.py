"""Where GPU usage comes from: NVML for NVML GPUs, else the fake processes file (or none), behind one
protocol, picked like the inventory and health sources (`source(...)`)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from webhook.core.usage import usage
from webhook.gpus import inventory
from webhook.gpus.usage.fake import FakeUsage
from webhook.gpus.usage.nvml import NvmlUsage


class UsageSource(Protocol):
    def sample(self) -> tuple[usage.GpuSample, ...]: ...


def source(inv: inventory.GpuInventory, fake_processes: Path | None = None) -> UsageSource:
    """NVML for NVML GPUs; declared GPUs get the processes of `fake_processes` (none without it)."""
    if isinstance(inv, inventory.NvmlInventory):
        import pynvml  # noqa: PLC0415  (only on GPU nodes)

        return NvmlUsage(pynvml, inv.gpus())
    return FakeUsage(inv.gpus(), fake_processes)
