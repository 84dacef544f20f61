"""Allocate policy: turn the kubelet's device count into the env of the container the extender placed.

Pods come from a `PodSource` (a watch of this node's pods, never an API list per call: fault 6); the
matching is `core.devices.AllocationBook`. Marking a pod assigned goes to an `AssignMarker` queue, so no
API round trip sits on the kubelet's admission path. Failures raise `AllocateError`, never a fake env.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from webhook.core import devices, resources
from webhook.deviceplugin.state import DeviceState

log = logging.getLogger(__name__)


class AllocateError(Exception):
    """Allocate cannot answer; `invalid` tells a malformed request from a pod that cannot be served."""

    def __init__(self, message: str, invalid: bool = False) -> None:
        super().__init__(message)
        self.invalid = invalid


class PodSource(Protocol):
    def snapshot(self) -> tuple[int, list[devices.PodView]]:
        """(version, the GPU-memory pods on this node); the version grows on every change."""
        ...

    def wait_newer(self, version: int, timeout: float) -> bool: ...


class AssignMarker(Protocol):
    def mark(self, pod: devices.PodView) -> None: ...


class Allocator:
    """Serialises Allocate calls (the kubelet admits one pod at a time) and keeps the allocation book
    across kubelet and server restarts: it lives as long as the process."""

    def __init__(
        self,
        state: DeviceState,
        pods: PodSource,
        marker: AssignMarker,
        *,
        isolation_disabled: Callable[[], bool],
        node_name: str,
        resource_name: str = resources.GPU_MEMORY,
        wait_s: float = 3.0,
    ) -> None:
        self.state = state
        self.pods = pods
        self.marker = marker
        self.isolation_disabled = isolation_disabled
        self.node_name = node_name
        self.resource_name = resource_name
        self.wait_s = wait_s
        self.book = devices.AllocationBook()
        self._lock = threading.Lock()

    def allocate(self, device_ids: Sequence[str]) -> dict[str, str]:
        """The env for one container that the kubelet gives these devices."""
        gpus, granularity = self.state.gpus, self.state.granularity
        if not device_ids:
            raise AllocateError("the container request lists no device IDs", invalid=True)
        if len(set(device_ids)) != len(device_ids):
            raise AllocateError("the container request lists a device ID twice", invalid=True)
        for ident in device_ids:
            try:
                devices.decode_device_id(ident, gpus, granularity)
            except devices.DeviceError as err:
                raise AllocateError(f"unknown device: {err}", invalid=True) from None
        count = len(device_ids)
        with self._lock:
            return self._allocate(count, gpus, granularity)

    def _allocate(
        self, count: int, gpus: Sequence[devices.Gpu], granularity: devices.Granularity
    ) -> dict[str, str]:
        deadline = time.monotonic() + self.wait_s
        while True:
            version, pods = self.pods.snapshot()
            self.book.forget_except(p.uid for p in pods)
            try:
                match = self.book.match(count, pods)
            except devices.Unplaceable as err:
                self.book.refuse(err.uid)
                raise AllocateError(self._explain(count, str(err))) from None
            except devices.NoMatch as err:
                # The kubelet's watch may have seen the pod before ours: wait for ours to catch up.
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    self.pods.wait_newer(version, remaining)
                    continue
                raise AllocateError(self._explain(count, f"no placed pod matches; {err}")) from None
            try:
                env = devices.container_env(match, gpus, granularity, self.isolation_disabled())
            except devices.DeviceError as err:
                self.book.refuse(match.pod.uid)
                raise AllocateError(self._explain(count, str(err))) from None
            self.book.commit(match)
            log.info(
                "allocated %s to %s container %s: GPU %s",
                granularity.describe(count),
                match.pod.key,
                match.slot.container,
                env[resources.ENV_MEM_IDX],
            )
            if match.last:
                self.marker.mark(match.pod)
            return env

    def _explain(self, count: int, why: str) -> str:
        what = self.state.granularity.describe(count)
        return f"gpushare: cannot allocate {what} of {self.resource_name} on node {self.node_name}: {why}"
