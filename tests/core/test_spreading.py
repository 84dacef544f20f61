"""Tests for webhook.core.placement.spreading: spread's rule (fewest shares on the GPU(s) a pod
gets, then the most free memory), as the allocator picks GPUs by it and the ranking compares nodes by it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.core.placement import allocator, ranking, spreading
from webhook.core.placement.accounting import Gpu
from webhook.core.placement.allocator import Fit, Policy
from webhook.core.specs.demand import Demand

SPREAD = Policy.SPREAD


def gpu(index: int, size: int, used: int = 0, shares: int = 0, healthy: bool = True) -> Gpu:
    return Gpu(index, size, used, healthy, shares=shares)


def demand(*containers: int, count: int = 1) -> Demand:
    return Demand(containers=containers, gpu_count=count)


def chosen(result: allocator.Fit | allocator.NoFit) -> dict[int, dict[int, int]]:
    assert isinstance(result, Fit), result
    return {c: dict(g) for c, g in result.allocation.containers.items()}


def best(nodes: dict[str, list[Gpu]], d: Demand, policy: Policy = SPREAD) -> list[str]:
    ranked = {}
    for name, gpus in nodes.items():
        value = ranking.rank(d, gpus, policy)
        if value is not None:
            ranked[name] = (policy, value)
    return ranking.best(ranked)


def test_the_order_is_fewest_shares_then_most_free_then_lowest_index():
    assert spreading.order(0, 12, 1) < spreading.order(1, 76, 0)
    assert spreading.order(1, 20, 3) < spreading.order(1, 12, 0)
    assert spreading.order(1, 12, 0) < spreading.order(1, 12, 1)


def test_loads_list_the_healthy_gpus_in_spread_order_and_the_first_that_fits_wins():
    node = [gpu(0, 80, 8, shares=2), gpu(1, 16, 4, shares=1), gpu(2, 16), gpu(3, 24, healthy=False)]
    loads = spreading.loads(node)
    assert loads == ((0, 16), (1, 12), (2, 72))
    assert spreading.first_fitting(16, loads) == (0, 16)
    assert spreading.first_fitting(20, loads) == (2, 72)
    assert spreading.first_fitting(80, loads) is None


def test_an_80_and_a_16_gib_gpu_each_take_one_pod_before_either_takes_a_second():
    # The node: most-free-memory alone piled pods on the 80 GiB card until it had less free
    # than the empty 16 GiB card.
    node = [gpu(0, 80), gpu(1, 16)]
    assert chosen(allocator.fit(demand(4), node, SPREAD)) == {0: {0: 4}}
    node = [gpu(0, 80, 4, shares=1), gpu(1, 16)]
    assert chosen(allocator.fit(demand(4), node, SPREAD)) == {0: {1: 4}}
    node = [gpu(0, 80, 4, shares=1), gpu(1, 16, 4, shares=1)]
    assert chosen(allocator.fit(demand(4), node, SPREAD)) == {0: {0: 4}}  # equal shares: most free


def test_between_nodes_an_empty_16_gib_gpu_wins_over_a_24_gib_one_holding_a_pod():
    # The cluster of 16, 16 and 24 GiB GPUs after the first 4 GiB pod took the 24 GiB one.
    nodes = {"a": [gpu(0, 16), gpu(1, 16)], "b": [gpu(0, 24, 4, shares=1)]}
    assert best(nodes, demand(4)) == ["a"]
    assert best({"a": [gpu(0, 16), gpu(1, 16)], "b": [gpu(0, 24)]}, demand(4)) == ["b"]


def test_a_multi_gpu_pod_takes_the_gpus_with_the_fewest_shares_and_is_ranked_by_the_most_then_the_sum():
    node = [gpu(0, 80, 8, shares=2), gpu(1, 16), gpu(2, 32, 4, shares=1), gpu(3, 16, 2, shares=1)]
    assert chosen(allocator.fit(demand(8, count=2), node, SPREAD)) == {0: {1: 4, 2: 4}}
    # Most shares on one of its GPUs first (1 against 2), then their sum (1 against 2).
    one_each = [gpu(0, 16, 2, shares=1), gpu(1, 16, 2, shares=1)]
    busy_and_empty = [gpu(0, 80, 8, shares=2), gpu(1, 16)]
    empty_and_one = [gpu(0, 16), gpu(1, 16, 2, shares=1)]
    nodes = {"one-each": one_each, "busy-and-empty": busy_and_empty, "empty-and-one": empty_and_one}
    assert best(nodes, demand(8, count=2)) == ["empty-and-one"]
    assert best({k: v for k, v in nodes.items() if k != "empty-and-one"}, demand(8, count=2)) == ["one-each"]


def test_each_container_of_a_split_pod_takes_the_gpu_with_the_fewest_other_pods():
    # 9 GiB fits no GPU whole: the 5 GiB container goes to the empty GPU 1, not to GPU 0 beside a pod
    # (most free memory alone would have taken GPU 0, the lower index), the 4 to the other empty GPU.
    node = [gpu(0, 16, 11, shares=1), gpu(1, 5), gpu(2, 4)]
    assert chosen(allocator.fit(demand(5, 4), node, SPREAD)) == {0: {1: 5}, 1: {2: 4}}


def test_a_pod_still_goes_whole_on_one_gpu_when_one_holds_it():
    # Splitting would put it on two GPUs: a failure of either would take it down.
    node = [gpu(0, 16, 6, shares=2), gpu(1, 5), gpu(2, 5)]
    assert chosen(allocator.fit(demand(5, 5), node, SPREAD)) == {0: {0: 5}, 1: {0: 5}}


gpu_rows = st.lists(
    st.tuples(st.sampled_from([16, 24, 32, 80]), st.integers(0, 80), st.integers(0, 4), st.booleans()),
    min_size=1,
    max_size=6,
)


def node_of(rows: list[tuple[int, int, int, bool]]) -> list[Gpu]:
    return [gpu(i, size, min(used, size), held, ok) for i, (size, used, held, ok) in enumerate(rows)]


@settings(max_examples=300, deadline=None)
@given(rows=gpu_rows, need=st.integers(1, 40))
def test_spread_never_takes_a_gpu_with_more_shares_than_a_fitting_one_with_fewer(rows, need):
    node = node_of(rows)
    fitting = [g for g in node if g.free >= need]
    result = allocator.fit(demand(need), node, SPREAD)
    if not fitting:
        assert not isinstance(result, Fit)
        return
    (index,) = chosen(result)[0]
    got = node[index]
    assert got.shares == min(g.shares for g in fitting)
    assert got.free == max(g.free for g in fitting if g.shares == got.shares)


@settings(max_examples=300, deadline=None)
@given(rows=gpu_rows, count=st.integers(2, 4), per=st.integers(1, 20))
def test_a_multi_gpu_pod_never_leaves_a_fitting_gpu_with_fewer_shares_than_one_it_took(rows, count, per):
    node = node_of(rows)
    result = allocator.fit(demand(per * count, count=count), node, SPREAD)
    if not isinstance(result, Fit):
        return
    taken = set(result.allocation.per_gpu())
    left_out = [g for g in node if g.index not in taken and g.free >= per]
    most = max(node[i].shares for i in taken)
    assert all(g.shares >= most for g in left_out)


@settings(max_examples=300, deadline=None)
@given(nodes=st.lists(gpu_rows, min_size=1, max_size=5), need=st.integers(1, 40))
def test_the_best_spread_node_holds_the_clusters_fitting_gpu_with_the_fewest_shares(nodes, need):
    cluster = {f"n{i}": node_of(rows) for i, rows in enumerate(nodes)}
    fitting = [g for gpus in cluster.values() for g in gpus if g.free >= need]
    found = best(cluster, demand(need))
    if not fitting:
        assert found == []
        return
    fewest = min(g.shares for g in fitting)
    most_free = max(g.free for g in fitting if g.shares == fewest)
    (name,) = found
    (index,) = chosen(allocator.fit(demand(need), cluster[name], SPREAD))[0]
    assert (cluster[name][index].shares, cluster[name][index].free) == (fewest, most_free)


@settings(max_examples=300, deadline=None)
@given(
    rows=gpu_rows,
    containers=st.lists(st.integers(0, 12), min_size=1, max_size=3),
    count=st.integers(1, 3),
)
def test_binpack_does_not_look_at_shares(rows, containers, count):
    node = node_of(rows)
    unshared = [Gpu(g.index, g.memory, g.used, g.healthy) for g in node]
    d = demand(*(c * count for c in containers), count=count)
    assert allocator.fit(d, node, Policy.BINPACK) == allocator.fit(d, unshared, Policy.BINPACK)
    assert ranking.rank(d, node, Policy.BINPACK) == ranking.rank(d, unshared, Policy.BINPACK)


@pytest.mark.parametrize("need", [4, 16, 17])
def test_without_shares_spread_is_the_most_free_memory_as_before(need):
    node = [gpu(0, 16, 4), gpu(1, 24, 2), gpu(2, 16)]
    result = allocator.fit(demand(need), node, SPREAD)
    fitting = [g for g in node if g.free >= need]
    (index,) = chosen(result)[0]
    assert node[index].free == max(g.free for g in fitting)
