"""Pod and Deployment bodies the end-to-end tests send through the API server."""

from __future__ import annotations

from typing import Any

from webhook.core.wire import resources

Obj = dict[str, Any]


def container(
    name: str = "main",
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> Obj:
    body: Obj = {"name": name, "image": "registry.k8s.io/pause:3.10"}
    res: Obj = {}
    if limits is not None:
        res["limits"] = limits
    if requests is not None:
        res["requests"] = requests
    if res:
        body["resources"] = res
    if env:
        body["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return body


def pod(
    name: str,
    *containers: Obj,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    meta: Obj = {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": list(containers) or [container()], "terminationGracePeriodSeconds": 0},
    }


def gpu_pod(name: str, *gib: int, **kwargs: Any) -> Obj:
    """A pod whose containers ask for `gib` GiB of GPU memory each."""
    return pod(
        name,
        *(container(f"c{i}", limits={resources.GPU_MEMORY: str(g)}) for i, g in enumerate(gib)),
        **kwargs,
    )


def deployment(name: str, *containers: Obj) -> Obj:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": list(containers)}},
        },
    }


def in_group(body: Obj, group: str) -> Obj:
    """Send the pod to the Bed nodes of `group` only (their label and taint)."""
    spec = body["spec"]
    spec["nodeSelector"] = {**spec.get("nodeSelector", {}), "e2e-group": group}
    spec["tolerations"] = [{"key": "e2e-group", "operator": "Equal", "value": group, "effect": "NoSchedule"}]
    return body
