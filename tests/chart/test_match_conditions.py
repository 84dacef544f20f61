"""matchConditions CEL sends GPU objects to the webhook and skips the rest (see tests/chart/cel.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import cel, render
from webhook.core.wire import resources

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)


def _pod_spec(container_resources: dict[str, Any] | None, init: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if container_resources is not None:
        container["resources"] = container_resources
    if init:
        return {"containers": [{"name": "main", "image": "busybox"}], "initContainers": [container]}
    return {"containers": [container]}


SPECS: dict[str, tuple[dict[str, Any], bool]] = {
    "gpu-mem-limit": (_pod_spec({"limits": {resources.GPU_MEMORY: "4"}}), True),
    "nvidia-request-only": (_pod_spec({"requests": {resources.NVIDIA_GPU: "500m"}}), True),
    "gpu-count": (_pod_spec({"limits": {resources.GPU_COUNT: "2"}}), True),
    "mig-prefix": (_pod_spec({"limits": {"nvidia.com/mig-1g.5gb": "1"}}), True),
    "amd-gpu": (_pod_spec({"limits": {"amd.com/gpu": "1"}}), True),
    "init-container": (_pod_spec({"limits": {resources.GPU_MEMORY: "1"}}, init=True), True),
    "cpu-only": (_pod_spec({"limits": {"cpu": "1", "memory": "1Gi"}}), False),
    "no-resources": (_pod_spec(None), False),
    "empty-resources": (_pod_spec({}), False),
    "other-extended-resource": (_pod_spec({"limits": {"example.com/fpga": "1"}}), False),
    "lookalike-name": (_pod_spec({"limits": {"nvidia.com/gpus": "1"}}), False),
}
WRAPPERS = {
    "pods.validate": lambda spec: {"kind": "Pod", "spec": spec},
    "pods.mutate": lambda spec: {"kind": "Pod", "spec": spec},
    "workloads.validate": lambda spec: {"kind": "Deployment", "spec": {"template": {"spec": spec}}},
    "cronjobs.validate": lambda spec: {
        "kind": "CronJob",
        "spec": {"jobTemplate": {"spec": {"template": {"spec": spec}}}},
    },
    "podtemplates.validate": lambda spec: {"kind": "PodTemplate", "template": {"spec": spec}},
}


@pytest.fixture(scope="module")
def expressions() -> dict[str, str]:
    out = {}
    for obj in render.render():
        if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in obj["webhooks"]:
                if hook["name"].startswith("resourceclaim"):
                    continue  # claims, not pod templates: tests/chart/test_claim_conditions.py
                (condition,) = [c for c in hook["matchConditions"] if c["name"] == "asks-for-gpu"]
                out[hook["name"].removesuffix(".gpushare.aliyun.com")] = condition["expression"]
    return out


def test_every_webhook_with_a_known_template_path_has_a_condition(expressions: dict[str, str]) -> None:
    assert set(expressions) == set(WRAPPERS)


@pytest.mark.parametrize("hook", list(WRAPPERS))
@pytest.mark.parametrize("case", list(SPECS))
def test_condition_accepts_gpu_objects_and_skips_others(
    expressions: dict[str, str], hook: str, case: str
) -> None:
    spec, expected = SPECS[case]
    obj = WRAPPERS[hook](spec)
    assert cel.evaluate(expressions[hook], {"object": obj}) is expected


@pytest.mark.parametrize("hook", ["workloads.validate", "cronjobs.validate", "podtemplates.validate"])
def test_condition_is_false_not_an_error_when_the_template_is_absent(
    expressions: dict[str, str], hook: str
) -> None:
    # ReplicationController.spec.template is optional: an error would deny with failurePolicy Fail (403).
    assert cel.evaluate(expressions[hook], {"object": {"kind": "X", "spec": {}}}) is False


def test_resource_names_come_from_values() -> None:
    objects = render.render({"gpuResources": {"wholeDevice": ["example.com/gpu"], "wholeDevicePrefixes": []}})
    hook = render.find(objects, "ValidatingWebhookConfiguration")["webhooks"][0]
    expression = hook["matchConditions"][0]["expression"]
    custom = {"kind": "Pod", "spec": _pod_spec({"limits": {"example.com/gpu": "1"}})}
    nvidia = {"kind": "Pod", "spec": _pod_spec({"limits": {resources.NVIDIA_GPU: "1"}})}
    assert cel.evaluate(expression, {"object": custom}) is True
    assert cel.evaluate(expression, {"object": nvidia}) is False


def test_conditions_cannot_be_switched_off() -> None:
    """Without them every pod in the cluster would depend on the webhook (issue 11)."""
    assert "/webhook/matchConditions" in render.render_error({"webhook": {"matchConditions": False}})
    objects = render.render()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        pod_hooks = [h for h in render.find(objects, kind)["webhooks"] if not h["name"].startswith("custom.")]
        assert all(h["matchConditions"] for h in pod_hooks)


def test_the_evaluator_rejects_what_it_does_not_understand() -> None:
    with pytest.raises(cel.CelError):
        cel.evaluate("object.spec.size() > 1", {"object": {"spec": {}}})
    with pytest.raises(cel.CelError):
        cel.evaluate("object.missing.field", {"object": {}})


def test_the_update_condition_reads_the_keys_the_webhooks_config_file_names() -> None:
    # extraConfig is merged into the config file last: the condition must watch the keys the rules read.
    extra = {
        "isolation": {"annotationKey": "example.com/isolation"},
        "resources": {"count": "example.com/count"},
    }
    objects = render.render({"webhook": {"extraConfig": extra}})
    hook = render.find(objects, "ValidatingWebhookConfiguration")["webhooks"][0]
    (update,) = [c for c in hook["matchConditions"] if c["name"] == "update-changes-what-the-rules-read"]
    assert "'example.com/isolation'" in update["expression"] and "'example.com/count'" in update["expression"]
    assert "'cgpu.disable.isolation'" not in update["expression"]
    (asks,) = [c for c in hook["matchConditions"] if c["name"] == "asks-for-gpu"]
    assert "'example.com/count'" in asks["expression"]
