"""Whole GPUs beside shares: where a pod's whole cards (`nvidia.com/gpu` by default) go on a node our
device plugin serves.

A whole card is placed with the same annotations as a share, holding the card's whole memory on each chosen
GPU. So the ledger (core.placement.accounting), `gpushare inspect`, the original tools and the invariant
checker all see a full GPU: no share can land on it, and a card only goes to a GPU nothing holds. What a pod
asks of cards is read with its memory (core.specs.demand: one `Demand` for both).

    fit(Demand((2,)), gpus)  -> Fit({0: {1: 16, 2: 16}})  # the two lowest-index empty healthy GPUs
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook.core.placement.accounting import Gpu
from webhook.core.placement.allocator import Fit, NoFit
from webhook.core.placement.annotations import Allocation
from webhook.core.specs.demand import Demand


def fit(cards: Demand, gpus: Sequence[Gpu]) -> Fit | NoFit:
    """The GPUs for a whole-card pod on a shared node: healthy ones that nothing holds, lowest index first
    (all empty GPUs are alike; low indexes keep the choice stable). Each container gets its own cards,
    each card counted with its whole memory. Init containers reuse the pod's cards, so one may not ask
    more than the app containers hold together."""
    if not cards.asks():
        return Fit(Allocation({}), 0)
    if not gpus:
        return NoFit("node has no GPUs for whole cards")
    healthy = [g for g in gpus if g.healthy]
    if not healthy:
        return NoFit(f"all {len(gpus)} GPUs of the node are unhealthy")
    if cards.effective > cards.total:
        return NoFit(
            f"an init container asks for {_whole(cards.effective)}, more than the pod's containers hold "
            f"({cards.total}); on a gpushare node init containers use the pod's own cards"
        )
    need = cards.total
    if len(healthy) < need:
        return NoFit(f"pod asks for {_whole(need)}, node has {len(healthy)} healthy")
    empty = sorted((g for g in healthy if g.used == 0), key=lambda g: g.index)
    if len(empty) < need:
        return NoFit(
            f"pod asks for {_whole(need)}, {len(empty)} of the node's {len(healthy)} healthy GPUs "
            "hold nothing (a whole GPU never shares with gpu-mem pods)"
        )
    chosen = iter(empty[:need])
    containers: dict[int, dict[int, int]] = {}
    for i, count in enumerate(cards.containers):
        for _ in range(count):
            gpu = next(chosen)
            containers.setdefault(i, {})[gpu.index] = gpu.memory
    return Fit(Allocation(containers), empty[0].memory)


def _whole(count: int) -> str:
    return f"{count} whole GPU" if count == 1 else f"{count} whole GPUs"


def unresolvable(gpus: Sequence[Gpu], cards: Demand) -> bool:
    """True when evicting pods cannot make room: too few healthy GPUs, or an init container's excess."""
    healthy = sum(1 for g in gpus if g.healthy)
    return healthy < cards.total or cards.effective > cards.total
