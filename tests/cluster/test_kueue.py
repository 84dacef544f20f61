"""Kueue v0.17.0 (built from its Go module, installed with its own Helm chart, running as a pod with its own
webhooks) with our chart on a node that runs containers. docs/quotas.md's Kueue blocks are applied as
written (flavors, two teams' ClusterQueues in a cohort, LocalQueues, a Job); then Jobs are suspended until
admitted, admitted within quota, borrow and are preempted within the cohort as Kueue documents, and once
admitted are placed by our extender through kube-scheduler with 0 over-committed GPUs, read from the API.
Kueue's own updates of a Job (unsuspending it, its flavor's nodeSelector) pass our validating webhook."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.workloads import Workloads, wait
from tests.e2e import placement
from tests.e2e.test_doc_shell_blocks import blocks
from webhook.core import resources
from webhook.devcluster import cluster as cluster_mod
from webhook.devcluster import helm, release
from webhook.devcluster.podrelease import PodRelease
from webhook.kube import rest

Obj = dict[str, Any]
GPU_MEM = resources.GPU_MEMORY
KUEUE = "kueue.x-k8s.io"
TEAMS = ("team-a", "team-b")
CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health: {healthProbeBindAddress: ":8081"}
metrics: {bindAddress: ":8443"}
webhook: {port: 9443}
leaderElection: {leaderElect: true, resourceName: c1f6bfd2.kueue.x-k8s.io}
integrations:
  frameworks: [batch/job]
"""


@pytest.fixture(scope="module")
def kueue(chart: PodRelease) -> Iterator[PodRelease]:
    """Kueue installed (and waited for) beside our chart, with docs/quotas.md's Kueue blocks applied;
    everything removed afterwards, so no Job of a later test meets Kueue's webhooks."""
    names = chart.cluster.names
    repository, tag = names["kueue"].rsplit(":", 1)
    values = {
        "controllerManager": {
            "manager": {
                "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
            }
        },
        "managerConfig": {"controllerManagerConfigYaml": CONFIG},
    }
    path = chart.root / "kueue-values.json"
    path.write_text(json.dumps(values))
    install = ["install", "kueue", names["kueue-chart"], "--namespace", "kueue-system", "--create-namespace"]
    chart.helm(*install, "--values", str(path), "--wait", "--timeout=300s")
    try:
        _apply_doc_blocks(chart)
        yield chart
    finally:
        cluster = chart.cluster
        for team in TEAMS:
            cluster.kubectl("delete", "namespace", team, "--wait=true", "--timeout=120s", check=False)
        for plural in ("clusterqueues", "resourceflavors"):
            cluster.kubectl(
                "delete", f"{plural}.{KUEUE}", "--all", "--wait=true", "--timeout=60s", check=False
            )
        chart.helm("uninstall", "kueue", "--namespace", "kueue-system", "--wait", "--timeout=120s")


def _apply_doc_blocks(chart: PodRelease) -> None:
    """docs/quotas.md's blocks meant for a cluster that runs pods, in order, as a reader runs them."""
    ran = 0
    for block in blocks():
        if block.file.name == "quotas.md" and block.cluster_reason is not None:
            env = {
                "KUBECONFIG": str(chart.cluster.kubeconfig),
                "PATH": f"{chart.cluster.kube_bins}:/usr/bin:/bin",
            }
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", block.code],
                cwd=helm.ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, f"{block.where}:\n{block.code}\n{done.stderr}"
            ran += 1
    assert ran >= 3


def _job(work: Workloads, team: str, name: str, gib: int) -> Obj:
    spec = {**work.pod(name, {GPU_MEM: gib})["spec"], "restartPolicy": "Never"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": team, "labels": {f"{KUEUE}/queue-name": "gpus"}},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {"spec": spec}},
    }


def _get(chart: PodRelease, plural: str, name: str, namespace: str = "", group: str = "batch") -> Obj:
    version = "v1beta2" if group == KUEUE else "v1"
    found: Obj = chart.api.request("GET", rest.path(plural, name, namespace, group=group, version=version))
    return found


def _workload(chart: PodRelease, team: str, job: str) -> Obj | None:
    """Kueue's Workload of Job `job` (by its owner reference), or None until Kueue made it."""
    listed = chart.api.request("GET", rest.path("workloads", namespace=team, group=KUEUE, version="v1beta2"))
    for workload in listed["items"]:
        if any(o.get("name") == job for o in workload["metadata"].get("ownerReferences", [])):
            found: Obj = workload
            return found
    return None


def _condition(workload: Obj | None, kind: str) -> Obj | None:
    if workload is None:
        return None
    return next((c for c in workload.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def _until_admitted(chart: PodRelease, team: str, job: str, timeout: float = 120) -> None:
    try:
        wait(f"{job} admitted", lambda: _admitted(chart, team, job), timeout)
    except TimeoutError as err:
        workload = _workload(chart, team, job)
        queues = [_get(chart, "clusterqueues", t, group=KUEUE).get("status") for t in TEAMS]
        raise AssertionError(
            f"{err}\nits Workload: {json.dumps(workload)[:3000]}\nqueues: {json.dumps(queues)[:3000]}"
        ) from None


def _admitted(chart: PodRelease, team: str, job: str) -> bool:
    found = _condition(_workload(chart, team, job), "Admitted")
    return bool(found and found["status"] == "True")


def _pods(chart: PodRelease, team: str, job: str) -> list[Obj]:
    return [p for p in chart.api.pods(team) if p["metadata"].get("labels", {}).get("job-name") == job]


def _running(chart: PodRelease, team: str, job: str) -> Obj | None:
    pods = [p for p in _pods(chart, team, job) if p["status"].get("phase") == "Running"]
    return pods[0] if pods else None


def _check_gpus(chart: PodRelease) -> None:
    """Each GPU of the node within its 16 GiB, each pod counted once: from the API's stored pods."""
    pods = [p for team in (*TEAMS,) for p in chart.api.pods(team) if p["spec"].get("nodeName")]
    placement.check_invariant(pods, {cluster_mod.NODE: 16})


def test_jobs_are_admitted_within_quota_borrow_and_are_reclaimed_as_kueue_documents(
    kueue: PodRelease, work: Workloads
) -> None:
    chart = kueue
    # The docs' Job: suspended by Kueue's webhook at creation, then admitted within team-a's 16 GiB.
    _until_admitted(chart, "team-a", "finetune")
    pod = wait("finetune's pod running", lambda: _running(chart, "team-a", "finetune"), 180)
    # Kueue's flavor nodeSelector (its UPDATE of the Job went through our validating webhook), then our
    # mutating webhook's isolation pool and second scheduler on the pod, and our extender's placement.
    assert pod["spec"]["nodeSelector"] == {"ack.node.gpu.schedule": "share", resources.ISOLATION_KEY: "false"}
    assert pod["spec"]["schedulerName"] == "gpushare-scheduler"
    assert pod["metadata"]["annotations"][resources.ANN_MEM_POD] == "12"
    template = _get(chart, "jobs", "finetune", "team-a")["spec"]["template"]["spec"]
    assert template["nodeSelector"] == {"ack.node.gpu.schedule": "share"}

    # 12 + 8 passes team-a's nominal 16: admitted by borrowing 4 of team-b's unused quota.
    assert "created" in work.apply(_job(work, "team-a", "borrower", 8))
    _until_admitted(chart, "team-a", "borrower")
    wait("borrower's pod running", lambda: _running(chart, "team-a", "borrower"), 180)
    queue = _get(chart, "clusterqueues", "team-a", group=KUEUE)
    share = next(f for f in queue["status"]["flavorsUsage"] if f["name"] == "gpu-share")
    usage = {r["name"]: r for r in share["resources"]}
    assert usage[GPU_MEM]["total"] == "20" and usage[GPU_MEM]["borrowed"] == "4", usage

    # 28 would pass nominal + borrowingLimit (24): suspended, no pod.
    assert "created" in work.apply(_job(work, "team-a", "too-much", 8))
    wait("too-much's Workload", lambda: _workload(chart, "team-a", "too-much"), 60)
    assert _get(chart, "jobs", "too-much", "team-a")["spec"]["suspend"] is True
    assert not _admitted(chart, "team-a", "too-much") and not _pods(chart, "team-a", "too-much")
    _check_gpus(chart)

    # team-b takes back its 16: Kueue preempts the borrower and admits team-b's Job.
    assert "created" in work.apply(_job(work, "team-b", "reclaim", 16))
    _until_admitted(chart, "team-b", "reclaim")
    evicted = _condition(_workload(chart, "team-a", "borrower"), "Evicted")
    assert evicted is not None and evicted["status"] == "True" and evicted["reason"] == "Preempted", evicted
    wait("the borrower suspended again", lambda: _get(chart, "jobs", "borrower", "team-a")["spec"]["suspend"])
    wait("reclaim's pod running", lambda: _running(chart, "team-b", "reclaim"), 180)
    assert not _admitted(chart, "team-a", "too-much")  # team-b lends nothing now
    _check_gpus(chart)


def test_the_kueue_objects_of_the_docs_give_gpushare_check_no_warning(
    kueue: PodRelease, tmp_path: Path
) -> None:
    listed = kueue.cluster.kubectl("get", f"clusterqueues.{KUEUE}", "-o", "json").stdout
    path = tmp_path / "queues.json"
    path.write_text(listed)
    checked = subprocess.run(
        [release.GPUSHARE, "check", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1].endswith(" 0 warnings"), checked.stdout
