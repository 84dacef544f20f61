"""The chart lints, renders in every mode, and every object passes strict schemas of Kubernetes 1.30-1.37."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.chart import render, schemas

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"  # only rendered, never parsed here
MODES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager": {"certificates": {"mode": "certManager"}},
    "cert-manager-own-issuer": {
        "certificates": {
            "mode": "certManager",
            "certManager": {"issuerRef": {"kind": "ClusterIssuer", "name": "x"}},
        }
    },
    "provided-certs": {
        "certificates": {
            "mode": "provided",
            "provided": {
                "caCrt": PEM,
                "tlsCrt": PEM,
                "tlsKey": PEM,
                "extender": {"tlsCrt": PEM, "tlsKey": PEM, "clientCrt": PEM, "clientKey": PEM},
            },
        }
    },
    "second-scheduler": {"scheduler": {"mode": "second", "replicas": 2}},
    "extra-crds-no-workloads": {
        "webhook": {
            "workloads": False,
            "extraCustomResources": [
                {"apiGroup": "jobset.x-k8s.io", "apiVersions": ["v1alpha2"], "resources": ["jobsets"]}
            ],
        }
    },
    "nodeport-extender-hard-anti-affinity": {
        "extender": {"service": {"type": "NodePort"}, "leaderElection": {"enabled": False}, "replicas": 1},
        "webhook": {"antiAffinity": "hard", "failurePolicy": "Ignore"},
        "devicePlugin": {"runtimeClassName": "nvidia"},
    },
    "webhook-only": {"extender": {"enabled": False}, "devicePlugin": {"enabled": False}},
    "device-plugin-only": {"webhook": {"enabled": False}, "extender": {"enabled": False}},
}
CRD_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: render.render(values) for name, values in MODES.items()}


def test_helm_lint_passes_strict() -> None:
    result = render.helm("lint", "--strict", str(render.CHART), "--namespace", render.NAMESPACE, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_package_covers_every_supported_kubernetes_version() -> None:
    assert set(schemas.VERSIONS) <= set(schemas.supported_versions())


@pytest.mark.parametrize("mode", list(MODES), ids=list(MODES))
def test_every_rendered_object_passes_strict_schemas_of_1_30_to_1_37(
    rendered: dict[str, list[dict[str, Any]]], mode: str
) -> None:
    objects = rendered[mode]
    assert objects
    problems = []
    for version in schemas.VERSIONS:
        for obj in objects:
            try:
                problems += [f"{version}: {e}" for e in schemas.errors(obj, version)]
            except schemas.NoSchema:
                assert (obj["apiVersion"], obj["kind"]) in CRD_KINDS, f"no schema for {obj['kind']}"
    assert problems == []


def test_a_broken_object_fails_the_schema_check(rendered: dict[str, list[dict[str, Any]]]) -> None:
    deployment = render.find(rendered["defaults"], "Deployment", "-webhook")
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    assert schemas.errors(broken, "1.30")


def test_names_are_unique_per_kind_and_namespace(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for objects in rendered.values():
        keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
        assert len(keys) == len(set(keys))


def test_each_part_can_be_switched_off(rendered: dict[str, list[dict[str, Any]]]) -> None:
    kinds = {o["kind"] for o in rendered["device-plugin-only"]}
    assert "DaemonSet" in kinds
    assert not kinds & {"Deployment", "MutatingWebhookConfiguration", "Job"}
    assert "DaemonSet" not in {o["kind"] for o in rendered["webhook-only"]}


def test_second_scheduler_only_in_mode_b(rendered: dict[str, list[dict[str, Any]]]) -> None:
    names = [o["metadata"]["name"] for o in rendered["defaults"] if o["kind"] == "Deployment"]
    assert not any(n.endswith("-scheduler") for n in names)
    scheduler = render.find(rendered["second-scheduler"], "Deployment", "-scheduler")
    image = scheduler["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("registry.k8s.io/kube-scheduler:v1.")


def test_security_defaults_on_every_pod(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for obj in rendered["defaults"] + rendered["second-scheduler"]:
        spec = _pod_spec(obj)
        if spec is None:
            continue
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, obj["metadata"][
            "name"
        ]
        device_plugin = obj["kind"] == "DaemonSet"
        assert spec["securityContext"]["runAsNonRoot"] is (not device_plugin)
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert "resources" in container


def test_service_account_tokens_only_where_the_api_is_called(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    mounted = {}
    for obj in rendered["second-scheduler"]:
        spec = _pod_spec(obj)
        if spec is not None:
            mounted[obj["metadata"]["name"].removeprefix(f"{render.RELEASE}-gpushare-")] = spec[
                "automountServiceAccountToken"
            ]
    assert mounted == {
        "webhook": False,
        "extender": True,
        "scheduler": True,
        "device-plugin": True,
        "certgen": True,
        "certgen-pre": True,
        "test": True,
    }
    for obj in rendered["defaults"]:
        if obj["kind"] == "ServiceAccount":
            assert obj["automountServiceAccountToken"] is False


def test_bad_values_are_refused_by_the_schema() -> None:
    assert "failurePolicy" in render.render_error({"webhook": {"failurePolicy": "Sometimes"}})
    assert "timeoutSeconds" in render.render_error({"webhook": {"timeoutSeconds": 31}})
    assert "mode" in render.render_error({"certificates": {"mode": "vault"}})
    assert "unknownKey" in render.render_error({"webhook": {"unknownKey": 1}})


def test_provided_mode_without_pems_fails_with_a_clear_message() -> None:
    assert "needs certificates.provided" in render.render_error({"certificates": {"mode": "provided"}})


def test_helm_test_namespace_must_not_be_the_release_namespace() -> None:
    assert "tests.namespace must differ" in render.render_error({"tests": {"namespace": render.NAMESPACE}})


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    if obj["kind"] == "Pod":
        return obj["spec"]  # type: ignore[no-any-return]
    if obj["kind"] in ("Deployment", "DaemonSet", "Job"):
        return obj["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return None


def test_values_schema_describes_every_value() -> None:
    schema = json.loads((render.CHART / "values.schema.json").read_text())
    values = yaml.safe_load((render.CHART / "values.yaml").read_text())
    missing = []

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        if "description" not in node and path:
            missing.append(f"{path} (no description)")
        if isinstance(value, dict) and node.get("properties") is not None:
            assert node.get("additionalProperties") is False, f"{path or 'values'} accepts unknown keys"
            for key, sub in value.items():
                if key not in node["properties"]:
                    missing.append(f"{path}.{key}".lstrip("."))
                else:
                    walk(sub, node["properties"][key], f"{path}.{key}".lstrip("."))

    walk(values, schema, "")
    assert missing == []


def test_the_helm_test_script_compiles() -> None:
    pod = render.find(render.render(), "Pod", "-test")
    script = pod["spec"]["containers"][0]["args"][0]
    compile(script, "helm-test", "exec")
    assert '"nvidia.com/gpu": "0.5"' in script
    assert 'dry_run="All"' in script
