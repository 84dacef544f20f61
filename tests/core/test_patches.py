"""JSON Patch operations: pointer escaping, add-only semantics, application with jsonpatch, idempotence."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.core.admission import isolation, verdict
from webhook.core.wire import patches


def gpu_pod(**spec: Any) -> dict[str, Any]:
    containers = [{"name": "c", "image": "x", "resources": {"limits": {"aliyun.com/gpu-mem": "2"}}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": containers, **spec},
    }


@pytest.mark.parametrize(
    ("parts", "pointer"),
    [
        (("spec", "nodeSelector"), "/spec/nodeSelector"),
        (("spec", "nodeSelector", "a/b"), "/spec/nodeSelector/a~1b"),
        (("spec", "nodeSelector", "a~b"), "/spec/nodeSelector/a~0b"),
        (("spec", "nodeSelector", "~/~1"), "/spec/nodeSelector/~0~1~01"),
    ],
    ids=["plain", "slash", "tilde", "both"],
)
def test_pointer_escapes_tilde_then_slash(parts, pointer):
    assert patches.pointer(*parts) == pointer


def test_absent_node_selector_is_added_as_a_whole_map():
    assert patches.node_selector_ops({}, "k", "v") == [
        {"op": "add", "path": "/spec/nodeSelector", "value": {"k": "v"}}
    ]
    assert patches.node_selector_ops({"nodeSelector": None}, "k", "v")[0]["path"] == "/spec/nodeSelector"


def test_present_node_selector_gets_only_the_one_key():
    ops = patches.node_selector_ops({"nodeSelector": {"zone": "a"}}, "example.com/iso~x", "true")
    assert ops == [{"op": "add", "path": "/spec/nodeSelector/example.com~1iso~0x", "value": "true"}]


def test_existing_key_is_never_overridden():
    assert patches.node_selector_ops({"nodeSelector": {"k": "other"}}, "k", "v") == []


@pytest.mark.parametrize(
    ("current", "added"),
    [(None, True), ("", True), ("default-scheduler", True), ("my-scheduler", False), ("gpushare", False)],
    ids=["absent", "empty", "default", "another choice", "ours already"],
)
def test_scheduler_name_is_added_only_over_the_default(current, added):
    spec = {} if current is None else {"schedulerName": current}
    ops = patches.scheduler_name_ops(spec, "gpushare")
    assert ops == ([{"op": "add", "path": "/spec/schedulerName", "value": "gpushare"}] if added else [])


def test_checked_rejects_malformed_operations():
    with pytest.raises(jsonpatch.InvalidJsonPatch):
        patches.checked([{"op": "bogus", "path": "/x"}])
    assert patches.checked([]) == []


def apply(pod: dict[str, Any], policy: verdict.Policy) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    ops = verdict.mutation_patch(pod, verdict.evaluate(pod, policy), policy)
    return ops, jsonpatch.apply_patch(pod, ops)


@pytest.mark.parametrize(
    ("spec", "policy", "expected_spec"),
    [
        ({}, verdict.Policy(), {"nodeSelector": {"cgpu.disable.isolation": "false"}}),
        (
            {"nodeSelector": {"zone": "a"}},
            verdict.Policy(),
            {"nodeSelector": {"zone": "a", "cgpu.disable.isolation": "false"}},
        ),
        (
            {"nodeSelector": {"zone": "a"}},
            verdict.Policy(isolation=isolation.IsolationPolicy(label_key="ex.com/a~b/c")),
            {"nodeSelector": {"zone": "a", "ex.com/a~b/c": "false"}},
        ),
        (
            {"schedulerName": "default-scheduler"},
            verdict.Policy(scheduler_name="gpushare-scheduler"),
            {"schedulerName": "gpushare-scheduler", "nodeSelector": {"cgpu.disable.isolation": "false"}},
        ),
        (
            {"nodeSelector": {"cgpu.disable.isolation": "true"}},
            verdict.Policy(),
            {"nodeSelector": {"cgpu.disable.isolation": "true"}},
        ),
    ],
    ids=["no selector", "other selector", "escaped key", "scheduler name", "user's choice"],
)
def test_patch_applies_and_a_second_round_adds_nothing(spec, policy, expected_spec):
    pod = gpu_pod(**spec)
    before = copy.deepcopy(pod)
    _, patched = apply(pod, policy)
    assert pod == before  # evaluate and mutation_patch never modify their input
    for key, value in expected_spec.items():
        assert patched["spec"][key] == value
    again, same = apply(patched, policy)
    assert again == [] and same == patched


@settings(max_examples=150, deadline=None)
@given(
    selector=st.none() | st.dictionaries(st.text(max_size=8), st.text(max_size=5), max_size=3),
    key=st.text(alphabet="ab~/.", min_size=1, max_size=6),
    scheduler=st.none() | st.sampled_from(["", "default-scheduler", "other", "gpushare"]),
    annotation=st.none() | st.sampled_from(["true", "FALSE", "x"]),
)
def test_mutation_is_idempotent_for_any_selector_and_key(selector, key, scheduler, annotation):
    spec: dict[str, Any] = {}
    if selector is not None:
        spec["nodeSelector"] = selector
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    pod = gpu_pod(**spec)
    if annotation is not None:
        pod["metadata"]["annotations"] = {key: annotation}
    policy = verdict.Policy(
        isolation=isolation.IsolationPolicy(label_key=key, annotation_key=key), scheduler_name="gpushare"
    )
    ops, patched = apply(pod, policy)
    if ops:
        assert patched["spec"]["nodeSelector"].get(key) in ("true", "false") or key in (selector or {})
    assert apply(patched, policy)[0] == []
