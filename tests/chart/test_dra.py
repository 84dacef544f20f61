"""The DRA part of the chart: off by default; when on, its DaemonSet runs only on nodes in a DRA mode (never
where the device plugin runs), with flags the CLI accepts; two DeviceClasses (shares, whole GPUs serving
nvidia.com/gpu); exact RBAC and an admission policy; refused below Kubernetes 1.36. The objects pass the
API's strict schemas of 1.34 to 1.37 (what the API server does with them: tests/e2e/test_dra_*.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import render, schemas
from tests.chart.test_deviceplugin_modes import _runs_on
from webhook.cli.serve import dra_driver as serve_dra_driver
from webhook.core.placement import modes

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)
ON = {"dra": {"enabled": True}}
KUBE = ("--kube-version", "1.36.3")


def _objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    merged = {**ON, **(values or {})}
    merged["dra"] = {**ON["dra"], **(values or {}).get("dra", {})}
    return render.render(merged, *KUBE)


def _spec(objects: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    return render.find(objects, "DaemonSet", suffix)["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_nothing_of_dra_is_rendered_by_default():
    objects = render.render({}, *KUBE)
    assert [o for o in objects if "dra" in o["metadata"]["name"] or o["kind"] == "DeviceClass"] == []


@pytest.mark.parametrize(
    ("labels", "dra", "plugin"),
    [
        ({modes.MODE_LABEL: "dra"}, True, False),
        ({modes.MODE_LABEL: "dra-mps"}, True, False),
        ({modes.MODE_LABEL: "share"}, False, True),
        ({modes.MODE_LABEL: "mps"}, False, True),
        ({"gpushare": "true"}, False, True),
        ({modes.MODE_LABEL: "dra", "gpushare": "true"}, True, False),
        ({modes.MODE_LABEL: "default"}, False, False),
    ],
    ids=["dra", "dra-mps", "share", "mps", "legacy", "dra-beats-legacy", "default"],
)
def test_the_driver_and_the_device_plugin_never_run_on_one_node(labels, dra, plugin):
    objects = _objects()
    assert _runs_on(_spec(objects, "-dra-driver"), labels) is dra
    assert _runs_on(_spec(objects, "-device-plugin"), labels) is plugin


def test_the_driver_flags_are_ones_the_cli_accepts():
    values = {"gpuMemory": {"unit": "MiB"}, "dra": {"mibStep": 64, "mps": {"enabled": True}}}
    container = _spec(_objects(values), "-dra-driver")["containers"][0]
    parser = serve_dra_driver.build_parser()
    assert container["args"][0] == "dra-driver"
    settings = serve_dra_driver.settings_from_args(
        parser.parse_args(container["args"][1:]), {"NODE_NAME": "n"}
    )
    assert (settings.granularity().label, settings.force_mps) == ("64MiB", True)
    assert (
        str(settings.registration_socket) == "/var/lib/kubelet/plugins_registry/gpushare.aliyun.com-reg.sock"
    )
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"} <= mounts
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container[
        "env"
    ]


def test_two_device_classes_select_the_drivers_devices_and_the_whole_gpu_one_serves_nvidia_gpu():
    objects = _objects({"dra": {"driverName": "gpu.example.com"}})
    share = render.find(objects, "DeviceClass", "gpushare-memory")
    whole = render.find(objects, "DeviceClass", "gpushare-gpu")
    expression = "device.driver == 'gpu.example.com'"
    assert share["spec"] == {"selectors": [{"cel": {"expression": expression}}]}
    assert whole["spec"] == {
        "selectors": [{"cel": {"expression": expression}}],
        "extendedResourceName": "nvidia.com/gpu",
    }
    off = _objects({"dra": {"deviceClasses": {"wholeGpuExtendedResource": ""}}})
    assert "extendedResourceName" not in render.find(off, "DeviceClass", "gpushare-gpu")["spec"]


def test_rbac_is_exactly_what_the_driver_calls():
    role = render.find(_objects(), "ClusterRole", "-dra-driver")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"],
        },
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
    ]


def test_the_admission_policy_is_rendered_unless_turned_off():
    kinds = {o["kind"] for o in _objects() if o["metadata"]["name"].endswith("-dra-driver")}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    off = _objects({"dra": {"restrictToOwnNode": False}})
    assert not [o for o in off if o["kind"] == "ValidatingAdmissionPolicy" and "dra" in o["metadata"]["name"]]


@pytest.mark.parametrize("version", ["1.34", "1.35", "1.36", "1.37"])
def test_the_dra_objects_pass_the_strict_schemas(version):
    found = [o for o in _objects() if "dra" in o["metadata"]["name"] or o["kind"] == "DeviceClass"]
    assert len(found) == 8
    assert [e for o in found for e in schemas.errors(o, version)] == []


@pytest.mark.parametrize("version", ["1.30.0", "1.33.9", "1.34.0", "1.35.4"])
def test_kubernetes_before_1_36_is_refused_naming_the_version_and_the_gates(version):
    result = render.helm(
        "template",
        "gs",
        str(render.CHART),
        "--kube-version",
        version,
        "--set",
        "dra.enabled=true",
        check=False,
    )
    assert result.returncode != 0
    assert f"dra.enabled needs Kubernetes 1.36 or newer, not v{version}" in result.stderr
    assert "DRAConsumableCapacity" in result.stderr and "DRAExtendedResource" in result.stderr


@pytest.mark.parametrize("version", ["1.36.0", "1.37.2"])
def test_kubernetes_1_36_and_newer_render_the_dra_part(version):
    objects = render.render({"dra": {"enabled": True}}, "--kube-version", version)
    assert {"DeviceClass", "DaemonSet"} <= {o["kind"] for o in objects}


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"dra": {"driverName": "GPU_share"}}, "driverName"),
        ({"dra": {"modes": ["share"]}}, "modes"),
        ({"dra": {"cdiDir": "cdi"}}, "cdiDir"),
        ({"dra": {"deviceClasses": {"share": "Shares!"}}}, "share"),
        ({"dra": {"mibStep": 0}}, "mibStep"),
    ],
    ids=["driver-name", "device-plugin-mode", "relative-cdi", "class-name", "zero-step"],
)
def test_values_the_driver_cannot_take_are_refused_by_the_schema(values, needle):
    assert needle in render.render_error({**values, "dra": {**values["dra"], "enabled": True}})
