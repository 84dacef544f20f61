"""Whole-card device IDs (one per GPU: the GPU's UUID), which of them to prefer for a container, and which
waiting container a kubelet request is for. The candidates come from `matching.AllocationBook` over card
pod views (core/node/cardviews.py); a card's ID names its GPU, so the IDs the kubelet passes pick the
candidate whose placement they are. Pure: no I/O, no clock.

    card_gpus(["GPU-b"], gpus)                       -> (1,)
    prefer(["GPU-a", "GPU-b"], [], 1, [pod on 1], gpus) -> (["GPU-b"], that match)
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook.core.node import devices
from webhook.core.node.matching import Match, NoMatch, Unplaceable


def card_gpus(ids: Sequence[str], gpus: Sequence[devices.Gpu]) -> tuple[int, ...]:
    """The GPU indexes of card device IDs, sorted; DeviceError for an empty list, a repeated ID or an ID
    that names no GPU of this node."""
    if not ids:
        raise devices.DeviceError("the container request lists no device IDs")
    if len(set(ids)) != len(ids):
        raise devices.DeviceError("the container request lists a device ID twice")
    by_uuid = {g.uuid: g.index for g in gpus}
    unknown = [i for i in ids if i not in by_uuid]
    if unknown:
        raise devices.DeviceError(f"device ID {unknown[0]!r} names no GPU of this node")
    return tuple(sorted(by_uuid[i] for i in ids))


def prefer(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    found: Sequence[Match],
    gpus: Sequence[devices.Gpu],
) -> tuple[list[str], Match | None]:
    """The cards of the first candidate whose placed GPUs the kubelet can give (must-include IDs among
    them), and that candidate; else the must-include IDs and the lowest-index free cards. Never raises:
    the answer is advice, and an error would fail the pod."""
    uuids = {g.index: g.uuid for g in gpus}
    free = set(available) | set(must_include)
    for match in found:
        if match.pod.problem is not None:
            break  # the likeliest pod will be refused: advise no other pod's GPUs
        want = [uuids.get(g, "") for g in sorted(match.slot.gpus)]
        if len(want) == size and free.issuperset(want) and set(must_include) <= set(want):
            return want, match
    order = {g.uuid: g.index for g in gpus}
    rest = sorted(
        (i for i in available if i not in must_include), key=lambda i: (order.get(i, len(order)), i)
    )
    return list(dict.fromkeys([*must_include, *rest]))[:size], None


def pick(found: Sequence[Match], chosen: Sequence[int]) -> Match:
    """The candidate placed on exactly the GPUs `chosen`, else the first (the kubelet did not take our
    advice: the container still gets its placement, which the extender's ledger counts). Unplaceable when
    that pod cannot get cards; NoMatch when there is no candidate."""
    if not found:
        raise NoMatch("no waiting pod asks this many whole GPUs")
    wanted = set(chosen)
    best = next((m for m in found if m.pod.problem is None and set(m.slot.gpus) == wanted), found[0])
    if best.pod.problem is not None:
        raise Unplaceable(best.pod.uid, f"pod {best.pod.key} {best.pod.problem}")
    return best
