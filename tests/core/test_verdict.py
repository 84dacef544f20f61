"""The verdict of whole objects: sample manifests, the denial message, warnings, mutation, and fuzzing."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.core.admission import verdict

MANIFESTS = Path(__file__).parent.parent / "data" / "manifests"
POLICY = verdict.Policy()


def load(name: str) -> Any:
    return yaml.safe_load((MANIFESTS / name).read_text())


GOOD = sorted(p.name for p in MANIFESTS.glob("*-good.yaml"))
BAD = {
    "pod-bad.yaml": [
        "spec.containers[0].resources.limits[nvidia.com/gpu]",
        "spec.containers[1].resources.limits[aliyun.com/gpu-mem]",
        "spec.initContainers[0].resources.requests[aliyun.com/gpu-mem]",
        "spec.containers[0].resources.limits[nvidia.com/gpu]",  # whole cards beside shares in one pod
    ],
    "pod-multi-gpu-bad.yaml": ["metadata.labels[aliyun.com/gpu-count]"],
    "pod-isolation-bad.yaml": ["metadata.annotations[cgpu.disable.isolation]"],
    "replicaset-bad.yaml": ["spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]"],
    "deployment-bad.yaml": [
        "spec.template.spec.containers[0].resources.limits[aliyun.com/gpu-mem]",
        "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
        "spec.template.spec.containers[0].resources.limits",  # whole GPUs and gpu-mem at once
        "spec.template.spec.containers[1].resources.limits[nvidia.com/gpu]",
        "spec.template.spec.initContainers[0].resources.limits[aliyun.com/gpu-mem]",
    ],
    "daemonset-bad.yaml": ["spec.template.spec.containers[0].resources.limits[nvidia.com/mig-1g.5gb]"],
    "cronjob-bad.yaml": [
        "spec.jobTemplate.spec.template.spec.containers[0].resources.requests[nvidia.com/gpu]"
    ],
    "pytorchjob-bad.yaml": [
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    ],
    "raycluster-bad.yaml": [
        "spec.workerGroupSpecs[0].template.spec.containers[0].resources.limits[aliyun.com/gpu-mem]"
    ],
    "jobset-bad.yaml": [
        "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    ],
    "leaderworkerset-bad.yaml": [
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[cgpu.disable.isolation]"
    ],
}


def test_every_bad_manifest_has_expectations():
    assert sorted(BAD) == sorted(p.name for p in MANIFESTS.glob("*-bad.yaml"))
    assert len(GOOD) >= 12


@pytest.mark.parametrize("name", GOOD)
def test_good_manifests_are_allowed(name):
    result = verdict.evaluate(load(name), POLICY)
    assert result.allowed and result.violations == () and result.message() == ""


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_manifests_are_denied_with_every_problem_in_order(name):
    result = verdict.evaluate(load(name), POLICY)
    assert not result.allowed
    assert [v.path for v in result.violations] == BAD[name]
    assert [v for t in result.templates for v in t.violations] == list(result.violations)


def test_message_has_a_summary_then_one_line_per_violation():
    result = verdict.evaluate(load("pod-bad.yaml"), POLICY)
    lines = result.message().split("\n")
    assert lines[0] == "Pod has 4 problems with GPU resources:"
    assert lines[1:] == [str(v) for v in result.violations]
    assert lines[1].startswith(
        'spec.containers[0].resources.limits[nvidia.com/gpu] (container "train"): "0.5": '
    )


def test_message_of_a_single_problem_is_deterministic():
    first = verdict.evaluate(load("cronjob-bad.yaml"), POLICY).message()
    assert first == verdict.evaluate(load("cronjob-bad.yaml"), POLICY).message()
    assert first == (
        "CronJob has 1 problem with GPU resources:\n"
        "spec.jobTemplate.spec.template.spec.containers[0].resources.requests[nvidia.com/gpu] "
        '(container "train"): '
        '"1": must equal limits[nvidia.com/gpu] (2); GPU resources cannot be overcommitted; fix: set '
        "requests[nvidia.com/gpu] equal to the limit, or leave it out (it defaults to the limit)"
    )


def test_isolation_is_reported_per_template_for_workloads():
    result = verdict.evaluate(load("raycluster-good.yaml"), POLICY)
    assert [(t.path, t.isolation) for t in result.templates] == [
        ("spec.headGroupSpec.template", None),
        ("spec.workerGroupSpecs[0].template", "false"),
    ]
    assert verdict.evaluate(load("deployment-good.yaml"), POLICY).templates[0].isolation == "true"


def test_workloads_are_never_patched():
    obj = load("deployment-good.yaml")
    assert verdict.mutation_patch(obj, verdict.evaluate(obj, POLICY), POLICY) == []


def test_denied_pods_are_not_patched():
    obj = load("pod-bad.yaml")
    assert verdict.mutation_patch(obj, verdict.evaluate(obj, POLICY), POLICY) == []


def test_good_pod_gets_the_isolation_selector():
    obj = load("pod-good.yaml")
    ops = verdict.mutation_patch(obj, verdict.evaluate(obj, POLICY), POLICY)
    assert ops == [{"op": "add", "path": "/spec/nodeSelector", "value": {"cgpu.disable.isolation": "false"}}]


def test_scheduler_name_mode_only_touches_gpu_memory_and_whole_card_pods():
    policy = verdict.Policy(scheduler_name="gpushare-scheduler")
    assert verdict.evaluate(load("pod-good.yaml"), policy).templates[0].scheduler_name == "gpushare-scheduler"
    whole = load("pod-good.yaml")
    whole["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": 1}
    # On shared nodes only the extender keeps whole cards off GPUs holding shares.
    assert verdict.evaluate(whole, policy).templates[0].scheduler_name == "gpushare-scheduler"
    other = load("pod-good.yaml")
    other["spec"]["containers"][0]["resources"]["limits"] = {"amd.com/gpu": 1}
    assert verdict.evaluate(other, policy).templates[0].scheduler_name is None
    assert verdict.mutation_patch(other, verdict.evaluate(other, policy), policy) == []


def test_another_scheduler_is_kept_with_a_warning():
    policy = verdict.Policy(scheduler_name="gpushare-scheduler")
    obj = load("pod-good.yaml")
    obj["spec"]["schedulerName"] = "volcano"
    result = verdict.evaluate(obj, policy)
    assert result.templates[0].scheduler_name is None
    assert result.warnings == (
        "schedulerName volcano is kept; gpu-mem pods need gpushare-scheduler to be placed",
    )


def test_workload_warnings_name_their_template_and_are_deduplicated():
    obj = load("pytorchjob-good.yaml")
    for replica in obj["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["nodeSelector"] = {"cgpu.disable.isolation": "maybe"}
    obj["spec"]["pytorchReplicaSpecs"]["Copy"] = obj["spec"]["pytorchReplicaSpecs"]["Master"]
    warnings = verdict.evaluate(obj, POLICY).warnings
    assert [w.split(": ")[0] for w in warnings] == [
        "spec.pytorchReplicaSpecs.Master.template",
        "spec.pytorchReplicaSpecs.Worker.template",
        "spec.pytorchReplicaSpecs.Copy.template",
    ]
    assert all(w.endswith("…") and "matches no gpushare node pool" in w for w in warnings)
    assert all(len(w) <= verdict.WARNING_LIMIT for w in warnings)


def test_identical_warnings_are_given_once():
    obj = load("pod-good.yaml")
    env = [{"name": "CGPU_DISABLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    obj["spec"]["containers"] = [{**obj["spec"]["containers"][0], "env": env}] * 2
    assert verdict.evaluate(obj, POLICY).warnings == (
        'CGPU_DISABLE of container "jupyter" comes from valueFrom; assumed not "true"',
    )


def test_too_deep_object_is_allowed_with_a_warning():
    deep: dict[str, Any] = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}}
    for _ in range(40):
        deep = {"x": deep}
    result = verdict.evaluate({"kind": "Thing", **deep}, POLICY)
    assert result.allowed
    assert result.warnings[0].startswith("not checked from x.x.x")


def test_malformed_known_paths_are_violations():
    result = verdict.evaluate(
        {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": "x"}}, POLICY
    )
    assert [str(v) for v in result.violations] == [
        "spec.template: has the wrong type: expected an object, got a string; "
        "fix: write this field as an object"
    ]


@pytest.mark.parametrize("obj", [None, [], "Pod", 3, True], ids=["null", "list", "string", "number", "bool"])
def test_a_non_object_is_denied_not_raised(obj):
    result = verdict.evaluate(obj, POLICY)
    assert not result.allowed
    assert result.message().startswith("the object has 1 problem with GPU resources:\n(object): ")
    assert verdict.mutation_patch(obj, result, POLICY) == []


def _huge_int() -> int:
    return 10**5000  # Python refuses to print it; the verdict must not try


# Fuzzing: evaluate() reads JSON from the network and YAML from users; it must never raise.
KEYS = st.sampled_from(
    [
        "kind",
        "spec",
        "metadata",
        "template",
        "containers",
        "initContainers",
        "resources",
        "limits",
        "requests",
        "nvidia.com/gpu",
        "aliyun.com/gpu-mem",
        "aliyun.com/gpu-count",
        "labels",
        "annotations",
        "cgpu.disable.isolation",
        "env",
        "name",
        "value",
        "valueFrom",
        "CGPU_DISABLE",
        "nodeSelector",
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
        "matchExpressions",
        "key",
        "operator",
        "values",
        "In",
        "NotIn",
        "schedulerName",
        "jobTemplate",
    ]
) | st.text(max_size=4)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.builds(_huge_int)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(
        ["1", "0.5", "-1", "1Ki", "1e3", "true", "TRUE", "maybe", "", "Pod", "2", "\n\x00\u202e"]
    )
    | st.text(max_size=6)
)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(KEYS | st.integers(0, 3) | st.none() | st.booleans(), children, max_size=5)
    ),
    max_leaves=40,
)


def check_invariants(obj: Any, policy: verdict.Policy) -> None:
    result = verdict.evaluate(obj, policy)
    assert isinstance(result, verdict.Verdict)
    assert result.allowed == (not result.violations)
    assert len(set(result.warnings)) == len(result.warnings)
    for w in result.warnings:
        assert w.isprintable() and 0 < len(w) <= verdict.WARNING_LIMIT
    message = result.message()
    if result.violations:
        lines = message.split("\n")
        assert len(lines) == len(result.violations) + 1
        assert all(line.isprintable() for line in lines)
    else:
        assert message == ""
    before = copy.deepcopy(obj)
    ops = verdict.mutation_patch(obj, result, policy)
    # deepcopy keeps the same float objects, and containers compare items by identity first, so NaN is fine.
    assert obj is before or obj == before
    if ops:
        patched = jsonpatch.apply_patch(obj, ops)
        assert verdict.mutation_patch(patched, verdict.evaluate(patched, policy), policy) == []


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=JSON)
def test_evaluate_never_raises_on_arbitrary_json(obj):
    check_invariants(obj, POLICY)


POD_LIKE = st.fixed_dictionaries(
    {"kind": st.sampled_from(["Pod", "Deployment", "X"]), "apiVersion": st.sampled_from(["v1", "apps/v1"])},
    optional={
        "metadata": JSON,
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "name": JSON,
                            "env": JSON,
                            "resources": st.fixed_dictionaries(
                                {}, optional={"limits": st.dictionaries(KEYS, SCALARS), "requests": JSON}
                            )
                            | JSON,
                        },
                    )
                    | JSON,
                    max_size=3,
                ),
                "nodeSelector": JSON,
                "affinity": JSON,
                "template": JSON,
                "schedulerName": JSON,
            },
        ),
    },
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=POD_LIKE, scheduler=st.none() | st.just("gpushare"))
def test_evaluate_never_raises_on_pod_shaped_json(obj, scheduler):
    check_invariants(obj, verdict.Policy(scheduler_name=scheduler))


def test_warnings_are_capped_and_the_last_says_how_many_more():
    # 30 containers, each with its own misspelt GPU name: 30 distinct look-alike warnings.
    obj = load("pod-good.yaml")
    base = obj["spec"]["containers"][0]
    obj["spec"]["containers"] = [
        {**base, "name": f"c{i}", "resources": {"limits": {"nvidia.com/gpus": "1"}}} for i in range(30)
    ]
    warnings = verdict.evaluate(obj, POLICY).warnings
    assert len(warnings) == verdict.MAX_WARNINGS
    assert warnings[0].startswith('container "c0": limits[nvidia.com/gpus] is no GPU resource')
    assert warnings[-1] == f"... and {30 - verdict.MAX_WARNINGS + 1} more warnings"


def test_warnings_up_to_the_cap_are_all_kept():
    obj = load("pod-good.yaml")
    base = obj["spec"]["containers"][0]
    count = verdict.MAX_WARNINGS
    obj["spec"]["containers"] = [
        {**base, "name": f"c{i}", "resources": {"limits": {"nvidia.com/gpus": "1"}}} for i in range(count)
    ]
    warnings = verdict.evaluate(obj, POLICY).warnings
    assert len(warnings) == count and all("more warnings" not in w for w in warnings)
