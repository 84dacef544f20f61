"""Whole cards (`nvidia.com/gpu`) in the extender: filter and bind on shared and on `default` nodes, and
whole cards and shares never on one GPU."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.extender.factory import FakeApi, node, pod
from webhook.cli.serve import extender as serve_extender
from webhook.core.placement import allocator, modes
from webhook.core.wire import resources
from webhook.extender import scheduling, wire
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import MODIFIED, Cache
from webhook.extender.settings import ExtenderSettings
from webhook.extender.wire import BindingArgs


def card_pod(name: str, *cards: int, node_name: str | None = None) -> dict[str, Any]:
    body = pod(name, node_name=node_name)
    body["spec"]["containers"] = [
        {"name": f"c{i}", "image": "x", "resources": {"limits": {resources.NVIDIA_GPU: str(n)}}}
        for i, n in enumerate(cards)
    ]
    return body


def labelled(body: dict[str, Any], mode: str) -> dict[str, Any]:
    body["metadata"]["labels"] = {modes.MODE_LABEL: mode}
    return body


def setup(*objs: dict[str, Any]) -> tuple[Cache, FakeApi, Binder]:
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([o for o in objs if o["kind"] == "Node"])
    pods = [o for o in objs if o["kind"] == "Pod"]
    for p in pods:
        api.add(p)
    cache.pods_resync(pods)
    return cache, api, Binder(cache, api, ExtenderSettings(), clock_ns=lambda: 42, sleep=lambda s: None)


def filtered(cache: Cache, body: dict[str, Any], *names: str) -> wire.FilterResult:
    return scheduling.filter_nodes(cache, wire.ExtenderArgs(body, names), allocator.Policy.BINPACK)


def bind(binder: Binder, name: str, node_name: str) -> str:
    return binder.bind(BindingArgs(name, "default", f"uid-{name}", node_name))


def test_a_card_pod_passes_only_shared_nodes_with_enough_gpus_holding_nothing():
    cache, _, _ = setup(
        node("empty", 16, 16),
        node("half", 16, 16),
        labelled(node("nvidia", 16), "default"),
        pod("s", 1, node_name="half", placed={0: {0: 1}}),
    )
    result = filtered(cache, card_pod("train", 2), "empty", "half", "nvidia")
    assert result["NodeNames"] == ["empty", "nvidia"]
    assert result["FailedNodes"] == {
        "half": "pod asks for 2 whole GPUs, 1 of the node's 2 healthy GPUs hold nothing "
        "(a whole GPU never shares with gpu-mem pods)"
    }


def test_a_node_with_too_few_gpus_or_an_unknown_mode_is_unresolvable_for_cards():
    cache, _, _ = setup(node("small", 16), labelled(node("odd", 16, 16), "Share"))
    result = filtered(cache, card_pod("train", 2), "small", "odd", "ghost")
    unresolvable = result["FailedAndUnresolvableNodes"]
    assert unresolvable is not None
    assert unresolvable["small"] == "pod asks for 2 whole GPUs, node has 1 healthy"
    assert unresolvable["odd"].startswith("node label ack.node.gpu.schedule='Share' is not a known mode")
    assert result["FailedNodes"] == {"ghost": scheduling.UNKNOWN_NODE}


def test_a_mixed_pod_fails_every_node_with_the_rules_words():
    cache, _, _ = setup(node("n1", 16, 16))
    body = card_pod("mixed", 1)
    body["spec"]["containers"].append(
        {"name": "side", "image": "x", "resources": {"limits": {resources.GPU_MEMORY: "2"}}}
    )
    result = filtered(cache, body, "n1")
    assert result["FailedAndUnresolvableNodes"] is not None
    assert "one pod takes whole GPUs or shares, not both" in result["FailedAndUnresolvableNodes"]["n1"]


def test_bind_on_a_shared_node_reserves_and_annotates_whole_gpus_so_no_share_lands_there():
    cache, api, binder = setup(node("n1", 16, 24), card_pod("train", 1), pod("s", 8))
    assert bind(binder, "train", "n1") == ""
    _, _, notes = api.bound[0]
    assert json.loads(notes[resources.ANN_ALLOCATION]) == {"0": {"0": 16}}
    assert notes[resources.ANN_MEM_IDX] == "0" and notes[resources.ANN_MEM_POD] == "16"
    assert notes[resources.ANN_MEM_ASSIGNED] == "false"
    view = cache.view("n1")
    assert view is not None and [g.used for g in view.gpus] == [16, 0]
    assert bind(binder, "s", "n1") == ""
    assert json.loads(api.bound[1][2][resources.ANN_ALLOCATION]) == {"0": {"1": 8}}


def test_bind_of_a_card_pod_to_a_full_shared_node_is_refused_and_reserves_nothing():
    cache, api, binder = setup(
        node("n1", 16), pod("s", 1, node_name="n1", placed={0: {0: 1}}), card_pod("t", 1)
    )
    error = bind(binder, "t", "n1")
    assert error.startswith("node n1: pod asks for 1 whole GPU, 0 of the node's 1 healthy GPUs hold nothing")
    assert api.bound == [] and cache.assumed() == {}


def test_bind_on_a_default_node_is_a_plain_binding_without_annotations_and_idempotent():
    cache, api, binder = setup(labelled(node("nvidia", 16, 16), "default"), card_pod("train", 2))
    assert bind(binder, "train", "nvidia") == ""
    assert api.bound == [("default/train", "nvidia", {})]
    assert cache.assumed() == {}
    # The watch shows it bound: a duplicate of the bind succeeds, one to another node says where it is.
    cache.pod_event(MODIFIED, api.pods["default/train"])
    assert bind(binder, "train", "nvidia") == ""
    assert bind(binder, "train", "other") == "pod default/train is already bound to node nvidia, not other"
    assert len(api.bound) == 1


def test_a_card_pod_bound_by_the_watch_counts_on_its_gpus_after_a_restart():
    placed = card_pod("train", 1, node_name="n1")
    placed["metadata"]["annotations"] = {
        resources.ANN_ALLOCATION: '{"0":{"1":16}}',
        resources.ANN_MEM_IDX: "1",
        resources.ANN_MEM_POD: "16",
    }
    cache, _, _ = setup(node("n1", 16, 16), placed)
    view = cache.view("n1")
    assert view is not None and [g.used for g in view.gpus] == [0, 16]
    assert filtered(cache, pod("big", 16), "n1")["NodeNames"] == ["n1"]
    assert filtered(cache, card_pod("two", 2), "n1")["NodeNames"] == []


def test_prioritize_has_no_preference_among_nodes_for_card_pods():
    cache, _, _ = setup(node("a", 16, 16), node("b", 16), pod("s", 8, node_name="b", placed={0: {0: 8}}))
    args = wire.ExtenderArgs(card_pod("t", 1), ("a", "b"))
    assert scheduling.prioritize(cache, args, allocator.Policy.BINPACK) == {"a": 0, "b": 0}


def test_the_cli_passes_the_whole_card_resource_to_the_extender():
    args = serve_extender.build_parser().parse_args(["--whole-card-resource=example.com/gpu"])
    assert serve_extender.settings_from(args).names.whole_card == "example.com/gpu"
    default = serve_extender.settings_from(serve_extender.build_parser().parse_args([]))
    assert default.names.whole_card == resources.NVIDIA_GPU


def test_the_cli_refuses_a_whole_card_resource_that_is_no_extended_resource(capsys):
    with pytest.raises(SystemExit) as exc:
        serve_extender.build_parser().parse_args(["--whole-card-resource=gpu"])
    assert exc.value.code == 2
    assert "'gpu' is not an extended resource name (<domain>/<name>, e.g. nvidia.com/gpu)" in (
        capsys.readouterr().err
    )


def test_a_node_relabelled_from_default_to_share_takes_nothing_while_nvidias_card_pods_run():
    # A card pod bound while n1 was `default` got a plain Binding (NVIDIA's plugin chose its GPU): after
    # the relabel nothing of ours may land beside it, share or card, until it ends.
    cache, api, binder = setup(labelled(node("n1", 16), "default"), card_pod("card", 1), pod("share", 8))
    assert bind(binder, "card", "n1") == ""
    card = api.pods["default/card"]
    card["status"]["phase"] = "Running"
    cache.pod_event(MODIFIED, card)
    cache.node_event(MODIFIED, labelled(node("n1", 16), "share"))
    result = filtered(cache, api.pods["default/share"], "n1")
    assert result["NodeNames"] == []
    reason = "the node runs 1 whole-GPU pod(s) (first: default/card) that NVIDIA's plugin placed"
    assert (result["FailedAndUnresolvableNodes"] or {})["n1"].startswith(reason)
    assert bind(binder, "share", "n1").startswith(f"node n1: {reason}")
    card["status"]["phase"] = "Succeeded"
    cache.pod_event(MODIFIED, card)
    assert filtered(cache, api.pods["default/share"], "n1")["NodeNames"] == ["n1"]


def test_a_node_relabelled_from_share_to_default_takes_no_whole_card_while_shares_run():
    running = pod("running", 8, node_name="n1", placed={0: {0: 8}}, phase="Running")
    cache, api, binder = setup(labelled(node("n1", 16), "share"), running, card_pod("card", 1))
    cache.node_event(MODIFIED, labelled(node("n1", 16), "default"))
    result = filtered(cache, api.pods["default/card"], "n1")
    assert result["NodeNames"] == []
    assert (result["FailedNodes"] or {})["n1"].startswith("gpu-mem shares placed while the node shared GPUs")
    assert bind(binder, "card", "n1").startswith("node n1: gpu-mem shares placed while")
    assert api.bound == []
    cache.pod_event(MODIFIED, {**running, "status": {"phase": "Succeeded"}})
    assert filtered(cache, api.pods["default/card"], "n1")["NodeNames"] == ["n1"]
