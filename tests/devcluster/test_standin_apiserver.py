"""The API stand-in answers the official client as the real API server does (pods/binding: BindingREST)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes.client import ApiException

from webhook.devcluster.standin.apiserver import ApiServer, pod_manifest

MERGE = "application/merge-patch+json"


def status_of(exc: ApiException) -> Any:
    return json.loads(exc.body or "")


def binding(
    name: str, node: str = "n1", uid: str | None = None, kind: str = "Node", **meta
) -> dict[str, Any]:
    metadata = {"name": name, **meta}
    if uid:
        metadata["uid"] = uid
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"kind": kind, "name": node},
    }


def read_stream(resp) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    finally:
        resp.release_conn()


def test_create_get_list_and_delete_a_pod(apiserver: ApiServer):
    core = apiserver.core
    created = core.create_namespaced_pod("default", pod_manifest("p1", gpu_mem=[2]))
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert (
        core.read_namespaced_pod("p1", "default").metadata.resource_version
        == created.metadata.resource_version
    )
    listed = core.list_namespaced_pod("default")
    assert [p.metadata.name for p in listed.items] == ["p1"]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)
    core.delete_namespaced_pod("p1", "default")
    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod("p1", "default")
    assert info.value.status == 404 and status_of(info.value)["reason"] == "NotFound"


def test_create_with_generate_name_and_duplicate_name(apiserver: ApiServer):
    core = apiserver.core
    body = {"metadata": {"generateName": "job-"}, "data": {"k": "v"}}
    made = core.create_namespaced_config_map("default", body)
    assert made.metadata.name.startswith("job-") and len(made.metadata.name) == 9
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})
    assert info.value.status == 409 and status_of(info.value)["reason"] == "AlreadyExists"


def test_stale_update_and_stale_patch_get_conflict(apiserver: ApiServer):
    core = apiserver.core
    old = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("cm", "default", {"data": {"a": "2"}}, _content_type=MERGE)
    old.data = {"a": "3"}
    with pytest.raises(ApiException) as info:
        core.replace_namespaced_config_map("cm", "default", old)
    assert info.value.status == 409 and status_of(info.value)["reason"] == "Conflict"
    stale = {"metadata": {"resourceVersion": old.metadata.resource_version}, "data": {"a": "4"}}
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_config_map("cm", "default", stale, _content_type=MERGE)
    assert info.value.status == 409
    assert core.read_namespaced_config_map("cm", "default").data == {"a": "2"}


def test_json_patch_applies_and_a_dict_body_goes_as_strategic_merge(apiserver: ApiServer):
    core = apiserver.core
    apiserver.add_pod("p1")
    ops = [{"op": "add", "path": "/metadata/annotations/x~1y", "value": "1"}]
    assert core.patch_namespaced_pod("p1", "default", ops).metadata.annotations == {"x/y": "1"}
    patched = core.patch_namespaced_pod("p1", "default", {"metadata": {"labels": {"a": "b"}}})
    assert patched.metadata.labels == {"a": "b"} and patched.metadata.annotations == {"x/y": "1"}


def test_main_resource_ignores_status_and_status_subresource_changes_only_status(apiserver: ApiServer):
    core = apiserver.core
    apiserver.add_pod("p1")
    core.patch_namespaced_pod("p1", "default", {"status": {"phase": "Running"}}, _content_type=MERGE)
    assert core.read_namespaced_pod("p1", "default").status.phase == "Pending"
    patch = {"status": {"phase": "Running"}, "spec": {"nodeName": "sneaky"}}
    core.patch_namespaced_pod_status("p1", "default", patch, _content_type=MERGE)
    pod = core.read_namespaced_pod("p1", "default")
    assert pod.status.phase == "Running" and pod.spec.node_name is None


def test_label_and_field_selectors_filter_lists(apiserver: ApiServer):
    apiserver.add_pod("a", labels={"app": "x"}, node_name="n1")
    apiserver.add_pod("b", labels={"app": "y"}, node_name="n2")
    apiserver.add_pod("c", namespace="other", labels={"app": "x"})
    core = apiserver.core

    def names(**kw) -> list[str]:
        return sorted(p.metadata.name for p in core.list_pod_for_all_namespaces(**kw).items)

    assert names() == ["a", "b", "c"]
    assert names(label_selector="app=x") == ["a", "c"]
    assert names(label_selector="app in (x,y),app!=y") == ["a", "c"]
    assert names(field_selector="spec.nodeName=n2") == ["b"]
    assert names(field_selector="spec.nodeName=") == ["c"]
    assert names(field_selector="metadata.name=a") == ["a"]
    assert [p.metadata.name for p in core.list_namespaced_pod("other").items] == ["c"]


def test_limit_and_continue_page_through_a_list(apiserver: ApiServer):
    for i in range(5):
        apiserver.add_pod(f"p{i}")
    core, seen, token = apiserver.core, [], None
    while True:
        page = core.list_namespaced_pod("default", limit=2, _continue=token)
        seen += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert seen == [f"p{i}" for i in range(5)]


def test_binding_sets_node_annotations_and_condition_and_answers_201_status(apiserver: ApiServer):
    pod = apiserver.add_pod("p1", gpu_mem=[2], annotations={"keep": "1"})
    body = binding("p1", uid=pod["metadata"]["uid"], annotations={"ALIYUN_COM_GPU_MEM_IDX": "0"})
    resp = apiserver.core.create_namespaced_pod_binding("p1", "default", body, _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    stored = apiserver.get("pods", "p1", "default")
    assert stored is not None
    assert stored["spec"]["nodeName"] == "n1"
    assert stored["metadata"]["annotations"] == {"keep": "1", "ALIYUN_COM_GPU_MEM_IDX": "0"}
    assert {"type": "PodScheduled", "status": "True"}.items() <= stored["status"]["conditions"][-1].items()


@pytest.mark.parametrize(
    ("body", "prepare", "code", "message"),
    [
        (binding("other"), None, 400, "name in URL does not match name in Binding object"),
        (binding("p1", kind="Pod"), None, 422, "target.kind: Unsupported value"),
        (binding("p1", node=""), None, 422, "target.name: Required value"),
        (binding("p1", uid="not-the-uid"), None, 409, "Precondition failed: UID in precondition"),
        (binding("p1"), "assigned", 409, 'pod p1 is already assigned to node "n0"'),
        (binding("p1"), "deleting", 409, "pod p1 is being deleted, cannot be assigned to a host"),
        (binding("p1"), "gated", 409, "pod p1 has non-empty .spec.schedulingGates"),
        (binding("missing"), None, 404, 'pods "missing" not found'),
    ],
    ids=[
        "name-mismatch",
        "target-kind",
        "target-name",
        "uid-precondition",
        "already-assigned",
        "being-deleted",
        "scheduling-gates",
        "pod-missing",
    ],
)
def test_binding_refusals_follow_the_real_server(apiserver: ApiServer, body, prepare, code, message):
    apiserver.add_pod("p1")
    if prepare == "assigned":
        apiserver.edit("pods", "p1", {"spec": {"nodeName": "n0"}}, "default")
    elif prepare == "deleting":
        apiserver.mark_deleting("p1")
    elif prepare == "gated":
        apiserver.edit("pods", "p1", {"spec": {"schedulingGates": [{"name": "g"}]}}, "default")
    url_name = "missing" if body["metadata"]["name"] == "missing" else "p1"
    with pytest.raises(ApiException) as info:
        apiserver.core.create_namespaced_pod_binding(url_name, "default", body, _preload_content=False)
    assert info.value.status == code
    assert message in status_of(info.value)["message"]


def test_watch_streams_changes_after_a_resource_version_and_filters_by_node(apiserver: ApiServer):
    core = apiserver.core
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    apiserver.add_pod("a")
    apiserver.edit("pods", "a", {"spec": {"nodeName": "n1"}}, "default")
    apiserver.edit("pods", "a", {"spec": {"nodeName": "n2"}}, "default")
    apiserver.add_pod("b", node_name="n1")
    apiserver.remove("pods", "b", "default")
    resp = core.list_pod_for_all_namespaces(
        watch=True,
        resource_version=rv,
        field_selector="spec.nodeName=n1",
        timeout_seconds=1,
        _preload_content=False,
    )
    events = [(e["type"], e["object"]["metadata"]["name"]) for e in read_stream(resp)]
    assert events == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b"), ("DELETED", "b")]


def test_watch_from_a_compacted_resource_version_gets_a_410_error_event(apiserver: ApiServer):
    rv = apiserver.core.list_namespaced_pod("default").metadata.resource_version
    apiserver.add_pod("a")
    apiserver.compact()
    resp = apiserver.core.list_namespaced_pod(
        "default", watch=True, resource_version=rv, timeout_seconds=5, _preload_content=False
    )
    (event,) = read_stream(resp)
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"


def test_watch_sends_bookmarks_when_allowed(apiserver: ApiServer):
    resp = apiserver.core.list_node(
        watch=True,
        resource_version=str(apiserver.resource_version),
        allow_watch_bookmarks=True,
        timeout_seconds=1,
        _preload_content=False,
    )
    events = read_stream(resp)
    assert events and {e["type"] for e in events} == {"BOOKMARK"}
    assert events[-1]["object"]["metadata"]["resourceVersion"] == str(apiserver.resource_version)


def test_dropped_watch_breaks_the_stream(apiserver: ApiServer):
    resp = apiserver.core.list_node(
        watch=True,
        resource_version=str(apiserver.resource_version),
        timeout_seconds=10,
        _preload_content=False,
    )
    apiserver.wait_for(lambda: apiserver.open_watches == 1, what="watch to open")
    threading.Timer(0.05, apiserver.drop_watches).start()
    with pytest.raises(Exception, match=r"IncompleteRead|ended prematurely|Connection broken"):
        read_stream(resp)


def test_injected_faults_answer_the_next_matching_requests_and_are_counted(apiserver: ApiServer):
    apiserver.add_pod("p1")
    apiserver.fail_next("get", "pods", status=500, count=2)
    for _ in range(2):
        with pytest.raises(ApiException) as info:
            apiserver.core.read_namespaced_pod("p1", "default")
        assert info.value.status == 500 and status_of(info.value)["reason"] == "InternalError"
    assert apiserver.core.read_namespaced_pod("p1", "default").metadata.name == "p1"
    assert apiserver.requests[("get", "pods")] == 3
    assert apiserver.requests[("list", "pods")] == 0


def test_restart_keeps_state_and_clients_reconnect(apiserver: ApiServer):
    apiserver.add_node("n1", gpus=2, gpu_mem=16)
    apiserver.restart()
    assert apiserver.core.read_node("n1").status.capacity["aliyun.com/gpu-mem"] == "16"
    apiserver.restart(new_port=True)
    assert apiserver.core.read_node("n1").metadata.name == "n1"


def test_leases_are_served_under_coordination_v1(apiserver: ApiServer):
    co = apiserver.coordination
    lease = {"metadata": {"name": "lock"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    made = co.create_namespaced_lease("kube-system", lease)
    made.spec.holder_identity = "b"
    co.replace_namespaced_lease("lock", "kube-system", made)
    assert co.read_namespaced_lease("lock", "kube-system").spec.holder_identity == "b"
    with pytest.raises(ApiException) as info:
        co.replace_namespaced_lease("lock", "kube-system", made)  # made carries the old resourceVersion
    assert info.value.status == 409


@pytest.mark.parametrize(
    ("method", "path", "body", "code"),
    [
        ("GET", "/api/v1/widgets", None, 404),
        ("GET", "/apis/coordination.k8s.io/v1/namespaces/x/pods", None, 404),
        ("POST", "/api/v1/namespaces/default/pods", b"{not json", 400),
        ("POST", "/api/v1/namespaces/default/pods", b"[]", 400),
        ("PATCH", "/api/v1/namespaces/default/pods/p1", b"{}", 415),
        ("PATCH", "/api/v1/namespaces/default/pods/p1?json-patch", b"{}", 400),
        ("DELETE", "/api/v1/namespaces/default/pods", None, 405),
        ("GET", "/api/v1/pods?labelSelector=a%20b", None, 400),
    ],
    ids=[
        "unknown-resource",
        "wrong-group",
        "bad-json",
        "not-an-object",
        "no-patch-type",
        "patch-not-a-list",
        "delete-no-name",
        "bad-selector",
    ],
)
def test_bad_requests_get_a_status_and_the_server_keeps_serving(
    apiserver: ApiServer, method, path, body, code
):
    apiserver.add_pod("p1")
    content_type = "application/json-patch+json" if "json-patch" in path else "text/plain"
    headers = {"Content-Type": content_type if method == "PATCH" else "application/json"}
    resp = apiserver.api.rest_client.pool_manager.request(
        method, apiserver.url + path, body=body, headers=headers
    )
    assert resp.status == code
    assert json.loads(resp.data)["kind"] == "Status"
    assert apiserver.core.read_namespaced_pod("p1", "default").metadata.name == "p1"


def test_delete_with_finalizers_marks_then_removing_the_finalizer_deletes(apiserver: ApiServer):
    core = apiserver.core
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm", "finalizers": ["x/y"]}})
    core.delete_namespaced_config_map("cm", "default")
    marked = apiserver.get("configmaps", "cm", "default")
    assert marked is not None and marked["metadata"]["deletionTimestamp"]
    core.patch_namespaced_config_map("cm", "default", {"metadata": {"finalizers": None}})
    assert apiserver.get("configmaps", "cm", "default") is None


def test_delete_preconditions_guard_against_a_replaced_object(apiserver: ApiServer):
    apiserver.add_pod("p1")
    body = {"preconditions": {"uid": "someone-else"}}
    with pytest.raises(ApiException) as info:
        apiserver.core.delete_namespaced_pod("p1", "default", body=body)
    assert info.value.status == 409 and "Precondition failed" in status_of(info.value)["message"]
    assert apiserver.get("pods", "p1", "default") is not None


def test_the_legacy_bindings_endpoint_takes_the_pod_name_from_the_body(apiserver: ApiServer):
    apiserver.add_pod("p1")
    resp = apiserver.core.create_namespaced_binding(
        "default", binding("p1", node="n7"), _preload_content=False
    )
    assert resp.status == 201
    assert (apiserver.get("pods", "p1", "default") or {})["spec"]["nodeName"] == "n7"


def test_concurrent_updates_from_one_version_let_exactly_one_win(apiserver: ApiServer):
    apiserver.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {}})
    base = apiserver.get("configmaps", "cm", "default")
    results: list[int] = []
    lock = threading.Lock()

    def update(i: int) -> None:
        body = {**(base or {}), "data": {"writer": str(i)}}
        try:
            apiserver.core.replace_namespaced_config_map("cm", "default", body)
            code = 200
        except ApiException as exc:
            code = int(exc.status or 0)
        with lock:
            results.append(code)

    threads = [threading.Thread(target=update, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(results) == [200] + [409] * 7


def test_create_refuses_a_body_for_another_namespace_and_a_missing_name(apiserver: ApiServer):
    with pytest.raises(ApiException) as info:
        apiserver.core.create_namespaced_pod("default", pod_manifest("p", namespace="other"))
    assert info.value.status == 400
    with pytest.raises(ApiException) as info:
        apiserver.core.create_namespaced_config_map("default", {"metadata": {}})
    assert info.value.status == 422 and status_of(info.value)["reason"] == "Invalid"


def test_latency_is_added_to_every_request_and_a_delay_to_the_requests_named(apiserver: ApiServer):
    apiserver.latency = 0.1
    started = time.monotonic()
    apiserver.core.list_node()
    assert time.monotonic() - started >= 0.1
    apiserver.latency, started = 0.0, time.monotonic()
    apiserver.delay("list", "nodes", 0.2)
    apiserver.core.list_namespaced_pod("default")
    assert time.monotonic() - started < 0.2
    apiserver.core.list_node()
    assert time.monotonic() - started >= 0.2


def test_a_pod_in_graceful_deletion_can_still_be_patched(apiserver: ApiServer):
    apiserver.add_pod("p1")
    apiserver.mark_deleting("p1")
    patched = apiserver.core.patch_namespaced_pod("p1", "default", {"metadata": {"annotations": {"a": "b"}}})
    assert patched.metadata.deletion_timestamp is not None
    assert apiserver.get("pods", "p1", "default") is not None
