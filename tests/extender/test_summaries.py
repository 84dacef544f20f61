"""webhook.core.placement.summaries: the per-node numbers filter ranks by, kept per pod size, always equal to
ranking every node afresh (`ranking.best_quick`), however the ledgers changed since."""

from __future__ import annotations

import random

import pytest

from tests.extender.factory import node, pod
from webhook.core.placement import podask, ranking, summaries
from webhook.core.placement.allocator import Policy
from webhook.extender.cache import MODIFIED, Cache


def cluster(rng: random.Random, nodes: int = 30) -> Cache:
    cache = Cache()
    cache.nodes_resync(
        [node(f"n{i:02d}", *rng.choices((16, 24, 32, 80), k=rng.randint(1, 8))) for i in range(nodes)]
    )
    cache.pods_resync([])
    return cache


def fresh(cache: Cache, names: list[str], need: int, policy: Policy) -> list[str]:
    with cache.locked():
        return ranking.best_quick(
            need, names, cache.state.summaries.free_asc(), {}, policy, loads=cache.state.summaries.loads()
        )


def kept(cache: Cache, names: list[str], need: int, policy: Policy) -> list[str]:
    with cache.locked():
        return ranking.best_ranked(names, cache.state.summaries.quick_ranks(need, policy))


@pytest.mark.parametrize("seed", range(6))
def test_the_kept_keys_pick_what_ranking_every_node_picks_as_pods_come_and_go(seed):
    rng = random.Random(seed)
    cache = cluster(rng)
    names = [f"n{i:02d}" for i in range(30)]
    live: list[str] = []
    placed = 0
    for step in range(300):
        need = rng.choice((1, 2, 3, 4, 8, 12, 16, 20, 24, 40, 80, 81))
        policy = rng.choice((Policy.BINPACK, Policy.SPREAD))
        order = rng.sample(names, k=rng.randint(1, len(names)))  # kube-scheduler's order, a subset
        assert kept(cache, order, need, policy) == fresh(cache, order, need, policy), step
        chosen = fresh(cache, order, need, Policy.BINPACK)
        if chosen and rng.random() < 0.7:  # place the pod there, whole on the GPU best fit picks
            target = chosen[0]
            free = cache.state.summaries.free_asc()[target]
            ledger = cache.ledger(target)
            assert ledger is not None
            tightest = min(f for f in free if f >= need)
            gpu = next(g.index for g in ledger.gpus() if g.healthy and g.free == tightest)
            name = f"p{step}"
            cache.pod_event(MODIFIED, pod(name, need, node_name=target, placed={0: {gpu: need}}))
            live.append(name)
            placed += 1
        elif live and rng.random() < 0.5:  # or a pod ends
            gone = live.pop(rng.randrange(len(live)))
            cache.pod_event("DELETED", pod(gone, 1))
    assert placed > 100  # the ledgers did change under the kept keys


def test_more_sizes_than_are_kept_are_still_right():
    rng = random.Random(7)
    cache = cluster(rng)
    names = [f"n{i:02d}" for i in range(30)]
    for need in [*range(1, 2 * summaries.KEPT_SIZES + 2), *range(1, 5)]:
        assert kept(cache, names, need, Policy.BINPACK) == fresh(cache, names, need, Policy.BINPACK)


def test_a_node_deleted_or_unknown_is_never_ranked():
    cache = Cache()
    cache.nodes_resync([node("a", 16), node("b", 16)])
    cache.pods_resync([])
    assert kept(cache, ["a", "b", "ghost"], 4, Policy.BINPACK) == ["a"]
    cache.node_event("DELETED", node("a", 16))
    assert kept(cache, ["a", "b"], 4, Policy.BINPACK) == ["b"]


def test_filter_reads_the_watchs_demand_of_the_same_pod_and_reads_another_pod_anew():
    cache = Cache()
    cache.nodes_resync([node("n1", 16)])
    watched = pod("a", 5)
    cache.pods_resync([watched])
    record = cache.pod("default/a")
    assert record is not None and record.demand is not None
    # The same pod (UID, gpu-count label): the record's demand as is, the body is not read again.
    unreadable = {**watched, "spec": {"containers": "not a list"}}
    asked, _ = podask.remembered_or_read(unreadable, record, cache.names, cache.unit)
    assert asked is record.demand
    # Another pod of that name (a new UID), or one with another gpu-count label: read from its body.
    other = pod("a", 7, uid="uid-new")
    assert podask.remembered_or_read(other, record, cache.names, cache.unit)[0].effective == 7
    relabelled = pod("a", 8, gpu_count=2)
    assert podask.remembered_or_read(relabelled, record, cache.names, cache.unit)[0].gpu_count == 2
