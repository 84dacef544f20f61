"""A fake pynvml module for usage tests and the benchmark: GPUs whose compute processes the test starts,
grows and stops, with per-process SM samples, following nvidia-ml-py 13.615.71's calls and errors
(NVMLError carries `.value`; no sample since the timestamp is NVML_ERROR_NOT_FOUND; a driver without the
newer utilisation call answers NVML_ERROR_FUNCTION_NOT_FOUND)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

GIB = 1 << 30


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeGpu:
    total: int = 16 * GIB
    reserved: int = 300 << 20  # the driver's own, in "used" but in no process
    utilization: int = 0  # percent
    processes: dict[int, int | None] = field(default_factory=dict)  # pid -> used bytes
    mps: dict[int, int | None] = field(default_factory=dict)  # MPS clients
    sm: dict[int, int] = field(default_factory=dict)  # pid -> SM percent of its next samples
    samples: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, timestamp us, sm percent)


class FakeNvml:
    NVMLError = NVMLError
    NVML_SUCCESS = 0
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_GPU_IS_LOST = 15

    def __init__(self, count: int = 2, *, new_api: bool = True, per_process: bool = True) -> None:
        self.gpus = [FakeGpu() for _ in range(count)]
        self.new_api = new_api  # driver 550+: nvmlDeviceGetProcessesUtilizationInfo exists
        self.per_process = per_process  # False: MIG or vGPU, per-process utilisation not supported
        self.broken: dict[tuple[str, int], int] = {}  # (call, GPU) -> error code it raises
        self.now_us = 1_000_000
        self.calls: list[str] = []

    # -- the test's side -----------------------------------------------------------------------------
    def start(self, gpu: int, pid: int, memory: int | None, sm: int = 0, mps: bool = False) -> None:
        (self.gpus[gpu].mps if mps else self.gpus[gpu].processes)[pid] = memory
        self.gpus[gpu].sm[pid] = sm

    def grow(self, gpu: int, pid: int, memory: int) -> None:
        self.gpus[gpu].processes[pid] = memory

    def stop(self, gpu: int, pid: int) -> None:
        self.gpus[gpu].processes.pop(pid, None)
        self.gpus[gpu].mps.pop(pid, None)
        self.gpus[gpu].sm.pop(pid, None)

    def tick(self, us: int = 166_666) -> None:
        """Time passes: every running process with SM time leaves one sample, as the driver does."""
        self.now_us += us
        for g in self.gpus:
            for pid, sm in g.sm.items():
                if sm:
                    g.samples.append((pid, self.now_us, sm))

    # -- pynvml's side -------------------------------------------------------------------------------
    def _check(self, call: str, handle: int) -> FakeGpu:
        self.calls.append(call)
        if (call, handle) in self.broken:
            raise NVMLError(self.broken[(call, handle)])
        return self.gpus[handle]

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:  # noqa: N802
        g = self._check("memory", handle)
        used = g.reserved + sum(m or 0 for m in (*g.processes.values(), *g.mps.values()))
        return SimpleNamespace(total=g.total, free=g.total - used, used=used)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:  # noqa: N802
        g = self._check("utilization", handle)
        return SimpleNamespace(gpu=g.utilization, memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:  # noqa: N802
        g = self._check("processes", handle)
        return [_process(pid, used) for pid, used in g.processes.items()]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: int) -> list[Any]:  # noqa: N802
        g = self._check("mps", handle)
        return [_process(pid, used) for pid, used in g.mps.items()]

    def nvmlDeviceGetProcessesUtilizationInfo(self, handle: int, since: int) -> list[Any]:  # noqa: N802
        if not self.new_api:
            raise NVMLError(self.NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._samples("utilization info", handle, since)

    def nvmlDeviceGetProcessUtilization(self, handle: int, since: int) -> list[Any]:  # noqa: N802
        return self._samples("process utilization", handle, since)

    def _samples(self, call: str, handle: int, since: int) -> list[Any]:
        g = self._check(call, handle)
        if not self.per_process:
            raise NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        newer = [s for s in g.samples if s[1] > since]
        if not newer:
            raise NVMLError(self.NVML_ERROR_NOT_FOUND)
        return [
            SimpleNamespace(pid=p, timeStamp=t, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
            for p, t, sm in newer
        ]


def _process(pid: int, used: int | None) -> Any:
    return SimpleNamespace(
        pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF
    )
