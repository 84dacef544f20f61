"""The device plugin DaemonSet runs only where the node's mode shares GPUs, its MPS flags come from values,
and its ValidatingAdmissionPolicy lets it write exactly the GPU type labels of core/node/gpulabels.py."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.chart import render
from webhook.cli.serve import device_plugin as serve_device_plugin
from webhook.core.node import gpulabels
from webhook.core.placement import modes

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)


def _spec(values: dict[str, Any] | None = None) -> dict[str, Any]:
    daemonset = render.find(render.render(values or {}), "DaemonSet", "-device-plugin")
    return daemonset["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator = expression["key"], expression["operator"]
    if operator == "In":
        return key in labels and labels[key] in expression["values"]
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {operator} not expected here")


def _runs_on(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """kube-scheduler's rule: the terms are ORed, the expressions of one term ANDed; nodeSelector too."""
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return any(
        all(_matches(e, labels) for e in term["matchExpressions"]) for term in required["nodeSelectorTerms"]
    )


@pytest.mark.parametrize(
    ("labels", "runs"),
    [
        ({modes.MODE_LABEL: "share"}, True),
        ({modes.MODE_LABEL: "cgpu"}, True),
        ({modes.MODE_LABEL: "mps"}, True),
        ({"gpushare": "true"}, True),
        ({modes.MODE_LABEL: "default", "gpushare": "true"}, False),
        ({modes.MODE_LABEL: "topology"}, False),
        ({}, False),
    ],
    ids=["share", "cgpu", "mps", "legacy-gpushare-true", "default-wins-over-legacy", "topology", "plain"],
)
def test_the_plugin_runs_only_on_nodes_whose_mode_shares(labels: dict[str, str], runs: bool) -> None:
    assert _runs_on(_spec(), labels) is runs


def test_shared_modes_and_legacy_labels_are_values() -> None:
    spec = _spec({"devicePlugin": {"sharedModes": ["cgpu"], "legacyNodeLabels": {"gpushare": None}}})
    assert _runs_on(spec, {modes.MODE_LABEL: "cgpu"})
    assert not _runs_on(spec, {modes.MODE_LABEL: "share"})
    assert not _runs_on(spec, {"gpushare": "true"})


def test_an_own_node_affinity_replaces_ours_and_other_affinity_is_kept() -> None:
    own: dict[str, Any] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
    }
    anti: dict[str, Any] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    assert _spec({"devicePlugin": {"affinity": own}})["affinity"] == own
    kept = _spec({"devicePlugin": {"affinity": anti}})["affinity"]
    assert set(kept) == {"nodeAffinity", "podAntiAffinity"}


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"sharedModes": ["default"]}, "sharedModes"),
        ({"sharedModes": []}, "sharedModes"),
        ({"mps": {"pipeDir": "nvidia-mps"}}, "pipeDir"),
        ({"mps": {"enable": True}}, "enable"),
    ],
    ids=["whole-card-mode", "no-mode", "relative-pipe-dir", "misspelt-key"],
)
def test_wrong_mode_and_mps_values_are_refused_by_the_schema(values: dict[str, Any], needle: str) -> None:
    assert needle in render.render_error({"devicePlugin": values})


def test_mps_values_become_flags_the_cli_accepts() -> None:
    values = {"devicePlugin": {"mps": {"enabled": True, "pipeDir": "/run/mps", "logDir": "/run/mps-log"}}}
    args = _spec(values)["containers"][0]["args"]
    assert {"--mps", "--mps-pipe-dir=/run/mps", "--mps-log-dir=/run/mps-log"} <= set(args)
    parsed = serve_device_plugin.build_parser().parse_args(args[1:])
    settings = serve_device_plugin.settings_from_args(parsed, {"NODE_NAME": "n"})
    assert (settings.force_mps, settings.mps_pipe_dir, settings.mps_log_dir) == (
        True,
        "/run/mps",
        "/run/mps-log",
    )
    assert "--mps" not in _spec()["containers"][0]["args"]


def test_the_admission_policy_lets_the_plugin_write_exactly_the_gpu_type_labels() -> None:
    policy = render.find(render.render(), "ValidatingAdmissionPolicy", "-device-plugin")
    (variable,) = [v for v in policy["spec"]["variables"] if v["name"] == "nodeLabels"]
    assert tuple(re.findall(r"'([^']+)'", variable["expression"])) == gpulabels.KEYS


def _plugin_args(spec: dict[str, Any]) -> Any:
    (container,) = spec["containers"]
    return serve_device_plugin.build_parser().parse_args(container["args"][1:])


def test_the_kubelets_pod_resources_folder_is_mounted_read_only_and_given_to_the_plugin() -> None:
    spec = _spec()
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["pod-resources"] == {
        "name": "pod-resources",
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }
    assert volumes["pod-resources"]["hostPath"] == {
        "path": "/var/lib/kubelet/pod-resources",
        "type": "Directory",
    }
    assert _plugin_args(spec).pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"


def test_an_empty_pod_resources_folder_mounts_nothing_and_turns_the_api_off() -> None:
    spec = _spec({"devicePlugin": {"podResourcesDir": ""}})
    assert "pod-resources" not in {m["name"] for m in spec["containers"][0]["volumeMounts"]}
    assert "pod-resources" not in {v["name"] for v in spec["volumes"]}
    assert _plugin_args(spec).pod_resources_socket == ""


def test_a_relative_pod_resources_folder_is_refused_by_the_schema() -> None:
    assert "podResourcesDir" in render.render_error({"devicePlugin": {"podResourcesDir": "var/lib"}})
