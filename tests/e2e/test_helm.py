"""Helm installs the chart into the real API server, which accepts every object; upgrade and uninstall
work; the default values (in-cluster webhook, self-managed certificates, scheduler mode a) too."""

from __future__ import annotations

import json
from typing import Any

from tests.chart.render import CHART
from tests.e2e.bed import NAMESPACE, RELEASE, Bed
from webhook.kube import errors, rest

# kind -> (plural, group, version, namespaced) for what the chart renders.
KINDS = {
    "ServiceAccount": ("serviceaccounts", "", "v1", True),
    "ConfigMap": ("configmaps", "", "v1", True),
    "Secret": ("secrets", "", "v1", True),
    "Service": ("services", "", "v1", True),
    "Namespace": ("namespaces", "", "v1", False),
    "Deployment": ("deployments", "apps", "v1", True),
    "DaemonSet": ("daemonsets", "apps", "v1", True),
    "CronJob": ("cronjobs", "batch", "v1", True),
    "Job": ("jobs", "batch", "v1", True),
    "PodDisruptionBudget": ("poddisruptionbudgets", "policy", "v1", True),
    "Role": ("roles", "rbac.authorization.k8s.io", "v1", True),
    "RoleBinding": ("rolebindings", "rbac.authorization.k8s.io", "v1", True),
    "ClusterRole": ("clusterroles", "rbac.authorization.k8s.io", "v1", False),
    "ClusterRoleBinding": ("clusterrolebindings", "rbac.authorization.k8s.io", "v1", False),
    "MutatingWebhookConfiguration": (
        "mutatingwebhookconfigurations",
        "admissionregistration.k8s.io",
        "v1",
        False,
    ),
    "ValidatingWebhookConfiguration": (
        "validatingwebhookconfigurations",
        "admissionregistration.k8s.io",
        "v1",
        False,
    ),
    "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", "admissionregistration.k8s.io", "v1", False),
    "ValidatingAdmissionPolicyBinding": (
        "validatingadmissionpolicybindings",
        "admissionregistration.k8s.io",
        "v1",
        False,
    ),
    "NetworkPolicy": ("networkpolicies", "networking.k8s.io", "v1", True),
    "Pod": ("pods", "", "v1", True),
}


def _path(obj: dict[str, Any], namespace: str) -> str:
    plural, group, version, namespaced = KINDS[obj["kind"]]
    ns = obj["metadata"].get("namespace", namespace) if namespaced else ""
    return rest.path(plural, obj["metadata"]["name"], ns, group=group, version=version)


def _stored(bed: Bed, manifest: list[dict[str, Any]], namespace: str) -> list[str]:
    missing = []
    for obj in manifest:
        try:
            bed.request("GET", _path(obj, namespace))
        except errors.NotFoundError:
            missing.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return missing


def test_every_object_of_the_release_is_stored(bed: Bed) -> None:
    status = json.loads(bed.helm("status", RELEASE, "--namespace", NAMESPACE, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    manifest = bed.manifest()
    assert {o["kind"] for o in manifest} >= {
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "DaemonSet",
        "Deployment",
        "ClusterRole",
    }
    assert _stored(bed, manifest, NAMESPACE) == []


def test_upgrade_keeps_the_release_working(bed: Bed) -> None:
    values = bed.root / f"values-{RELEASE}.json"
    bed.helm(
        "upgrade",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--values",
        str(values),
        "--set",
        "webhook.timeoutSeconds=7",
    )
    mutating = bed.request(
        "GET",
        rest.path(
            "mutatingwebhookconfigurations",
            f"{RELEASE}-gpushare-mutating",
            group="admissionregistration.k8s.io",
        ),
    )
    assert mutating["webhooks"][0]["timeoutSeconds"] == 7
    history = json.loads(bed.helm("history", RELEASE, "--namespace", NAMESPACE, "-o", "json").stdout)
    assert history[-1]["status"] == "deployed" and history[-1]["revision"] >= 2


def test_the_default_values_install_and_uninstall(bed: Bed) -> None:
    """The defaults as an operator installs them: webhook behind its Service, self-managed certificates
    (their hook Job needs a kubelet, so --no-hooks), the cluster's own scheduler (mode a)."""
    release, namespace = "defaults", "gpushare-defaults"
    bed.helm("install", release, str(CHART), "--namespace", namespace, "--create-namespace", "--no-hooks")
    try:
        manifest = bed.manifest(release, namespace)
        assert _stored(bed, manifest, namespace) == []
        kinds = {o["kind"] for o in manifest}
        assert "Service" in kinds and "Deployment" in kinds
    finally:
        # Its webhooks call a Service no pod backs; with failurePolicy Fail they must not outlive the test.
        bed.helm("uninstall", release, "--namespace", namespace, "--no-hooks")
    assert _stored(bed, manifest, namespace) == [f"{o['kind']}/{o['metadata']['name']}" for o in manifest]
