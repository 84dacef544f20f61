"""webhook.kube.pods against the API stand-in: binding, annotation patches, node status, events."""

from __future__ import annotations

import pytest

from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import errors, pods


def test_bind_pod_binds_with_annotations_despite_the_201_status_reply(apiserver: ApiServer):
    pod = apiserver.add_pod("p1", gpu_mem=[4])
    pods.bind_pod(
        apiserver.api, "default", "p1", pod["metadata"]["uid"], "n1", {"ALIYUN_COM_GPU_MEM_IDX": "1"}
    )
    stored = pods.get_pod(apiserver.api, "default", "p1")
    assert stored["spec"]["nodeName"] == "n1"
    assert stored["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"] == "1"
    assert apiserver.requests[("create", "pods/binding")] == 1


@pytest.mark.parametrize(
    ("prepare", "uid", "error", "text"),
    [
        ("assigned", None, errors.ConflictError, "already assigned"),
        ("deleting", None, errors.ConflictError, "being deleted"),
        (None, "stale-uid", errors.ConflictError, "Precondition failed"),
        ("gone", None, errors.NotFoundError, "not found"),
    ],
    ids=["already-assigned", "being-deleted", "replaced-pod", "deleted-pod"],
)
def test_bind_pod_refusals_are_typed_errors(apiserver: ApiServer, prepare, uid, error, text):
    pod = apiserver.add_pod("p1")
    if prepare == "assigned":
        apiserver.edit("pods", "p1", {"spec": {"nodeName": "n0"}}, "default")
    elif prepare == "deleting":
        apiserver.mark_deleting("p1")
    elif prepare == "gone":
        apiserver.remove("pods", "p1", "default")
    with pytest.raises(error, match=text) as info:
        pods.bind_pod(apiserver.api, "default", "p1", uid or pod["metadata"]["uid"], "n1")
    assert info.value.status == (404 if prepare == "gone" else 409)
    assert not info.value.retryable


def test_bind_pod_server_error_is_retryable(apiserver: ApiServer):
    pod = apiserver.add_pod("p1")
    apiserver.fail_next("create", "pods/binding", status=500)
    with pytest.raises(errors.ApiError) as info:
        pods.bind_pod(apiserver.api, "default", "p1", pod["metadata"]["uid"], "n1")
    assert info.value.retryable and info.value.reason == "InternalError"
    pods.bind_pod(apiserver.api, "default", "p1", pod["metadata"]["uid"], "n1")


def test_patch_pod_annotations_merges_and_removes_keys(apiserver: ApiServer):
    apiserver.add_pod("p1", annotations={"keep": "1", "drop": "2"})
    patched = pods.patch_pod_annotations(apiserver.api, "default", "p1", {"new": "3", "drop": None})
    assert patched["metadata"]["annotations"] == {"keep": "1", "new": "3"}


def test_patch_pod_annotations_with_a_stale_resource_version_conflicts(apiserver: ApiServer):
    pod = apiserver.add_pod("p1")
    apiserver.edit("pods", "p1", {"metadata": {"labels": {"moved": "on"}}}, "default")
    with pytest.raises(errors.ConflictError):
        pods.patch_pod_annotations(
            apiserver.api, "default", "p1", {"a": "b"}, resource_version=pod["metadata"]["resourceVersion"]
        )
    assert "a" not in (apiserver.get("pods", "p1", "default") or {})["metadata"]["annotations"]


def test_patch_pod_annotations_refuses_a_pod_recreated_under_the_same_name(apiserver: ApiServer):
    old = apiserver.add_pod("p1")
    apiserver.remove("pods", "p1", "default")
    apiserver.add_pod("p1")
    with pytest.raises(errors.ConflictError, match="UID"):
        pods.patch_pod_annotations(apiserver.api, "default", "p1", {"a": "b"}, uid=old["metadata"]["uid"])
    current = apiserver.get("pods", "p1", "default") or {}
    patched = pods.patch_pod_annotations(
        apiserver.api, "default", "p1", {"a": "b"}, uid=current["metadata"]["uid"]
    )
    assert patched["metadata"]["annotations"]["a"] == "b"


def test_node_annotations_and_status_patches(apiserver: ApiServer):
    apiserver.add_node("n1", gpus=2, gpu_mem=30)
    node = pods.patch_node_metadata(
        apiserver.api, "n1", annotations={"gpushare.aliyun.com/devices": "[]"}, labels={"accelerator": "x"}
    )
    assert node["metadata"]["annotations"]["gpushare.aliyun.com/devices"] == "[]"
    assert node["metadata"]["labels"]["accelerator"] == "x"
    node = pods.patch_node_metadata(apiserver.api, "n1", labels={"accelerator": None})
    assert "accelerator" not in node["metadata"]["labels"]
    assert node["metadata"]["annotations"]["gpushare.aliyun.com/devices"] == "[]"
    node = pods.patch_node_status(apiserver.api, "n1", {"capacity": {"aliyun.com/gpu-mem": "32"}})
    assert node["status"]["capacity"]["aliyun.com/gpu-mem"] == "32"
    assert node["status"]["capacity"]["aliyun.com/gpu-count"] == "2"
    assert pods.get_node(apiserver.api, "n1")["status"]["capacity"]["aliyun.com/gpu-mem"] == "32"


def test_list_pods_filters_by_node_and_returns_the_resource_version(apiserver: ApiServer):
    apiserver.add_pod("a", node_name="n1")
    apiserver.add_pod("b", node_name="n2", namespace="other")
    items, rv = pods.list_pods(apiserver.api, field_selector="spec.nodeName=n2")
    assert [p["metadata"]["name"] for p in items] == ["b"]
    assert rv == str(apiserver.resource_version)


def test_create_event_records_the_involved_object(apiserver: ApiServer):
    pod = apiserver.add_pod("p1")
    pods.create_event(apiserver.api, pod, "GPUMemAssigned", "gpu 0: 4 GiB", type_="Normal", host="n1")
    (event,) = apiserver.objects("events", "default")
    assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]
    assert event["involvedObject"]["kind"] == "Pod"
    assert (event["reason"], event["message"], event["source"]["host"]) == (
        "GPUMemAssigned",
        "gpu 0: 4 GiB",
        "n1",
    )
