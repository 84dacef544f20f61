"""What the device plugin knows of a pod on its node that asks for whole cards (`nvidia.com/gpu` by
default): its card containers in the kubelet's Allocate order, each with the GPUs its placement names.

The extender places a card like a share holding the GPU's whole memory (core/placement/wholecards.py), so a
card container's slot is `{GPU index: that memory}` and its `units` is the number of cards. Init containers
get the lowest-index cards of the pod: the kubelet lets the app containers reuse them.

    card_view(pod asking 2 cards, placed {"0": {"1": 16, "3": 16}}, 0).slots
        -> (Slot("train", False, 2, {1: 16, 3: 16}, 0),)

Pure: reads pod dicts, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core.node.podviews import (
    NO_PLACEMENT,
    PlacementError,
    PodView,
    Slot,
    base_fields,
    container_name,
)
from webhook.core.placement import annotations as ann
from webhook.core.specs import podread
from webhook.core.specs.demand import NO_DEMAND, Demand
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources


def card_view(
    pod: Mapping[str, Any], arrival: int, names: resources.GpuResourceNames | None = None
) -> PodView | None:
    """Read a pod dict; None when it asks for no whole cards."""
    names = names or resources.GpuResourceNames()
    meta = pod.get("metadata") or {}
    spec = pod.get("spec")
    notes = meta.get("annotations")
    base = base_fields(meta, pod.get("status") or {})
    uid: str = base["uid"]
    created = str(meta.get("creationTimestamp") or "")
    read = podread.of_spec(spec, names) if isinstance(spec, Mapping) else None
    try:
        cards = NO_DEMAND if read is None else read.cards()
    except Finding as err:
        if read is None or not read.asks_cards():
            return None  # a share pod's own problem: the gpu-mem endpoint reports it
        return PodView(
            order=(arrival, 0, created, uid), first_units=0, problem=f"unreadable request: {err}", **base
        )
    if not cards.asks():
        return None
    first = next(n for n in (*cards.init_containers, *cards.containers) if n > 0)
    try:
        placement = ann.decode(notes if isinstance(notes, Mapping) else None)
    except ann.AnnotationError as err:
        order = (arrival, 0, created, uid)
        return PodView(order=order, first_units=first, problem=f"malformed placement: {err}", **base)
    order = (arrival, placement.assume_time_ns if placement else 0, created, uid)
    if placement is None:
        return PodView(order=order, first_units=first, problem=NO_PLACEMENT, **base)
    try:
        slots = _slots(spec if isinstance(spec, Mapping) else {}, cards, placement.allocation)
    except PlacementError as err:
        return PodView(order=order, first_units=first, placement=placement, problem=str(err), **base)
    return PodView(order=order, first_units=first, slots=slots, placement=placement, **base)


def _slots(spec: Mapping[str, Any], cards: Demand, alloc: ann.Allocation) -> tuple[Slot, ...]:
    """Init containers, then app containers, those asking cards only (the kubelet's Allocate order)."""
    apps: list[Slot] = []
    for i, count in enumerate(cards.containers):
        if not count:
            continue
        gpus = dict(alloc.for_container(i))
        if len(gpus) != count:
            raise PlacementError(
                f"malformed placement: container {container_name(spec, 'containers', i)!r} asks "
                f"{_whole(count)} but the allocation annotation gives it {len(gpus)} GPU(s)"
            )
        apps.append(Slot(container_name(spec, "containers", i), False, count, gpus, i))
    held = _held(apps)
    inits: list[Slot] = []
    for i, count in enumerate(cards.init_containers):
        if not count:
            continue
        if count > len(held):
            raise PlacementError(
                f"malformed placement: init container {container_name(spec, 'initContainers', i)!r} asks "
                f"{_whole(count)} but the pod holds {len(held)}"
            )
        lowest = sorted(held)[:count]
        inits.append(
            Slot(container_name(spec, "initContainers", i), True, count, {g: held[g] for g in lowest}, i)
        )
    return (*inits, *apps)


def _held(slots: Sequence[Slot]) -> dict[int, int]:
    held: dict[int, int] = {}
    for slot in slots:
        held.update(slot.gpus)
    return held


def _whole(count: int) -> str:
    return f"{count} whole GPU" if count == 1 else f"{count} whole GPUs"
