"""The isolation nodeSelector decision table: selector, affinity, annotation, CGPU_DISABLE, contradictions."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.admission import isolation
from webhook.core.specs import templates
from webhook.core.wire import resources

NAMES = resources.GpuResourceNames()
POLICY = isolation.IsolationPolicy()
KEY = "cgpu.disable.isolation"


def ctr(name: str = "c", mem: Any = 2, env: Any = None, gpu: Any = None) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if mem is not None:
        limits["aliyun.com/gpu-mem"] = mem
    if gpu is not None:
        limits["nvidia.com/gpu"] = gpu
    out: dict[str, Any] = {"name": name, "resources": {"limits": limits}}
    if env is not None:
        out["env"] = env
    return out


def cgpu(value: Any) -> list[dict[str, Any]]:
    return [{"name": "CGPU_DISABLE", "value": value}]


def affinity(*exprs: dict[str, Any]) -> dict[str, Any]:
    terms = [{"matchExpressions": list(exprs)}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def decide(
    *containers: Any,
    init: Any = (),
    annotations: Any = None,
    spec_extra: Any = None,
    policy: isolation.IsolationPolicy = POLICY,
) -> isolation.IsolationDecision:
    spec: dict[str, Any] = {"containers": list(containers), **(spec_extra or {})}
    if init:
        spec["initContainers"] = list(init)
    metadata = {} if annotations is None else {"annotations": annotations}
    return isolation.decide(templates.PodTemplate("", metadata, spec), policy, NAMES)


TABLE: list[tuple[str, dict[str, Any], str | None, list[str]]] = [
    ("no gpu-mem: nothing", {"containers": [ctr(mem=None, gpu=1)]}, None, []),
    ("zero gpu-mem: nothing", {"containers": [ctr(mem="0")]}, None, []),
    ("unparsable gpu-mem: nothing", {"containers": [ctr(mem="x")]}, None, []),
    ("gpu-mem without signal: default false", {"containers": [ctr()]}, "false", []),
    (
        "gpu-mem as a request only",
        {"containers": [{"resources": {"requests": {"aliyun.com/gpu-mem": "1"}}}]},
        "false",
        [],
    ),
    ("annotation true", {"containers": [ctr()], "annotations": {KEY: "true"}}, "true", []),
    ("annotation case-insensitive", {"containers": [ctr()], "annotations": {KEY: "TRUE"}}, "true", []),
    ("annotation False", {"containers": [ctr()], "annotations": {KEY: "False"}}, "false", []),
    ("annotation with spaces", {"containers": [ctr()], "annotations": {KEY: " true "}}, "true", []),
    (
        "every container CGPU_DISABLE=true",
        {"containers": [ctr("a", env=cgpu("true")), ctr("b", env=cgpu("True"))]},
        "true",
        [],
    ),
    ("CGPU_DISABLE=false", {"containers": [ctr(env=cgpu("false"))]}, "false", []),
    ("empty CGPU_DISABLE is unset", {"containers": [ctr(env=cgpu(""))]}, "false", []),
    (
        "env of a non-gpu container is ignored",
        {"containers": [ctr("a"), ctr("b", mem=None, env=cgpu("true"))]},
        "false",
        [],
    ),
    (
        "mixed containers: default with a warning",
        {"containers": [ctr("a", env=cgpu("true")), ctr("b")]},
        "false",
        ['CGPU_DISABLE=true is not set in gpu-mem container "b"; using cgpu.disable.isolation=false'],
    ),
    (
        "init container counts",
        {"containers": [ctr("a", env=cgpu("true"))], "init": [ctr("i", env=cgpu("true"))]},
        "true",
        [],
    ),
    (
        "valueFrom: assumed not true",
        {
            "containers": [
                ctr(
                    "a",
                    env=[
                        {"name": "CGPU_DISABLE", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}
                    ],
                )
            ]
        },
        "false",
        ['CGPU_DISABLE of container "a" comes from valueFrom; assumed not "true"'],
    ),
    (
        "unrecognised env value",
        {"containers": [ctr("a", env=cgpu("yes"))]},
        "false",
        ['CGPU_DISABLE="yes" of container "a" is not true or false; assumed not "true"'],
    ),
    (
        "last env entry wins",
        {"containers": [ctr("a", env=[*cgpu("true"), *cgpu("false")])]},
        "false",
        [],
    ),
    (
        "annotation overrides env",
        {"containers": [ctr(env=cgpu("true"))], "annotations": {KEY: "false"}},
        "false",
        ["annotation cgpu.disable.isolation=false overrides CGPU_DISABLE=true"],
    ),
    (
        "existing nodeSelector wins",
        {"containers": [ctr()], "spec_extra": {"nodeSelector": {KEY: "true"}}},
        None,
        [],
    ),
    (
        "existing nodeSelector wins over mixed containers silently",
        {
            "containers": [ctr("a", env=cgpu("true")), ctr("b")],
            "spec_extra": {"nodeSelector": {KEY: "false"}},
        },
        None,
        [],
    ),
    (
        "nodeSelector contradicts annotation",
        {"containers": [ctr()], "annotations": {KEY: "false"}, "spec_extra": {"nodeSelector": {KEY: "true"}}},
        None,
        ["nodeSelector cgpu.disable.isolation=true is kept although annotation cgpu.disable.isolation=false"],
    ),
    (
        "nodeSelector contradicts env",
        {"containers": [ctr(env=cgpu("true"))], "spec_extra": {"nodeSelector": {KEY: "false"}}},
        None,
        ["nodeSelector cgpu.disable.isolation=false is kept although CGPU_DISABLE=true"],
    ),
    (
        "nodeSelector value matches no pool",
        {"containers": [ctr()], "spec_extra": {"nodeSelector": {KEY: "yes"}}},
        None,
        ["nodeSelector cgpu.disable.isolation=yes matches no gpushare node pool (use true or false)"],
    ),
    (
        "other nodeSelector keys are kept and the key added",
        {"containers": [ctr()], "spec_extra": {"nodeSelector": {"zone": "a"}}},
        "false",
        [],
    ),
    (
        "required affinity In wins",
        {
            "containers": [ctr()],
            "spec_extra": {"affinity": affinity({"key": KEY, "operator": "In", "values": ["true"]})},
        },
        None,
        [],
    ),
    (
        "required affinity Exists wins",
        {
            "containers": [ctr(env=cgpu("true"))],
            "spec_extra": {"affinity": affinity({"key": KEY, "operator": "Exists"})},
        },
        None,
        [],
    ),
    (
        "required affinity contradicts annotation",
        {
            "containers": [ctr()],
            "annotations": {KEY: "false"},
            "spec_extra": {"affinity": affinity({"key": KEY, "operator": "In", "values": ["true"]})},
        },
        None,
        [
            "required node affinity on cgpu.disable.isolation is kept although "
            "annotation cgpu.disable.isolation=false"
        ],
    ),
    (
        "required affinity NotIn contradicts env",
        {
            "containers": [ctr(env=cgpu("true"))],
            "spec_extra": {"affinity": affinity({"key": KEY, "operator": "NotIn", "values": ["true"]})},
        },
        None,
        ["required node affinity on cgpu.disable.isolation is kept although CGPU_DISABLE=true"],
    ),
    (
        "affinity on another key does not count",
        {
            "containers": [ctr()],
            "spec_extra": {"affinity": affinity({"key": "zone", "operator": "In", "values": ["a"]})},
        },
        "false",
        [],
    ),
    (
        "preferred affinity does not count",
        {
            "containers": [ctr()],
            "spec_extra": {
                "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
            },
        },
        "false",
        [],
    ),
]


@pytest.mark.parametrize(("case", "value", "warnings"), [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_isolation_decision(case, value, warnings):
    decision = decide(
        *case["containers"],
        init=case.get("init", ()),
        annotations=case.get("annotations"),
        spec_extra=case.get("spec_extra"),
    )
    assert decision.violation is None
    assert decision.value == value
    assert list(decision.warnings) == warnings


def test_annotation_with_another_value_is_a_violation_listing_the_allowed_values():
    decision = decide(ctr(), annotations={KEY: "maybe"})
    assert decision.value is None
    v = decision.violation
    assert v is not None
    assert str(v) == (
        'metadata.annotations[cgpu.disable.isolation]: "maybe": is not an allowed value; allowed: "true" '
        '(isolation off) or "false" (GPU memory isolated); fix: set annotation cgpu.disable.isolation to '
        '"true" or "false", or remove it'
    )


def test_annotation_is_ignored_for_pods_without_gpu_memory():
    assert decide(ctr(mem=None, gpu=1), annotations={KEY: "maybe"}) == isolation.IsolationDecision(None)


WRONG = [
    ("annotation is a boolean", {"annotations": {KEY: True}}, "metadata.annotations[cgpu.disable.isolation]"),
    ("annotations is a list", {"annotations": [KEY]}, "metadata.annotations"),
    ("nodeSelector is a list", {"spec_extra": {"nodeSelector": [KEY]}}, "spec.nodeSelector"),
    ("affinity is a string", {"spec_extra": {"affinity": "x"}}, "spec.affinity"),
    (
        "nodeSelectorTerms item is a number",
        {
            "spec_extra": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [1]}
                    }
                }
            }
        },
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]",
    ),
    ("env is an object", {"env": {"CGPU_DISABLE": "true"}}, "spec.containers[0].env"),
    ("env item is a string", {"env": ["CGPU_DISABLE=true"]}, "spec.containers[0].env[0]"),
    (
        "env value is a boolean",
        {"env": [{"name": "CGPU_DISABLE", "value": True}]},
        "spec.containers[0].env[0].value",
    ),
]


@pytest.mark.parametrize(("case", "path"), [w[1:] for w in WRONG], ids=[w[0] for w in WRONG])
def test_wrong_types_are_violations_not_errors(case, path):
    decision = decide(
        ctr(env=case.get("env")), annotations=case.get("annotations"), spec_extra=case.get("spec_extra")
    )
    assert decision.value is None
    assert decision.violation is not None
    assert decision.violation.path == path
    assert "has the wrong type" in decision.violation.problem


def test_template_paths_prefix_the_violation():
    t = templates.PodTemplate("spec.template", {"annotations": {KEY: "no"}}, {"containers": [ctr()]})
    v = isolation.decide(t, POLICY, NAMES).violation
    assert v is not None and v.path == "spec.template.metadata.annotations[cgpu.disable.isolation]"


def test_default_true_still_honours_an_explicit_false():
    policy = isolation.IsolationPolicy(default="true")
    assert decide(ctr(), policy=policy).value == "true"
    assert decide(ctr(env=cgpu("false")), policy=policy).value == "false"


def test_configured_keys_are_used():
    policy = isolation.IsolationPolicy(
        label_key="example.com/iso", annotation_key="example.com/choose", env_name="NO_ISO"
    )
    assert decide(ctr(env=[{"name": "NO_ISO", "value": "true"}]), policy=policy).value == "true"
    assert decide(ctr(), annotations={"example.com/choose": "true"}, policy=policy).value == "true"
    assert decide(ctr(), spec_extra={"nodeSelector": {"example.com/iso": "x"}}, policy=policy).value is None
    assert decide(ctr(), spec_extra={"nodeSelector": {KEY: "true"}}, policy=policy).value == "false"


def test_warnings_are_short_single_lines_even_with_hostile_names():
    decision = decide(ctr("n\n" * 100, env=cgpu("y\x00" * 100)), ctr("b", env=cgpu("true")))
    assert decision.warnings
    for w in decision.warnings:
        assert w.isprintable() and len(w) <= 200


def test_gpu_memory_containers_lists_app_then_init_containers():
    a, b, i = ctr("a"), ctr("b", mem=None), ctr("i")
    spec = {"containers": [a, b], "initContainers": [i, "junk"]}
    assert isolation.gpu_memory_containers(spec, NAMES) == [a, i]
    assert isolation.asks_gpu_memory({"containers": [ctr(mem=10**5000)]}, NAMES)


def test_a_pod_placed_by_nodename_gets_no_selector_the_kubelet_could_refuse_it_for():
    decision = decide(ctr(env=cgpu("true")), spec_extra={"nodeName": "gpu-node-1"})
    assert decision.violation is None and decision.value is None
    assert decision.warnings == (
        "spec.nodeName=gpu-node-1 places the pod itself: no nodeSelector cgpu.disable.isolation added",
    )


def _terms(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


def _on_node(name: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}


def test_a_daemonset_pod_pinned_by_node_name_gets_no_selector():
    # The DaemonSet controller picked the node without our selector: one the node's label does not
    # match would leave the pod Pending there for good.
    decision = decide(ctr(), spec_extra={"affinity": _terms(_on_node("gpu-node-1"))})
    assert decision.violation is None and decision.value is None
    assert decision.warnings == (
        "node affinity pins the pod to node gpu-node-1: no nodeSelector cgpu.disable.isolation added",
    )
    # The template's own terms get the matchFields merged in each; still pinned.
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    both = _terms({**_on_node("n1"), "matchExpressions": [zone]}, {**_on_node("n1"), "matchExpressions": []})
    assert decide(ctr(), spec_extra={"affinity": both}).value is None


def test_a_term_without_a_node_name_leaves_the_pod_to_the_scheduler():
    for terms in (
        _terms(_on_node("n1"), {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}),
        _terms({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}),
        _terms({"matchFields": [{"key": "metadata.name", "operator": "In", "values": []}]}),
        # Several nodes, in one term or across terms: the scheduler still chooses among them.
        _terms({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]}),
        _terms(_on_node("n1"), _on_node("n2")),
    ):
        assert decide(ctr(), spec_extra={"affinity": terms}).value == "false"


def test_affinity_terms_are_ored_so_one_that_leaves_the_key_alone_allows_every_value():
    # Term 2 allows any node, so CGPU_DISABLE=true contradicts nothing: no warning.
    only_false = {"matchExpressions": [{"key": KEY, "operator": "In", "values": ["false"]}]}
    zone = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    decision = decide(ctr(env=cgpu("true")), spec_extra={"affinity": _terms(only_false, zone)})
    assert decision.value is None and decision.warnings == ()
    # Every term restricting the key to false still contradicts it.
    decision = decide(ctr(env=cgpu("true")), spec_extra={"affinity": _terms(only_false, only_false)})
    assert decision.warnings == (
        "required node affinity on cgpu.disable.isolation is kept although CGPU_DISABLE=true",
    )
