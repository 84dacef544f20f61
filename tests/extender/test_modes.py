"""The extender follows each node's mode and placement labels: gpu-mem pods stay off nodes whose mode
does not share, a label change applies at the next request, and the placement order is pod > node > flag."""

from __future__ import annotations

from typing import Any

import pytest

from tests.extender.factory import FakeApi, node, pod
from webhook.core.placement import allocator, modes
from webhook.extender import scheduling, wire
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import MODIFIED, Cache
from webhook.extender.settings import ExtenderSettings
from webhook.extender.wire import BindingArgs


def labelled(name: str, *sizes: int, **labels: str) -> dict[str, Any]:
    body = node(name, *sizes)
    body["metadata"]["labels"] = dict(labels)
    return body


def mode(value: str) -> dict[str, str]:
    return {modes.MODE_LABEL: value}


def test_filter_keeps_gpu_memory_pods_off_nodes_whose_mode_does_not_share():
    cache = Cache()
    cache.nodes_resync(
        [
            labelled("legacy", 16),
            labelled("cgpu", 16, **mode("cgpu")),
            labelled("whole", 16, **mode("default")),
            labelled("topo", 16, **mode("topology")),
            labelled("typo", 16, **mode("Share")),
        ]
    )
    cache.pods_resync([])
    names = ("legacy", "cgpu", "whole", "topo", "typo")
    for body in (pod("small", 2), pod("pair", 2, 3)):  # the quick path and the allocator's path
        # Every node that takes the pod (best fit would keep one of them).
        args = wire.ExtenderArgs(body, names)
        result = scheduling.filter_nodes(cache, args, allocator.Policy.BINPACK, best_fit=False)
        assert result["NodeNames"] == ["legacy", "cgpu"]
        assert result["FailedNodes"] is None
        # Unresolvable: preempting pods cannot make a whole-card node take a share.
        unresolvable = result["FailedAndUnresolvableNodes"] or {}
        assert unresolvable["whole"] == (
            "node label ack.node.gpu.schedule=default: the node serves whole GPUs only (nvidia.com/gpu), "
            "not aliyun.com/gpu-mem; shares go to nodes labelled share, cgpu or mps"
        )
        assert "ack.node.gpu.schedule=topology" in unresolvable["topo"]
        assert "ack.node.gpu.schedule='Share' is not a known mode" in unresolvable["typo"]


def test_a_mode_label_change_applies_at_the_next_filter_and_keeps_placed_pods_counted():
    cache = Cache()
    cache.nodes_resync([labelled("n1", 16, **mode("share"))])
    cache.pods_resync([pod("old", 10, node_name="n1", placed={0: {0: 10}}, phase="Running")])
    args = wire.ExtenderArgs(pod("new", 4), ("n1",))
    assert scheduling.filter_nodes(cache, args, allocator.Policy.BINPACK)["NodeNames"] == ["n1"]
    cache.node_event(MODIFIED, labelled("n1", 16, **mode("default")))
    assert scheduling.filter_nodes(cache, args, allocator.Policy.BINPACK)["NodeNames"] == []
    view = cache.view("n1")
    assert view is not None and view.mode == "default" and [g.used for g in view.gpus] == [10]
    cache.node_event(MODIFIED, labelled("n1", 16, **mode("mps")))
    assert scheduling.filter_nodes(cache, args, allocator.Policy.BINPACK)["NodeNames"] == ["n1"]
    too_big = wire.ExtenderArgs(pod("big", 8), ("n1",))  # 10 of 16 still held by the pod placed before
    assert scheduling.filter_nodes(cache, too_big, allocator.Policy.BINPACK)["NodeNames"] == []


@pytest.mark.parametrize(
    ("pod_policy", "node_label", "flag", "best"),
    [
        (None, None, allocator.Policy.BINPACK, "fuller"),
        (None, "spread", allocator.Policy.BINPACK, "emptier"),
        ("binpack", "spread", allocator.Policy.SPREAD, "fuller"),
        (None, None, allocator.Policy.SPREAD, "emptier"),
        (None, "tight", allocator.Policy.SPREAD, "emptier"),
    ],
    ids=["flag-default", "node-label-over-flag", "pod-over-node-label", "flag-spread", "unknown-node-value"],
)
def test_prioritize_uses_the_pod_then_the_node_label_then_the_flag(pod_policy, node_label, flag, best):
    labels = {modes.PLACEMENT_LABEL: node_label} if node_label else {}
    cache = Cache()
    cache.nodes_resync([labelled("fuller", 16, **labels), labelled("emptier", 16, **labels)])
    cache.pods_resync([pod("held", 8, node_name="fuller", placed={0: {0: 8}}, phase="Running")])
    body = pod("new", 4, policy=pod_policy)
    scores = scheduling.prioritize(cache, wire.ExtenderArgs(body, ("fuller", "emptier")), flag)
    assert max(scores, key=lambda n: scores[n]) == best


def _binder(*objs: dict[str, Any]) -> tuple[Cache, FakeApi, Binder]:
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([o for o in objs if o["kind"] == "Node"])
    pods = [o for o in objs if o["kind"] == "Pod"]
    for body in pods:
        api.add(body)
    cache.pods_resync(pods)
    return cache, api, Binder(cache, api, ExtenderSettings(), clock_ns=lambda: 1, sleep=lambda s: None)


def test_bind_places_by_the_nodes_placement_label_unless_the_pod_says_otherwise():
    node_body = labelled("n1", 16, 16, **{modes.PLACEMENT_LABEL: "spread"})
    held = pod("held", 8, node_name="n1", placed={0: {0: 8}}, phase="Running")
    _, api, binder = _binder(node_body, held, pod("spread-me", 2), pod("pack-me", 2, policy="binpack"))
    assert binder.bind(BindingArgs("spread-me", "default", "uid-spread-me", "n1")) == ""
    assert binder.bind(BindingArgs("pack-me", "default", "uid-pack-me", "n1")) == ""
    placed = {key: notes["ALIYUN_COM_GPU_MEM_IDX"] for key, _, notes in api.bound}
    assert placed == {"default/spread-me": "1", "default/pack-me": "0"}


def test_bind_refuses_a_node_whose_mode_changed_to_whole_cards_after_filter():
    cache, api, binder = _binder(labelled("n1", 16), pod("late", 2))
    cache.node_event(MODIFIED, labelled("n1", 16, **mode("default")))
    error = binder.bind(BindingArgs("late", "default", "uid-late", "n1"))
    assert error.startswith("node n1: node label ack.node.gpu.schedule=default: the node serves whole GPUs")
    assert api.bound == []
