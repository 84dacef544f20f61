"""GPU usage declared in a file, for fake inventories (`--fake-processes`): the processes NVML would
report, re-read on every poll, so tests and demos make a pod's process appear, grow and go.

    processes:
      - {gpu: 0, pid: 4242, memory: 5GiB, utilization: 0.4}   # memory as --fake-gpus: GiB, or "300MiB"
      - {gpu: 1, pid: 77, memory: 300MiB}                    # utilization: 0 when not given

A GPU's used memory is the sum of its processes', its utilisation their sum (at most 1). A missing file
means no processes; a file that cannot be read is logged and the last good one kept (a half-written
file never makes processes vanish).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TypeGuard

from webhook.core.node import devices
from webhook.core.usage import usage
from webhook.gpus.inventory import InventoryError, parse_memory_mib, read_document

log = logging.getLogger(__name__)
MIB = 1 << 20


class FakeUsage:
    def __init__(self, gpus: Sequence[devices.Gpu], path: Path | None = None) -> None:
        self.indexes = tuple(sorted(g.index for g in gpus))
        self.path = path
        self._last: dict[int, list[usage.ProcessSample]] = {}
        self._failing = ""

    def sample(self) -> tuple[usage.GpuSample, ...]:
        if self.path is not None:
            try:
                self._last = read_processes(self.path, self.indexes)
                self._failing = ""
            except InventoryError as err:
                if str(err) != self._failing:
                    log.warning("%s; keeping the last processes read", err)
                    self._failing = str(err)
        out = []
        for index in self.indexes:
            procs = self._last.get(index, [])
            out.append(
                usage.GpuSample(
                    index=index,
                    memory_used_bytes=sum(p.memory_bytes or 0 for p in procs),
                    utilization=min(1.0, sum(p.utilization or 0.0 for p in procs)),
                    processes=tuple(procs),
                    process_utilization=True,
                )
            )
        return tuple(out)


def read_processes(path: Path, indexes: Sequence[int]) -> dict[int, list[usage.ProcessSample]]:
    """GPU index -> its processes, from the file; InventoryError naming the file and entry."""
    data = read_document(path, "fake processes file", missing_ok=True)
    data = {} if data is None else data  # no file, or an empty one: no processes
    items = data.get("processes") if isinstance(data, dict) else None
    if isinstance(data, dict) and items is None:
        items = []  # "processes:" with nothing under it
    if not isinstance(items, list):
        raise InventoryError(
            f"fake processes file {path}: expected 'processes: [{{gpu: 0, pid: 1, memory: 1GiB}}]'"
        )
    found: dict[int, list[usage.ProcessSample]] = {}
    for n, item in enumerate(items):
        where = f"fake processes file {path}: processes[{n}]"
        if not isinstance(item, dict):
            raise InventoryError(f"{where}: must be a mapping like {{gpu: 0, pid: 1, memory: 1GiB}}")
        gpu, pid = item.get("gpu"), item.get("pid")
        if not _whole(gpu) or gpu not in indexes:
            raise InventoryError(f"{where}: gpu {gpu!r} is not one of the GPUs {list(indexes)}")
        if not _whole(pid) or not 0 < pid < 1 << 22:
            raise InventoryError(f"{where}: pid {pid!r} is not a process ID")
        memory = parse_memory_mib(item.get("memory"), where) * MIB
        util = item.get("utilization", 0)
        if isinstance(util, bool) or not isinstance(util, int | float) or not 0 <= util <= 1:
            raise InventoryError(f"{where}: utilization {util!r} is not a ratio from 0 to 1")
        found.setdefault(gpu, []).append(usage.ProcessSample(pid, memory, float(util)))
    return found


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
