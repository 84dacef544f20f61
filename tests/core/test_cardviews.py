"""core.node.podviews.card_view: a whole-card pod as the device plugin sees it, and the pure card choices
(core.node.devices.card_gpus, core.node.matching.prefer_cards)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.node import devices, matching
from webhook.core.node.matching import Match
from webhook.core.node.podviews import Slot, card_view
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources

CARDS = resources.NVIDIA_GPU
GPUS = [devices.Gpu(i, f"GPU-{i}", 16384) for i in range(4)]


def _pod(
    containers: list[dict[str, Any]],
    placed: dict[int, dict[int, int]] | None,
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    notes = ann.encode(ann.Placement(ann.Allocation(placed), 16, 1)) if placed is not None else {}
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": notes}, "spec": spec}


def _asks(name: str, resource: str, value: str) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": {resource: value}}}


def test_each_card_container_gets_the_gpus_its_placement_names_and_init_containers_the_lowest():
    pod = _pod(
        [_asks("a", CARDS, "1"), {"name": "sidecar"}, _asks("b", CARDS, "2")],
        {0: {3: 16}, 2: {1: 16, 2: 16}},
        init=[_asks("setup", CARDS, "2")],
    )
    view = card_view(pod, 0)
    assert view is not None and view.problem is None
    assert view.slots == (
        Slot("setup", True, 2, {1: 16, 2: 16}, 0),
        Slot("a", False, 1, {3: 16}, 0),
        Slot("b", False, 2, {1: 16, 2: 16}, 2),
    )
    assert view.first_units == 2


@pytest.mark.parametrize(
    ("pod", "problem"),
    [
        (_pod([_asks("a", CARDS, "1")], None), "has no gpushare placement"),
        (
            _pod([_asks("a", CARDS, "2")], {0: {1: 16}}),
            "container 'a' asks 2 whole GPUs but the allocation annotation gives it 1 GPU(s)",
        ),
        (
            _pod([_asks("a", CARDS, "1"), _asks("b", resources.GPU_MEMORY, "4")], {0: {1: 16}}),
            "one pod takes whole GPUs or shares, not both",
        ),
        (_pod([_asks("a", CARDS, "0.5")], {0: {1: 16}}), "only whole GPUs are possible"),
    ],
    ids=["bypassed-the-extender", "too-few-gpus-placed", "cards-and-shares", "half-a-card"],
)
def test_a_card_pod_that_cannot_get_its_cards_says_why(pod, problem):
    view = card_view(pod, 0)
    assert view is not None and problem in str(view.problem)


def test_a_pod_asking_no_cards_is_not_a_card_pod():
    assert card_view(_pod([_asks("a", resources.GPU_MEMORY, "4")], {0: {0: 4}}), 0) is None


@pytest.mark.parametrize(
    ("ids", "error"),
    [
        ([], "lists no device IDs"),
        (["GPU-1", "GPU-1"], "a device ID twice"),
        (["GPU-9"], "device ID 'GPU-9' names no GPU of this node"),
    ],
    ids=["empty", "repeated", "unknown"],
)
def test_card_ids_that_name_no_distinct_gpus_of_the_node_are_refused(ids, error):
    with pytest.raises(devices.DeviceError, match=error):
        devices.card_gpus(ids, GPUS)


def test_card_ids_name_their_gpus():
    assert devices.card_gpus(["GPU-3", "GPU-1"], GPUS) == (1, 3)


def test_preference_falls_back_to_the_lowest_free_cards_when_no_placed_container_fits():
    view = card_view(_pod([_asks("a", CARDS, "1")], {0: {2: 16}}), 0)
    assert view is not None
    ids, match = matching.prefer_cards(["GPU-3", "GPU-1"], [], 1, [Match(view, 0)], GPUS)
    assert (ids, match) == (["GPU-1"], None)  # GPU 2 is not free: advise, match nothing
