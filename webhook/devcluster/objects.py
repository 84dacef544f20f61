"""The objects a cluster without kubelets needs from its admin: GPU Nodes with their capacity in status
(what a kubelet with our device plugin reports), and create-or-get for anything else."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes.client

from webhook.core.wire import resources
from webhook.kube import errors, rest

Obj = dict[str, Any]


def gpu_node(
    api: kubernetes.client.ApiClient,
    name: str,
    gpus: int,
    gib_each: int,
    labels: Mapping[str, str] | None = None,
    *,
    taints: Sequence[Obj] = (),
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A Node with GPU capacity in its status, as a kubelet with our device plugin would report it;
    `annotations` from its creation on (e.g. the plugin's GPUs of several sizes, before any watch sees it)."""
    node_labels = {"kubernetes.io/hostname": name, resources.GPU_COUNT_LABEL: str(gpus), **(labels or {})}
    meta: Obj = {"name": name, "labels": node_labels}
    if annotations:
        meta["annotations"] = dict(annotations)
    body: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
    if taints:
        body["spec"] = {"taints": list(taints)}
    node = create_or_get(api, rest.path("nodes"), body)
    capacity = {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "250",
        resources.GPU_MEMORY: str(gpus * gib_each),
        resources.GPU_COUNT: str(gpus),
    }
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    node["status"] = {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
    }
    updated: Obj = rest.request(api, "PUT", rest.path("nodes", name) + "/status", body=node)
    return updated


def create_or_get(api: kubernetes.client.ApiClient, path: str, body: Obj) -> Obj:
    """POST `body` to the collection at `path`; the stored object when it already exists."""
    try:
        created: Obj = rest.request(api, "POST", path, body=body)
        return created
    except errors.ConflictError:
        existing: Obj = rest.request(api, "GET", f"{path}/{body['metadata']['name']}")
        return existing
