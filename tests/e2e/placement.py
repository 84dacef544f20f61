"""GPU memory per GPU as the API server stores it, for the invariant every placement test checks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from tests.extender import invariant
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources

Obj = dict[str, Any]


def _placed(pods: list[Obj]) -> Iterator[tuple[str, dict[int, int]]]:
    """(node, GPU index -> GiB) of each stored pod that holds its GPU memory (bound, not finished: as the
    extender and `invariant.stored_use` count) with an allocation annotation."""
    for pod in pods:
        placement = ann.decode(pod["metadata"].get("annotations"))
        if invariant.holds(pod) and placement is not None:
            yield pod["spec"]["nodeName"], placement.allocation.per_gpu()


def per_gpu(pods: list[Obj]) -> dict[tuple[str, int], int]:
    """(node, GPU index) -> GiB placed there by the stored pods that hold memory, by their annotations."""
    used: dict[tuple[str, int], int] = defaultdict(int)
    for node, gpus in _placed(pods):
        for gpu, amount in gpus.items():
            used[(node, gpu)] += amount
    return dict(used)


def shares_per_gpu(pods: list[Obj]) -> dict[tuple[str, int], int]:
    """(node, GPU index) -> the number of stored, bound pods holding memory there (spread's count)."""
    held: dict[tuple[str, int], int] = defaultdict(int)
    for node, gpus in _placed(pods):
        for gpu in gpus:
            held[(node, gpu)] += 1
    return dict(held)


def check_invariant(pods: list[Obj], capacity: dict[str, int]) -> dict[tuple[str, int], int]:
    """Σ per GPU ≤ its capacity (`capacity`: node -> GiB per GPU), every bound GPU pod placed exactly
    once (one UID, one allocation annotation), every placed pod bound."""
    uids = [p["metadata"]["uid"] for p in pods]
    assert len(uids) == len(set(uids)), "a pod is listed twice"
    for pod in pods:
        placement = ann.decode(pod["metadata"].get("annotations"))
        bound = bool(pod["spec"].get("nodeName"))
        assert bound == (placement is not None), (
            f"{pod['metadata']['name']}: bound={bound} placed={placement}"
        )
    used = per_gpu(pods)
    over = {key: gib for key, gib in used.items() if gib > capacity[key[0]]}
    assert not over, f"over-committed GPUs (node, index) -> GiB: {over}"
    # Again with the annotations read by plain `json`, not the code under test, and each gpu-mem pod
    # holding exactly what it asks for (a whole-card pod holds its cards' memory and asks for none).
    read_by_json, wrong = invariant.stored_use(pods)
    assert read_by_json == used, (read_by_json, used)
    cards = [p["metadata"]["uid"] for p in pods if _asks_cards(p)]
    wrong = [problem for problem in wrong if not any(f"(UID {uid})" in problem for uid in cards)]
    assert not wrong, wrong
    return used


def _asks_cards(pod: Obj) -> bool:
    return any(
        resources.NVIDIA_GPU in ((c.get("resources") or {}).get("limits") or {})
        for c in pod["spec"].get("containers") or []
    )
