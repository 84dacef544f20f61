"""Tests for webhook.extender.wire: extender v1 JSON, read case-insensitively, written PascalCase."""

from __future__ import annotations

import json

import pytest

from webhook.extender import wire

POD = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": []}}


def test_node_cache_capable_args_carry_names_only():
    args = wire.extender_args({"Pod": POD, "Nodes": None, "NodeNames": ["n1", "n2"]})
    assert args.node_cache_capable
    assert args.node_names == ("n1", "n2")


def test_full_node_args_carry_node_objects_and_their_names():
    nodes = {"metadata": {}, "items": [{"metadata": {"name": "n1"}}, {"metadata": {"name": "n2"}}]}
    args = wire.extender_args({"Pod": POD, "Nodes": nodes, "NodeNames": None})
    assert not args.node_cache_capable
    assert args.node_names == ("n1", "n2")


def test_keys_are_matched_case_insensitively_and_the_exact_key_wins():
    args = wire.extender_args({"pod": POD, "nodenames": ["a"], "NodeNames": ["b"]})
    assert args.node_names == ("b",)
    assert wire.binding_args({"podname": "p", "PODNAMESPACE": "ns", "podUID": "u", "node": "n"}) == (
        wire.BindingArgs("p", "ns", "u", "n")
    )


def test_missing_node_names_means_no_nodes():
    assert wire.extender_args({"Pod": POD}).node_names == ()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ([], "ExtenderArgs must be a JSON object"),
        ({"Pod": None, "NodeNames": []}, "ExtenderArgs.Pod must be a JSON object"),
        ({"Pod": POD, "NodeNames": "n1"}, "NodeNames must be a list of strings"),
        ({"Pod": POD, "NodeNames": [1]}, "NodeNames must be a list of strings"),
        ({"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}}, "items[0].metadata.name must be a non-empty"),
        (
            {"Pod": POD, "Nodes": {"items": [{"metadata": "n1"}]}},
            "items[0].metadata.name must be a non-empty",
        ),
        ({"Pod": "x"}, "ExtenderArgs.Pod must be a JSON object, got a string"),
        ({"Pod": POD, "Nodes": {"items": "x"}}, "must be a list of Node objects"),
        ({"Pod": POD, "Nodes": []}, "ExtenderArgs.Nodes must be a JSON object"),
    ],
    ids=[
        "not-object",
        "no-pod",
        "names-string",
        "names-ints",
        "nameless-node",
        "node-metadata-string",
        "pod-string",
        "items-string",
        "nodes-list",
    ],
)
def test_malformed_extender_args_are_refused_with_the_field(body, fragment):
    with pytest.raises(wire.WireError) as err:
        wire.extender_args(body)
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"PodName": 3, "Node": "n"}, "PodName must be a string"),
        ({"PodName": "p", "Node": ""}, "Node is empty"),
        ({"Node": "n"}, "PodName is empty"),
        ("bind", "must be a JSON object"),
    ],
    ids=["wrong-type", "no-node", "no-pod", "string"],
)
def test_malformed_binding_args_are_refused(body, fragment):
    with pytest.raises(wire.WireError) as err:
        wire.binding_args(body)
    assert fragment in str(err.value)


def test_body_that_is_not_json_is_refused():
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.parse_json(b"{nope")
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.parse_json(b"\xff\xfe")


def test_nan_and_infinity_are_refused_as_go_would():
    for body in (b'{"Pod": {"x": NaN}}', b"[Infinity]", b"-Infinity"):
        refused = r"request body is not JSON: (unexpected character|no digit after sign)"
        with pytest.raises(wire.WireError, match=refused):
            wire.parse_json(body)


def test_very_deep_json_is_refused_with_a_message_not_a_recursion_error():
    with pytest.raises(wire.WireError, match="nested too deeply"):
        wire.parse_json(b"[" * 100_000 + b"]" * 100_000)


def test_filter_result_is_the_exact_go_json_with_nulls():
    args = wire.extender_args({"Pod": POD, "NodeNames": ["n1", "n2"]})
    out = wire.filter_result(args, ["n1"], {"n2": "largest free GPU has 3 GiB, pod needs 5"})
    assert json.dumps(out, separators=(",", ":")) == (
        '{"Nodes":null,"NodeNames":["n1"],"FailedNodes":{"n2":"largest free GPU has 3 GiB, pod needs 5"},'
        '"FailedAndUnresolvableNodes":null,"Error":""}'
    )


def test_filter_result_without_node_cache_returns_the_passing_node_objects():
    n1, n2 = {"metadata": {"name": "n1"}, "x": 1}, {"metadata": {"name": "n2"}}
    args = wire.extender_args({"Pod": POD, "Nodes": {"items": [n1, n2]}})
    out = wire.filter_result(args, ["n1"], {"n2": "full"})
    assert out["Nodes"] is not None
    assert out["Nodes"]["items"] == [n1]
    assert out["NodeNames"] is None


def test_priorities_and_binding_results_are_pascal_case():
    assert wire.host_priority_list({"n1": 7}) == [{"Host": "n1", "Score": 7}]
    assert wire.binding_result() == {"Error": ""}
    assert wire.filter_error("boom")["Error"] == "boom"
