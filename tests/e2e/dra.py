"""What the DRA end-to-end tests share: the chart's DRA part installed as a release of its own (the bed's
release keeps DRA off), our driver run on this host the way its DaemonSet runs it, claims and pods as a
user writes them, and the API's own account of what kube-scheduler allocated."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.e2e.bed import Bed
from webhook.core.node import draslice
from webhook.core.wire import quantity
from webhook.devcluster import helm, objects
from webhook.devcluster.controlplane import free_port
from webhook.devcluster.process import Process, child_env, http_status
from webhook.devcluster.release import GPUSHARE, SCHEDULER_NAME, _override
from webhook.kube import errors, rest

Obj = dict[str, Any]
RELEASE = "gsdra"
NAMESPACE = "gpu-dra"
DRIVER_SA = f"{RELEASE}-gpushare-dra-driver"
DRIVER = "gpushare.aliyun.com"
SHARE_CLASS = "gpushare-memory"
GPU_CLASS = "gpushare-gpu"
GROUP = "resource.k8s.io"
FINALIZER = "resource.kubernetes.io/delete-protection"


def install(bed: Bed) -> None:
    """The DRA part alone (classes, DaemonSet, RBAC, admission policy), beside the bed's release."""
    bed.helm(
        "install",
        RELEASE,
        str(helm.CHART),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        *("--set", "dra.enabled=true", "--set", "webhook.enabled=false", "--set", "extender.enabled=false"),
        *("--set", "devicePlugin.enabled=false"),
    )


def uninstall(bed: Bed) -> None:
    bed.helm("uninstall", RELEASE, "--namespace", NAMESPACE, check=False)


def driver_pod(bed: Bed, node: str) -> Obj:
    """The DaemonSet's pod on `node`, as its controller would make it: the driver's token is bound to it."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"dra-driver-{node}"},
        "spec": {
            "nodeName": node,
            "serviceAccountName": DRIVER_SA,
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "dra-driver", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    return objects.create_or_get(bed.api, rest.path("pods", namespace=NAMESPACE), body)


def driver_kubeconfig(bed: Bed, node: str) -> Path:
    token = bed.token(DRIVER_SA, namespace=NAMESPACE, bound_pod=driver_pod(bed, node))
    path = bed.root / "kubeconfigs" / f"dra-driver-{node}-{free_port()}.kubeconfig"
    return bed.cp.write_kubeconfig(path, {"token": token})


def start_driver(
    bed: Bed,
    node: str,
    fake_gpus: str,
    folders: Path,
    *,
    registry: Path | None = None,
    registered: bool = False,
    extra: Sequence[str] = (),
) -> Process:
    """`gpushare dra-driver` with the DaemonSet's flags; its folders under `folders` (the registry one may be
    a kubelet's), its token bound to a pod on `node`. `registered`: wait until its /healthz says the kubelet
    registered it and its slice is published, as the DaemonSet's readiness probe does."""
    port = free_port()
    args = bed.container_args("daemonsets", DRIVER_SA, NAMESPACE)
    args = _override(
        args,
        {
            "--registry-dir": str(registry or folders / "registry"),
            "--plugins-dir": str(folders / "plugins"),
            "--cdi-dir": str(folders / "cdi"),
            "--health-port": str(port),
        },
    )
    argv = [GPUSHARE, *args, "--fake-gpus", fake_gpus, "--kubeconfig", str(driver_kubeconfig(bed, node))]
    argv += ["--log-format", "text", "--resync-period", "5", *extra]
    log = bed.cp.logs / f"dra-driver-{node}.log"
    process = Process(f"dra-driver-{node}", argv, log, env=child_env({"NODE_NAME": node}))
    bed.processes.append(process)
    process.start()
    if registered:
        url = f"http://127.0.0.1:{port}/healthz"
        process.wait_until(lambda: http_status(url, None) == 200, 60, "registered with the kubelet")
    return process


def claim(name: str, memory: str | None, device_class: str = SHARE_CLASS) -> Obj:
    """A ResourceClaim for one device of `device_class`, asking `memory` of it (None: no capacity asked)."""
    exactly: Obj = {"deviceClassName": device_class}
    if memory is not None:
        exactly["capacity"] = {"requests": {"memory": memory}}
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def pod(name: str, claim_name: str, group: str) -> Obj:
    """A pod whose one container uses the claim; scheduled by the bed's real kube-scheduler."""
    body = _base_pod(name)
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    body["spec"]["schedulerName"] = SCHEDULER_NAME
    body["spec"]["nodeSelector"] = {"e2e-group": group}
    body["spec"]["tolerations"] = [
        {"key": "e2e-group", "operator": "Equal", "value": group, "effect": "NoSchedule"}
    ]
    return body


def _base_pod(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def create(bed: Bed, namespace: str, *bodies: Obj) -> None:
    for body in bodies:
        plural = "resourceclaims" if body["kind"] == "ResourceClaim" else "pods"
        group = GROUP if plural == "resourceclaims" else ""
        bed.request("POST", rest.path(plural, namespace=namespace, group=group), body=body)


def claims(bed: Bed, namespace: str = "") -> list[Obj]:
    return list(rest.list_all(bed.api, rest.path("resourceclaims", namespace=namespace, group=GROUP)))


def results(found: Obj) -> list[Obj]:
    """Our driver's allocation results of one claim ([] while it is not allocated)."""
    allocation = (found.get("status") or {}).get("allocation") or {}
    return [r for r in (allocation.get("devices") or {}).get("results") or [] if r.get("driver") == DRIVER]


def forget_slices(bed: Bed, nodes: Sequence[str]) -> None:
    """Delete our driver's slices of `nodes` once their drivers are gone for good (the kubelet would, 30 s
    after its driver left; the nodes without a kubelet have nobody to)."""
    for node in nodes:
        with contextlib.suppress(errors.NotFoundError):
            bed.request("DELETE", rest.path("resourceslices", draslice.slice_name(node, DRIVER), group=GROUP))


def release(bed: Bed, namespace: str) -> None:
    """Delete the namespace's pods, then its claims: without kube-controller-manager nobody removes the
    scheduler's delete-protection finalizer or the pods from reservedFor, so the test does it."""
    for found in bed.pods(namespace):
        name = found["metadata"]["name"]
        bed.request("DELETE", rest.path("pods", name, namespace), query={"gracePeriodSeconds": 0})
    bed.wait("the pods gone", lambda: not bed.pods(namespace), timeout=60)
    for found in claims(bed, namespace):
        name = found["metadata"]["name"]
        path = rest.path("resourceclaims", name, namespace, group=GROUP)
        try:
            bed.request("DELETE", path)
            bed.request("PATCH", path, body={"metadata": {"finalizers": None}}, content_type=rest.MERGE_PATCH)
        except errors.NotFoundError:
            pass
    bed.wait("the claims gone", lambda: not claims(bed, namespace), timeout=30)


def capacities(bed: Bed, nodes: Sequence[str]) -> dict[tuple[str, str], int]:
    """(pool, device) -> the memory capacity our driver publishes for it on `nodes`, in bytes."""
    out = {}
    for found in rest.list_all(bed.api, rest.path("resourceslices", group=GROUP)):
        spec = found["spec"]
        if spec.get("driver") != DRIVER or spec.get("nodeName") not in nodes:
            continue
        for device in spec.get("devices") or []:
            out[(spec["pool"]["name"], device["name"])] = _bytes(device["capacity"]["memory"]["value"])
    return out


def consumed(claims_: Sequence[Obj]) -> dict[tuple[str, str], int]:
    """(pool, device) -> the memory the claims' allocations consume there, each share (shareID) once."""
    seen: set[str] = set()
    out: dict[tuple[str, str], int] = {}
    for found in claims_:
        for result in results(found):
            share = str(result.get("shareID") or f"{found['metadata']['uid']}/{result['request']}")
            assert share not in seen, f"share {share} appears twice"
            seen.add(share)
            key = (result["pool"], result["device"])
            memory = (result.get("consumedCapacity") or {}).get("memory")
            assert memory is not None, f"claim {found['metadata']['name']}: no consumedCapacity"
            out[key] = out.get(key, 0) + _bytes(memory)
    return out


def _bytes(text: str) -> int:
    return quantity.parse(text).to_int()


def cdi_env(cdi_dir: Path, claim_uid: str) -> dict[str, dict[str, str]]:
    """{CDI device name: env} of the spec our driver wrote for a claim."""
    doc = json.loads((cdi_dir / f"{DRIVER}-gpu_{claim_uid}.json").read_text())
    return {d["name"]: dict(e.split("=", 1) for e in d["containerEdits"]["env"]) for d in doc["devices"]}
