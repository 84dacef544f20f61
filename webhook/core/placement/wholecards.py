"""Whole GPUs beside shares: which nodes take a pod's whole cards (`nvidia.com/gpu` by default), and where
they go on a node our device plugin serves.

On nodes whose mode shares GPUs (our plugin serves the cards there) the pod needs that many healthy GPUs
holding nothing; on `default` and `topology` nodes NVIDIA's plugin serves the cards and kube-scheduler's own
resource fit has counted them, so those nodes pass untouched, unless gpu-mem shares placed while the node
shared GPUs still run there: NVIDIA's plugin, which knows nothing of them, could hand out their GPU whole.
Filter (`judge`, a step of core.placement.filtering) and bind (`ours`, `refusal`) read these rules from the
extender's node state, so both refuse a node for the same reason.

A whole card is placed with the same annotations as a share, holding the card's whole memory on each chosen
GPU. So the ledger (core.placement.accounting), `gpushare inspect`, the original tools and the invariant
checker all see a full GPU: no share can land on it, and a card only goes to a GPU nothing holds. What a pod
asks of cards is read with its memory (core.specs.demand: one `Demand` for both).

    fit(Demand((2,)), gpus)  -> Fit({0: {1: 16, 2: 16}})  # the two lowest-index empty healthy GPUs
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from webhook.core.placement import modes
from webhook.core.placement.accounting import Gpu, Ledger
from webhook.core.placement.allocator import Fit, NoFit
from webhook.core.placement.annotations import Allocation
from webhook.core.placement.summaries import UNKNOWN_NODE
from webhook.core.specs.demand import Demand

SHARES_LEFT = (
    "gpu-mem shares placed while the node shared GPUs still run on it, and NVIDIA's plugin, which serves "
    "whole GPUs here, could hand out their GPU: whole GPUs wait until they end"
)


class Nodes(Protocol):
    """What the rules read of the extender's node state (core.placement.filtering.NodeState is one)."""

    @property
    def node_modes(self) -> Mapping[str, modes.Mode | str]: ...
    @property
    def blocked(self) -> Mapping[str, str]: ...
    def ledger(self, name: str) -> Ledger | None: ...


def ours(nodes: Nodes, node: str) -> modes.Mode | str | None:
    """The node's mode when our plugin serves its whole cards (a shared mode); None when NVIDIA's
    does; a string when the node is unknown or its mode label unreadable (then nothing serves cards)."""
    mode = nodes.node_modes.get(node)
    if mode is None:
        return UNKNOWN_NODE
    if isinstance(mode, modes.Mode):  # first: a Mode is a str too
        return mode if mode.shares else None
    return mode


def refusal(nodes: Nodes, node: str, mode: modes.Mode | str | None) -> str | None:
    """Why no whole card may go to `node` now (`mode`: `ours`), bind as filter; None when one may.
    Read under the extender's lock."""
    if mode is None:  # NVIDIA's plugin chooses the GPU: none may hold a share of ours
        ledger = nodes.ledger(node)
        return SHARES_LEFT if ledger is not None and any(g.used for g in ledger.gpus()) else None
    return nodes.blocked.get(node)  # ours: not while NVIDIA's plugin's own card pods still run


def judge(cards: Demand, nodes: Nodes, node: str) -> tuple[str, bool] | None:
    """Filter's verdict on one node for a pod asking `cards`: None when it passes, else (why, whether
    evicting pods cannot help: kube-scheduler preempts only where it can)."""
    mode = ours(nodes, node)
    if mode is not None and not isinstance(mode, modes.Mode):
        return mode, mode != UNKNOWN_NODE  # an unknown node may yet show up; a bad label stays bad
    refused = refusal(nodes, node, mode)
    if refused is not None:
        return refused, False  # until those pods end
    if mode is None:
        return None
    ledger = nodes.ledger(node)
    gpus = ledger.gpus() if ledger is not None else ()
    result = fit(cards, gpus)
    return None if not isinstance(result, NoFit) else (result.reason, unresolvable(gpus, cards))


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
