"""A health watcher and an inventory that show whether a component's stop waits for the watcher before it
shuts NVML down (the inventory's close): on an H200 the DRA driver's did not, and the watcher's last
NVML call raised in its thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from webhook.gpus import health, inventory


class StopOrder:
    def __init__(self, gpus: str = "0:16,1:16") -> None:
        self.ended = threading.Event()
        self.closed_after_watcher: bool | None = None  # None: never closed
        order = self

        class Inventory(inventory.FakeInventory):
            def close(self) -> None:
                order.closed_after_watcher = order.ended.is_set()

        self.inventory = Inventory(inventory.parse_fake_gpus(gpus).gpus())

    def run(self, stop: threading.Event, on_change: health.OnChange) -> None:
        stop.wait()
        threading.Event().wait(1.0)  # its last NVML event wait (1 s, as NvmlHealth's), still running
        self.ended.set()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def discover(*args: Any, **kwargs: Any) -> inventory.FakeInventory:
            return self.inventory

        def watcher(*args: Any, **kwargs: Any) -> StopOrder:
            return self

        monkeypatch.setattr(inventory, "discover", discover)
        monkeypatch.setattr(health, "watcher", watcher)
