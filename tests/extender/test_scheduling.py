"""Tests for webhook.extender.scheduling: the quick per-node summary agrees with the allocator and the
ranking after any sequence of cache changes; spread pods land where filter, prioritize and bind agree."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.extender.factory import FakeApi, node, pod
from webhook.core.placement import allocator, modes, ranking
from webhook.core.placement import annotations as ann
from webhook.core.specs.demand import Demand
from webhook.extender import scheduling, wire
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import ADDED, DELETED, MODIFIED, Cache
from webhook.extender.settings import ExtenderSettings

NODES = ("n0", "n1", "n2")

node_ops = st.tuples(
    st.just("node"),
    st.sampled_from(NODES),
    st.lists(st.integers(4, 16), min_size=0, max_size=3),
    st.sets(st.integers(0, 2), max_size=2),
)
pod_ops = st.tuples(
    st.just("pod"), st.integers(0, 5), st.sampled_from(NODES), st.integers(0, 2), st.integers(1, 8)
)
gone_ops = st.tuples(st.sampled_from(("delete-node", "delete-pod", "assume", "forget")), st.integers(0, 5))


def apply(cache: Cache, op: tuple[Any, ...]) -> None:
    match op:
        case ("node", name, sizes, unhealthy):
            cache.node_event(MODIFIED, node(name, *sizes, unhealthy=tuple(unhealthy)))
        case ("pod", i, name, gpu, units):
            cache.pod_event(
                ADDED, pod(f"p{i}", units, node_name=name, placed={0: {gpu: units}}, phase="Running")
            )
        case ("delete-node", i):
            cache.node_event(DELETED, {"metadata": {"name": NODES[i % len(NODES)]}})
        case ("delete-pod", i):
            cache.pod_event(DELETED, pod(f"p{i}", 1))
        case ("assume", i):
            now = time.monotonic_ns()  # a live reservation: filter expires those past the TTL
            cache.assume(
                f"default/q{i}", f"uid-q{i}", NODES[i % len(NODES)], ann.Allocation({0: {0: 2}}), now
            )
        case ("forget", i):
            held = cache.assumption(f"default/q{i}")
            if held is not None:
                cache.forget(f"default/q{i}", held.token)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(node_ops, pod_ops, gone_ops), max_size=25), st.integers(1, 17), st.booleans())
def test_filter_agrees_with_the_allocator_after_any_changes(ops, units, best_fit):
    cache = Cache()
    cache.nodes_resync([node("n0", 16, 8)])
    cache.pods_resync([])
    for op in ops:
        apply(cache, op)
    names = (*NODES, "ghost")
    expected_pass, expected_fail, expected_never = [], {}, {}
    ranks = {}
    with cache.locked():
        for name in names:
            ledger = cache.ledger(name)
            if ledger is None:
                expected_fail[name] = scheduling.UNKNOWN_NODE
                continue
            fit = allocator.fit(Demand((units,)), ledger.gpus(), unit=ledger.unit)
            if isinstance(fit, allocator.Fit):
                expected_pass.append(name)
                ranks[name] = (
                    allocator.Policy.BINPACK,
                    ranking.of_fit(fit, ledger.gpus(), allocator.Policy.BINPACK),
                )
            elif any(g.healthy for g in ledger.gpus()):
                # Unresolvable (not failed) when it would not fit the node emptied of pods either.
                never = allocator.never_fits(
                    Demand((units,)), ledger.gpus(), allocator.Policy.BINPACK, ledger.unit
                )
                if never is None:
                    expected_fail[name] = fit.reason
                else:
                    expected_never[name] = never
    # Judged before filter runs: with one node left, filter counts the pod there (Cache.nominate).
    result = scheduling.filter_nodes(
        cache, wire.ExtenderArgs(pod("new", units), names), allocator.Policy.BINPACK, best_fit
    )
    # Best fit drops the nodes that fit less well without a reason: they are not failures.
    assert result["NodeNames"] == (ranking.best(ranks) if best_fit else expected_pass)
    nominated = best_fit and len(result["NodeNames"] or []) == 1
    assert cache.nominated() == ({"default/new": result["NodeNames"][0]} if nominated else {})
    assert (result["FailedNodes"] or {}) == expected_fail
    unresolvable = result["FailedAndUnresolvableNodes"] or {}
    assert set(unresolvable) == set(names) - set(expected_pass) - set(expected_fail)
    assert {k: v for k, v in unresolvable.items() if k in expected_never} == expected_never


# The clusters: GPUs of 16, 16 and 24 GiB on two nodes; one node of an 80 and a 16 GiB GPU.
SPREAD_CLUSTERS = {
    "16-16-and-24": ((("a", (16, 16)), ("b", (24,))), 3),
    "80-and-16": ((("c", (80, 16)),), 2),
}


def _spread_node(name: str, sizes: tuple[int, ...], labelled: bool) -> dict[str, Any]:
    body = node(name, *sizes)
    if labelled:
        body["metadata"]["labels"] = {modes.PLACEMENT_LABEL: "spread"}
    return body


@pytest.mark.parametrize("burst", [False, True], ids=["bind-after-each-filter", "all-filters-before-binds"])
@pytest.mark.parametrize("labelled", [False, True], ids=["pod-annotation", "node-label"])
@pytest.mark.parametrize(("nodes", "count"), SPREAD_CLUSTERS.values(), ids=list(SPREAD_CLUSTERS))
def test_spread_pods_each_get_a_gpu_of_their_own_where_filter_prioritize_and_bind_agree(
    nodes, count, labelled, burst
):
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([_spread_node(name, sizes, labelled) for name, sizes in nodes])
    # The node label reaches filter's ranking of every node by its own policy (ranking.best_quick).
    pods = [pod(f"s{i}", 4, policy=None if labelled else "spread") for i in range(count)]
    for p in pods:
        api.add(p)
    cache.pods_resync(pods)
    binder = Binder(cache, api, ExtenderSettings(), clock_ns=lambda: 42, sleep=lambda s: None)
    names = tuple(name for name, _ in nodes)
    nominated: dict[str, tuple[str, tuple[int, ...]]] = {}
    for p in pods:
        name = p["metadata"]["name"]
        args = wire.ExtenderArgs(p, names)
        # Prioritize as kube-scheduler calls it with --no-best-fit-filter (no nomination yet): its 10 is
        # the one node best fit passes.
        scores = scheduling.prioritize(cache, args, allocator.Policy.BINPACK)
        (passed,) = scheduling.filter_nodes(cache, args, allocator.Policy.BINPACK)["NodeNames"] or []
        assert scores[passed] == 10 and all(v < 10 for n, v in scores.items() if n != passed), scores
        allocation = cache.nominated_allocation(f"default/{name}", f"uid-{name}", passed)
        assert allocation is not None
        nominated[name] = (passed, allocation.gpus())
        if not burst:
            assert binder.bind(wire.BindingArgs(name, "default", f"uid-{name}", passed)) == ""
    for name, (passed, _) in nominated.items():
        if burst:
            assert binder.bind(wire.BindingArgs(name, "default", f"uid-{name}", passed)) == ""
    placed = {}
    for key, node_name, notes in api.bound:
        placement = ann.decode(notes)
        assert placement is not None
        placed[key.split("/")[1]] = (node_name, placement.allocation.gpus())
    assert placed == nominated
    assert len(set(placed.values())) == count  # three (two) different GPUs
