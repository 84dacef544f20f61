"""`gpushare demo` on the real control plane (etcd, kube-apiserver, kube-controller-manager and
kube-scheduler from scripts/kube-bins, and a real kubelet per node where root may run one): the API server
calls the webhook, which refuses the half GPU; kube-scheduler calls the extender, which places the rest;
a namespace made while it runs gets its ServiceAccount and admits pods; Ctrl-C stops every process it
started."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.devcluster.demorun import Demo
from tests.e2e import objects
from webhook.devcluster import binaries, kubelet, release
from webhook.kube import client, errors, rest

REFUSAL = (
    'admission webhook "pods.mutate.gpushare.aliyun.com" denied the request: Pod has 1 problem with GPU '
    "resources:"
)


def _until(what: str, predicate: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = predicate()
        except errors.NotFoundError:
            found = None
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _fresh_namespace_admits_a_gpu_pod(kubeconfig: str, runs: bool) -> None:
    """What a user does in the running demo: a new namespace, a GPU pod in it."""
    api = client.connect(client.ClientSettings(kubeconfig=kubeconfig))
    try:
        ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh"}}
        rest.request(api, "POST", rest.path("namespaces"), body=ns)
        # kube-controller-manager's: until it exists, the ServiceAccount admission plugin refuses pods.
        _until(
            "the default ServiceAccount",
            lambda: rest.request(api, "GET", rest.path("serviceaccounts", "default", "fresh")),
        )
        body = objects.gpu_pod("mine", 2)
        created = rest.request(api, "POST", rest.path("pods", namespace="fresh"), body=body)
        assert created["spec"]["schedulerName"] == release.SCHEDULER_NAME  # through our webhook

        def placed() -> bool:
            pod = rest.request(api, "GET", rest.path("pods", "mine", "fresh"))
            bound = bool(pod["spec"].get("nodeName"))
            return bound and (not runs or pod.get("status", {}).get("phase") == "Running")

        _until("the pod placed" + (" and Running" if runs else ""), placed)
    finally:
        api.close()


@pytest.fixture(params=["kubelets", "no-kubelet"])
def bins(request: pytest.FixtureRequest, kube_bins: Path, tmp_path: Path) -> Path:
    """The binaries' folder; for "no-kubelet" one with the control plane only, as a build from before the
    kubelet was added has (the demo then runs without kubelets, whoever runs it)."""
    if request.param == "kubelets":
        return kube_bins
    folder = tmp_path / "control-plane-only"
    folder.mkdir()
    for name in binaries.NAMES:
        (folder / name).symlink_to(kube_bins / name)
    return folder


def test_demo_on_the_real_control_plane_refuses_places_shows_the_table_and_ctrl_c_stops_it_all(
    bins: Path, kube_bins: Path, tmp_path: Path
) -> None:
    runs = kubelet.private_available(bins) is None  # root, with kubelet and fakecri built
    # With every binary, the demo would take a node that runs containers (tests/cluster/test_demo.py):
    # here, its kubelets on the fake runtime; without the kubelet, it says in one line why it cannot.
    flags = ("--fake-runtime",) if bins == kube_bins else ()
    demo = Demo("--workdir", str(tmp_path / "demo"), *flags, env={"GPUSHARE_KUBE_BINS": str(bins)})
    demo.wait_for("Ctrl-C stops it all.", timeout=240)
    try:
        out = demo.output
        assert (
            "the real control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler" in out
        )
        assert "STAND-IN" not in out
        assert "pod demo/half-gpu: nvidia.com/gpu: 0.5 REFUSED:" in out
        assert REFUSAL in out
        assert '"500m": only whole GPUs are possible with nvidia.com/gpu' in out  # as the API server sent it
        phase = "Running" if runs else "Pending"
        for pod in ("train-a", "train-b", "infer", "notebook"):
            assert re.search(rf"^pod {pod} -> gpu-node-\d GPU \d, {phase}$", out, re.M), out
        if runs:
            assert "A real kubelet per node, on the CRI fake runtime" in out
            assert "kubelet gpu-node-1: registered" in out and "kubelet gpu-node-2: registered" in out
        else:
            assert "gpushare demo: no node that runs containers here (" in out
            assert "No kubelet runs (" in out
            assert "placed pods stay PENDING" in out
        assert "Allocated/Total GPU Memory In Cluster (GiB):\n34/56 (60%)" in out
        kubeconfig = re.search(r"gpushare inspect -d --kubeconfig (\S+)", out)
        assert kubeconfig is not None, out
        _fresh_namespace_admits_a_gpu_pod(kubeconfig.group(1), runs)
        assert demo.survivors(), "the demo's processes should be running before Ctrl-C"
    except BaseException:
        demo.kill()  # no cluster left running after a failed assertion
        demo.finish()
        raise
    assert demo.finish(signal.SIGINT) == 130
    assert "gpushare demo: interrupted" in demo.err
    assert "Traceback" not in demo.err
    assert demo.survivors() == []
