"""Realistic AdmissionReview v1 requests (as kube-apiserver sends them) for Pods and every workload kind."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

Json = dict[str, Any]


def container(name: str = "train", limits: Json | None = None, env: list[Json] | None = None) -> Json:
    out: Json = {
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "train.py"],
        "resources": {"limits": dict(limits or {}), "requests": dict(limits or {})},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    if env is not None:
        out["env"] = env
    return out


def pod_spec(*containers: Json, node_selector: Json | None = None) -> Json:
    spec: Json = {
        "containers": list(containers) or [container(limits={"aliyun.com/gpu-mem": "4"})],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "securityContext": {},
    }
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return spec


def pod(
    spec: Json | None = None,
    name: str = "train-0",
    namespace: str = "ml",
    annotations: Json | None = None,
    labels: Json | None = None,
) -> Json:
    metadata: Json = {"name": name, "namespace": namespace, "labels": labels or {"app": "train"}}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec or pod_spec()}


def template(spec: Json) -> Json:
    return {"metadata": {"labels": {"app": "train"}}, "spec": spec}


def _apps(kind: str) -> Callable[[Json], Json]:
    return lambda spec: {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"selector": {"matchLabels": {"app": "train"}}, "template": template(spec)},
    }


# kind -> (group, version, resource, build(pod spec) -> object, field path of the pod spec)
WORKLOADS: dict[str, tuple[str, str, str, Callable[[Json], Json], str]] = {
    "PodTemplate": (
        "",
        "v1",
        "podtemplates",
        lambda spec: {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "t"},
            "template": template(spec),
        },
        "template.spec",
    ),
    "ReplicationController": (
        "",
        "v1",
        "replicationcontrollers",
        lambda spec: {
            "apiVersion": "v1",
            "kind": "ReplicationController",
            "metadata": {"name": "rc"},
            "spec": {"replicas": 1, "template": template(spec)},
        },
        "spec.template.spec",
    ),
    "ReplicaSet": ("apps", "v1", "replicasets", _apps("ReplicaSet"), "spec.template.spec"),
    "Deployment": ("apps", "v1", "deployments", _apps("Deployment"), "spec.template.spec"),
    "StatefulSet": ("apps", "v1", "statefulsets", _apps("StatefulSet"), "spec.template.spec"),
    "DaemonSet": ("apps", "v1", "daemonsets", _apps("DaemonSet"), "spec.template.spec"),
    "Job": (
        "batch",
        "v1",
        "jobs",
        lambda spec: {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {"template": template(spec)},
        },
        "spec.template.spec",
    ),
    "CronJob": (
        "batch",
        "v1",
        "cronjobs",
        lambda spec: {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "cj"},
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template(spec)}}},
        },
        "spec.jobTemplate.spec.template.spec",
    ),
    "PyTorchJob": (
        "kubeflow.org",
        "v1",
        "pytorchjobs",
        lambda spec: {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "ddp"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template(spec)}}},
        },
        "spec.pytorchReplicaSpecs.Master.template.spec",
    ),
    "RayCluster": (
        "ray.io",
        "v1",
        "rayclusters",
        lambda spec: {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "ray"},
            "spec": {"workerGroupSpecs": [{"groupName": "gpu", "template": template(spec)}]},
        },
        "spec.workerGroupSpecs[0].template.spec",
    ),
    "JobSet": (
        "jobset.x-k8s.io",
        "v1alpha2",
        "jobsets",
        lambda spec: {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "js"},
            "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": template(spec)}}}]},
        },
        "spec.replicatedJobs[0].template.spec.template.spec",
    ),
    "LeaderWorkerSet": (
        "leaderworkerset.x-k8s.io",
        "v1",
        "leaderworkersets",
        lambda spec: {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws"},
            "spec": {"leaderWorkerTemplate": {"size": 2, "workerTemplate": template(spec)}},
        },
        "spec.leaderWorkerTemplate.workerTemplate.spec",
    ),
}


def workload(kind: str, spec: Json) -> Json:
    return WORKLOADS[kind][3](copy.deepcopy(spec))


def review(
    obj: Json | None,
    *,
    operation: str = "CREATE",
    kind: str | None = None,
    namespace: str = "ml",
    old: Json | None = None,
    uid: str | None = None,
    sub_resource: str | None = None,
) -> Json:
    """An AdmissionReview v1 request with every field the v1 dispatcher sets."""
    kind = kind or (obj or old or {}).get("kind", "Pod")
    group, version, resource = ("", "v1", "pods") if kind == "Pod" else WORKLOADS[kind][:3]
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource}
    request: Json = {
        "uid": uid or str(uuid.uuid4()),
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": "alice", "uid": "1", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": None
        if operation == "CONNECT"
        else {"kind": f"{operation.title()}Options", "apiVersion": "meta.k8s.io/v1"},
    }
    name = (obj or old or {}).get("metadata", {}).get("name")
    if name:
        request["name"] = name
    if sub_resource:
        request["subResource"] = sub_resource
        request["requestSubResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
