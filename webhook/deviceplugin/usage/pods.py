"""Every pod of this node as usage needs it (core/usage/podshares.py), kept from the same pod watch as
Allocate's stores: an ended or deleted pod leaves at once, and its series with it."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core.usage import podshares
from webhook.core.wire import resources


class PodSharesStore:
    def __init__(
        self, unit_bytes: int, gpu_bytes: Mapping[int, int], names: resources.GpuResourceNames | None = None
    ) -> None:
        self.unit_bytes = unit_bytes
        self.gpu_bytes = dict(gpu_bytes)
        self.names = names or resources.GpuResourceNames()
        self._pods: dict[str, podshares.PodShares] = {}
        self._lock = threading.Lock()

    def _key(self, pod: Mapping[str, Any]) -> str:
        meta = pod.get("metadata") or {}
        return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")

    def _read(self, pod: Mapping[str, Any]) -> podshares.PodShares | None:
        return podshares.pod_shares(pod, self.unit_bytes, self.gpu_bytes, self.names)

    def apply(self, kind: str, pod: Mapping[str, Any]) -> None:
        """A watch event: ADDED, MODIFIED or DELETED."""
        key = self._key(pod)
        shares = None if kind == "DELETED" else self._read(pod)
        with self._lock:
            if shares is None:
                self._pods.pop(key, None)
            else:
                self._pods[key] = shares

    def resync(self, pods: Iterable[Mapping[str, Any]]) -> None:
        fresh = {}
        for pod in pods:
            shares = self._read(pod)
            if shares is not None:
                fresh[self._key(pod)] = shares
        with self._lock:
            self._pods = fresh

    def snapshot(self) -> list[podshares.PodShares]:
        with self._lock:
            return list(self._pods.values())
