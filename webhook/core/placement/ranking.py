"""How the nodes a pod fits compare: the GPU-level best fit that decides where it goes.

Under `binpack` a node's key is what the pod leaves free on the GPU(s) it would get there, then on the whole
node, and the least wins (online best fit: a 16 GiB pod takes an empty 16 GiB GPU before a 24 GiB one, and the
24 GiB GPU is kept for a pod that needs it). Under `spread` it is first the shares already on those GPU(s)
(the most on one of them, then their sum: the blast radius, core.placement.spreading), then the most left free
on them, then on the node. Keys compare only among nodes of one policy; smaller is better. Filter keeps the
best node of each policy (`best`: the first of equal ones, in kube-scheduler's order), so kube-scheduler's own
scores, which know nothing of GPUs, cannot send the pod elsewhere, and the extender knows where the pod goes
before its bind arrives.

    key(Policy.BINPACK, left=0, node_left=16) -> (0, 16)
    key(Policy.SPREAD, left=12, node_left=28, most=0, total=0) -> (0, 0, -12, -28)
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import TypeAlias

from webhook.core.placement import allocator, spreading
from webhook.core.placement.accounting import Gpu
from webhook.core.placement.allocator import Fit, Policy
from webhook.core.specs.demand import Demand

Rank: TypeAlias = tuple[int, ...]


def key(policy: Policy, left: int, node_left: int, most: int = 0, total: int = 0) -> Rank:
    """`left`: free on the chosen GPU(s) after placing the pod; `node_left`: free on the node after;
    spread only, the shares on the chosen GPU(s) before it: `most` on one of them, `total` over them."""
    return (left, node_left) if policy is Policy.BINPACK else (most, total, -left, -node_left)


def of_fit(placed: Fit, gpus: Sequence[Gpu], policy: Policy) -> Rank:
    """The key of a placement `allocator.fit` (or whole cards' fit) chose on this node."""
    per_gpu = placed.allocation.per_gpu()
    healthy_free = sum(g.free for g in gpus if g.healthy)
    left = sum(g.free - per_gpu[g.index] for g in gpus if g.index in per_gpu)
    if policy is Policy.BINPACK:
        return key(policy, left, healthy_free - sum(per_gpu.values()))
    held = [g.shares for g in gpus if g.index in per_gpu]
    return key(policy, left, healthy_free - sum(per_gpu.values()), max(held, default=0), sum(held))


def rank(demand: Demand, gpus: Sequence[Gpu], policy: Policy) -> Rank | None:
    """The node's key for this pod, or None when the pod does not fit there."""
    placed = allocator.fit(demand, gpus, policy)
    return of_fit(placed, gpus, policy) if isinstance(placed, Fit) else None


def quick_rank(
    need: int, free_asc: Sequence[int], policy: Policy, loads: Sequence[spreading.Load] | None = None
) -> Rank | None:
    """`rank` for a pod that goes whole on one GPU (one gpu-mem container, one GPU), from the node's free
    memory per healthy GPU, smallest first, and for spread `loads` (spreading.loads of the same GPUs): the
    same GPU `allocator.fit` picks, without building it. Filter calls it for every node, so it is a
    bisection (spread: a scan of the node's GPUs) and a sum. ValueError: spread without `loads`."""
    if not free_asc or free_asc[-1] < need:
        return None
    node_left = sum(free_asc) - need
    if policy is Policy.SPREAD:
        gets = None if loads is None else spreading.first_fitting(need, loads)
        if gets is None:
            raise ValueError(f"spread ranks by each GPU's shares: loads {loads!r} do not match {free_asc!r}")
        held, free = gets
        return key(policy, free - need, node_left, held, held)
    # Binpack: the smallest free GPU that still holds `need`.
    return key(policy, free_asc[bisect.bisect_left(free_asc, need)] - need, node_left)


def best_quick(
    need: int,
    names: Sequence[str],
    free_asc: Mapping[str, Sequence[int]],
    policies: Mapping[str, Policy],
    default: Policy,
    *,
    loads: Mapping[str, Sequence[spreading.Load]] | None = None,
) -> list[str]:
    """`best` of `quick_rank` over `names` (in kube-scheduler's order): `free_asc` per node as
    `quick_rank` reads it (a node missing there is skipped), each node's policy from `policies`, else
    `default`; `loads` per node for the spread ones. Filter calls it with every node of the cluster, so
    the loop looks up, ranks and compares; nothing else."""
    found = Best()
    add = found.add
    spread = loads or {}
    for name in names:
        free = free_asc.get(name)
        if free:
            policy = policies.get(name) or default
            value = quick_rank(need, free, policy, spread.get(name))
            if value is not None:
                add(name, policy, value)
    return found.names(names)


def best_ranked(names: Sequence[str], ranks: Mapping[str, Rank]) -> list[str]:
    """`best` for nodes of one policy whose keys are known ahead (`ranks`; a node absent there does not
    fit): the first of `names` holding the least key, as a list of one (empty when none fits). One min()
    in C: filter calls it with every node of the cluster."""
    found = min(filter(ranks.__contains__, names), key=ranks.__getitem__, default=None)
    return [] if found is None else [found]


class Best:
    """Finds the best node of each policy as nodes come: the first one holding the least key."""

    __slots__ = ("_first", "_top")

    def __init__(self) -> None:
        self._top: dict[Policy, Rank] = {}
        self._first: dict[Policy, str] = {}

    def add(self, name: str, policy: Policy, value: Rank) -> None:
        top = self._top.get(policy)
        if top is None or value < top:
            self._top[policy] = value
            self._first[policy] = name

    def names(self, order: Sequence[str]) -> list[str]:
        """The best node of each policy (one, unless nodes of several policies fit), in `order`."""
        if len(self._first) <= 1:
            return list(self._first.values())
        kept = set(self._first.values())
        return [name for name in order if name in kept]


def best(ranked: Mapping[str, tuple[Policy, Rank]]) -> list[str]:
    """The best node of each policy, the first of equal ones in the order given."""
    found = Best()
    for name, (policy, value) in ranked.items():
        found.add(name, policy, value)
    return found.names(list(ranked))


def scores(ranked: Mapping[str, tuple[Policy, Rank]]) -> dict[str, int]:
    """0..10 from the keys: the best key of each policy scores 10, the next distinct key 9, and so on
    down to 1 (0 is left for nodes the pod does not fit)."""
    order: dict[Policy, dict[Rank, int]] = {}
    for policy in {p for p, _ in ranked.values()}:
        distinct = sorted({value for p, value in ranked.values() if p is policy})
        order[policy] = {value: i for i, value in enumerate(distinct)}
    return {
        name: max(allocator.MIN_SCORE + 1, allocator.MAX_SCORE - order[policy][value])
        for name, (policy, value) in ranked.items()
    }
