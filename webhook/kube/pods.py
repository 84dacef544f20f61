"""Small typed operations on pods, nodes and events that the extender, device plugin and tools share.

All take an official-client `ApiClient`, work on plain JSON dicts and raise only `errors.ApiError`.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Mapping
from typing import Any

import kubernetes.client

from webhook.kube import errors, rest

Obj = dict[str, Any]


def get_pod(api: kubernetes.client.ApiClient, namespace: str, name: str) -> Obj:
    pod: Obj = rest.request(api, "GET", rest.path("pods", name, namespace))
    return pod


def get_node(api: kubernetes.client.ApiClient, name: str) -> Obj:
    node: Obj = rest.request(api, "GET", rest.path("nodes", name))
    return node


def list_pods(
    api: kubernetes.client.ApiClient,
    namespace: str = "",
    *,
    label_selector: str = "",
    field_selector: str = "",
) -> tuple[list[Obj], str]:
    """Pods (all namespaces when `namespace` is "") and the list's resourceVersion."""
    query = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
    reply = rest.request(api, "GET", rest.path("pods", namespace=namespace), query=query)
    return list(reply.get("items") or []), str(reply.get("metadata", {}).get("resourceVersion", ""))


def bind_pod(  # noqa: PLR0917 - the signature the extender and device plugin were promised
    api: kubernetes.client.ApiClient,
    namespace: str,
    name: str,
    uid: str,
    node: str,
    annotations: Mapping[str, str] | None = None,
) -> None:
    """Create the pods/binding subresource: the pod UID is a precondition, `annotations` are merged
    into the pod with the bind. Raises ConflictError when the pod is already bound, being deleted,
    gated or replaced (UID mismatch), NotFoundError when it is gone."""
    path, body = binding(namespace, name, uid, node, annotations)
    check_binding(rest.request(api, "POST", path, body=body))


def binding(
    namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str] | None = None
) -> tuple[str, Obj]:
    """The path and body of `bind_pod`'s request (for a caller that sends it otherwise, `direct`)."""
    metadata: Obj = {"name": name, "namespace": namespace}
    if uid:
        metadata["uid"] = uid
    if annotations:
        metadata["annotations"] = dict(annotations)
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    return rest.path("pods", name, namespace) + "/binding", body


def check_binding(reply: Any) -> None:
    """Raise the error a Binding's reply carries: it is a 201 Status, a Failure one when refused."""
    if isinstance(reply, dict) and reply.get("kind") == "Status" and reply.get("status") == "Failure":
        raise errors.from_status(int(reply.get("code") or 500), reply)


def patch_pod_annotations(
    api: kubernetes.client.ApiClient,
    namespace: str,
    name: str,
    annotations: Mapping[str, str | None],
    *,
    resource_version: str = "",
    uid: str = "",
) -> Obj:
    """Merge-patch pod annotations (a None value removes the key); the patched pod.

    `resource_version` makes it conditional (ConflictError when the pod changed since); `uid` guards
    against a pod deleted and recreated under the same name (ConflictError on mismatch; without an
    explicit `resource_version` it patches the version it checked, so any concurrent change conflicts)."""
    if uid:
        # A merge patch cannot carry a UID precondition: check it, then patch that exact version.
        current = get_pod(api, namespace, name)
        meta = current.get("metadata") or {}
        if meta.get("uid") != uid:
            message = (
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta.get('uid')}"
            )
            raise errors.ConflictError(409, "Conflict", message, {"name": name, "kind": "pods"})
        resource_version = resource_version or str(meta.get("resourceVersion") or "")
    metadata: Obj = {"annotations": dict(annotations)}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    patched: Obj = rest.request(
        api,
        "PATCH",
        rest.path("pods", name, namespace),
        body={"metadata": metadata},
        content_type=rest.MERGE_PATCH,
    )
    return patched


def patch_node_metadata(
    api: kubernetes.client.ApiClient,
    name: str,
    *,
    annotations: Mapping[str, str | None] | None = None,
    labels: Mapping[str, str | None] | None = None,
) -> Obj:
    """Merge-patch node annotations and labels in one request (None removes a key); the patched node."""
    metadata: Obj = {}
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if labels is not None:
        metadata["labels"] = dict(labels)
    node: Obj = rest.request(
        api, "PATCH", rest.path("nodes", name), body={"metadata": metadata}, content_type=rest.MERGE_PATCH
    )
    return node


def patch_node_status(api: kubernetes.client.ApiClient, name: str, status: Mapping[str, Any]) -> Obj:
    """Merge-patch the nodes/status subresource with `status` (e.g. {"capacity": {...}})."""
    node: Obj = rest.request(
        api,
        "PATCH",
        rest.path("nodes", name) + "/status",
        body={"status": dict(status)},
        content_type=rest.MERGE_PATCH,
    )
    return node


def create_event(
    api: kubernetes.client.ApiClient,
    involved: Obj,
    reason: str,
    message: str,
    *,
    type_: str = "Normal",
    component: str = "gpushare",
    host: str = "",
    now: datetime.datetime | None = None,
) -> Obj:
    """Record a core/v1 Event about `involved` (a pod or node dict) in its namespace ("default" for nodes)."""
    meta = involved.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta.get('name', 'object')}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion", "v1"),
            "kind": involved.get("kind", ""),
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": {"component": component, **({"host": host} if host else {})},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": component,
        "reportingInstance": host or component,
    }
    event: Obj = rest.request(api, "POST", rest.path("events", namespace=namespace), body=body)
    return event


def evict_pod(api: kubernetes.client.ApiClient, namespace: str, name: str, uid: str = "") -> None:
    """Create the pods/eviction subresource (policy/v1), so PodDisruptionBudgets are honoured: 429 when
    one forbids it now (retryable), NotFoundError when the pod is gone, ConflictError when `uid` no longer
    names it (a pod recreated under the name is never evicted for its predecessor)."""
    body: Obj = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    if uid:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    rest.request(api, "POST", rest.path("pods", name, namespace) + "/eviction", body=body)
