"""`gpushare check` and `gpushare inspect` against the real API server: check's verdicts are the ones
the API server gives with our webhook, inspect's numbers are the stored pods' placements."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import objects, placement
from tests.e2e.bed import GPUSHARE, Bed
from webhook.kube import errors, rest

MANIFESTS = Path(__file__).resolve().parents[1] / "data" / "manifests"
# Kinds the API server serves without CRDs, with where their objects are created.
BUILT_IN = {
    "Pod": ("pods", ""),
    "Deployment": ("deployments", "apps"),
    "ReplicaSet": ("replicasets", "apps"),
    "StatefulSet": ("statefulsets", "apps"),
    "DaemonSet": ("daemonsets", "apps"),
    "Job": ("jobs", "batch"),
    "CronJob": ("cronjobs", "batch"),
    "ReplicationController": ("replicationcontrollers", ""),
    "PodTemplate": ("podtemplates", ""),
}


def _built_in_manifests() -> list[Path]:
    out = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if docs and all(d.get("kind") in BUILT_IN for d in docs):
            out.append(path)
    return out


@pytest.mark.parametrize("path", _built_in_manifests(), ids=lambda p: p.stem)
def test_check_and_the_api_server_agree(bed: Bed, path: Path) -> None:
    ns = bed.namespace("e2e-check")
    config = bed.root / "webhook-config.yaml"  # the chart's webhook config, as the webhook runs it
    run = subprocess.run(
        [GPUSHARE, "check", "-o", "json", "--config", str(config), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # check lists the objects it has something to say about; the others are allowed.
    results = {(r["kind"], r["name"]): r for r in json.loads(run.stdout)["results"]}
    for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
        result = results.get((doc["kind"], doc["metadata"]["name"]), {"allowed": True, "violations": []})
        plural, group = BUILT_IN[doc["kind"]]
        doc["metadata"]["namespace"] = ns
        try:
            bed.request(
                "POST", rest.path(plural, namespace=ns, group=group), body=doc, query={"dryRun": "All"}
            )
            refused = ""
        except errors.ApiError as exc:
            refused = exc.message
        assert bool(refused) == (not result["allowed"]), (result, refused)
        if "denied the request" in refused:
            # Each violation check reports names the field the webhook named (values may differ in form:
            # the API server hands the webhook canonical quantities, e.g. "0.5" as "500m").
            for violation in result["violations"]:
                assert violation["path"] in refused, (violation, refused)


def test_inspect_shows_what_the_stored_pods_hold(bed: Bed) -> None:
    ns = bed.namespace("e2e-inspect")
    names = [f"inspect-node-{i}" for i in range(2)]
    for name in names:
        bed.node(name, 2, 16, labels={"cgpu.disable.isolation": "false"}, group="inspect")
    for i, gib in enumerate((9, 9, 5, 3)):
        body = objects.gpu_pod(f"i{i}", gib)
        objects.in_group(body, "inspect")
        bed.request("POST", rest.path("pods", namespace=ns), body=body)
    pods = bed.wait(
        "all bound", lambda: all(p["spec"].get("nodeName") for p in bed.pods(ns)) and bed.pods(ns)
    )
    assert len(pods) == 4
    # Other tests' pods without a node selector may land here too: count every stored pod.
    everyone = list(rest.list_all(bed.api, rest.path("pods")))
    expected = {k: v for k, v in placement.per_gpu(everyone).items() if k[0] in names}
    run = subprocess.run(
        [GPUSHARE, "inspect", "-o", "json", "--kubeconfig", str(bed.cp.admin_kubeconfig), *names],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    shown: dict[str, Any] = json.loads(run.stdout)
    seen = {(n["name"], g["index"]): g["allocated"] for n in shown["nodes"] for g in n["gpus"]}
    assert {k: v for k, v in seen.items() if v} == expected
    allocated = sum(expected.values())
    assert shown["total"] == 64 and shown["allocated"] == allocated >= 26
    text = subprocess.run(
        [GPUSHARE, "inspect", "--kubeconfig", str(bed.cp.admin_kubeconfig), *names],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "inspect-node-0" in text and f"{allocated}/64" in text.replace(" ", "")


def test_inspect_tells_a_missing_node_from_a_wrong_api_address(bed: Bed, tmp_path: Path) -> None:
    def inspect(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
        argv = [GPUSHARE, "inspect", "--kubeconfig", str(kubeconfig), "no-such-node"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    missing = inspect(bed.cp.admin_kubeconfig)
    assert (missing.returncode, missing.stderr) == (1, 'gpushare inspect: node "no-such-node" not found\n')
    # The same API server under a path it does not serve: its own plain-text 404, no NotFound Status.
    config = yaml.safe_load(bed.cp.admin_kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    config["clusters"][0]["cluster"]["server"] = server + "/not-the-api"
    wrong = tmp_path / "kubeconfig"
    wrong.write_text(yaml.safe_dump(config))
    answer = inspect(wrong)
    assert answer.returncode == 1
    assert answer.stderr == (
        f'gpushare inspect: {server}/not-the-api answered 404 for node "no-such-node" without the API '
        "server's NotFound status: is that the API server's address?\n"
    )
