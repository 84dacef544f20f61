"""Helm installs the chart into the real API server, which accepts every object; upgrade and uninstall
work, with Helm 3 and with Helm 4; the default values (in-cluster webhook, self-managed certificates,
scheduler mode a) too. The bed's release is installed by the default Helm (3)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.chart.render import CHART
from tests.e2e.bed import NAMESPACE, RELEASE, Bed
from webhook.devcluster import helm
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


def _managers(bed: Bed, name: str) -> set[tuple[str, str]]:
    path = rest.path("mutatingwebhookconfigurations", name, group="admissionregistration.k8s.io")
    return {(f["manager"], f["operation"]) for f in bed.request("GET", path)["metadata"]["managedFields"]}


@pytest.mark.parametrize(("major", "timeout"), [(3, 7), (4, 8)], ids=["helm3", "helm4"])
def test_upgrade_keeps_the_release_working(bed: Bed, major: int, timeout: int) -> None:
    """Either Helm upgrades the release the other installed. Helm 4 keeps the release's method
    (--server-side=auto): on the bed's release, installed by Helm 3 unless GPUSHARE_HELM=4, nothing is
    server-side applied."""
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
        f"webhook.timeoutSeconds={timeout}",
        major=major,
    )
    mutating = bed.request(
        "GET",
        rest.path(
            "mutatingwebhookconfigurations",
            f"{RELEASE}-gpushare-mutating",
            group="admissionregistration.k8s.io",
        ),
    )
    assert mutating["webhooks"][0]["timeoutSeconds"] == timeout
    history = json.loads(
        bed.helm("history", RELEASE, "--namespace", NAMESPACE, "-o", "json", major=major).stdout
    )
    assert history[-1]["status"] == "deployed" and history[-1]["revision"] >= 2
    applied = ("helm", "Apply") in _managers(bed, f"{RELEASE}-gpushare-mutating")
    assert applied == (helm.default_major() == 4)


@pytest.mark.parametrize("major", [3, 4], ids=["helm3", "helm4"])
def test_the_default_values_install_and_uninstall(bed: Bed, major: int) -> None:
    """The defaults as an operator installs them: webhook behind its Service, self-managed certificates
    (their hook Job needs a kubelet, so --no-hooks), the cluster's own scheduler (mode a). Helm 4 applies
    each object server-side, as field manager `helm`."""
    release, namespace = f"defaults{major}", f"gpushare-defaults{major}"
    bed.helm(
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--create-namespace",
        "--no-hooks",
        major=major,
    )
    try:
        applied = ("helm", "Apply") in _managers(bed, f"{release}-gpushare-mutating")
        assert applied == (major == 4)
        manifest = bed.manifest(release, namespace)
        assert _stored(bed, manifest, namespace) == []
        kinds = {o["kind"] for o in manifest}
        assert "Service" in kinds and "Deployment" in kinds
    finally:
        # Its webhooks call a Service no pod backs; with failurePolicy Fail they must not outlive the test.
        bed.helm("uninstall", release, "--namespace", namespace, "--no-hooks", major=major)
    assert _stored(bed, manifest, namespace) == [f"{o['kind']}/{o['metadata']['name']}" for o in manifest]


@pytest.mark.parametrize("major", [3, 4], ids=["helm3", "helm4"])
def test_an_upgrade_over_a_hand_scaled_deployment(bed: Bed, major: int) -> None:
    """What install.md says of the two Helms when someone else changed a field the chart sets: Helm 3's
    three-way merge puts the chart's value back without a word; Helm 4's server-side apply refuses with a
    conflict naming the field, and takes it over only with --force-conflicts."""
    release, namespace = f"scaled{major}", f"gpushare-scaled{major}"
    deployment = rest.path("deployments", f"{release}-gpushare-extender", namespace, group="apps")
    common = ("--namespace", namespace, "--no-hooks", "--reuse-values")
    bed.helm(
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--create-namespace",
        "--no-hooks",
        major=major,
    )
    try:
        chart_replicas = bed.request("GET", deployment)["spec"]["replicas"]
        bed.request(
            "PATCH",
            deployment,
            body={"spec": {"replicas": chart_replicas + 1}},
            content_type=rest.MERGE_PATCH,
        )
        upgrade = bed.helm("upgrade", release, str(CHART), *common, check=False, major=major)
        if major == 4:
            assert (
                upgrade.returncode != 0
                and "conflict" in upgrade.stderr
                and ".spec.replicas" in upgrade.stderr
            )
            assert bed.request("GET", deployment)["spec"]["replicas"] == chart_replicas + 1
            bed.helm("upgrade", release, str(CHART), *common, "--force-conflicts", major=major)
        else:
            assert upgrade.returncode == 0, upgrade.stderr
        assert bed.request("GET", deployment)["spec"]["replicas"] == chart_replicas
    finally:
        bed.helm("uninstall", release, "--namespace", namespace, "--no-hooks", major=major)
