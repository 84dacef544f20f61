"""Cluster DNS for a cluster whose pods run: CoreDNS (built by scripts/runtime-bins, imaged by
scripts/node-images) with its `kubernetes` plugin, as kubeadm installs it: a Deployment of two replicas
kept apart on nodes where it can, in kube-system behind the `kube-dns` Service at the address the kubelets
give pods as their nameserver. One replica alone would take the cluster's names with any node it ran on:
a lost node's pods keep their place for 300 s, so kube-scheduler could not reach the extender by its
Service name until then.

It answers for cluster.local and the reverse zones only, and forwards nothing: a name outside the
cluster gets SERVFAIL, so no query leaves this machine.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
NAMESPACE = "kube-system"
NAME = "coredns"
LABELS = {"k8s-app": "kube-dns"}
REPLICAS = 2  # kubeadm's count

COREFILE = """.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loadbalance
}
"""


def manifests(image: str, cluster_ip: str) -> list[Obj]:
    """The objects of cluster DNS: RBAC, the Corefile, the Deployment and the `kube-dns` Service."""
    meta = {"name": NAME, "namespace": NAMESPACE, "labels": LABELS}
    rules = [
        {
            "apiGroups": [""],
            "resources": ["endpoints", "services", "pods", "namespaces"],
            "verbs": ["list", "watch"],
        },
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]
    probe_port = {"port": 8080, "path": "/health"}
    container = {
        "name": NAME,
        "image": image,
        "imagePullPolicy": "Never",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
        ],
        "livenessProbe": {"httpGet": probe_port, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"port": 8181, "path": "/ready"}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": COREFILE}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {
                        "serviceAccountName": NAME,
                        "affinity": {
                            "podAntiAffinity": {
                                "preferredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "weight": 100,
                                        "podAffinityTerm": {
                                            "labelSelector": {"matchLabels": LABELS},
                                            "topologyKey": "kubernetes.io/hostname",
                                        },
                                    }
                                ]
                            }
                        },
                        "priorityClassName": "system-cluster-critical",
                        # Its own lookups never go to itself; the node gives pods no other resolver.
                        "dnsPolicy": "Default",
                        # Port 53 as a non-root user: containerd 2.x opens the unprivileged ports to pods.
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [container],
                        "volumes": [{"name": "config", "configMap": {"name": NAME}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": NAMESPACE, "labels": LABELS},
            "spec": {
                "selector": LABELS,
                "clusterIP": cluster_ip,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                ],
            },
        },
    ]
