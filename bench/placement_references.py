"""The references bench/placement.py measures packing against: workloads that fill every GPU exactly,
online best (or worst) fit in the pods' order, and offline best-fit-decreasing."""

from __future__ import annotations

import random


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


def online(gpus: list[int], pods: list[int], spread: bool = False) -> tuple[int, list[int]]:
    """GiB placed by online best fit (worst fit when `spread`) over every GPU, pods in the given order;
    and the free memory per GPU left."""
    free = list(gpus)
    placed = 0
    for need in pods:
        fitting = [i for i, f in enumerate(free) if f >= need]
        if not fitting:
            continue
        pick = (max if spread else min)(fitting, key=lambda i: free[i])
        free[pick] -= need
        placed += need
    return placed, free


def best_fit_decreasing(gpus: list[int], pods: list[int]) -> int:
    return online(gpus, sorted(pods, reverse=True))[0]


# -- the cluster ---------------------------------------------------------------------------------------
