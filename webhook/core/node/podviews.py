"""What the device plugin knows of one pod on its node that asks for GPU memory: its containers in the
kubelet's Allocate order (`Slot`s), each with the GPU memory its placement gives it, or why it has none.

Pure: reads pod dicts, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core.node import mps
from webhook.core.placement import annotations as ann
from webhook.core.specs import podread
from webhook.core.specs.demand import Demand
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources

NO_PLACEMENT = "has no gpushare placement (it was not bound by the gpushare extender)"


class PlacementError(ValueError):
    """A placement that does not fit the pod's containers; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One container the kubelet calls Allocate for, and the GPU memory it gets: {GPU index: units}."""

    container: str
    init: bool
    units: int
    gpus: Mapping[int, int]
    index: int = 0  # in spec.containers (or spec.initContainers): the allocation annotation's key


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
    compute_percent: object = None  # the MPS compute share annotation as written (core/node/mps.py reads it)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def pod_view(
    pod: Mapping[str, Any], arrival: int, names: resources.GpuResourceNames | None = None
) -> PodView | None:
    """Read a pod dict; None when it asks for no GPU memory."""
    names = names or resources.GpuResourceNames()
    meta = pod.get("metadata") or {}
    base = base_fields(meta, pod.get("status") or {})
    uid: str = base["uid"]
    try:
        want = podread.of_pod(pod, names).memory()
    except Finding as err:
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
        return PodView(order=order, first_units=order_units[0], problem=NO_PLACEMENT, **base)
    try:
        slots = _slots(pod, want, placement)
    except PlacementError as err:
        return PodView(order=order, first_units=order_units[0], placement=placement, problem=str(err), **base)
    return PodView(order=order, first_units=order_units[0], slots=slots, placement=placement, **base)


def base_fields(meta: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """The `PodView` fields read alike for every pod (memory or whole cards): who it is, whether it
    waits, its MPS compute share."""
    notes = meta.get("annotations")
    return {
        "uid": str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"),
        "namespace": str(meta.get("namespace") or "default"),
        "name": str(meta.get("name") or ""),
        "waiting": waiting(meta, status),
        "compute_percent": notes.get(mps.COMPUTE_PERCENT_ANNOTATION) if isinstance(notes, Mapping) else None,
    }


def waiting(meta: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    # The kubelet writes container statuses right after admitting a pod, so a pod that has them (or
    # runs, or ended) is past Allocate even if marking it assigned was lost.
    return (
        not meta.get("deletionTimestamp")
        and status.get("phase") in (None, "", "Pending")
        and not status.get("containerStatuses")
        and not status.get("initContainerStatuses")
    )


def _slots(pod: Mapping[str, Any], want: Demand, placement: ann.Placement) -> tuple[Slot, ...]:
    """The kubelet's Allocate order: init containers, then app containers, those asking memory only."""
    spec = pod.get("spec") or {}
    alloc = placement.allocation
    per_gpu = alloc.per_gpu()
    if not per_gpu:
        raise PlacementError("malformed placement: it holds no GPU memory")
    legacy = set(alloc.containers) == {0} and sum(alloc.for_container(0).values()) == want.total
    _check_entries(spec, want, alloc, legacy)
    slots: list[Slot] = []
    for i, units in enumerate(want.init_containers):
        if units:
            slots.append(
                Slot(
                    container_name(spec, "initContainers", i),
                    True,
                    units,
                    _init_gpus(units, per_gpu, want),
                    i,
                )
            )
    for i, units in enumerate(want.containers):
        if not units:
            continue
        gpus = dict(alloc.for_container(i))
        if sum(gpus.values()) != units and legacy:
            # The original extender's annotations put the whole pod on container 0.
            gpus = _spread(units, sorted(alloc.for_container(0)))
        if sum(gpus.values()) != units:
            raise PlacementError(
                f"malformed placement: container {container_name(spec, 'containers', i)!r} asks {units} "
                f"units but the allocation annotation gives it {sum(gpus.values())}"
            )
        slots.append(Slot(container_name(spec, "containers", i), False, units, gpus, i))
    return tuple(slots)


def _check_entries(spec: Mapping[str, Any], want: Demand, alloc: ann.Allocation, legacy: bool) -> None:
    """Every entry gives memory to a container that asks for it; the extender writes no other.

    A 0-unit entry would add its GPU to the container's env (NVIDIA_VISIBLE_DEVICES), and an entry for
    a container that does not ask would be counted in ALIYUN_COM_GPU_MEM_POD. The original extender's
    annotations put the whole pod on container 0 (`legacy`), whether it asks or not.
    """
    for index, gpus in sorted(alloc.containers.items()):
        for gpu, units in sorted(gpus.items()):
            if units <= 0:
                raise PlacementError(
                    f"malformed placement: the allocation annotation gives container index {index} "
                    f"{units} units on GPU {gpu} (every entry must hold memory)"
                )
        asks = index < len(want.containers) and want.containers[index] > 0
        if not asks and not (legacy and index == 0):
            what = (
                f"container {container_name(spec, 'containers', index)!r} asks no GPU memory"
                if index < len(want.containers)
                else f"the pod has {len(want.containers)} container(s)"
            )
            raise PlacementError(
                f"malformed placement: the allocation annotation has an entry for container index "
                f"{index}, but {what}"
            )


def _init_gpus(units: int, per_gpu: Mapping[int, int], want: Demand) -> dict[int, int]:
    # Init containers run before the app containers, inside what the pod holds: split like the pod
    # when it is split over several GPUs, else on the GPU where the pod holds most (lowest index).
    gpus = sorted(per_gpu)
    if want.gpu_count > 1 and len(gpus) == want.gpu_count and units % len(gpus) == 0:
        return _spread(units, gpus)
    best = min(gpus, key=lambda g: (-per_gpu[g], g))
    return {best: units}


def _spread(units: int, gpus: Sequence[int]) -> dict[int, int]:
    if not gpus or units % len(gpus):
        raise PlacementError(f"malformed placement: {units} units do not split over GPUs {list(gpus)}")
    return {g: units // len(gpus) for g in gpus}


def container_name(spec: Mapping[str, Any], key: str, i: int) -> str:
    items = spec.get(key) or []
    return str(items[i].get("name") or f"{key}[{i}]") if i < len(items) else f"{key}[{i}]"
