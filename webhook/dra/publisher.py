"""Keeps this node's ResourceSlice equal to what the driver serves: its healthy GPUs in a DRA mode, no
devices otherwise.

A round reads the slice and writes only when the devices differ from what it carries (the devices hash
annotation), raising the pool generation so kube-scheduler takes the new content. Rounds run at start,
on every health or mode change, on every event of the slice's watch (the kubelet deletes a driver's
slices at its own start, and 30 s after the driver went away), and every `resync_s`. Other slices of
this driver on this node (an older name) are deleted. Failures are retried.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import kubernetes.client

from webhook.core.node import devices, draslice
from webhook.dra.nodemode import NodeMode
from webhook.kube import draobjects, errors, rounds, watch

log = logging.getLogger(__name__)


class SlicePublisher:
    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        *,
        driver: str,
        node: str,
        gpus: Sequence[devices.Gpu],
        granularity: devices.Granularity,
        mode: NodeMode,
        resync_s: float = 60.0,
        retry_s: float = 2.0,
    ) -> None:
        self.api = api
        self.driver = driver
        self.node = node
        self.gpus = tuple(gpus)
        self.granularity = granularity
        self.mode = mode
        self.resync_s = resync_s
        self.retry_s = retry_s
        self.node_uid = ""  # set by the node watch: the Node then owns the slice
        self.name = draslice.slice_name(node, driver)
        self.writes = 0
        self.synced = threading.Event()  # set after the first round that succeeded
        self._unhealthy: frozenset[int] = frozenset()
        self._generation = 0
        self._rounds = rounds.Rounds("resource-slice", self._round, period_s=resync_s)

    @property
    def field_selector(self) -> str:
        """This driver's slices on this node (the selectors the kubelet wipes them with)."""
        return f"spec.nodeName={self.node},spec.driver={self.driver}"

    def set_unhealthy(self, indexes: frozenset[int]) -> None:
        if indexes != self._unhealthy:
            log.warning("unhealthy GPUs now %s", sorted(indexes) or "none")
        self._unhealthy = indexes
        self.poke()

    def poke(self) -> None:
        self._rounds.poke()

    def on_slice_event(self, event: watch.WatchEvent) -> None:
        self.poke()

    def start(self) -> SlicePublisher:
        self.poke()
        self._rounds.start()
        return self

    def stop(self) -> None:
        self._rounds.stop(timeout=10)

    def devices(self) -> list[dict[str, object]]:
        if not self.mode.serving.serves:
            return []
        return draslice.devices_of(self.gpus, self.granularity, self._unhealthy)

    def publish(self) -> bool:
        """One round; True when it wrote. Raises errors.ApiError (ConflictError: someone wrote between)."""
        wanted = self.devices()
        digest = draslice.devices_hash(wanted)
        try:
            current = draobjects.get_slice(self.api, self.name)
        except errors.NotFoundError:
            current = None
        wrote = False
        if current is None:
            body = draslice.resource_slice(
                self.node, self.driver, self._generation + 1, wanted, self.node_uid
            )
            written = draobjects.create_slice(self.api, body)
            wrote = True
        elif draslice.published_hash(current) != digest or not self._owned(current):
            body = draslice.resource_slice(
                self.node, self.driver, draslice.generation(current) + 1, wanted, self.node_uid
            )
            version = str(current["metadata"].get("resourceVersion", ""))
            written = draobjects.replace_slice(self.api, body, version)
            wrote = True
        else:
            written = current
        self._generation = max(self._generation, draslice.generation(written))
        if wrote and wanted:
            self._check_kept(written)
        if wrote:
            self.writes += 1
            log.info(
                "published ResourceSlice %s: %d GPUs, pool generation %d",
                self.name,
                len(wanted),
                draslice.generation(written),
            )
        self._delete_others()
        return wrote

    def _check_kept(self, written: dict[str, object]) -> None:
        """An API server with consumable capacity off (DRAConsumableCapacity, on by default from 1.36)
        drops allowMultipleAllocations and the request policy: each claim would then take a whole GPU."""
        spec = written.get("spec")
        found = spec.get("devices") if isinstance(spec, dict) else None
        if isinstance(found, list) and not all(
            isinstance(d, dict) and d.get("allowMultipleAllocations") for d in found
        ):
            log.error(
                "the API server dropped allowMultipleAllocations from ResourceSlice %s: consumable "
                "capacity (feature gate DRAConsumableCapacity) is off, so every claim takes a whole GPU; "
                "turn it on in kube-apiserver, kube-scheduler and the kubelet (Kubernetes 1.34+)",
                self.name,
            )

    def _owned(self, current: dict[str, object]) -> bool:
        """Whether the slice read back is ours as we would write it (node, driver, owner)."""
        spec = current.get("spec")
        meta = current.get("metadata")
        if not isinstance(spec, dict) or not isinstance(meta, dict):
            return False
        owners = meta.get("ownerReferences") or []
        owner_ok = not self.node_uid or any(
            isinstance(o, dict) and o.get("uid") == self.node_uid for o in owners
        )
        return spec.get("nodeName") == self.node and spec.get("driver") == self.driver and owner_ok

    def _delete_others(self) -> None:
        for found in draobjects.list_slices(self.api, self.field_selector):
            name = str((found.get("metadata") or {}).get("name", ""))
            if name and name != self.name:
                draobjects.delete_slice(self.api, name)
                log.info("deleted ResourceSlice %s, an older slice of this driver on this node", name)

    def _round(self) -> None:
        try:
            self.publish()
            self.synced.set()
        except errors.ConflictError:
            self._rounds.again()  # written between our read and write: read again at once
        except errors.ApiError as err:
            log.warning("publishing ResourceSlice %s failed: %s; retrying", self.name, err)
            self._rounds.again(self.retry_s)
