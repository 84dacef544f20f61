"""review.py: AdmissionReview request -> response, every response field, and malformed requests."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from typing import Any

import jsonpatch
import pytest

from tests.admission import samples
from webhook.admission import review
from webhook.core.admission import verdict

POLICY = review.Policy(rules=verdict.Policy())
GPU_MEM = {"aliyun.com/gpu-mem": "4"}
HALF_GPU = {"nvidia.com/gpu": "0.5"}


def decode_patch(response: Mapping[str, Any]) -> Any:
    return json.loads(base64.b64decode(response["patch"]))


def gpu_pod(limits=None, **kwargs) -> dict[str, Any]:
    return samples.pod(
        samples.pod_spec(samples.container(limits=GPU_MEM if limits is None else limits)), **kwargs
    )


def test_envelope_is_admission_review_v1_with_the_uid_echoed():
    body = samples.review(
        samples.pod(samples.pod_spec(samples.container(limits={"cpu": "1"}))), uid="abc-123"
    )
    result = review.review(body, "validate", POLICY)
    assert result.review == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "abc-123", "allowed": True},
    }
    assert result.outcome == "allowed"


def test_mutate_patches_a_gpu_memory_pod_with_the_isolation_node_selector():
    obj = gpu_pod()
    result = review.review(samples.review(obj), "mutate", POLICY)
    response = result.review["response"]
    assert set(response) == {"uid", "allowed", "patch", "patchType"}
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    ops = decode_patch(response)
    assert ops == [{"op": "add", "path": "/spec/nodeSelector", "value": {"cgpu.disable.isolation": "false"}}]
    patched = jsonpatch.apply_patch(obj, ops)
    assert patched["spec"]["nodeSelector"] == {"cgpu.disable.isolation": "false"}
    assert result.outcome == "patched"


def test_mutate_is_idempotent_on_the_patched_pod():
    obj = gpu_pod()
    first = review.review(samples.review(obj), "mutate", POLICY).review["response"]
    patched = jsonpatch.apply_patch(obj, decode_patch(first))
    again = review.review(samples.review(patched), "mutate", POLICY)
    assert again.review["response"] == {"uid": again.request.uid, "allowed": True}


def test_mutate_adds_one_key_to_an_existing_node_selector_and_the_scheduler_name_when_configured():
    obj = samples.pod(samples.pod_spec(samples.container(limits=GPU_MEM), node_selector={"zone": "a"}))
    policy = review.Policy(rules=verdict.Policy(scheduler_name="gpushare-scheduler"))
    ops = decode_patch(review.review(samples.review(obj), "mutate", policy).review["response"])
    patched = jsonpatch.apply_patch(obj, ops)
    assert patched["spec"]["nodeSelector"] == {"zone": "a", "cgpu.disable.isolation": "false"}
    assert patched["spec"]["schedulerName"] == "gpushare-scheduler"


@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_a_fractional_gpu_is_denied_with_403_forbidden_and_the_core_message(endpoint):
    obj = gpu_pod(limits=HALF_GPU)
    result = review.review(samples.review(obj, uid="u-1"), endpoint, POLICY)
    response = result.review["response"]
    assert set(response) == {"uid", "allowed", "status"}
    assert response["uid"] == "u-1"
    assert response["allowed"] is False
    expected = verdict.evaluate(obj, POLICY.rules).message()
    assert response["status"] == {
        "status": "Failure",
        "code": 403,
        "reason": "Forbidden",
        "message": expected,
    }
    assert "nvidia.com/gpu" in expected and "aliyun.com/gpu-mem" in expected
    assert result.outcome == "denied"
    assert result.violations == 1


def test_validate_never_returns_a_patch():
    response = review.review(samples.review(gpu_pod()), "validate", POLICY).review["response"]
    assert response == {"uid": response["uid"], "allowed": True}


def test_warnings_are_passed_on_allowed_responses():
    env = [{"name": "CGPU_DISABLE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
    obj = samples.pod(samples.pod_spec(samples.container(limits=GPU_MEM, env=env)))
    response = review.review(samples.review(obj), "validate", POLICY).review["response"]
    assert response["allowed"] is True
    assert response["warnings"] == list(verdict.evaluate(obj, POLICY.rules).warnings)
    assert all(len(w) <= 120 for w in response["warnings"])


@pytest.mark.parametrize("kind", list(samples.WORKLOADS))
def test_validate_denies_a_bad_template_in_every_workload_kind(kind):
    obj = samples.workload(kind, samples.pod_spec(samples.container(limits=HALF_GPU)))
    result = review.review(samples.review(obj), "validate", POLICY)
    response = result.review["response"]
    assert response["allowed"] is False
    assert (
        f"{samples.WORKLOADS[kind][4]}.containers[0].resources.limits[nvidia.com/gpu]"
        in (response["status"]["message"])
    )


@pytest.mark.parametrize("kind", list(samples.WORKLOADS))
def test_workloads_are_never_mutated(kind):
    obj = samples.workload(kind, samples.pod_spec(samples.container(limits=GPU_MEM)))
    result = review.review(samples.review(obj), "mutate", POLICY)
    assert result.review["response"] == {"uid": result.request.uid, "allowed": True}
    assert result.outcome == "skipped"


@pytest.mark.parametrize(
    ("endpoint", "operation", "examined"),
    [
        ("validate", "CREATE", True),
        ("validate", "UPDATE", True),
        ("validate", "DELETE", False),
        ("validate", "CONNECT", False),
        ("mutate", "CREATE", True),
        ("mutate", "UPDATE", False),
        ("mutate", "DELETE", False),
    ],
    ids=str,
)
def test_operations(endpoint, operation, examined):
    obj = gpu_pod(limits=HALF_GPU)
    body = samples.review(
        None if operation in ("DELETE", "CONNECT") else obj,
        operation=operation,
        kind="Pod",
        # The UPDATE brings the problem in: what the object had before is not held against it.
        old=gpu_pod() if operation in ("UPDATE", "DELETE") else None,
    )
    result = review.review(body, endpoint, POLICY)
    assert result.review["response"]["allowed"] is (not examined)
    assert (result.outcome == "skipped") is (not examined)


def test_an_update_is_denied_only_for_the_problems_it_brings():
    bad = gpu_pod(limits=HALF_GPU)  # created before the webhook (or before a rule) was in place
    relabelled = copy.deepcopy(bad)
    relabelled["metadata"]["labels"] = {"team": "vision"}
    answer = review.review(samples.review(relabelled, operation="UPDATE", old=bad), "validate", POLICY)
    response = answer.review["response"]
    assert response["allowed"] is True and answer.outcome == "allowed"
    assert response["warnings"][-1] == "1 GPU resource problem(s) the object already had are left as they are"
    worse = copy.deepcopy(relabelled)
    worse["spec"]["containers"].append(samples.container(name="second", limits={"aliyun.com/gpu-mem": "3Gi"}))
    denied = review.review(samples.review(worse, operation="UPDATE", old=bad), "validate", POLICY)
    message = denied.review["response"]["status"]["message"]
    # The 3Gi and the mixed pod it makes are new; the half GPU it had before is not listed again.
    assert message.startswith("Pod has 2 problems with GPU resources:") and "3Gi" in message
    assert '"0.5"' not in message


def test_excluded_namespaces_are_allowed_untouched():
    policy = review.Policy(rules=verdict.Policy(), excluded_namespaces=frozenset({"kube-system"}))
    for endpoint in ("mutate", "validate"):
        result = review.review(
            samples.review(gpu_pod(limits=HALF_GPU), namespace="kube-system"), endpoint, policy
        )
        assert result.review["response"] == {"uid": result.request.uid, "allowed": True}
        assert result.outcome == "skipped"


def test_subresources_are_allowed_untouched():
    body = samples.review(gpu_pod(limits=HALF_GPU), operation="UPDATE", sub_resource="status")
    assert review.review(body, "validate", POLICY).outcome == "skipped"


def test_an_update_of_an_object_being_deleted_is_allowed_so_finalizers_can_go():
    obj = gpu_pod(limits=HALF_GPU)
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body = samples.review(obj, operation="UPDATE", old=obj)
    assert review.review(body, "validate", POLICY).review["response"]["allowed"] is True
    assert review.review(samples.review(obj), "validate", POLICY).review["response"]["allowed"] is False


def test_a_pod_of_another_api_group_is_not_mutated():
    body = samples.review(gpu_pod())
    body["request"]["kind"] = {"group": "example.com", "version": "v1", "kind": "Pod"}
    assert review.review(body, "mutate", POLICY).outcome == "skipped"


def good_body() -> dict[str, Any]:
    return samples.review(gpu_pod(), uid="u")


def mutate(change):
    body = good_body()
    change(body)
    return body


BAD = [
    ("not-an-object", [], "JSON object"),
    ("v1beta1", mutate(lambda b: b.update(apiVersion="admission.k8s.io/v1beta1")), "expected apiVersion"),
    ("wrong-kind", mutate(lambda b: b.update(kind="Pod")), "kind 'AdmissionReview'"),
    ("no-api-version", mutate(lambda b: b.pop("apiVersion")), "expected apiVersion"),
    ("no-request", mutate(lambda b: b.pop("request")), "request must be an object"),
    ("request-null", mutate(lambda b: b.update(request=None)), "request must be an object"),
    ("request-list", mutate(lambda b: b.update(request=[])), "request must be an object"),
    ("no-uid", mutate(lambda b: b["request"].pop("uid")), "uid"),
    ("empty-uid", mutate(lambda b: b["request"].update(uid="")), "uid"),
    ("uid-number", mutate(lambda b: b["request"].update(uid=7)), "uid"),
    ("no-kind", mutate(lambda b: b["request"].pop("kind")), "request.kind"),
    ("kind-string", mutate(lambda b: b["request"].update(kind="Pod")), "request.kind"),
    ("group-number", mutate(lambda b: b["request"]["kind"].update(group=1)), "group"),
    ("bad-operation", mutate(lambda b: b["request"].update(operation="PATCH")), "operation"),
    ("no-operation", mutate(lambda b: b["request"].pop("operation")), "operation"),
    ("namespace-number", mutate(lambda b: b["request"].update(namespace=3)), "namespace"),
    ("name-list", mutate(lambda b: b["request"].update(name=[])), "request.name"),
    ("no-object-on-create", mutate(lambda b: b["request"].update(object=None)), "request.object"),
    (
        "object-string-on-update",
        mutate(lambda b: b["request"].update(operation="UPDATE", object="x")),
        "object",
    ),
]


@pytest.mark.parametrize(("body", "message"), [(b, m) for _, b, m in BAD], ids=[i for i, _, _ in BAD])
def test_malformed_requests_raise_review_error(body, message):
    for endpoint in ("mutate", "validate"):
        with pytest.raises(review.ReviewError, match=message):
            review.review(copy.deepcopy(body), endpoint, POLICY)


def test_an_object_of_the_wrong_shape_is_a_denial_not_an_error():
    body = samples.review({"kind": "Pod", "spec": {"containers": "nope"}})
    response = review.review(body, "mutate", POLICY).review["response"]
    assert response["allowed"] is False
    assert "wrong type" in response["status"]["message"]
