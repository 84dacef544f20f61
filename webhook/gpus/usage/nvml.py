"""GPU usage from NVML (nvidia-ml-py): each GPU's used memory and utilisation, its compute processes with
their memory (PIDs of the host's PID namespace, whatever namespace we run in), and each process's SM
utilisation where the driver offers it.

Per-process utilisation: `nvmlDeviceGetProcessesUtilizationInfo` (drivers from 550 on), else the older
`nvmlDeviceGetProcessUtilization`; both return the driver's samples newer than a timestamp, averaged per
process over the poll. NOT_FOUND means no sample since then (every process idle); NOT_SUPPORTED on both
(e.g. MIG, vGPU) means not offered, and the container's utilisation is then absent, never 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from webhook.core.node import devices
from webhook.core.usage import usage

log = logging.getLogger(__name__)
T = TypeVar("T")

_NEW_API = "nvmlDeviceGetProcessesUtilizationInfo"
_OLD_API = "nvmlDeviceGetProcessUtilization"


class NvmlUsage:
    """`sample()` -> one `usage.GpuSample` per GPU. `nvml` is the pynvml module (a fake in tests).
    Called from one thread (the usage poller)."""

    def __init__(self, nvml: Any, gpus: Sequence[devices.Gpu]) -> None:
        self.nvml = nvml
        self.handles = {g.index: nvml.nvmlDeviceGetHandleByIndex(g.index) for g in gpus}
        self._last_seen: dict[int, int] = dict.fromkeys(self.handles, 0)  # microseconds, per GPU
        self._util_api: dict[int, str | None] = dict.fromkeys(self.handles, _NEW_API)
        self._warned: set[tuple[int, str]] = set()

    def sample(self) -> tuple[usage.GpuSample, ...]:
        return tuple(self._gpu(index, handle) for index, handle in self.handles.items())

    def utilization_call(self, index: int) -> str | None:
        """The NVML call that gives GPU `index`'s per-process utilisation; None when not offered."""
        return self._util_api.get(index)

    def _gpu(self, index: int, handle: Any) -> usage.GpuSample:
        nvml = self.nvml
        memory = self._call(index, "memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        rates = self._call(index, "utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        utils = self._process_utilization(index, handle)
        return usage.GpuSample(
            index=index,
            memory_used_bytes=int(memory.used) if memory is not None else None,
            utilization=_ratio(rates.gpu) if rates is not None else None,
            processes=tuple(
                usage.ProcessSample(pid, used, utils.get(pid, 0.0) if utils is not None else None)
                for pid, used in sorted(self._processes(index, handle).items())
            ),
            process_utilization=utils is not None,
        )

    def _processes(self, index: int, handle: Any) -> dict[int, int | None]:
        """PID -> used bytes, compute processes and MPS clients together (a PID in both counted once)."""
        nvml = self.nvml
        found: dict[int, int | None] = {}
        lists = (
            ("processes", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle)),
            ("mps processes", lambda: nvml.nvmlDeviceGetMPSComputeRunningProcesses(handle)),
        )
        for what, call in lists:
            for proc in self._call(index, what, call) or ():
                pid, used = int(proc.pid), proc.usedGpuMemory
                used = int(used) if used is not None else None
                before = found.get(pid)
                found[pid] = used if before is None else max(before, used or 0)
        return found

    def _process_utilization(self, index: int, handle: Any) -> dict[int, float] | None:
        """PID -> mean SM ratio of the samples since the last poll; None when not offered."""
        api = self._util_api[index]
        while api is not None:
            try:
                samples = getattr(self.nvml, api)(handle, self._last_seen[index])
            except Exception as err:
                code = getattr(err, "value", None)
                # NOT_FOUND: no sample since the last poll, every process idle. SUCCESS: pynvml raises it
                # when the sizing call found no samples at all (it expects INSUFFICIENT_SIZE).
                if code in (
                    getattr(self.nvml, "NVML_ERROR_NOT_FOUND", 6),
                    getattr(self.nvml, "NVML_SUCCESS", 0),
                ):
                    return {}
                if api == _NEW_API and _unsupported(self.nvml, err):
                    api = self._util_api[index] = _OLD_API
                    continue
                if _unsupported(self.nvml, err):
                    log.info("GPU %d: per-process utilisation is not offered (%s)", index, err)
                    self._util_api[index] = None
                    return None
                self._warn(index, "process utilisation", err)
                return None
            return self._mean(index, samples)
        return None

    def _mean(self, index: int, samples: Sequence[Any]) -> dict[int, float]:
        sums: dict[int, tuple[float, int]] = {}
        for s in samples:
            pid = int(s.pid)
            total, n = sums.get(pid, (0.0, 0))
            sums[pid] = (total + _ratio(s.smUtil), n + 1)
            self._last_seen[index] = max(self._last_seen[index], int(s.timeStamp))
        return {pid: total / n for pid, (total, n) in sums.items()}

    def _call(self, index: int, what: str, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except Exception as err:  # NVMLError, or a library older than the call (mismatch): no figure
            self._warn(index, what, err)
            return None

    def _warn(self, index: int, what: str, err: Exception) -> None:
        if (index, what) not in self._warned:  # once per GPU and call: a poll every few seconds
            self._warned.add((index, what))
            log.warning(
                "GPU %d: reading its %s through NVML failed (%s); reported as unknown", index, what, err
            )


def _unsupported(nvml: Any, err: Exception) -> bool:
    """The call does not exist in this driver or library, or the GPU does not support it."""
    codes = (
        getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", object()),
        getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", object()),
    )
    return (
        getattr(err, "value", None) in codes
        or isinstance(err, AttributeError)
        or (type(err).__name__ == "NVMLLibraryMismatchError")
    )


def _ratio(percent: object) -> float:
    """NVML's whole percent as a ratio, clamped to 0-1."""
    try:
        value = float(percent)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return min(1.0, max(0.0, value / 100.0))
