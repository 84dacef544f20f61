"""What the device plugin knows of one pod on its node that asks for GPU memory (`pod_view`) or for
whole cards (`card_view`): its containers in the kubelet's Allocate order (`Slot`s), each with the GPUs
its placement gives it, or why it has none.

Both resources are read alike (one pod read, its `Demand`, the placement annotation, the order), so
that is written once (`_view`); what differs is how a pod's demand is read and how the placement maps
to its containers (the slot rules: `_share_slots`, `_card_slots`). The extender places a card like a
share holding the GPU's whole memory (core/placement/wholecards.py), so a card container's slot is
`{GPU index: that memory}` and its `units` is the number of cards.

    card_view(pod asking 2 cards, placed {"0": {"1": 16, "3": 16}}, 0).slots
        -> (Slot("train", False, 2, {1: 16, 3: 16}, 0),)

Pure: reads pod dicts, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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
    """What Allocate needs to know of one pod on the node that asks for GPU memory (or whole cards)."""

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


# The slot rule of one resource: (pod spec, its demand, its allocation) -> its slots; PlacementError when
# the placement does not fit.
_SlotRule = Callable[[Mapping[str, Any], Demand, ann.Allocation], tuple[Slot, ...]]


def pod_view(
    pod: Mapping[str, Any], arrival: int, names: resources.GpuResourceNames | None = None
) -> PodView | None:
    """Read a pod dict; None when it asks for no GPU memory."""
    return _view(pod, arrival, names, _memory, _share_slots, dated_unreadable=False)


def card_view(
    pod: Mapping[str, Any], arrival: int, names: resources.GpuResourceNames | None = None
) -> PodView | None:
    """Read a pod dict; None when it asks for no whole cards."""
    return _view(pod, arrival, names, _cards, _card_slots, dated_unreadable=True)


def _memory(pod: Mapping[str, Any], names: resources.GpuResourceNames) -> Demand:
    return podread.of_pod(pod, names).memory()


def _cards(pod: Mapping[str, Any], names: resources.GpuResourceNames) -> Demand | None:
    """The pod's whole cards; None when a spec of no object or a share pod's own problem hides them: the
    gpu-mem endpoint reports that pod."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return None
    read = podread.of_spec(spec, names)
    try:
        return read.cards()
    except Finding:
        if read.asks_cards():
            raise
        return None


def _view(
    pod: Mapping[str, Any],
    arrival: int,
    names: resources.GpuResourceNames | None,
    demand: Callable[[Mapping[str, Any], resources.GpuResourceNames], Demand | None],
    slot_rule: _SlotRule,
    *,
    dated_unreadable: bool,  # whether an unreadable pod's order has its creationTimestamp, as it had
) -> PodView | None:
    """The view of a pod of one resource: `demand` reads what it asks (None: not this resource's pod;
    Finding: unreadable), `slot_rule` gives its containers their GPUs."""
    names = names or resources.GpuResourceNames()
    meta = pod.get("metadata") or {}
    base = _base_fields(meta, pod.get("status") or {})
    uid: str = base["uid"]
    created = str(meta.get("creationTimestamp") or "")
    try:
        want = demand(pod, names)
    except Finding as err:
        order = (arrival, 0, created if dated_unreadable else "", uid)
        return PodView(order=order, first_units=0, problem=f"unreadable request: {err}", **base)
    if want is None or not want.asks():
        return None
    first = next(u for u in (*want.init_containers, *want.containers) if u > 0)
    notes = meta.get("annotations")
    try:
        placement = ann.decode(notes if isinstance(notes, Mapping) else None)
    except ann.AnnotationError as err:
        order = (arrival, 0, created, uid)
        return PodView(order=order, first_units=first, problem=f"malformed placement: {err}", **base)
    order = (arrival, placement.assume_time_ns if placement else 0, created, uid)
    if placement is None:
        return PodView(order=order, first_units=first, problem=NO_PLACEMENT, **base)
    spec = pod.get("spec")
    try:
        slots = slot_rule(spec if isinstance(spec, Mapping) else {}, want, placement.allocation)
    except PlacementError as err:
        return PodView(order=order, first_units=first, placement=placement, problem=str(err), **base)
    return PodView(order=order, first_units=first, slots=slots, placement=placement, **base)


def _base_fields(meta: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """The `PodView` fields read alike for every pod (memory or whole cards): who it is, whether it
    waits, its MPS compute share."""
    notes = meta.get("annotations")
    return {
        "uid": str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"),
        "namespace": str(meta.get("namespace") or "default"),
        "name": str(meta.get("name") or ""),
        "waiting": _waiting(meta, status),
        "compute_percent": notes.get(mps.COMPUTE_PERCENT_ANNOTATION) if isinstance(notes, Mapping) else None,
    }


def _waiting(meta: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    # The kubelet writes container statuses right after admitting a pod, so a pod that has them (or
    # runs, or ended) is past Allocate even if marking it assigned was lost.
    return (
        not meta.get("deletionTimestamp")
        and status.get("phase") in (None, "", "Pending")
        and not status.get("containerStatuses")
        and not status.get("initContainerStatuses")
    )


def _in_order(
    spec: Mapping[str, Any],
    want: Demand,
    app_gpus: Callable[[int, int], dict[int, int]],
    init_gpus: Callable[[int, int, tuple[Slot, ...]], dict[int, int]],
) -> tuple[Slot, ...]:
    """The kubelet's Allocate order: init containers, then app containers, those asking only. The app
    containers' GPUs are found first: an init container runs inside what they hold."""
    apps = tuple(
        Slot(_container_name(spec, "containers", i), False, n, app_gpus(i, n), i)
        for i, n in enumerate(want.containers)
        if n
    )
    inits = tuple(
        Slot(_container_name(spec, "initContainers", i), True, n, init_gpus(i, n, apps), i)
        for i, n in enumerate(want.init_containers)
        if n
    )
    return (*inits, *apps)


def _share_slots(spec: Mapping[str, Any], want: Demand, alloc: ann.Allocation) -> tuple[Slot, ...]:
    """Each container gets the memory its allocation entry names; init containers share what the pod
    holds (`_init_gpus`)."""
    per_gpu = alloc.per_gpu()
    if not per_gpu:
        raise PlacementError("malformed placement: it holds no GPU memory")
    legacy = set(alloc.containers) == {0} and sum(alloc.for_container(0).values()) == want.total
    _check_entries(spec, want, alloc, legacy)

    def app_gpus(i: int, units: int) -> dict[int, int]:
        gpus = dict(alloc.for_container(i))
        if sum(gpus.values()) != units and legacy:
            # The original extender's annotations put the whole pod on container 0.
            gpus = _spread(units, sorted(alloc.for_container(0)))
        if sum(gpus.values()) != units:
            raise PlacementError(
                f"malformed placement: container {_container_name(spec, 'containers', i)!r} asks {units} "
                f"units but the allocation annotation gives it {sum(gpus.values())}"
            )
        return gpus

    return _in_order(spec, want, app_gpus, lambda _i, units, _apps: _init_gpus(units, per_gpu, want))


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
                f"container {_container_name(spec, 'containers', index)!r} asks no GPU memory"
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


def _card_slots(spec: Mapping[str, Any], cards: Demand, alloc: ann.Allocation) -> tuple[Slot, ...]:
    """Each container gets exactly as many GPUs as it asks cards; init containers the lowest-index cards
    the pod holds: the kubelet lets the app containers reuse them."""

    def app_gpus(i: int, count: int) -> dict[int, int]:
        gpus = dict(alloc.for_container(i))
        if len(gpus) != count:
            raise PlacementError(
                f"malformed placement: container {_container_name(spec, 'containers', i)!r} asks "
                f"{_whole(count)} but the allocation annotation gives it {len(gpus)} GPU(s)"
            )
        return gpus

    def init_gpus(i: int, count: int, apps: tuple[Slot, ...]) -> dict[int, int]:
        held: dict[int, int] = {}
        for slot in apps:
            held.update(slot.gpus)
        if count > len(held):
            raise PlacementError(
                f"malformed placement: init container {_container_name(spec, 'initContainers', i)!r} asks "
                f"{_whole(count)} but the pod holds {len(held)}"
            )
        return {g: held[g] for g in sorted(held)[:count]}

    return _in_order(spec, cards, app_gpus, init_gpus)


def _whole(count: int) -> str:
    return f"{count} whole GPU" if count == 1 else f"{count} whole GPUs"


def _container_name(spec: Mapping[str, Any], key: str, i: int) -> str:
    items = spec.get(key) or []
    return str(items[i].get("name") or f"{key}[{i}]") if i < len(items) else f"{key}[{i}]"
