"""GPU memory per team with ResourceQuota, enforced by the real kube-apiserver and kube-controller-manager for
pods that our webhook admits and our extender places: what is counted, what is refused and in whose
words, how a share split over several GPUs is counted, what a DRA claim counts for, and the spellings
that count nothing (which `gpushare check` warns about)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.cluster.workloads import Workloads, wait
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.devcluster import release
from webhook.kube import rest

Obj = dict[str, Any]
GPU_MEM = resources.GPU_MEMORY
CARDS = resources.NVIDIA_GPU


def _quota(work: Workloads, hard: dict[str, str], name: str = "gpu") -> Obj:
    """ResourceQuota `name` once kube-controller-manager has counted it: before that, the API server refuses
    every pod the quota would count ("status unknown for quota")."""
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name}, "spec": {"hard": hard}}
    work.chart.api.request("POST", rest.path("resourcequotas", namespace=work.namespace), body=body)
    return wait(f"quota {name} counted", lambda: _counted(work, name, hard), 60)


def _counted(work: Workloads, name: str, hard: dict[str, str]) -> Obj | None:
    found: Obj = work.get(name, "resourcequotas")
    return found if found.get("status", {}).get("hard") == hard else None


def _used(work: Workloads, name: str = "gpu") -> dict[str, str]:
    used: dict[str, str] = work.get(name, "resourcequotas").get("status", {}).get("used", {})
    return used


def test_a_gpu_memory_quota_refuses_past_it_with_the_api_servers_message(work: Workloads) -> None:
    _quota(work, {f"requests.{GPU_MEM}": "8", f"requests.{CARDS}": "1"})
    assert "created" in work.apply(work.pod("three", {GPU_MEM: 3}), work.pod("four", {GPU_MEM: 4}))
    refused = work.apply(work.pod("two", {GPU_MEM: 2}))
    assert (
        'pods "two" is forbidden: exceeded quota: gpu, requested: requests.aliyun.com/gpu-mem=2, '
        "used: requests.aliyun.com/gpu-mem=7, limited: requests.aliyun.com/gpu-mem=8"
    ) in refused, refused
    assert "created" in work.apply(work.pod("one", {GPU_MEM: 1}))  # exactly up to the quota
    assert "created" in work.apply(work.pod("card", {CARDS: 1}))
    refused = work.apply(work.pod("card-2", {CARDS: 1}))
    assert "exceeded quota: gpu, requested: requests.nvidia.com/gpu=1" in refused, refused
    for name in ("three", "four", "one", "card"):
        work.running(name)  # each admitted pod is placed and runs: the quota and the extender agree
    wait("the quota's count", lambda: _used(work) == {f"requests.{GPU_MEM}": "8", f"requests.{CARDS}": "1"})


def test_our_webhooks_message_comes_before_the_quotas(work: Workloads) -> None:
    """Admission webhooks run before the ResourceQuota plugin: a pod both refuse gets our reason."""
    _quota(work, {f"requests.{GPU_MEM}": "1", f"requests.{CARDS}": "0"})
    half = work.apply(work.pod("half", {CARDS: "0.5"}))
    assert 'admission webhook "pods.mutate.gpushare.aliyun.com" denied the request' in half, half
    assert "exceeded quota" not in half
    mismatch = work.pod("mismatch", {GPU_MEM: 4})
    mismatch["spec"]["containers"][0]["resources"]["requests"] = {GPU_MEM: 2}
    refused = work.apply(mismatch)
    assert "denied the request" in refused and "exceeded quota" not in refused, refused


def test_a_share_split_over_gpus_counts_its_total_as_the_extender_does(work: Workloads) -> None:
    _quota(work, {f"requests.{GPU_MEM}": "32"})
    pod = work.pod("split", {GPU_MEM: 8})
    pod["metadata"]["labels"] = {resources.GPU_COUNT_LABEL: "2"}
    work.apply(pod)
    placed = ann.decode(work.running("split")["metadata"]["annotations"])
    assert placed is not None and sorted(placed.allocation.per_gpu().values()) == [4, 4]
    wait("the quota's count", lambda: _used(work) == {f"requests.{GPU_MEM}": "8"})


def test_keys_that_count_nothing_admit_every_pod_and_gpushare_check_says_so(work: Workloads) -> None:
    hard = {f"limits.{GPU_MEM}": "1", GPU_MEM: "1", f"limits.{CARDS}": "0"}
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "inert"},
        "spec": {"hard": hard},
    }
    work.chart.api.request("POST", rest.path("resourcequotas", namespace=work.namespace), body=body)
    wait("quota inert counted", lambda: _counted(work, "inert", hard))
    assert "created" in work.apply(work.pod("big", {GPU_MEM: 6}), work.pod("card", {CARDS: 1}))
    work.running("big")
    assert _used(work, "inert") == {}  # stored, never used
    checked = subprocess.run(
        [release.GPUSHARE, "check", "-o", "json", "-"],
        input=json.dumps(body),
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    warnings = json.loads(checked.stdout)["results"][0]["warnings"]
    assert len(warnings) == 3 and all("so this key limits nothing" in w for w in warnings), warnings


def test_dra_claims_count_as_shares_not_as_memory(work: Workloads) -> None:
    """Kubernetes 1.36 counts a claim's devices per DeviceClass, not the capacity it consumes: a quota
    can cap how many shares of our class a namespace holds, not their GiB."""
    devices = f"{resources.DRA_SHARE_CLASS}.deviceclass.resource.k8s.io/devices"
    _quota(work, {devices: "2"})
    sizes = (("small", "1Gi"), ("large", "12Gi"), ("third", "1Gi"))
    claims = [_claim(work.namespace, name, memory) for name, memory in sizes]
    assert "created" in work.apply(*claims[:2])
    refused = work.apply(claims[2])
    assert f"exceeded quota: gpu, requested: {devices}=1, used: {devices}=2, limited: {devices}=2" in refused
    wait("the quota's count", lambda: _used(work) == {devices: "2"})


def _claim(namespace: str, name: str, memory: str) -> Obj:
    request = {"deviceClassName": resources.DRA_SHARE_CLASS, "capacity": {"requests": {"memory": memory}}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


def test_inspect_shows_each_namespaces_memory_beside_its_quota(work: Workloads) -> None:
    _quota(work, {f"requests.{GPU_MEM}": "16"})
    work.apply(work.pod("five", {GPU_MEM: 5}))
    work.running("five")
    wait("the quota's count", lambda: _used(work) == {f"requests.{GPU_MEM}": "5"})
    shown = subprocess.run(
        [release.GPUSHARE, "inspect", "--namespaces"],
        env={"KUBECONFIG": str(work.cluster.kubeconfig), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    row = next(line.split() for line in shown.stdout.splitlines() if line.startswith(work.namespace))
    assert row == [work.namespace, "5", "gpu", f"requests.{GPU_MEM}", "5/16"]
