"""RBAC grants what the code calls and nothing more: API calls found in each part's source vs its rules.

The scan maps every Kubernetes call site (official-client methods and webhook.kube helpers) to
(apiGroup, resource, verb). A new call without an entry in CALLS fails `test_every_api_call_is_known`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.chart import render

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)

WEBHOOK = Path(render.ROOT) / "webhook"
Grant = tuple[str, str, str]  # (apiGroup, resource, verb)
LIST_WATCH = ("list", "watch")

# call name -> grants it needs. Watch helpers list then watch.
CALLS: dict[str, set[Grant]] = {
    "list_node": {("", "nodes", v) for v in LIST_WATCH},
    "list_pod_for_all_namespaces": {("", "pods", v) for v in LIST_WATCH},
    "list_namespaced_pod": {("", "pods", v) for v in LIST_WATCH},
    "list_pods": {("", "pods", "list")},
    "read_namespaced_pod": {("", "pods", "get")},
    "get_pod": {("", "pods", "get")},
    "read_node": {("", "nodes", "get")},
    "get_node": {("", "nodes", "get")},
    "create_namespaced_pod_binding": {("", "pods/binding", "create")},
    "bind_pod": {("", "pods/binding", "create")},
    "patch_namespaced_pod": {("", "pods", "patch")},
    # With a UID precondition it reads the pod first (a merge patch cannot carry one): the end-to-end
    # suite's real API server refused the device plugin's GET that this map had missed.
    "patch_pod_annotations": {("", "pods", "patch"), ("", "pods", "get")},
    "patch_node_status": {("", "nodes/status", "patch")},
    "patch_node_metadata": {("", "nodes", "patch")},
    "patch_node": {("", "nodes", "patch")},
    "create_event": {("", "events", "create")},
    "evict_pod": {("", "pods/eviction", "create")},
    "create_namespaced_event": {("", "events", "create")},
    "read_namespaced_lease": {("coordination.k8s.io", "leases", "get")},
    "create_namespaced_lease": {("coordination.k8s.io", "leases", "create")},
    "replace_namespaced_lease": {("coordination.k8s.io", "leases", "update")},
    "patch_namespaced_lease": {("coordination.k8s.io", "leases", "patch")},
    # webhook.kube.leader: GET the Lease, POST it when missing, PUT to renew or take over.
    "LeaderElector": {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")},
    # webhook.kube.watch.one_node: list and watch the node agent's own Node (a field selector).
    "one_node": {("", "nodes", v) for v in LIST_WATCH},
}
CALL_RE = re.compile(r"\.(" + "|".join(CALLS) + r")\b")
API_LIKE_RE = re.compile(r"\.((?:list|read|create|patch|replace|delete)_(?:namespaced_)?[a-z_]+)\(")
# Local helpers whose names look like client calls.
NOT_API = {"read_text", "read_bytes", "list_response", "read_limited"}
WATCH_PATH_RE = re.compile(r"rest\.path\(\s*\"(pods|nodes)\"")


def _required(package: str) -> set[Grant]:
    needed: set[Grant] = set()
    for source in sorted((WEBHOOK / package).rglob("*.py")):  # sub-packages too (extender/bind)
        text = source.read_text(encoding="utf-8")
        for name in CALL_RE.findall(text):
            needed |= CALLS[name]
        if "watch." in text or "Watch(" in text:  # webhook.kube.watch lists and watches a rest.path
            for resource in WATCH_PATH_RE.findall(text):
                needed |= {("", resource, v) for v in LIST_WATCH}
    return needed


def _granted(objects: list[dict[str, Any]], component: str) -> set[Grant]:
    grants: set[Grant] = set()
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        if obj["metadata"]["labels"]["app.kubernetes.io/component"] != component:
            continue
        for rule in obj["rules"]:
            grants |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return grants


# Grants the code needs only with an opt-in value, rendered only then: package -> (grants, values).
OPT_IN: dict[str, tuple[set[Grant], dict[str, Any]]] = {
    "deviceplugin": (
        {("", "pods/eviction", "create")},
        {"devicePlugin": {"usage": {"overShare": {"evict": True}}}},
    ),
}


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render.render()


@pytest.mark.parametrize(
    ("package", "component"), [("extender", "extender"), ("deviceplugin", "device-plugin")]
)
def test_rbac_grants_exactly_what_the_code_calls(
    objects: list[dict[str, Any]], package: str, component: str
) -> None:
    if not (WEBHOOK / package).is_dir():
        pytest.skip(f"webhook/{package} not written yet")
    needed = _required(package)
    granted = _granted(objects, component)
    assert needed, f"no API calls found in webhook/{package}: the scan is broken"
    opt_in, values = OPT_IN.get(package, (set(), {}))
    assert opt_in <= needed, "an opt-in grant the code no longer needs"
    assert opt_in <= _granted(render.render(values), component), "the opt-in value does not grant it"
    needed -= opt_in
    assert sorted(needed - granted) == [], "the code calls these but the chart does not grant them"
    assert sorted(granted - needed) == [], "the chart grants these but the code never calls them"


@pytest.mark.parametrize("package", ["extender", "deviceplugin", "admission"])
def test_every_api_call_is_known(package: str) -> None:
    unknown = set()
    for source in (WEBHOOK / package).rglob("*.py"):
        for name in API_LIKE_RE.findall(source.read_text(encoding="utf-8")):
            if name not in CALLS and name not in NOT_API:
                unknown.add(f"{source.name}: {name}")
    assert unknown == set(), "add these calls to CALLS (and the chart's RBAC)"


def test_the_webhook_has_no_rbac_and_no_token(objects: list[dict[str, Any]]) -> None:
    assert _granted(objects, "webhook") == set()


def test_certgen_may_touch_only_its_secret_and_configurations(objects: list[dict[str, Any]]) -> None:
    rules = [r for o in objects if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]
             if o["metadata"]["labels"]["app.kubernetes.io/component"] == "certgen"]  # fmt: skip
    named = {
        f"{render.RELEASE}-gpushare-webhook-tls",
        f"{render.RELEASE}-gpushare-extender-tls",
        f"{render.RELEASE}-gpushare-mutating",
        f"{render.RELEASE}-gpushare-validating",
    }
    for rule in rules:
        if rule["verbs"] == ["create"]:  # create cannot be limited by name (Kubernetes RBAC)
            assert rule["resources"] == ["secrets"]
        else:
            assert set(rule["resourceNames"]) <= named
            assert set(rule["verbs"]) <= {"get", "update", "patch"}
