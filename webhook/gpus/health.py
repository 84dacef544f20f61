"""GPU health: NVML XID events mark a GPU unhealthy; a probe makes it healthy again once the fault clears.

Each watcher runs in its own thread and calls `on_change(unhealthy GPU indexes)` whenever the set
changes; the device plugin streams it through ListAndWatch and the node annotation (fault 11: the
original never recovered), the DRA driver drops the GPU from its ResourceSlice. `FileHealth` drives the
same from a file, for fake inventories and tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from webhook.core.node import devices
from webhook.gpus import inventory

log = logging.getLogger(__name__)

OnChange = Callable[[frozenset[int]], None]

# XIDs caused by the application, not the GPU (NVIDIA k8s-device-plugin's skip list): they do not make
# the card unhealthy for other pods.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


class HealthWatcher(Protocol):
    def run(self, stop: threading.Event, on_change: OnChange) -> None: ...


class StaticHealth:
    """Every GPU healthy, forever (no health source configured)."""

    def run(self, stop: threading.Event, on_change: OnChange) -> None:
        stop.wait()


class FileHealth:
    """Unhealthy GPU indexes from a file such as "0,2" (like the original's ConfigMap key `gpus`).

    A missing or empty file means all healthy; an unreadable line is logged and the last good
    state is kept, so a half-written file never flips GPUs.
    """

    def __init__(self, path: Path, interval: float = 0.5) -> None:
        self.path = path
        self.interval = interval

    def read(self) -> frozenset[int] | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return frozenset()
        except OSError as err:
            log.warning("health file %s unreadable: %s", self.path, err)
            return None
        parts = [p.strip() for p in text.replace("\n", ",").split(",") if p.strip()]
        if not all(p.isascii() and p.isdigit() for p in parts):
            log.warning("health file %s: %r is not a list of GPU indexes like '0,2'", self.path, text[:80])
            return None
        return frozenset(int(p) for p in parts)

    def run(self, stop: threading.Event, on_change: OnChange) -> None:
        last: frozenset[int] | None = frozenset()
        while not stop.is_set():
            now = self.read()
            if now is not None and now != last:
                last = now
                on_change(now)
            stop.wait(self.interval)


class NvmlHealth:
    """XID critical-error events from NVML; a GPU recovers when no XID came for `recovery_s` and a probe
    (UUID and memory info readable) succeeds. `nvml` is the pynvml module (or a fake in tests)."""

    def __init__(
        self,
        nvml: Any,
        gpus: Sequence[devices.Gpu],
        recovery_s: float = 60.0,
        wait_ms: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nvml = nvml
        self.gpus = tuple(gpus)
        self.recovery_s = recovery_s
        self.wait_ms = wait_ms
        self.clock = clock
        self.last_xid: dict[int, float] = {}  # GPU index -> when its last critical XID came

    def run(self, stop: threading.Event, on_change: OnChange) -> None:
        nvml = self.nvml
        events = nvml.nvmlEventSetCreate()
        by_uuid = {g.uuid: g.index for g in self.gpus}
        try:
            for gpu in self.gpus:
                handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
                try:
                    nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
                except nvml.NVMLError as err:
                    # Some GPUs (e.g. older or vGPU) do not report XIDs; they stay healthy.
                    log.warning("GPU %d: XID events unavailable (%s); health not watched", gpu.index, err)
            unhealthy: frozenset[int] = frozenset()
            while not stop.is_set():
                self._wait_event(events, by_uuid)
                now = self._unhealthy()
                if now != unhealthy:
                    unhealthy = now
                    on_change(now)
        finally:
            try:
                nvml.nvmlEventSetFree(events)
            except nvml.NVMLError as err:  # NVML already shut down (a stop that did not wait for us)
                log.debug("NVML event set not freed: %s", err)

    def _wait_event(self, events: Any, by_uuid: dict[str, int]) -> None:
        nvml = self.nvml
        try:
            data = nvml.nvmlEventSetWait(events, self.wait_ms)
        except nvml.NVMLError as err:
            if getattr(err, "value", None) != getattr(nvml, "NVML_ERROR_TIMEOUT", object()):
                log.warning("NVML event wait failed: %s", err)
                time.sleep(self.wait_ms / 1000)
            return
        xid = int(getattr(data, "eventData", 0))
        if xid in APPLICATION_XIDS:
            return
        uuid = nvml.nvmlDeviceGetUUID(data.device)
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        indexes = [by_uuid[uuid]] if uuid in by_uuid else list(by_uuid.values())
        for index in indexes:
            log.warning("GPU %d: XID %d, marked unhealthy", index, xid)
            self.last_xid[index] = self.clock()

    def _unhealthy(self) -> frozenset[int]:
        now = self.clock()
        for index, since in list(self.last_xid.items()):
            if now - since >= self.recovery_s and self._probe(index):
                log.info("GPU %d: no XID for %.0f s and probe passed, healthy again", index, now - since)
                del self.last_xid[index]
        return frozenset(self.last_xid)

    def _probe(self, index: int) -> bool:
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            nvml.nvmlDeviceGetUUID(handle)
            nvml.nvmlDeviceGetMemoryInfo(handle)
        except nvml.NVMLError as err:
            log.warning("GPU %d: probe failed (%s), stays unhealthy", index, err)
            return False
        return True


def watcher(health_file: Path | None, inv: inventory.GpuInventory, recovery_s: float = 60.0) -> HealthWatcher:
    """The health source for `inv`: the file when one is named, NVML events for NVML GPUs, else none."""
    if health_file:
        return FileHealth(health_file)
    if isinstance(inv, inventory.NvmlInventory):
        import pynvml  # noqa: PLC0415  (only on GPU nodes)

        return NvmlHealth(pynvml, inv.gpus(), recovery_s=recovery_s)
    return StaticHealth()


def start(source: HealthWatcher, stop: threading.Event, on_change: OnChange) -> threading.Thread:
    """Run `source` in its own daemon thread until `stop` is set."""
    thread = threading.Thread(target=source.run, args=(stop, on_change), name="gpu-health", daemon=True)
    thread.start()
    return thread


def join(thread: threading.Thread | None, timeout_s: float = 5.0) -> None:
    """Wait for a watcher `start` began to end once its stop event is set: its NVML event set must be
    freed before the inventory shuts NVML down (else the free fails on a stopping node)."""
    if thread is not None:
        thread.join(timeout_s)
