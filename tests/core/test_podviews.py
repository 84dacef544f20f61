"""Tests for webhook.core.node.podviews: a placement whose entries do not fit the pod is a malformed placement
of that pod (never extra GPUs or memory in its env), and the original extender's annotations still read."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deviceplugin.placed import placed_pod
from webhook.core.node import podviews
from webhook.core.wire import resources


def _with_allocation(pod: dict[str, Any], text: str) -> dict[str, Any]:
    pod["metadata"]["annotations"][resources.ANN_ALLOCATION] = text
    return pod


def _legacy(pod: dict[str, Any], idx: str, total: str) -> dict[str, Any]:
    pod["metadata"]["annotations"] = {
        resources.ANN_MEM_IDX: idx,
        resources.ANN_MEM_POD: total,
        resources.ANN_MEM_DEV: "16",
        resources.ANN_MEM_ASSIGNED: "false",
        resources.ANN_MEM_ASSUME_TIME: "1",
    }
    return pod


def _view(pod: dict[str, Any]) -> podviews.PodView:
    view = podviews.pod_view(pod, 0)
    assert view is not None
    return view


@pytest.mark.parametrize(
    ("gpu_mem", "text", "needle"),
    [
        (
            [4],
            '{"0":{"0":4,"1":0}}',
            "gives container index 0 0 units on GPU 1 (every entry must hold memory)",
        ),
        ([4], '{"0":{"0":4},"7":{"1":9}}', "entry for container index 7, but the pod has 1 container(s)"),
        ([4, 0], '{"0":{"0":4},"1":{"1":2}}', "entry for container index 1, but container 'c1' asks no"),
        ([0, 4], '{"0":{"1":4},"1":{"1":4}}', "entry for container index 0, but container 'c0' asks no"),
    ],
    ids=["zero-units", "index-past-the-containers", "container-asking-nothing", "legacy-shape-with-more"],
)
def test_an_entry_for_no_memory_or_no_gpu_container_is_a_malformed_placement(gpu_mem, text, needle):
    view = _view(_with_allocation(placed_pod("p", gpu_mem, {0: {0: 1}}), text))
    assert view.slots == ()
    assert view.problem is not None
    assert view.problem.startswith("malformed placement: ")
    assert needle in view.problem


def test_the_original_extenders_annotations_still_put_the_pod_on_its_gpu():
    view = _view(_legacy(placed_pod("legacy", [2, 2], None), "1", "4"))
    assert view.problem is None
    assert [dict(s.gpus) for s in view.slots] == [{1: 2}, {1: 2}]


def test_a_legacy_shaped_allocation_for_a_container_that_asks_nothing_reads_as_before():
    # Container 0 asks nothing, the whole pod sits on key 0: the original extender's shape.
    view = _view(_with_allocation(placed_pod("p", [0, 4], {0: {0: 1}}), '{"0":{"1":4}}'))
    assert view.problem is None
    assert [(s.index, dict(s.gpus)) for s in view.slots] == [(1, {1: 4})]
