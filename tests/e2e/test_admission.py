"""The API server calls the webhook the chart registered: what a `kubectl apply` user sees."""

from __future__ import annotations

import re
import ssl
import urllib.request
from typing import Any

import pytest

from tests.e2e import objects
from tests.e2e.bed import Bed
from webhook.core.wire import resources
from webhook.kube import errors, rest

NS = "e2e-admission"


@pytest.fixture(scope="module")
def ns(bed: Bed) -> str:
    return bed.namespace(NS)


def _create(bed: Bed, ns: str, body: dict[str, Any], **query: str) -> dict[str, Any]:
    plural, group = ("deployments", "apps") if body["kind"] == "Deployment" else ("pods", "")
    created: dict[str, Any] = bed.request(
        "POST", rest.path(plural, namespace=ns, group=group), body=body, query=query
    )
    return created


def _reviews(bed: Bed) -> float:
    """Reviews the webhook has answered, from its own /metrics."""
    assert bed.cp.pki is not None
    context = ssl.create_default_context(cafile=str(bed.cp.pki.ca_crt))
    url = f"https://127.0.0.1:{bed.webhook_port}/metrics"
    with urllib.request.urlopen(url, context=context, timeout=5) as reply:
        text = reply.read().decode()
    total = 0.0
    for line in text.splitlines():
        if re.match(r"^gpushare_webhook_requests_total\{", line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_invalid_gpu_pod_is_refused_with_our_message(bed: Bed, ns: str) -> None:
    body = objects.pod("fractional", objects.container(limits={"nvidia.com/gpu": "0.5"}))
    with pytest.raises(errors.ApiError) as caught:
        _create(bed, ns, body)
    err = caught.value
    # The API server wraps our denial: `admission webhook "<name>" denied the request: <our message>`.
    assert err.status == 403
    assert 'admission webhook "pods.mutate.gpushare.aliyun.com" denied the request' in err.message
    # The API server decodes the pod before admission, so "0.5" reaches us in canonical form.
    assert 'limits[nvidia.com/gpu] (container "main"): "500m"' in err.message
    assert "only whole GPUs" in err.message
    with pytest.raises(errors.NotFoundError):
        bed.request("GET", rest.path("pods", "fractional", ns))


def test_request_without_limit_is_refused(bed: Bed, ns: str) -> None:
    body = objects.pod("nolimit", objects.container(requests={resources.GPU_MEMORY: "4"}))
    with pytest.raises(errors.ApiError) as caught:
        _create(bed, ns, body)
    assert "denied the request" in caught.value.message
    assert resources.GPU_MEMORY in caught.value.message


def test_invalid_deployment_is_refused_by_the_validating_webhook(bed: Bed, ns: str) -> None:
    # 5 GiB cannot be split evenly over the 2 GPUs the label asks for: valid to the API server, not to us.
    body = objects.deployment("bad", objects.container(limits={resources.GPU_MEMORY: "5"}))
    body["spec"]["template"]["metadata"]["labels"][resources.GPU_COUNT_LABEL] = "2"
    with pytest.raises(errors.ApiError) as caught:
        _create(bed, ns, body)
    message = caught.value.message
    assert 'admission webhook "workloads.validate.gpushare.aliyun.com" denied the request' in message
    assert resources.GPU_COUNT_LABEL in message
    with pytest.raises(errors.NotFoundError):
        bed.request("GET", rest.path("deployments", "bad", ns, group="apps"))


def test_the_api_server_itself_refuses_what_its_validation_covers_in_workloads(bed: Bed, ns: str) -> None:
    """For workloads, built-in validation runs before validating webhooks: requests != limits of an
    extended resource is the API server's own message (pods get ours: the mutating webhook runs first)."""
    body = objects.deployment(
        "unequal", objects.container(limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "1"})
    )
    with pytest.raises(errors.ApiError) as caught:
        _create(bed, ns, body)
    assert "must be equal to nvidia.com/gpu limit of 2" in caught.value.message
    pod = objects.pod(
        "unequal", objects.container(limits={"nvidia.com/gpu": "2"}, requests={"nvidia.com/gpu": "1"})
    )
    with pytest.raises(errors.ApiError) as caught:
        _create(bed, ns, pod)
    assert "denied the request" in caught.value.message


def test_valid_gpu_pod_is_stored_with_the_isolation_node_selector(bed: Bed, ns: str) -> None:
    created = _create(bed, ns, objects.gpu_pod("valid", 4))
    stored = bed.request("GET", rest.path("pods", "valid", ns))
    assert stored["metadata"]["uid"] == created["metadata"]["uid"]
    assert stored["spec"]["nodeSelector"] == {"cgpu.disable.isolation": "false"}
    # Scheduler mode (b): the mutating webhook hands gpu-mem pods to the second scheduler.
    assert stored["spec"]["schedulerName"] == "gpushare-scheduler"


def test_isolation_follows_the_containers_env(bed: Bed, ns: str) -> None:
    body = objects.pod(
        "noiso", objects.container(limits={resources.GPU_MEMORY: "2"}, env={"CGPU_DISABLE": "true"})
    )
    _create(bed, ns, body)
    stored = bed.request("GET", rest.path("pods", "noiso", ns))
    assert stored["spec"]["nodeSelector"] == {"cgpu.disable.isolation": "true"}


def test_a_pod_pinned_to_its_node_as_a_daemonset_places_it_gets_no_isolation_selector(
    bed: Bed, ns: str
) -> None:
    # The DaemonSet controller chose the node without our selector; one the node's label does not
    # match would keep its pod Pending there. (No node has this name: nothing here gets placed.)
    body = objects.gpu_pod("pinned", 2)
    on_node = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["no-such-node"]}]}
    required = {"nodeSelectorTerms": [on_node]}
    body["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    _create(bed, ns, body)
    stored = bed.request("GET", rest.path("pods", "pinned", ns))
    assert "cgpu.disable.isolation" not in (stored["spec"].get("nodeSelector") or {})
    assert stored["spec"]["affinity"]["nodeAffinity"] == body["spec"]["affinity"]["nodeAffinity"]


def test_server_side_dry_run_changes_nothing(bed: Bed, ns: str) -> None:
    answer = _create(bed, ns, objects.gpu_pod("dry", 2), dryRun="All")
    assert answer["spec"]["nodeSelector"] == {"cgpu.disable.isolation": "false"}  # mutated in the answer
    with pytest.raises(errors.NotFoundError):
        bed.request("GET", rest.path("pods", "dry", ns))
    with pytest.raises(errors.ApiError) as caught:
        _create(
            bed, ns, objects.pod("dry-bad", objects.container(limits={"nvidia.com/gpu": "1.5"})), dryRun="All"
        )
    assert "denied the request" in caught.value.message


def test_pods_without_gpus_never_reach_the_webhook(bed: Bed, ns: str) -> None:
    before = _reviews(bed)
    for i in range(5):
        _create(bed, ns, objects.pod(f"plain-{i}"))
    assert _reviews(bed) == before
    _create(bed, ns, objects.gpu_pod("counted", 1))
    # One pod: the mutating and the validating webhook each review it once.
    assert _reviews(bed) == before + 2


def _patch(bed: Bed, plural: str, name: str, ns: str, body: dict[str, Any], *, group: str = "") -> None:
    bed.request("PATCH", rest.path(plural, name, ns, group=group), body=body, content_type=rest.MERGE_PATCH)


def test_updates_that_leave_what_the_rules_read_never_reach_the_webhook(bed: Bed, ns: str) -> None:
    _create(bed, ns, objects.gpu_pod("updated", 1))
    scaled = objects.deployment("scaled", objects.container(limits={resources.GPU_MEMORY: "1"}))
    # Paused from the start, kube-controller-manager makes no ReplicaSet (nor pods) for it, whose
    # reviews would mix with those of this test's own writes.
    scaled["spec"]["paused"] = True
    _create(bed, ns, scaled)
    before = _reviews(bed)
    # What the extender, the device plugin and controllers write: placement annotations, replicas.
    _patch(bed, "pods", "updated", ns, {"metadata": {"annotations": {"example.com/note": "x"}}})
    _patch(bed, "deployments", "scaled", ns, {"spec": {"replicas": 3}}, group="apps")
    assert _reviews(bed) == before
    # What the rules read: the gpu-count label, the pod template.
    _patch(bed, "pods", "updated", ns, {"metadata": {"labels": {resources.GPU_COUNT: "1"}}})
    assert _reviews(bed) == before + 1
    # An empty value is not an absent one: the rules refuse "" (and the webhook says so).
    for key in (resources.ISOLATION_KEY, "gpushare.aliyun.com/compute-percent"):
        with pytest.raises(errors.ApiError) as caught:
            _patch(bed, "pods", "updated", ns, {"metadata": {"annotations": {key: ""}}})
        assert "denied the request" in caught.value.message, key
    assert _reviews(bed) == before + 3
    template = {"spec": {"template": {"metadata": {"labels": {"app": "scaled", "v": "2"}}}}}
    _patch(bed, "deployments", "scaled", ns, template, group="apps")
    assert _reviews(bed) == before + 4


def test_with_the_webhook_down_gpu_pods_fail_closed_and_others_are_created(bed: Bed, ns: str) -> None:
    webhook = next(p for p in bed.processes if p.name == "webhook")
    webhook.stop()
    bed.processes.remove(webhook)
    try:
        with pytest.raises(errors.ApiError) as caught:
            _create(bed, ns, objects.gpu_pod("while-down", 1))
        # failurePolicy Fail: the API server says it could not call us.
        assert 'failed calling webhook "pods.mutate.gpushare.aliyun.com"' in caught.value.message
        _create(bed, ns, objects.pod("plain-while-down"))
        # Placing and marking existing GPU pods, and scaling GPU workloads, go on without the webhook.
        _patch(bed, "pods", "valid", ns, {"metadata": {"annotations": {"example.com/while-down": "x"}}})
        _patch(bed, "deployments", "scaled", ns, {"spec": {"replicas": 0}}, group="apps")
        with pytest.raises(errors.ApiError) as caught:  # a change the rules read still fails closed
            _patch(bed, "pods", "valid", ns, {"metadata": {"labels": {resources.GPU_COUNT: "1"}}})
        assert 'failed calling webhook "pods.validate.gpushare.aliyun.com"' in caught.value.message
    finally:
        bed.start_webhook()
    _create(bed, ns, objects.gpu_pod("after-restart", 1))
