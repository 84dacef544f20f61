"""The node's GPUs and their health, shared by ListAndWatch, Allocate and the node publisher.

Every change bumps a version and wakes the waiters, so each ListAndWatch stream sends the full list
again (the kubelet rebuilds its device sets from every message).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

from webhook.core.node import devices
from webhook.core.placement import annotations as ann


class DeviceState:
    def __init__(self, gpus: Sequence[devices.Gpu], granularity: devices.Granularity) -> None:
        devices.check_inventory(gpus)
        self.gpus = tuple(sorted(gpus, key=lambda g: g.index))
        self.granularity = granularity
        self._unhealthy: frozenset[int] = frozenset()
        self._advertised = True  # False in a node mode that does not share (deviceplugin/nodemode.py)
        self._version = 0
        self._changed = threading.Condition()
        self._listeners: list[Callable[[], None]] = []
        # Fail at start, not at the first ListAndWatch, when a device ID would be too long.
        devices.fake_devices(self.gpus, granularity)

    @property
    def unhealthy(self) -> frozenset[int]:
        return self._unhealthy

    def set_unhealthy(self, indexes: Iterable[int]) -> None:
        known = {g.index for g in self.gpus}
        self._change(unhealthy=frozenset(i for i in indexes if i in known))

    @property
    def advertised(self) -> bool:
        return self._advertised

    def set_advertised(self, advertised: bool) -> None:
        """Advertise the devices or an empty list; streams and the node publisher follow at once."""
        self._change(advertised=advertised)

    def _change(self, *, unhealthy: frozenset[int] | None = None, advertised: bool | None = None) -> None:
        """Apply what is given; when anything changed, a new version wakes the streams and listeners."""
        with self._changed:
            now = (
                self._unhealthy if unhealthy is None else unhealthy,
                self._advertised if advertised is None else advertised,
            )
            if now == (self._unhealthy, self._advertised):
                return
            self._unhealthy, self._advertised = now
            self._version += 1
            self._changed.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def snapshot(self) -> tuple[int, list[devices.FakeDevice]]:
        with self._changed:
            version, unhealthy, advertised = self._version, self._unhealthy, self._advertised
        if not advertised:
            return version, []
        return version, devices.fake_devices(self.gpus, self.granularity, unhealthy)

    def status(self) -> tuple[int, frozenset[int], bool]:
        """(version, unhealthy GPU indexes, advertised) at one instant: the whole-card list is per GPU."""
        with self._changed:
            return self._version, self._unhealthy, self._advertised

    def wait_newer(self, version: int, timeout: float) -> int:
        """Block until the version differs from `version` or `timeout` passes; the current version."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != version, timeout)
            return self._version

    def wake(self) -> None:
        """Wake waiters (a stream that was cancelled checks its context)."""
        with self._changed:
            self._changed.notify_all()

    def node_devices(self) -> ann.NodeDevices:
        return devices.node_devices(self.gpus, self.granularity, self._unhealthy)
