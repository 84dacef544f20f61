"""Tests for webhook.core.placement.allocator: which GPU(s) a pod gets on a node and why it does not fit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.core.placement import allocator
from webhook.core.placement.accounting import Gpu
from webhook.core.placement.allocator import Fit, NoFit, Policy
from webhook.core.placement.annotations import Allocation
from webhook.core.specs.demand import Demand
from webhook.core.wire import resources


def gpus(*free_total: tuple[int, int], unhealthy: tuple[int, ...] = ()) -> list[Gpu]:
    return [Gpu(i, total, total - free, i not in unhealthy) for i, (free, total) in enumerate(free_total)]


def demand(*containers: int, count: int = 1, init: tuple[int, ...] = ()) -> Demand:
    return Demand(containers=containers, init_containers=init, gpu_count=count)


def placed(result: Fit | NoFit) -> dict[int, dict[int, int]]:
    assert isinstance(result, Fit), result
    return {c: dict(g) for c, g in result.allocation.containers.items()}


@pytest.mark.parametrize(
    ("policy", "expected_gpu"),
    [(Policy.BINPACK, 2), (Policy.SPREAD, 1)],
    ids=["binpack-least-free-that-fits", "spread-most-free"],
)
def test_whole_pod_goes_on_one_gpu_chosen_by_policy(policy, expected_gpu):
    node = gpus((3, 16), (12, 16), (5, 16), (5, 16))
    assert placed(allocator.fit(demand(4), node, policy)) == {0: {expected_gpu: 4}}


def test_ties_go_to_the_lowest_index():
    assert placed(allocator.fit(demand(4), gpus((8, 8), (8, 8)))) == {0: {0: 4}}
    assert placed(allocator.fit(demand(4), gpus((8, 8), (8, 8)), Policy.SPREAD)) == {0: {0: 4}}


def test_several_containers_share_one_gpu_when_it_has_room():
    result = allocator.fit(demand(2, 0, 3), gpus((16, 16), (6, 16)))
    assert placed(result) == {0: {1: 2}, 2: {1: 3}}
    assert isinstance(result, Fit)
    assert result.device_memory == 16


def test_containers_go_to_separate_gpus_when_no_single_gpu_holds_the_pod():
    assert placed(allocator.fit(demand(4, 6), gpus((5, 8), (7, 8)))) == {0: {0: 4}, 1: {1: 6}}


def test_containers_do_not_split_when_init_containers_need_gpu_memory():
    result = allocator.fit(demand(4, 6, init=(2,)), gpus((5, 8), (7, 8)))
    assert isinstance(result, NoFit)


def test_init_container_bigger_than_the_app_needs_room_on_the_gpu():
    assert placed(allocator.fit(demand(2, init=(6,)), gpus((4, 8), (6, 8)))) == {0: {1: 2}}


def test_multi_gpu_pod_is_split_evenly_over_distinct_gpus():
    result = allocator.fit(demand(8, count=2), gpus((16, 16), (4, 16), (5, 16)))
    assert placed(result) == {0: {1: 4, 2: 4}}


def test_multi_gpu_split_pours_containers_into_the_chosen_gpus_in_order():
    result = allocator.fit(demand(6, 2, count=2), gpus((4, 4), (4, 4)))
    assert placed(result) == {0: {0: 4, 1: 2}, 1: {1: 2}}


@pytest.mark.parametrize(
    ("d", "node", "reason"),
    [
        (demand(5), gpus((3, 16), (2, 16)), "largest free GPU has 3 GiB, pod needs 5"),
        (demand(5), [], "node has no GPUs for shared GPU memory"),
        (demand(1), gpus((8, 8), (8, 8), unhealthy=(0, 1)), "all 2 GPUs of the node are unhealthy"),
        (demand(4, count=3), gpus((8, 8), (8, 8)), "pod asks for 3 GPUs, node has 2 healthy"),
        (
            demand(8, count=2),
            gpus((8, 8), (3, 8)),
            "pod needs 4 GiB on each of 2 GPUs, 1 have that much free (largest free GPU has 8 GiB)",
        ),
        (
            demand(6, 6),
            gpus((5, 8), (7, 8)),
            "largest free GPU has 7 GiB, pod needs 12 on one GPU or its containers (6, 6) on separate GPUs",
        ),
    ],
    ids=["too-small", "no-gpus", "all-unhealthy", "too-few-gpus", "too-few-free", "containers"],
)
def test_no_fit_says_why(d, node, reason):
    result = allocator.fit(d, node)
    assert isinstance(result, NoFit)
    assert result.reason == reason


def test_unhealthy_gpu_is_never_chosen_even_when_it_fits_best():
    assert placed(allocator.fit(demand(4), gpus((4, 16), (16, 16), unhealthy=(0,)))) == {0: {1: 4}}


def test_pod_without_gpu_memory_fits_anywhere_with_nothing_allocated():
    assert placed(allocator.fit(demand(0), [])) == {}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("spread", Policy.SPREAD),
        (" BinPack ", Policy.BINPACK),
        ("bogus", Policy.BINPACK),
        (None, Policy.BINPACK),
    ],
    ids=["spread", "case-and-space", "unknown-uses-default", "absent"],
)
def test_policy_comes_from_the_pod_annotation(value, expected):
    annotations = {} if value is None else {resources.PLACEMENT_POLICY_ANNOTATION: value}
    assert allocator.policy_of(annotations) is expected


@pytest.mark.parametrize(
    ("d", "answer"),
    [
        (demand(4), True),  # the largest free GPU holds it
        (demand(10), False),  # one container larger than any free GPU
        (demand(2, 2), True),  # both containers fit the largest GPU together
        (demand(5, 5), None),  # might split over GPUs: only fit can tell
        (demand(6, count=2), None),
        (demand(2, count=2), None),
        (demand(8, count=3), False),  # more GPUs than the node has
        (demand(0), True),  # asks nothing
    ],
    ids=["fits", "too-big", "together", "maybe-split", "two-gpus-tight", "two-gpus", "three-gpus", "nothing"],
)
def test_quick_fit_answers_the_clear_cases_and_agrees_with_fit(d, answer):
    node = gpus((3, 16), (9, 16))
    quick = allocator.quick_fit(d, (9, 3))
    assert quick is answer
    if quick is not None:
        assert quick == isinstance(allocator.fit(d, node), Fit), d


node_strategy = st.lists(
    st.tuples(st.integers(0, 16), st.integers(1, 16), st.booleans()), min_size=0, max_size=8
).map(lambda rows: [Gpu(i, total, min(used, total), ok) for i, (used, total, ok) in enumerate(rows)])
demand_strategy = st.builds(
    lambda cs, count: Demand(containers=tuple(c * count for c in cs), gpu_count=count),
    st.lists(st.integers(0, 8), min_size=1, max_size=4),
    st.integers(1, 4),
)


@settings(max_examples=300, deadline=None)
@given(node=node_strategy, d=demand_strategy, policy=st.sampled_from(list(Policy)))
def test_a_fit_never_over_commits_never_uses_unhealthy_gpus_and_splits_exactly(node, d, policy):
    result = allocator.fit(d, node, policy)
    quick = allocator.quick_fit(d, tuple(sorted((g.free for g in node if g.healthy), reverse=True)))
    if quick is not None:
        assert quick == isinstance(result, Fit)
    if isinstance(result, NoFit):
        assert result.reason
        return
    by_index = {g.index: g for g in node}
    per_gpu = result.allocation.per_gpu()
    assert result.allocation.total() == d.total
    for index, units in per_gpu.items():
        assert by_index[index].healthy
        assert units <= by_index[index].free
    for c, units in enumerate(d.containers):
        assert sum(result.allocation.for_container(c).values()) == units
    if d.gpu_count > 1 and d.total:
        assert len(per_gpu) == d.gpu_count
        assert set(per_gpu.values()) == {d.per_gpu}


def test_again_keeps_an_allocation_whose_gpus_still_have_the_room() -> None:
    gpus = [Gpu(0, 12, used=4), Gpu(1, 16, used=15)]
    kept = allocator.again(Allocation({0: {0: 8}}), gpus)
    assert kept == allocator.Fit(Allocation({0: {0: 8}}), 12)
    split = allocator.again(Allocation({0: {1: 1}, 1: {0: 8}}), gpus)
    assert split is not None and split.device_memory == 12  # the lowest-index GPU's memory


def test_again_refuses_a_gpu_without_the_room_unhealthy_or_unknown() -> None:
    assert allocator.again(Allocation({0: {0: 9}}), [Gpu(0, 12, used=4)]) is None
    assert allocator.again(Allocation({0: {0: 1}}), [Gpu(0, 12, healthy=False)]) is None
    assert allocator.again(Allocation({0: {3: 1}}), [Gpu(0, 12)]) is None
    assert allocator.again(Allocation({}), [Gpu(0, 12)]) is None
