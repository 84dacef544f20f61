"""Kubelet-facing GPU memory: fake device IDs and their granularity, and which pod an Allocate is for.

The kubelet counts `aliyun.com/gpu-mem` as fake devices (one per memory unit) and calls Allocate once
per container with only a device count; `AllocationBook` maps that call to the pod and container the
extender placed, and `container_env` turns the placement into the env protocol. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.core import annotations as ann
from webhook.core import demand, resources

# `<GPU UUID>-_-<j>`, as the original plugin names them; the kubelet allows 63 characters.
DEVICE_ID_SEPARATOR = "-_-"
MAX_DEVICE_ID_LENGTH = 63
MIB_PER_GIB = 1024
# MiB mode: one fake device per block of this many MiB. One device per MiB makes 1,155,072 devices
# (~70 MB) for 8 x 141 GiB, far past the kubelet's 4 MB gRPC limit (fault 5); 128 MiB blocks make
# 9,024 devices (~0.56 MB).
DEFAULT_MIB_PER_DEVICE = 128


class DeviceError(ValueError):
    """A device ID, inventory or granularity that cannot be used; the message says which and why."""


class NoMatch(LookupError):
    """No waiting pod on the node owns the container the kubelet asks devices for."""


class Unplaceable(LookupError):
    """The pod the kubelet is admitting cannot get GPU memory; it is named in `uid`."""

    def __init__(self, uid: str, message: str) -> None:
        super().__init__(message)
        self.uid = uid


@dataclass(frozen=True, slots=True)
class Granularity:
    """How much GPU memory one fake device stands for: 1 GiB, or a block of `mib_per_device` MiB."""

    unit: str = "GiB"
    mib_per_device: int = MIB_PER_GIB

    @classmethod
    def parse(cls, unit: str, mib_per_device: int | None = None) -> Granularity:
        if unit == "GiB":
            if mib_per_device not in (None, MIB_PER_GIB):
                raise DeviceError("--mib-per-device applies to --memory-unit MiB only")
            return cls("GiB", MIB_PER_GIB)
        if unit == "MiB":
            block = DEFAULT_MIB_PER_DEVICE if mib_per_device is None else mib_per_device
            if not 1 <= block <= 512 * MIB_PER_GIB:
                raise DeviceError(f"MiB per device must be between 1 and {512 * MIB_PER_GIB}, not {block}")
            return cls("MiB", block)
        raise DeviceError(f"memory unit {unit!r} is not GiB or MiB")

    @property
    def label(self) -> str:
        """The unit every number of the protocol is counted in: "GiB", "MiB" or e.g. "128MiB"."""
        if self.unit == "GiB":
            return "GiB"
        return "MiB" if self.mib_per_device == 1 else f"{self.mib_per_device}MiB"

    def units(self, memory_mib: int) -> int:
        """Whole units of a GPU's memory, rounded down (a 16130 MiB V100 has 15 GiB)."""
        return memory_mib // self.mib_per_device

    def describe(self, units: int) -> str:
        if self.label in ("GiB", "MiB"):
            return f"{units} {self.label}"
        return f"{units} x {self.mib_per_device} MiB"


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU as discovered (NVML or a declared fake inventory)."""

    index: int
    uuid: str
    memory_mib: int
    model: str = ""


@dataclass(frozen=True, slots=True)
class FakeDevice:
    id: str
    gpu_index: int
    healthy: bool


def check_inventory(gpus: Sequence[Gpu]) -> None:
    """Indexes and UUIDs unique, UUIDs usable inside a device ID; raises DeviceError."""
    seen_index: set[int] = set()
    seen_uuid: set[str] = set()
    for gpu in gpus:
        if gpu.index < 0 or gpu.index in seen_index:
            raise DeviceError(f"GPU index {gpu.index} is negative or appears twice")
        if not gpu.uuid or gpu.uuid in seen_uuid or DEVICE_ID_SEPARATOR in gpu.uuid:
            raise DeviceError(f"GPU {gpu.index}: UUID {gpu.uuid!r} is empty, repeated or contains '-_-'")
        if gpu.memory_mib <= 0:
            raise DeviceError(f"GPU {gpu.index}: memory must be positive, not {gpu.memory_mib} MiB")
        seen_index.add(gpu.index)
        seen_uuid.add(gpu.uuid)


def device_id(gpu: Gpu, j: int) -> str:
    ident = f"{gpu.uuid}{DEVICE_ID_SEPARATOR}{j}"
    if len(ident) > MAX_DEVICE_ID_LENGTH:
        raise DeviceError(f"device ID {ident!r} is longer than {MAX_DEVICE_ID_LENGTH} characters")
    return ident


def fake_devices(
    gpus: Sequence[Gpu], granularity: Granularity, unhealthy: Iterable[int] = ()
) -> list[FakeDevice]:
    """The full device list for ListAndWatch: `units(memory)` devices per GPU, GPU by GPU."""
    bad = set(unhealthy)
    return [
        FakeDevice(device_id(gpu, j), gpu.index, gpu.index not in bad)
        for gpu in sorted(gpus, key=lambda g: g.index)
        for j in range(granularity.units(gpu.memory_mib))
    ]


def decode_device_id(ident: str, gpus: Sequence[Gpu], granularity: Granularity) -> int:
    """The GPU index of one of our device IDs; DeviceError for an ID we never listed."""
    uuid, sep, tail = ident.rpartition(DEVICE_ID_SEPARATOR)
    if not sep or not (tail.isascii() and tail.isdigit()):
        raise DeviceError(f"device ID {ident!r} is not of the form <GPU UUID>-_-<n>")
    for gpu in gpus:
        if gpu.uuid == uuid:
            if int(tail) >= granularity.units(gpu.memory_mib):
                raise DeviceError(f"device ID {ident!r}: GPU {gpu.index} has no device {tail}")
            return gpu.index
    raise DeviceError(f"device ID {ident!r} names no GPU of this node")


def node_devices(
    gpus: Sequence[Gpu], granularity: Granularity, unhealthy: Iterable[int] = ()
) -> ann.NodeDevices:
    """What the extender reads from the node annotation: each GPU's memory in the protocol unit."""
    bad = set(unhealthy)
    return ann.NodeDevices(
        unit=granularity.label,
        devices=tuple(
            ann.GpuDevice(g.index, g.uuid, granularity.units(g.memory_mib), g.index not in bad, g.model)
            for g in sorted(gpus, key=lambda g: g.index)
        ),
    )


@dataclass(frozen=True, slots=True)
class Slot:
    """One container the kubelet calls Allocate for, and the GPU memory it gets: {GPU index: units}."""

    container: str
    init: bool
    units: int
    gpus: Mapping[int, int]


@dataclass(frozen=True, slots=True)
class PodView:
    """What Allocate needs to know of one pod on the node that asks for GPU memory."""

    uid: str
    namespace: str
    name: str
    order: tuple[Any, ...]  # kubelet admission order: arrival on the node, then bind time
    first_units: int  # what its first GPU container asks; 0 when unreadable
    slots: tuple[Slot, ...] = ()
    placement: ann.Placement | None = None
    problem: str | None = None  # why it cannot get memory: no placement, bad annotations
    waiting: bool = True  # Pending, not yet started by the kubelet, not being deleted

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def pod_view(
    pod: Mapping[str, Any], arrival: int, names: resources.GpuResourceNames | None = None
) -> PodView | None:
    """Read a pod dict; None when it asks for no GPU memory."""
    names = names or resources.GpuResourceNames()
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
    base: dict[str, Any] = {
        "uid": uid,
        "namespace": str(meta.get("namespace") or "default"),
        "name": str(meta.get("name") or ""),
        "waiting": _waiting(meta, status),
    }
    try:
        want = demand.pod_demand(pod, names)
    except demand.DemandError as err:
        return PodView(
            order=(arrival, 0, "", uid), first_units=0, problem=f"unreadable request: {err}", **base
        )
    if not want.asks():
        return None
    order_units = [u for u in (*want.init_containers, *want.containers) if u > 0]
    try:
        placement = ann.decode(meta.get("annotations"))
    except ann.AnnotationError as err:
        order = (arrival, 0, str(meta.get("creationTimestamp") or ""), uid)
        return PodView(order=order, first_units=order_units[0], problem=f"malformed placement: {err}", **base)
    assume = placement.assume_time_ns if placement else 0
    order = (arrival, assume, str(meta.get("creationTimestamp") or ""), uid)
    if placement is None:
        problem = "has no gpushare placement (it was not bound by the gpushare extender)"
        return PodView(order=order, first_units=order_units[0], problem=problem, **base)
    try:
        slots = _slots(pod, want, placement)
    except DeviceError as err:
        return PodView(order=order, first_units=order_units[0], placement=placement, problem=str(err), **base)
    return PodView(order=order, first_units=order_units[0], slots=slots, placement=placement, **base)


def _waiting(meta: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    # The kubelet writes container statuses right after admitting a pod, so a pod that has them (or
    # runs, or ended) is past Allocate even if marking it assigned was lost.
    return (
        not meta.get("deletionTimestamp")
        and status.get("phase") in (None, "", "Pending")
        and not status.get("containerStatuses")
        and not status.get("initContainerStatuses")
    )


def _slots(
    pod: Mapping[str, Any], want: demand.GpuMemoryDemand, placement: ann.Placement
) -> tuple[Slot, ...]:
    """The kubelet's Allocate order: init containers, then app containers, those asking memory only."""
    spec = pod.get("spec") or {}
    alloc = placement.allocation
    per_gpu = alloc.per_gpu()
    if not per_gpu:
        raise DeviceError("malformed placement: it holds no GPU memory")
    legacy = set(alloc.containers) == {0} and sum(alloc.for_container(0).values()) == want.total
    slots: list[Slot] = []
    for i, units in enumerate(want.init_containers):
        if units:
            slots.append(
                Slot(_name(spec, "initContainers", i), True, units, _init_gpus(units, per_gpu, want))
            )
    for i, units in enumerate(want.containers):
        if not units:
            continue
        gpus = dict(alloc.for_container(i))
        if sum(gpus.values()) != units and legacy:
            # The original extender's annotations put the whole pod on container 0.
            gpus = _spread(units, sorted(alloc.for_container(0)))
        if sum(gpus.values()) != units:
            raise DeviceError(
                f"malformed placement: container {_name(spec, 'containers', i)!r} asks {units} units "
                f"but the allocation annotation gives it {sum(gpus.values())}"
            )
        slots.append(Slot(_name(spec, "containers", i), False, units, gpus))
    return tuple(slots)


def _init_gpus(units: int, per_gpu: Mapping[int, int], want: demand.GpuMemoryDemand) -> dict[int, int]:
    # Init containers run before the app containers, inside what the pod holds: split like the pod
    # when it is split over several GPUs, else on the GPU where the pod holds most (lowest index).
    gpus = sorted(per_gpu)
    if want.gpu_count > 1 and len(gpus) == want.gpu_count and units % len(gpus) == 0:
        return _spread(units, gpus)
    best = min(gpus, key=lambda g: (-per_gpu[g], g))
    return {best: units}


def _spread(units: int, gpus: Sequence[int]) -> dict[int, int]:
    if not gpus or units % len(gpus):
        raise DeviceError(f"malformed placement: {units} units do not split over GPUs {list(gpus)}")
    return {g: units // len(gpus) for g in gpus}


def _name(spec: Mapping[str, Any], key: str, i: int) -> str:
    items = spec.get(key) or []
    return str(items[i].get("name") or f"{key}[{i}]") if i < len(items) else f"{key}[{i}]"


@dataclass(frozen=True, slots=True)
class Match:
    pod: PodView
    slot_number: int

    @property
    def slot(self) -> Slot:
        return self.pod.slots[self.slot_number]

    @property
    def last(self) -> bool:
        return self.slot_number == len(self.pod.slots) - 1


@dataclass(slots=True)
class AllocationBook:
    """Which containers of which pods this plugin has answered Allocate for (not thread-safe).

    The kubelet admits pods one at a time and calls Allocate for a pod's GPU containers in a row
    (init containers, then app containers). So the book first continues the pod it is in the middle
    of; only a pod's first container is matched among the others: the oldest waiting pod (arrival on
    the node, then bind time) whose first GPU container asks exactly the count. A pod that cannot get
    memory (no placement, malformed annotations) is refused when it is the one that matches.
    """

    progress: dict[str, int] = field(default_factory=dict)  # uid -> containers answered
    current: str | None = None
    refused: set[str] = field(default_factory=set)

    def match(self, count: int, pods: Iterable[PodView]) -> Match:
        if count <= 0:
            raise NoMatch("the request asks for no devices")
        pods = list(pods)
        by_uid = {p.uid: p for p in pods}
        current = by_uid.get(self.current) if self.current else None
        if current is not None and current.problem is None:
            done = self.progress.get(current.uid, 0)
            if done < len(current.slots) and current.slots[done].units == count:
                return Match(current, done)
        fresh = sorted(
            (p for p in pods if self.fresh(p)),
            key=lambda p: p.order,
        )
        for pod in fresh:
            if pod.first_units != count:
                continue
            if pod.problem is not None:
                raise Unplaceable(pod.uid, f"pod {pod.key} {pod.problem}")
            return Match(pod, 0)
        raise NoMatch(_waiting_summary(fresh))

    def fresh(self, pod: PodView) -> bool:
        """Waiting for the kubelet and not yet touched by this plugin."""
        assigned = pod.placement is not None and pod.placement.assigned
        return pod.waiting and not assigned and pod.uid not in self.progress and pod.uid not in self.refused

    def commit(self, match: Match) -> None:
        self.progress[match.pod.uid] = match.slot_number + 1
        self.current = None if match.last else match.pod.uid

    def refuse(self, uid: str) -> None:
        self.refused.add(uid)
        self.current = None

    def forget_except(self, uids: Iterable[str]) -> None:
        """Drop what is known of pods that left the node, so the book does not grow forever."""
        keep = set(uids)
        self.progress = {u: n for u, n in self.progress.items() if u in keep}
        self.refused &= keep
        if self.current not in keep:
            self.current = None


def _waiting_summary(fresh: Sequence[PodView]) -> str:
    if not fresh:
        return "no pod on this node is waiting for GPU memory"
    parts = []
    for pod in fresh[:5]:
        why = pod.problem or f"its first GPU container asks {pod.first_units}"
        parts.append(f"{pod.key} ({why})")
    more = f" and {len(fresh) - 5} more" if len(fresh) > 5 else ""
    return "pods waiting on this node: " + "; ".join(parts) + more


def container_env(
    match: Match, gpus: Sequence[Gpu], granularity: Granularity, isolation_disabled: bool
) -> dict[str, str]:
    """The env protocol for the matched container; DeviceError when a placed GPU is not on this node."""
    by_index = {g.index: g for g in gpus}
    slot = match.slot
    chosen = sorted(slot.gpus)
    missing = [g for g in chosen if g not in by_index]
    if missing:
        raise DeviceError(f"pod {match.pod.key} is placed on GPU {missing} which this node does not have")
    placement = match.pod.placement
    assert placement is not None
    env = {
        resources.ENV_VISIBLE_DEVICES: ",".join(by_index[g].uuid for g in chosen),
        resources.ENV_MEM_IDX: ",".join(str(g) for g in chosen),
        resources.ENV_MEM_POD: str(placement.pod_total),
        # Memory on each of its GPUs: on one GPU that is the container's whole share.
        resources.ENV_MEM_CONTAINER: str(max(slot.gpus.values())),
        resources.ENV_MEM_DEV: str(granularity.units(by_index[chosen[0]].memory_mib)),
    }
    if isolation_disabled:
        env[resources.CGPU_DISABLE_ENV] = "true"
    return env
