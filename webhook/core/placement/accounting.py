"""Per-GPU memory ledger of one node, rebuilt from the node object and its pods' gpushare annotations.

The extender's cache keeps one `Ledger` per node and updates it pod by pod; `gpushare inspect` builds
the same ledger in one go with `build(node, pods)`. Both count exactly the same memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.placement import annotations as ann
from webhook.core.specs import podread
from webhook.core.specs.finding import Finding
from webhook.core.wire import quantity, resources
from webhook.core.wire.units import unit_mib

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class DevicesError(ValueError):
    """A node whose GPUs cannot be read (bad annotation, capacity without a GPU count)."""


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU of a node with the memory pods hold on it, and how many pods hold it (`shares`: what
    spread minimises, core.placement.spreading). An unhealthy GPU has no free memory."""

    index: int
    memory: int
    used: int = 0
    healthy: bool = True
    uuid: str = ""
    model: str = ""
    shares: int = 0

    @property
    def free(self) -> int:
        return max(0, self.memory - self.used) if self.healthy else 0


@dataclass(frozen=True, slots=True)
class PodShare:
    """The memory one pod holds on a node: `key` is "namespace/name"; `assumed` = bound, not yet seen."""

    key: str
    uid: str
    allocation: ann.Allocation
    assigned: bool = False
    assumed: bool = False
    assume_time_ns: int = 0


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def holds_memory(pod: Mapping[str, Any]) -> bool:
    """A pod counts until it is Succeeded/Failed or removed from the API, being deleted or not.

    A terminating pod's containers keep their GPU memory until the kubelet has stopped them (up to the
    grace period), and kube-scheduler and the kubelet count its resources until the object is gone too
    (the original extender stopped at the deletionTimestamp, and could over-commit meanwhile).
    """
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def being_deleted(pod: Mapping[str, Any]) -> bool:
    """The pod has a deletionTimestamp: it still holds its memory (`holds_memory`), but kube-apiserver
    never binds it any more."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def node_name_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def convert(amount: int, from_unit: str, to_unit: str) -> int:
    """GPU memory from one unit to another ("GiB", "MiB", "<N>MiB"); rounds down, as the protocol does."""
    if from_unit == to_unit:
        return amount
    return amount * unit_mib(from_unit) // unit_mib(to_unit)


def node_devices(
    node: Mapping[str, Any], unit: str = "GiB", names: resources.GpuResourceNames | None = None
) -> ann.NodeDevices:
    """The GPUs of a node, in `unit`.

    From the device plugin's annotation `NODE_DEVICES_ANNOTATION` when present (each GPU its own size and
    health); otherwise capacity[gpu-mem] / capacity[gpu-count] equal GPUs (a remainder is dropped, so the
    split never promises memory a card lacks). A node with neither has no GPUs. Raises DevicesError.
    """
    names = names or resources.GpuResourceNames()
    meta = node.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(resources.NODE_DEVICES_ANNOTATION)
    if raw is not None:
        try:
            published = ann.NodeDevices.from_json(str(raw))
        except ann.AnnotationError as err:
            raise DevicesError(str(err)) from None
        devices = tuple(
            ann.GpuDevice(d.index, d.uuid, convert(d.memory, published.unit, unit), d.healthy, d.model)
            for d in published.devices
        )
        return ann.NodeDevices(unit=unit, devices=devices)
    capacity = (node.get("status") or {}).get("capacity") or {}
    memory = _whole(capacity, names.memory)
    count = _whole(capacity, names.count)
    if memory == 0:
        return ann.NodeDevices(unit=unit, devices=())
    if count == 0:
        raise DevicesError(
            f"node reports {names.memory}={memory} but no {names.count}, so the size of each GPU is unknown"
        )
    size = memory // count
    return ann.NodeDevices(
        unit=unit, devices=tuple(ann.GpuDevice(index=i, uuid="", memory=size) for i in range(count))
    )


def _whole(capacity: Mapping[str, Any], name: str) -> int:
    if name not in capacity:
        return 0
    try:
        q = quantity.from_json(capacity[name])
    except quantity.QuantityError as err:
        raise DevicesError(f"capacity[{name}] {err}") from None
    if q.is_negative() or not q.is_integer():
        raise DevicesError(f"capacity[{name}] {q} is not a whole number")
    return q.to_int()


def share_of(pod: Mapping[str, Any]) -> PodShare | None:
    """The memory a pod holds according to its annotations; None when it holds none.

    Raises ann.AnnotationError for a placement that cannot be read.
    """
    if not holds_memory(pod):
        return None
    placement = ann.decode((pod.get("metadata") or {}).get("annotations"))
    if placement is None or placement.pod_total == 0:
        return None
    meta = pod.get("metadata") or {}
    return PodShare(
        key=pod_key(pod),
        uid=str(meta.get("uid") or ""),
        allocation=placement.allocation,
        assigned=placement.assigned,
        assume_time_ns=placement.assume_time_ns,
    )


@dataclass(slots=True)
class Ledger:
    """GPU memory held on one node, pod by pod. Not thread-safe: callers hold their own lock.

    Memory a pod holds on a GPU index the node no longer has (its GPU count shrank) is kept as a
    problem rather than dropped, so the pod is still visible and counts again if the GPU returns.
    """

    node: str
    devices: ann.NodeDevices = field(default_factory=lambda: ann.NodeDevices("GiB", ()))
    device_problem: str = ""
    _shares: dict[str, PodShare] = field(default_factory=dict)
    _used: dict[int, int] = field(default_factory=dict)
    _held: dict[int, int] = field(default_factory=dict)  # pods holding memory, per GPU index
    _gpus: tuple[Gpu, ...] | None = None
    _free_desc: tuple[int, ...] | None = None
    _free_asc: tuple[int, ...] | None = None

    @property
    def unit(self) -> str:
        return self.devices.unit

    def set_devices(self, devices: ann.NodeDevices, problem: str = "") -> None:
        self.devices = devices
        self.device_problem = problem
        self._changed()

    def place(self, share: PodShare) -> None:
        """Count a pod's memory, replacing what the same pod (by key) held before."""
        self.release(share.key)
        self._shares[share.key] = share
        for gpu, units in share.allocation.per_gpu().items():
            self._used[gpu] = self._used.get(gpu, 0) + units
            self._held[gpu] = self._held.get(gpu, 0) + 1  # one pod, however many containers it puts there
        self._changed()

    def release(self, key: str) -> PodShare | None:
        share = self._shares.pop(key, None)
        if share is not None:
            for gpu, units in share.allocation.per_gpu().items():
                left = self._used.get(gpu, 0) - units
                if left:
                    self._used[gpu] = left
                else:
                    self._used.pop(gpu, None)
                held = self._held.get(gpu, 0) - 1
                if held:
                    self._held[gpu] = held
                else:
                    self._held.pop(gpu, None)
            self._changed()
        return share

    def _changed(self) -> None:
        self._gpus = None
        self._free_desc = None
        self._free_asc = None

    def share(self, key: str) -> PodShare | None:
        return self._shares.get(key)

    def shares(self) -> tuple[PodShare, ...]:
        return tuple(sorted(self._shares.values(), key=lambda s: s.key))

    def gpus(self) -> tuple[Gpu, ...]:
        """Every GPU of the node with its used memory and shares, in index order (cached until the next
        change)."""
        if self._gpus is None:
            used, held = self._used, self._held
            self._gpus = tuple(
                Gpu(d.index, d.memory, used.get(d.index, 0), d.healthy, d.uuid, d.model, held.get(d.index, 0))
                for d in self.devices.devices
            )
        return self._gpus

    def largest_memory(self) -> int:
        """Memory of the node's largest healthy GPU, used or not; -1 when none is healthy."""
        return max((g.memory for g in self.gpus() if g.healthy), default=-1)

    def free_desc(self) -> tuple[int, ...]:
        """Free memory of each healthy GPU, largest first (cached; filter reads it for every node)."""
        if self._free_desc is None:
            self._free_desc = tuple(sorted((g.free for g in self.gpus() if g.healthy), reverse=True))
        return self._free_desc

    def free_asc(self) -> tuple[int, ...]:
        """Free memory of each healthy GPU, smallest first (cached; filter's best fit bisects it)."""
        if self._free_asc is None:
            self._free_asc = self.free_desc()[::-1]
        return self._free_asc

    def pods_on(self, gpu: int) -> tuple[PodShare, ...]:
        return tuple(s for s in self.shares() if gpu in s.allocation.per_gpu())

    def total(self) -> int:
        return sum(g.memory for g in self.gpus())

    def used(self) -> int:
        return sum(g.used for g in self.gpus())

    def problems(self) -> tuple[str, ...]:
        found = [self.device_problem] if self.device_problem else []
        known = {d.index: d for d in self.devices.devices}
        for share in self.shares():
            for gpu, units in sorted(share.allocation.per_gpu().items()):
                if gpu not in known:
                    found.append(
                        f"pod {share.key} holds {units} {self.unit} on GPU {gpu}, which the node lacks"
                    )
        for g in self.gpus():
            if g.used > g.memory:
                found.append(f"GPU {g.index} is over-committed: {g.used}/{g.memory} {self.unit}")
        return tuple(found)


@dataclass(frozen=True, slots=True)
class Skipped:
    """A pod on the node whose memory could not be counted, and why."""

    key: str
    reason: str


def build(
    node: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    unit: str = "GiB",
    names: resources.GpuResourceNames | None = None,
) -> tuple[Ledger, tuple[Skipped, ...]]:
    """The ledger of `node` from all pods (pods on other nodes are ignored), and pods that were skipped.

    A pod asking for gpu-mem on this node without a placement (it bypassed the extender) is skipped
    and reported: the device plugin refuses it, so it holds no memory.
    """
    name = str((node.get("metadata") or {}).get("name") or "")
    ledger = Ledger(node=name)
    try:
        ledger.set_devices(node_devices(node, unit, names))
    except DevicesError as err:
        ledger.set_devices(ann.NodeDevices(unit, ()), str(err))
    skipped: list[Skipped] = []
    for pod in pods:
        if node_name_of(pod) != name:
            continue
        try:
            share = share_of(pod)
        except ann.AnnotationError as err:
            skipped.append(Skipped(pod_key(pod), str(err)))
            continue
        if share is not None:
            ledger.place(share)
            continue
        if holds_memory(pod):
            try:
                asks = podread.of_pod(pod, names).memory().asks()
            except Finding as err:
                skipped.append(Skipped(pod_key(pod), str(err)))
                continue
            if asks:
                skipped.append(
                    Skipped(pod_key(pod), "asks for GPU memory but was not placed by the extender")
                )
    return ledger, tuple(skipped)
