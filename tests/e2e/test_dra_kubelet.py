"""The DRA driver meets the real kubelet and the real kube-scheduler: the kubelet's plugin watcher finds our
registration socket, kube-scheduler allocates GPU memory from our ResourceSlice (consumable capacity),
the kubelet calls NodePrepareResources before it starts a pod's containers and NodeUnprepareResources
after it deleted them. The fake CRI keeps no CDI env, so the CDI spec we wrote is what is checked.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import dra
from tests.e2e.bed import Bed
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.devcluster import kubelet as kubeletmod
from webhook.devcluster.process import Process
from webhook.gpus import inventory
from webhook.kube import rest

NODE = "dra-node-0"
GROUP = "dra-kubelet"
GIB = 1 << 30


@pytest.fixture(scope="module")
def release(bed: Bed) -> Iterator[None]:
    dra.install(bed)
    try:
        yield
    finally:
        dra.uninstall(bed)


@pytest.fixture(scope="module")
def kubelet(
    bed: Bed, release: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[kubeletmod.Kubelet]:
    reason = kubeletmod.private_available(bed.cp.bins)
    if reason is not None:
        pytest.skip(reason)  # a failure under CI (tests/e2e/conftest.py)
    workdir = tmp_path_factory.mktemp("kubelet")
    real = kubeletmod.Kubelet(
        bed.cp.bins,
        bed.cp,
        workdir,
        node=NODE,
        labels={"e2e-group": GROUP, modes.MODE_LABEL: "dra"},
        taints=(f"e2e-group={GROUP}:NoSchedule",),
        # A device-plugin folder of its own: it runs beside the device plugin's kubelet tests.
        plugin_dir=workdir / "device-plugins",
    ).start()
    try:
        yield real
    finally:
        real.stop()
        dra.forget_slices(bed, [NODE])


@pytest.fixture
def folders() -> Iterator[Path]:
    """The driver's plugin and CDI folders, short enough for unix socket paths."""
    root = Path(tempfile.mkdtemp(prefix="gpushare-dra-", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _start(bed: Bed, kubelet: kubeletmod.Kubelet, folders: Path) -> Process:
    registry = kubelet.root_dir / "plugins_registry"
    health = ("--health-file", str(folders / "unhealthy"))
    process = dra.start_driver(
        bed, NODE, "0:16,1:16", folders, registry=registry, registered=True, extra=health
    )
    assert len(dra.capacities(bed, [NODE])) == 2  # the slice with both GPUs
    return process


@pytest.fixture
def driver(bed: Bed, kubelet: kubeletmod.Kubelet, folders: Path) -> Iterator[Process]:
    process = _start(bed, kubelet, folders)
    try:
        yield process
    finally:
        process.stop()


def _running(bed: Bed, namespace: str, count: int, timeout: float = 90) -> list[Any]:
    def check() -> list[Any] | None:
        pods = bed.pods(namespace)
        done = len(pods) == count and all(p.get("status", {}).get("phase") == "Running" for p in pods)
        return pods if done else None

    pods: list[Any] = bed.wait(f"{count} pods Running on the real kubelet", check, timeout=timeout)
    return pods


def _claims(bed: Bed, namespace: str) -> dict[str, Any]:
    return {c["metadata"]["name"]: c for c in dra.claims(bed, namespace)}


def _spec_files(folders: Path) -> set[str]:
    cdi = folders / "cdi"
    return {p.name for p in cdi.glob(f"{dra.DRIVER}-gpu_*.json")} if cdi.exists() else set()


def test_shares_of_3_and_5_gib_share_a_gpu_12_gib_takes_the_other_and_the_kubelet_prepares_them(
    bed: Bed, kubelet: kubeletmod.Kubelet, driver: Process, folders: Path
) -> None:
    ns = bed.namespace("e2e-dra-kubelet")
    sizes = {"small": "3Gi", "medium": "5Gi", "large": "12Gi"}
    # The 3 GiB one as most users write it: a template, whose claim kube-controller-manager makes per pod.
    template = {
        "apiVersion": f"{dra.GROUP}/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "small"},
        "spec": {"spec": dra.claim("small", "3Gi")["spec"]},
    }
    bed.request("POST", rest.path("resourceclaimtemplates", namespace=ns, group=dra.GROUP), body=template)
    small = dra.pod("small", "small", GROUP)
    small["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "small"}]
    dra.create(bed, ns, small)
    for name in ("medium", "large"):
        dra.create(bed, ns, dra.claim(name, sizes[name]), dra.pod(name, name, GROUP))
    try:
        pods = {p["metadata"]["name"]: p for p in _running(bed, ns, 3)}
        made = pods["small"]["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        by_name = _claims(bed, ns)
        claims = {"small": by_name[made], "medium": by_name["medium"], "large": by_name["large"]}
        device = {name: dra.results(claims[name])[0]["device"] for name in sizes}
        assert device["small"] == device["medium"] != device["large"]
        assert {n: dra.results(c)[0]["consumedCapacity"]["memory"] for n, c in claims.items()} == sizes
        # The kubelet prepared each claim before starting its pod: our CDI spec gives it its share.
        for name, memory in sizes.items():
            uid = claims[name]["metadata"]["uid"]
            env = dra.cdi_env(folders / "cdi", uid)[f"{uid}-gpu"]
            index = int(device[name].removeprefix("gpu-"))
            assert env[resources.ENV_VISIBLE_DEVICES] == inventory.fake_uuid(index)
            assert env[resources.ENV_MEM_IDX] == str(index)
            assert env[resources.ENV_MEM_CONTAINER] == memory.removesuffix("Gi")
            assert env[resources.ENV_MEM_DEV] == "16"
        # The API's own account: what the claims consume on each GPU fits its memory.
        used = dra.consumed(list(claims.values()))
        assert all(used[key] <= dra.capacities(bed, [NODE])[key] for key in used)
        # Deleting the pods makes the kubelet unprepare: the specs go.
        for name in sizes:
            bed.request("DELETE", rest.path("pods", name, ns), query={"gracePeriodSeconds": 0})
        bed.wait("the kubelet to unprepare every claim", lambda: not _spec_files(folders), timeout=60)
        # The template's claim goes with its pod (kube-controller-manager's garbage collector).
        bed.wait("the template's claim gone", lambda: made not in _claims(bed, ns), timeout=60)
    finally:
        dra.release(bed, ns)


def test_a_nvidia_gpu_pod_gets_a_whole_card_through_the_whole_gpu_class(
    bed: Bed, kubelet: kubeletmod.Kubelet, driver: Process, folders: Path
) -> None:
    ns = bed.namespace("e2e-dra-whole")
    body = dra.pod("card", "unused", GROUP)
    del body["spec"]["resourceClaims"]
    body["spec"]["containers"][0]["resources"] = {"limits": {resources.NVIDIA_GPU: "1"}}
    dra.create(bed, ns, body)
    try:
        (pod,) = _running(bed, ns, 1)
        (claim,) = dra.claims(bed, ns)  # made by kube-scheduler for the extended resource
        (result,) = dra.results(claim)
        assert result["consumedCapacity"]["memory"] == "16Gi"  # the device's default: all of it
        assert pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == claim["metadata"]["name"]
        env = dra.cdi_env(folders / "cdi", claim["metadata"]["uid"])
        (edits,) = env.values()
        assert edits[resources.ENV_MEM_CONTAINER] == "16"
    finally:
        dra.release(bed, ns)


def test_a_driver_restart_between_prepare_and_unprepare_loses_nothing(
    bed: Bed, kubelet: kubeletmod.Kubelet, folders: Path
) -> None:
    ns = bed.namespace("e2e-dra-restart")
    process = _start(bed, kubelet, folders)
    try:
        dra.create(bed, ns, dra.claim("share", "4Gi"), dra.pod("share", "share", GROUP))
        _running(bed, ns, 1)
        assert len(_spec_files(folders)) == 1
        process.stop()
        # Deleted while the driver is away: the kubelet cannot unprepare yet and keeps trying.
        bed.request("DELETE", rest.path("pods", "share", ns), query={"gracePeriodSeconds": 0})
        assert len(_spec_files(folders)) == 1
        process = _start(bed, kubelet, folders)
        bed.wait("the kubelet to unprepare after the restart", lambda: not _spec_files(folders), timeout=90)
    finally:
        process.stop()
        dra.release(bed, ns)


def test_an_unhealthy_gpu_leaves_the_slice_and_the_pod_holding_it_sees_it(
    bed: Bed, kubelet: kubeletmod.Kubelet, driver: Process, folders: Path
) -> None:
    ns = bed.namespace("e2e-dra-health")
    dra.create(bed, ns, dra.claim("share", "2Gi"), dra.pod("share", "share", GROUP))
    try:
        _running(bed, ns, 1)
        (result,) = dra.results(dra.claims(bed, ns)[0])
        (folders / "unhealthy").write_text(result["device"].removeprefix("gpu-"))
        left = {(NODE, "gpu-0"), (NODE, "gpu-1")} - {(NODE, result["device"])}
        bed.wait("the GPU out of the slice", lambda: set(dra.capacities(bed, [NODE])) == left, timeout=30)

        # The kubelet heard it on the health stream and shows it in the status of the pod holding it.
        def status() -> list[Any]:
            pod = bed.request("GET", rest.path("pods", "share", ns))
            return [
                r
                for c in pod["status"].get("containerStatuses") or []
                for s in c.get("allocatedResourcesStatus") or []
                for r in s.get("resources") or []
                if r.get("health") == "Unhealthy"
            ]

        bed.wait("the pod's allocatedResourcesStatus to say Unhealthy", status, timeout=60)
        (folders / "unhealthy").write_text("")
        bed.wait("the GPU back in the slice", lambda: len(dra.capacities(bed, [NODE])) == 2, timeout=30)
    finally:
        dra.release(bed, ns)
