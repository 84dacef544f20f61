"""Kueue v0.17.0 (built from its Go module, installed with its own Helm chart, running as a pod with its own
webhooks) with our chart on a node that runs containers. docs/quotas.md's Kueue blocks are applied as
written (flavors, two teams' ClusterQueues in a cohort, LocalQueues, a Job); then Jobs are suspended until
admitted, admitted within quota, borrow and are preempted within the cohort as Kueue documents, and once
admitted are placed by our extender through kube-scheduler with 0 over-committed GPUs, read from the API;
whole GPUs are counted as `nvidia.com/gpu` of the share flavor, and a Job past the cohort's stays suspended.
Kueue's own updates of a Job (unsuspending it, its flavor's nodeSelector) pass our validating webhook."""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.workloads import Workloads, node_mode, ready, wait
from tests.e2e import dra, placement
from tests.e2e.test_doc_shell_blocks import blocks
from webhook.core.node import mps
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.devcluster import cluster as cluster_mod
from webhook.devcluster import helm, release
from webhook.devcluster.podrelease import FULLNAME, NAMESPACE, PodRelease
from webhook.gpus.inventory import fake_uuid
from webhook.kube import errors, rest

Obj = dict[str, Any]
GPU_MEM = resources.GPU_MEMORY
CARDS = resources.NVIDIA_GPU
KUEUE = "kueue.x-k8s.io"
TEAMS = ("team-a", "team-b", "team-mps", "team-dra")
CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health: {healthProbeBindAddress: ":8081"}
metrics: {bindAddress: ":8443"}
webhook: {port: 9443}
leaderElection: {leaderElect: true, resourceName: c1f6bfd2.kueue.x-k8s.io}
integrations:
  frameworks: [batch/job]
resources:
  deviceClassMappings:
  - name: gpushare.aliyun.com/shares
    deviceClassNames: [gpushare-memory]
"""
SHARES = "gpushare.aliyun.com/shares"  # Kueue's name for our DRA shares (deviceClassMappings above)


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
            },
            # Kueue counts DRA devices only behind this gate (alpha in v0.17).
            "featureGates": [{"name": "DynamicResourceAllocation", "enabled": True}],
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
                # kubectl keeps its discovery cache under $HOME/.kube: without HOME, in the checkout
                "HOME": str(chart.cluster.workdir),
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


def _job(work: Workloads, team: str, name: str, gib: int = 0, cards: int = 0) -> Obj:
    """A Job of one pod asking `gib` of GPU memory, or `cards` whole GPUs, in `team`'s LocalQueue."""
    limits = {GPU_MEM: gib} if gib else {resources.NVIDIA_GPU: cards}
    spec = {**work.pod(name, limits)["spec"], "restartPolicy": "Never"}
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


def _pending_because(chart: PodRelease, team: str, job: str) -> str | None:
    """Why Kueue reserves no quota for Job `job` (its Workload's QuotaReserved=False message), or None
    until it has said so."""
    found = _condition(_workload(chart, team, job), "QuotaReserved")
    return str(found.get("message", "")) if found and found["status"] == "False" else None


def _usage(chart: PodRelease, team: str, flavor: str, resource: str) -> str | None:
    """ClusterQueue `team`'s total of `resource` in `flavor`, as Kueue last wrote it in its status."""
    status = _get(chart, "clusterqueues", team, group=KUEUE).get("status") or {}
    for used in status.get("flavorsUsage") or []:
        if used["name"] == flavor:
            return next((str(r["total"]) for r in used["resources"] if r["name"] == resource), None)
    return None


def _running(chart: PodRelease, team: str, job: str) -> Obj | None:
    pods = [p for p in _pods(chart, team, job) if p["status"].get("phase") == "Running"]
    return pods[0] if pods else None


def _listed(chart: PodRelease, namespace: str) -> list[Obj]:
    try:
        return chart.api.pods(namespace)
    except errors.NotFoundError:
        return []


def _check_gpus(chart: PodRelease) -> None:
    """Each GPU of the node within its 16 GiB, each pod counted once: from the API's stored pods."""
    pods = [p for team in TEAMS for p in _listed(chart, team) if p["spec"].get("nodeName")]
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

    # Kueue writes a ClusterQueue's usage after it admits, not with the admission: a loaded CI machine read
    # 12 here a second after both pods ran.
    wait("team-a's usage of 20 GiB", lambda: _usage(chart, "team-a", "gpu-share", GPU_MEM) == "20", 60)
    queue = _get(chart, "clusterqueues", "team-a", group=KUEUE)
    share = next(f for f in queue["status"]["flavorsUsage"] if f["name"] == "gpu-share")
    usage = {r["name"]: r for r in share["resources"]}
    assert usage[GPU_MEM]["total"] == "20" and usage[GPU_MEM]["borrowed"] == "4", usage

    # 28 would pass nominal + borrowingLimit (24): suspended, no pod.
    assert "created" in work.apply(_job(work, "team-a", "too-much", 8))
    why = wait("too-much pending for quota", lambda: _pending_because(chart, "team-a", "too-much"), 60)
    assert GPU_MEM in why, why
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


def test_whole_card_jobs_are_nvidia_gpus_of_the_share_flavor_within_the_cohort(
    kueue: PodRelease, work: Workloads
) -> None:
    """Whole GPUs are a resource of the share flavor (docs/quotas.md): team-b's one card is admitted beside
    its 16 GiB of shares and placed by our extender on a GPU no share is on; two more pass what the cohort
    holds (team-b's 1 and team-a's 1 to borrow) and stay suspended."""
    chart = kueue
    try:
        assert "created" in work.apply(_job(work, "team-b", "card", cards=1))
        _until_admitted(chart, "team-b", "card")
        pod = wait("card's pod running", lambda: _running(chart, "team-b", "card"), 180)
        assert pod["spec"]["nodeSelector"]["ack.node.gpu.schedule"] == "share"  # the flavor's label
        # Kueue writes a ClusterQueue's usage after it admits, not with the admission.
        wait("team-b's usage of one GPU", lambda: _usage(chart, "team-b", "gpu-share", CARDS) == "1", 60)
        assert _usage(chart, "team-b", "gpu-share", GPU_MEM) == "16"  # its share Job, unchanged

        card = ann.decode(pod["metadata"]["annotations"])
        assert card is not None, pod["metadata"]["annotations"]
        held = set(card.allocation.per_gpu())
        others = [
            p for t in TEAMS for p in _listed(chart, t) if p["metadata"]["uid"] != pod["metadata"]["uid"]
        ]
        shared = {gpu for (_, gpu) in placement.shares_per_gpu(others)}
        assert len(held) == 1 and not held & shared, (held, shared)
        logged = chart.cluster.kubectl("logs", "-n", "team-b", pod["metadata"]["name"]).stdout
        env = json.loads(next(line for line in logged.splitlines() if line.startswith("{")))["env"]
        assert env[resources.ENV_VISIBLE_DEVICES] == fake_uuid(held.pop()), env

        assert "created" in work.apply(_job(work, "team-b", "cards", cards=2))
        why = wait("cards pending for quota", lambda: _pending_because(chart, "team-b", "cards"), 60)
        assert CARDS in why, why
        assert _get(chart, "jobs", "cards", "team-b")["spec"]["suspend"] is True
        assert not _pods(chart, "team-b", "cards")
        _check_gpus(chart)
    finally:
        # The pending Job first: once the card's quota is free, Kueue could admit it.
        for job in ("cards", "card"):
            chart.cluster.kubectl(
                "delete",
                "job",
                job,
                "-n",
                "team-b",
                "--ignore-not-found",
                "--cascade=foreground",
                "--wait=true",
                "--timeout=120s",
                check=False,
            )
        wait(
            "the card Jobs' pods gone",
            lambda: not _pods(chart, "team-b", "card") + _pods(chart, "team-b", "cards"),
            120,
        )


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


def _team(work: Workloads, team: str, flavor: str, resources_: dict[str, int]) -> None:
    """A ClusterQueue `team` of one flavor, its namespace and a LocalQueue `gpus` there."""
    queue = {
        "apiVersion": f"{KUEUE}/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": team},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": list(resources_),
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [{"name": n, "nominalQuota": q} for n, q in resources_.items()],
                        }
                    ],
                }
            ],
        },
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}}
    local = {
        "apiVersion": f"{KUEUE}/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "gpus", "namespace": team},
        "spec": {"clusterQueue": team},
    }
    out = work.apply(queue, namespace)
    assert "created" in out or "configured" in out, out
    wait(f"{team}'s default ServiceAccount", lambda: _has_sa(work, team), 60)
    out = work.apply(local)
    assert "created" in out, out


def _has_sa(work: Workloads, namespace: str) -> bool:
    try:
        work.chart.api.request("GET", rest.path("serviceaccounts", "default", namespace))
    except errors.NotFoundError:
        return False
    return True


def test_a_job_admitted_to_the_mps_flavor_runs_under_mps_on_an_mps_node(
    kueue: PodRelease, work: Workloads
) -> None:
    chart = kueue
    dirs = (mps.DEFAULT_PIPE_DIRECTORY, mps.DEFAULT_LOG_DIRECTORY)  # the MPS daemon's, on a real node
    assert chart.cluster.net is not None
    chart.cluster.net.run(["mkdir", "-p", *dirs])
    try:
        with node_mode(work, "mps"):
            _team(work, "team-mps", "gpu-mps", {GPU_MEM: 16})
            logs = ("logs", "-n", NAMESPACE, f"daemonset/{FULLNAME}-device-plugin")
            wait("the plugin in mode mps", lambda: "node mode mps" in chart.cluster.kubectl(*logs).stdout, 60)
            assert "created" in work.apply(_job(work, "team-mps", "mps-job", 6))
            _until_admitted(chart, "team-mps", "mps-job")
            pod = wait("mps-job's pod running", lambda: _running(chart, "team-mps", "mps-job"), 180)
            assert pod["spec"]["nodeSelector"]["ack.node.gpu.schedule"] == "mps"  # the flavor's
            name = pod["metadata"]["name"]
            logged = chart.cluster.kubectl("logs", "-n", "team-mps", name).stdout
            env = json.loads(next(line for line in logged.splitlines() if line.startswith("{")))["env"]
            assert env[mps.ENV_MEM_LIMIT] == "0=6144MB", env
            _check_gpus(chart)
    finally:
        chart.cluster.net.run(["rm", "-rf", *dirs])


def _claimed_job(team: str, name: str, image: str) -> list[Obj]:
    """A Job whose pod takes a 3Gi share of our DRA class through a claim template."""
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"{name}-share", "namespace": team},
        "spec": {"spec": dra.claim("", "3Gi")["spec"]},
    }
    container = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "command": [
            "python",
            "-c",
            "import os, time; print(os.environ.get('NVIDIA_VISIBLE_DEVICES'), flush=True); time.sleep(10**9)",
        ],
        "resources": {"claims": [{"name": "gpu"}]},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": team, "labels": {f"{KUEUE}/queue-name": "gpus"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f"{name}-share"}],
                }
            },
        },
    }
    return [template, job]


def test_dra_shares_are_admitted_by_kueue_per_share_on_a_dra_node(kueue: PodRelease, work: Workloads) -> None:
    """Kueue counts a DRA claim's devices of our class (its deviceClassMappings), as ResourceQuota does: a
    team gets a number of shares, and its pods get their GPU through our CDI spec."""
    chart = kueue
    with node_mode(work, "dra"):
        wait("the DRA driver Ready", lambda: ready(chart, "daemonsets", "dra-driver") == (1, 1), 180)
        _team(work, "team-dra", "gpu-dra", {SHARES: 2})
        image = chart.cluster.names["gpushare"]
        for name in ("first", "second", "third"):
            out = work.apply(*_claimed_job("team-dra", name, image))
            assert "created" in out, out
        for name in ("first", "second"):
            _until_admitted(chart, "team-dra", name)
            pod = wait(f"{name}'s pod running", functools.partial(_running, chart, "team-dra", name), 180)
            assert pod["spec"]["nodeSelector"] == {"ack.node.gpu.schedule": "dra"}
            logged = chart.cluster.kubectl("logs", "-n", "team-dra", pod["metadata"]["name"]).stdout
            assert logged.strip().startswith("GPU-"), logged  # the env our CDI spec gave it
        # A third share is past the team's 2.
        why = wait("third pending for quota", lambda: _pending_because(chart, "team-dra", "third"), 60)
        assert SHARES in why, why
        assert not _admitted(chart, "team-dra", "third")
        assert _get(chart, "jobs", "third", "team-dra")["spec"]["suspend"] is True
        chart.cluster.kubectl("delete", "namespace", "team-dra", "--wait=true", "--timeout=120s")
