"""Tests for webhook.core.placement.ranking: the GPU-level best fit that decides between nodes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.core.placement import allocator, ranking, spreading
from webhook.core.placement.accounting import Gpu
from webhook.core.placement.allocator import Fit, Policy
from webhook.core.specs.demand import Demand


def gpus(*free_total: tuple[int, int], unhealthy: tuple[int, ...] = ()) -> list[Gpu]:
    return [Gpu(i, total, total - free, i not in unhealthy) for i, (free, total) in enumerate(free_total)]


def demand(*containers: int, count: int = 1) -> Demand:
    return Demand(containers=containers, gpu_count=count)


def ranked(nodes: dict[str, list[Gpu]], d: Demand, policy: Policy = Policy.BINPACK):
    out = {}
    for name, node in nodes.items():
        value = ranking.rank(d, node, policy)
        if value is not None:
            out[name] = (policy, value)
    return out


def test_a_16_gib_pod_takes_an_empty_16_gib_gpu_before_a_24_gib_one():
    # The demo's cluster (issue 20): placing by node fullness sent it to the 24 GiB GPU instead.
    nodes = {"gpu-node-1": gpus((16, 16), (16, 16)), "gpu-node-2": gpus((24, 24))}
    assert ranking.best(ranked(nodes, demand(16))) == ["gpu-node-1"]


def test_binpack_prefers_the_least_left_on_the_gpu_over_a_fuller_node():
    fuller_node = gpus((10, 16), (0, 16))  # the pod leaves 6 on GPU 0
    tighter_gpu = gpus((5, 16), (16, 16))  # the pod leaves 1 on GPU 0
    nodes = {"fuller": fuller_node, "tighter": tighter_gpu}
    assert ranking.best(ranked(nodes, demand(4))) == ["tighter"]


def test_equal_gpu_fit_is_decided_by_what_the_node_keeps_free():
    nodes = {"emptier": gpus((4, 16), (16, 16)), "fuller": gpus((4, 16), (0, 16))}
    assert ranking.best(ranked(nodes, demand(4))) == ["fuller"]
    assert ranking.best(ranked(nodes, demand(4), Policy.SPREAD)) == ["emptier"]


def test_spread_prefers_the_emptiest_gpu():
    nodes = {"a": gpus((8, 16)), "b": gpus((16, 16)), "c": gpus((12, 16), (12, 16))}
    assert ranking.best(ranked(nodes, demand(4), Policy.SPREAD)) == ["b"]


def test_of_exact_ties_the_first_in_the_order_given_is_kept():
    nodes = {"z": gpus((16, 16)), "a": gpus((16, 16)), "m": gpus((24, 24))}
    assert ranking.best(ranked(nodes, demand(16))) == ["z"]


def test_each_policy_keeps_its_own_best_node():
    mixed = {
        "bin-tight": (Policy.BINPACK, ranking.key(Policy.BINPACK, 0, 0)),
        "bin-loose": (Policy.BINPACK, ranking.key(Policy.BINPACK, 8, 8)),
        "spread-empty": (Policy.SPREAD, ranking.key(Policy.SPREAD, 12, 40)),
        "spread-busy": (Policy.SPREAD, ranking.key(Policy.SPREAD, 2, 2)),
    }
    assert ranking.best(mixed) == ["bin-tight", "spread-empty"]


def test_a_split_pod_is_ranked_by_what_it_leaves_on_all_its_gpus():
    loose = gpus((16, 16), (16, 16))  # leaves 12 + 12
    tight = gpus((5, 16), (6, 16), (16, 16))  # leaves 1 + 2
    assert ranking.best(ranked({"loose": loose, "tight": tight}, demand(8, count=2))) == ["tight"]


def test_a_node_the_pod_does_not_fit_has_no_rank():
    assert ranking.rank(demand(20), gpus((16, 16)), Policy.BINPACK) is None
    assert ranking.rank(demand(4), gpus((16, 16), unhealthy=(0,)), Policy.BINPACK) is None
    assert ranking.quick_rank(20, (16,), Policy.BINPACK) is None
    assert ranking.quick_rank(1, (), Policy.SPREAD) is None


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (Policy.BINPACK, {"tight": 10, "mid": 9, "loose": 8}),
        (Policy.SPREAD, {"loose": 10, "mid": 9, "tight": 8}),
    ],
    ids=["binpack", "spread"],
)
def test_scores_give_the_best_ten_and_go_down_one_per_distinct_key(policy, expected):
    nodes = {"tight": gpus((5, 16)), "mid": gpus((9, 16)), "loose": gpus((16, 16))}
    assert ranking.scores(ranked(nodes, demand(4), policy)) == expected


def test_scores_never_reach_zero_for_a_node_the_pod_fits():
    nodes = {f"n{i}": gpus((4 + i, 64)) for i in range(20)}
    scores = ranking.scores(ranked(nodes, demand(4)))
    assert scores["n0"] == 10
    assert min(scores.values()) == 1


# Each GPU's free memory and the shares (pods) on it: what spread ranks by.
load_lists = st.lists(st.tuples(st.integers(0, 32), st.integers(0, 3)), min_size=0, max_size=8)


def node_of(loads: list[tuple[int, int]]) -> list[Gpu]:
    return [Gpu(i, 32, 32 - f, True, shares=held) for i, (f, held) in enumerate(loads)]


@settings(max_examples=400, deadline=None)
@given(loads=load_lists, need=st.integers(1, 32), policy=st.sampled_from(list(Policy)))
def test_quick_rank_is_rank_for_a_one_container_pod(loads, need, policy):
    node = node_of(loads)
    free_asc = tuple(sorted(f for f, _ in loads))
    quick = ranking.quick_rank(need, free_asc, policy, spreading.loads(node))
    assert quick == ranking.rank(demand(need), node, policy)


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(
        st.lists(st.tuples(st.integers(0, 32), st.sampled_from([16, 24, 32])), min_size=1, max_size=4),
        min_size=1,
        max_size=6,
    ),
    need=st.integers(1, 32),
)
def test_binpack_best_node_holds_the_clusters_tightest_gpu(nodes, need):
    # Online best fit over every GPU of the cluster: the least free memory that still holds the pod.
    cluster = {
        f"n{i}": [Gpu(j, size, size - min(used, size), True) for j, (used, size) in enumerate(node)]
        for i, node in enumerate(nodes)
    }
    tightest = min((g.free - need for node in cluster.values() for g in node if g.free >= need), default=None)
    best = ranking.best(ranked(cluster, demand(need)))
    if tightest is None:
        assert best == []
        return
    for name in best:
        placed = allocator.fit(demand(need), cluster[name])
        assert isinstance(placed, Fit)
        (gpu,) = placed.allocation.per_gpu()
        assert cluster[name][gpu].free - need == tightest


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(load_lists, st.sampled_from([None, Policy.BINPACK, Policy.SPREAD]), st.booleans()),
        min_size=0,
        max_size=8,
    ),
    need=st.integers(1, 32),
    default=st.sampled_from(list(Policy)),
)
def test_best_quick_is_best_of_quick_rank_in_the_order_given(nodes, need, default):
    names = [f"n{i}" for i in range(len(nodes))][::-1]  # kube-scheduler's order need not be sorted
    known = {f"n{i}": node_of(gpu_loads) for i, (gpu_loads, _, seen) in enumerate(nodes) if seen}
    free_asc = {name: tuple(sorted(g.free for g in node)) for name, node in known.items()}
    loads = {name: spreading.loads(node) for name, node in known.items()}
    policies = {f"n{i}": policy for i, (_, policy, _) in enumerate(nodes) if policy is not None}
    expected: dict[str, tuple[Policy, ranking.Rank]] = {}
    for name in names:
        policy = policies.get(name) or default
        value = ranking.quick_rank(need, free_asc[name], policy, loads[name]) if name in known else None
        if value is not None:
            expected[name] = (policy, value)
    assert ranking.best_quick(need, names, free_asc, policies, default, loads=loads) == ranking.best(expected)
