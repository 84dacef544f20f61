"""Values that would install something broken are refused with the reason, or rendered safely.

Each case was found against the chart: the API server refusing an object (a CronJob name over 52
characters, a label key or resource name it cannot take), or objects it accepts that cannot work (GPU
pods sent to a scheduler that is not installed, two binding extenders, a PodDisruptionBudget no eviction
can satisfy).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import render

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)


def _kinds(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_second_scheduler_mode_without_the_extender_is_refused() -> None:
    # The webhook would set schedulerName: gpushare-scheduler on every GPU pod, and no such scheduler runs.
    error = render.render_error({"scheduler": {"mode": "second"}, "extender": {"enabled": False}})
    assert "scheduler.mode=second" in error
    assert "extender.enabled=true" in error


def test_several_extender_replicas_need_leader_election() -> None:
    error = render.render_error({"extender": {"replicas": 2, "leaderElection": {"enabled": False}}})
    assert "extender.leaderElection.enabled=true" in error
    objects = render.render({"extender": {"replicas": 1, "leaderElection": {"enabled": False}}})
    assert f"{render.RELEASE}-gpushare-extender" in _kinds(objects, "Deployment")


@pytest.mark.parametrize("part", ["webhook", "extender"])
def test_one_replica_gets_no_disruption_budget_that_would_block_drains(part: str) -> None:
    values: dict[str, Any] = {part: {"replicas": 1}}
    if part == "extender":
        values[part]["leaderElection"] = {"enabled": False}
    pdbs = _kinds(render.render(values), "PodDisruptionBudget")
    assert f"{render.RELEASE}-gpushare-{part}" not in pdbs
    assert len(pdbs) == 1  # the other part keeps its budget
    pdbs = _kinds(render.render({part: {"replicas": 3}}), "PodDisruptionBudget")
    assert pdbs[f"{render.RELEASE}-gpushare-{part}"]["spec"]["minAvailable"] == 1


@pytest.mark.parametrize("min_available", [2, 3, "100%"])
@pytest.mark.parametrize("part", ["webhook", "extender"])
def test_a_budget_at_the_replica_count_is_refused(part: str, min_available: object) -> None:
    error = render.render_error(
        {part: {"replicas": 2, "podDisruptionBudget": {"minAvailable": min_available}}}
    )
    assert f"{part}.podDisruptionBudget.minAvailable" in error
    assert "below the replica count" in error


def test_a_percentage_below_all_replicas_is_kept() -> None:
    pdbs = _kinds(
        render.render({"webhook": {"podDisruptionBudget": {"minAvailable": "50%"}}}), "PodDisruptionBudget"
    )
    assert pdbs[f"{render.RELEASE}-gpushare-webhook"]["spec"]["minAvailable"] == "50%"


@pytest.mark.parametrize(
    "values",
    [
        {"fullnameOverride": "a" * 40},
        {"nameOverride": "gpu-sharing-for-the-production-cluster"},
    ],
)
def test_the_renewal_cronjob_name_fits_the_api_servers_limit(values: dict[str, Any]) -> None:
    # kube-apiserver 1.36.3: `CronJob.batch "<40 chars>-certgen-renew" is invalid: metadata.name: ... must
    # be no more than 52 characters`, which failed `helm install` for a long release name.
    (name,) = _kinds(render.render(values), "CronJob")
    assert len(name) <= 52
    assert name.endswith("-certgen-ren") or name.endswith("-certgen-renew")


@pytest.mark.parametrize(
    ("values", "field"),
    [
        # The API server refuses the webhook configurations' namespaceSelector.
        ({"webhook": {"optOutLabel": "skip me"}}, "/webhook/optOutLabel"),
        # The API server refuses the DaemonSet's node affinity.
        (
            {"devicePlugin": {"legacyNodeLabels": {"gpushare": "yes please"}}},
            "/devicePlugin/legacyNodeLabels",
        ),
        ({"devicePlugin": {"legacyNodeLabels": {"bad key!": "true"}}}, "invalid propertyName 'bad key!'"),
        # A quote breaks the CEL of matchConditions and of the device plugin's admission policy.
        ({"gpuResources": {"wholeDevice": ["it's"]}}, "/gpuResources/wholeDevice/0"),
        ({"gpuResources": {"memory": "gpu-mem"}}, "/gpuResources/memory"),
        ({"gpuResources": {"count": "a.com/x'"}}, "/gpuResources/count"),
        ({"gpuResources": {"wholeDevicePrefixes": ["mig-'"]}}, "/gpuResources/wholeDevicePrefixes/0"),
    ],
)
def test_names_the_api_server_cannot_take_are_refused_by_the_schema(
    tmp_path: Path, values: dict[str, Any], field: str
) -> None:
    result = render.helm(
        "template", "gs", str(render.CHART), "-f", _values_file(tmp_path, values), check=False
    )
    assert result.returncode != 0
    assert field in result.stderr


def test_valid_names_still_render(tmp_path: Path) -> None:
    values = {
        "webhook": {"optOutLabel": "example.com/skip-gpu"},
        "devicePlugin": {"legacyNodeLabels": {"example.com/gpu-pool": "shared_1"}},
        # A vendor-wide prefix ("amd.com/") is one the webhook accepts too.
        "gpuResources": {
            "wholeDevice": ["example.com/gpu"],
            "wholeDevicePrefixes": ["example.com/slice-", "amd.com/"],
        },
    }
    objects = render.render(None, "-f", _values_file(tmp_path, values))
    terms = render.find(objects, "DaemonSet", "-device-plugin")["spec"]["template"]["spec"]["affinity"]
    assert "example.com/gpu-pool" in json.dumps(terms)


def _values_file(tmp_path: Path, values: dict[str, Any]) -> str:
    # A file, not --set: label keys hold dots and slashes.
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    return str(path)


def test_the_device_plugin_is_ready_only_when_its_health_endpoint_says_so() -> None:
    # Without a readiness probe a DaemonSet rolling update counts a new pod available at once and moves on
    # to the next node even when the new version never registers with the kubelet.
    ds = render.find(render.render(), "DaemonSet", "-device-plugin")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    probe = container["readinessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"
    port = next(p for p in container["ports"] if p["name"] == probe["port"])
    assert f"--health-port={port['containerPort']}" in container["args"]


@pytest.mark.parametrize(("replicas", "elects", "strategy"), [(1, False, "Recreate"), (2, True, None)])
def test_the_second_scheduler_never_runs_twice_without_leader_election(
    replicas: int, elects: bool, strategy: str | None
) -> None:
    objects = render.render({"scheduler": {"mode": "second", "replicas": replicas}})
    config = yaml.safe_load(render.find(objects, "ConfigMap", "-scheduler")["data"]["config.yaml"])
    assert config["leaderElection"]["leaderElect"] is elects
    deployment = render.find(objects, "Deployment", "-scheduler")
    assert deployment["spec"].get("strategy", {}).get("type") == strategy


@pytest.mark.parametrize(("elects", "strategy"), [(False, "Recreate"), (True, None)])
def test_an_extender_without_leader_election_is_never_rolled_side_by_side(
    elects: bool, strategy: str | None
) -> None:
    values = {"extender": {"replicas": 1, "leaderElection": {"enabled": elects}}}
    deployment = render.find(render.render(values), "Deployment", "-extender")
    assert deployment["spec"].get("strategy", {}).get("type") == strategy


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ({"webhook": {"extraConfig": {"isolation": {"annotationKey": "a'b"}}}}, "a'b"),
        ({"webhook": {"extraConfig": {"resources": {"memory": 5}}}}, "5"),
        ({"webhook": {"extraConfig": {"resources": {"wholeDevice": ['x"y']}}}}, 'x"y'),
    ],
    ids=["quote-in-annotation-key", "number-as-resource", "double-quote-in-resource"],
)
def test_names_that_would_break_the_cel_conditions_fail_clearly(
    tmp_path: Path, values: dict[str, Any], shown: str
) -> None:
    # extraConfig bypasses the schema; a quote would make the API server refuse the configurations.
    result = render.helm(
        "template", render.RELEASE, str(render.CHART), "-f", _values_file(tmp_path, values), check=False
    )
    assert result.returncode != 0
    assert f"{shown} is not a resource, label or annotation name" in result.stderr
