"""The GPU Pod AdmissionReview the admission benches post: as the API server sends it, ~4.5 KB."""

from __future__ import annotations

from typing import Any


def realistic_review() -> dict[str, Any]:
    """A Pod CREATE review as the API server sends it: two containers, one asking for 4 GiB of GPU memory."""
    env = [{"name": f"TRAIN_OPTION_{i}", "value": f"value-{i}-" + "x" * 16} for i in range(12)]
    mounts = [{"name": f"data-{i}", "mountPath": f"/mnt/data-{i}", "readOnly": i % 2 == 0} for i in range(6)]
    trainer = {
        "name": "trainer",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["torchrun", "--nproc-per-node=1", "train.py", "--epochs=10", "--batch-size=64"],
        "env": env,
        "resources": {
            "limits": {"aliyun.com/gpu-mem": "4", "cpu": "4", "memory": "16Gi"},
            "requests": {"aliyun.com/gpu-mem": "4", "cpu": "2", "memory": "8Gi"},
        },
        "volumeMounts": mounts,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
    }
    sidecar = {
        "name": "metrics",
        "image": "prom/node-exporter:v1.8.1",
        "args": ["--web.listen-address=:9100"],
        "resources": {
            "limits": {"cpu": "100m", "memory": "64Mi"},
            "requests": {"cpu": "50m", "memory": "32Mi"},
        },
        "ports": [{"containerPort": 9100, "name": "metrics", "protocol": "TCP"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "resnet-train-",
            "namespace": "ml-team",
            "labels": {"app": "resnet", "team": "vision", "job-name": "resnet-train", "tier": "training"},
            "annotations": {
                "kubectl.kubernetes.io/default-container": "trainer",
                "owner": "alice@example.com",
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "resnet-train",
                    "uid": "5f0c6a0e-1d0b-4f1a-9a4e-2f6f1b3c9d10",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [trainer, sidecar],
            "volumes": [
                {"name": f"data-{i}", "persistentVolumeClaim": {"claimName": f"pvc-{i}"}} for i in range(6)
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "trainer",
            "schedulerName": "default-scheduler",
            "securityContext": {"fsGroup": 1000},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 50,
                            "preference": {
                                "matchExpressions": [
                                    {"key": "gpu-type", "operator": "In", "values": ["t4", "a10"]}
                                ]
                            },
                        }
                    ]
                }
            },
            "priority": 0,
            "enableServiceLinks": True,
        },
    }
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0c9a6b0e-6c9f-4a51-b2b3-7f1d2e3c4b5a",
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "namespace": "ml-team",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:job-controller",
                "uid": "8d3f1a2b-0000-4000-8000-000000000001",
                "groups": [
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                    "system:authenticated",
                ],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }
