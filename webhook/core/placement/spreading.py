"""What `spread` optimises: ACK's `ack.node.gpu.placement: spread` puts pods on different GPUs, so that
one card's failure takes down as few of them as possible. So spread first looks for the fewest shares
(pods holding memory) on a GPU, the blast radius, and only among GPUs holding equally many for the most
free memory, then the lowest index. The allocator picks GPUs by `order`, and core.placement.ranking compares
nodes by the same numbers, so filter, prioritize, bind and nominations agree.

    order(shares=1, free=60, index=0) > order(shares=0, free=12, index=1)  # the empty 16 GiB GPU first
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias

from webhook.core.placement.accounting import Gpu

Load: TypeAlias = tuple[int, int]  # (shares, free memory) of one healthy GPU


def order(shares: int, free: int, index: int) -> tuple[int, int, int]:
    """Spread's preference among the GPUs a pod fits, smallest first: the fewest shares, then the most
    free memory (in absolute units, not as a share of the GPU: among GPUs of equal blast radius the one
    with the most room left keeps the smaller GPUs able to take the next pods), then the lowest index."""
    return (shares, -free, index)


def loads(gpus: Iterable[Gpu]) -> tuple[Load, ...]:
    """Each healthy GPU's (shares, free), in spread's order: what filter ranks a one-GPU pod by."""
    healthy = ((g.shares, g.free) for g in gpus if g.healthy)
    return tuple(sorted(healthy, key=lambda load: (load[0], -load[1])))


def first_fitting(need: int, node: Sequence[Load]) -> Load | None:
    """The load of the GPU spread gives a pod of `need` on a node of these `loads`; None when none fits."""
    for load in node:
        if load[1] >= need:
            return load
    return None
