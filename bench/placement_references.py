"""The references bench/placement.py measures packing against: workloads that fill every GPU exactly,
online best (or worst) fit in the pods' order, and offline best-fit-decreasing; for spread, the least
possible largest number of pods on one GPU."""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from webhook.core.placement import allocator, ranking
from webhook.core.placement.accounting import Gpu
from webhook.core.specs.demand import Demand


def exact_workload(gpus: list[int], rng: random.Random) -> list[int]:
    """Pod sizes (GiB) that fill every GPU exactly: each GPU's memory cut into pieces of 1..16 GiB."""
    pods: list[int] = []
    for size in gpus:
        left = size
        while left:
            piece = min(left, rng.choice((1, 2, 2, 4, 4, 6, 8, 8, 12, 16)))
            pods.append(piece)
            left -= piece
    rng.shuffle(pods)
    return pods


@dataclass(frozen=True, slots=True)
class Packing:
    placed: int  # GiB
    free: list[int]  # GiB left per GPU
    shares: list[int]  # pods per GPU


def online_packing(gpus: list[int], pods: list[int], spread: bool = False) -> Packing:
    """Online best fit (worst fit when `spread`: the most free memory, as spread placed before issue 34)
    over every GPU, pods in the given order, lowest index on ties; a pod that fits nowhere is skipped."""
    free = list(gpus)
    shares = [0] * len(gpus)
    placed = 0
    for need in pods:
        fitting = [i for i, f in enumerate(free) if f >= need]
        if not fitting:
            continue
        pick = (max if spread else min)(fitting, key=lambda i: free[i])
        free[pick] -= need
        shares[pick] += 1
        placed += need
    return Packing(placed, free, shares)


def online_spread(sizes: list[int], gpus: int, pods: list[int]) -> Packing:
    """Spread's own rule, online in the pods' order, on nodes of `gpus` GPUs of `sizes[n]` GiB each:
    the node and GPU webhook.core's ranking and allocator choose (what kube-scheduler with the extender
    should carry out), the same free memory and shares per GPU as the bench's nodes list them."""
    spread = allocator.Policy.SPREAD
    nodes = [[Gpu(i, size) for i in range(gpus)] for size in sizes]
    placed = 0
    for need in pods:
        asked = Demand((need,))
        ranked = {}
        for n, node in enumerate(nodes):
            value = ranking.rank(asked, node, spread)
            if value is not None:
                ranked[str(n)] = (spread, value)
        for name in ranking.best(ranked):  # one policy: at most one node
            node = nodes[int(name)]
            fit = allocator.fit(asked, node, spread)
            assert isinstance(fit, allocator.Fit)
            for index, units in fit.allocation.per_gpu().items():
                gpu = node[index]
                node[index] = replace(gpu, used=gpu.used + units, shares=gpu.shares + 1)
            placed += need
    flat = [g for node in nodes for g in node]
    return Packing(placed, [g.free for g in flat], [g.shares for g in flat])


def online(gpus: list[int], pods: list[int], spread: bool = False) -> tuple[int, list[int]]:
    """GiB placed by `online_packing`, and the free memory per GPU left."""
    done = online_packing(gpus, pods, spread)
    return done.placed, done.free


def best_fit_decreasing(gpus: list[int], pods: list[int]) -> int:
    return online(gpus, sorted(pods, reverse=True))[0]


def least_most_shares(gpus: list[int], pods: list[int]) -> tuple[int, int | None]:
    """For placing every pod of `pods` (GiB each) on GPUs of `gpus` GiB: (a lower bound on the largest
    number of pods one GPU must hold, the least largest number found by a packing, None when neither
    packing placed every pod). Equal: the optimum.

    The bound is the least k for which both counts allow it: pods per GPU, at most k and at most as many
    of the smallest pods as fit its memory, add up to every pod; memory per GPU, at most its size and at
    most the k largest pods, adds up to all the pods ask. Every placement with at most k per GPU meets
    both, so none exists below the bound. The packings: the pods largest first, each on a GPU with fewer
    than k pods and room, chosen by fewest pods then most free, or tightest fit; k from the bound up.
    ValueError when the counts show the pods cannot all be placed at all."""
    if not pods:
        return 0, 0
    ascending = sorted(pods)
    smallest = list(itertools.accumulate(ascending))  # smallest[j]: GiB of the j+1 smallest pods
    largest = list(itertools.accumulate(reversed(ascending)))
    holds = [bisect.bisect_right(smallest, size) for size in gpus]  # most pods one GPU's memory holds
    bound = math.ceil(len(pods) / len(gpus))
    while sum(min(bound, h) for h in holds) < len(pods) or (
        sum(min(size, largest[min(bound, len(pods)) - 1]) for size in gpus) < sum(pods)
    ):
        bound += 1
        if bound > len(pods):
            raise ValueError("the pods do not all fit these GPUs")
    for most in range(bound, len(pods) + 1):
        if any(_packs(gpus, ascending[::-1], most, pick) for pick in (_fewest_then_freest, _tightest)):
            return bound, most
    return bound, None


def _fewest_then_freest(free: list[int], shares: list[int], fitting: list[int]) -> int:
    return min(fitting, key=lambda i: (shares[i], -free[i], i))


def _tightest(free: list[int], shares: list[int], fitting: list[int]) -> int:
    return min(fitting, key=lambda i: (free[i], i))


def _packs(
    gpus: list[int], pods: list[int], most: int, pick: Callable[[list[int], list[int], list[int]], int]
) -> bool:
    """Whether `pick` places every pod, in this order, with at most `most` pods on any GPU."""
    free = list(gpus)
    shares = [0] * len(gpus)
    for need in pods:
        fitting = [i for i, f in enumerate(free) if f >= need and shares[i] < most]
        if not fitting:
            return False
        chosen = pick(free, shares, fitting)
        free[chosen] -= need
        shares[chosen] += 1
    return True


# -- the cluster ---------------------------------------------------------------------------------------
