"""Our releases as a user consumes them: scripts/release pushes the chart and the image to an OCI registry
(the CNCF distribution registry, built from its Go module by scripts/registry-bins, started here), Helm
installs the chart from `oci://` and the node's containerd pulls the image. The previous release
(CHANGELOG.md's "Released from commit") is built from its own commit, installed with workloads running and
upgraded to this tree's release, then rolled back: running pods keep their GPUs and annotations, the ledger
counts each once, new pods are placed, and the webhook refuses no valid pod meanwhile. A registry that is
down: Helm's and the kubelet's own messages. Installs the package's release again at the end."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.cluster.workloads import Workloads, ready, serving_pods, unreached, wait
from tests.e2e import placement
from webhook.core.wire import resources
from webhook.devcluster import cluster as cluster_mod
from webhook.devcluster import helm, releases
from webhook.devcluster import registry as registry_mod
from webhook.devcluster.podrelease import NAMESPACE, ChartSource, PodRelease
from webhook.gpus.inventory import fake_uuid
from webhook.kube import errors, rest

Obj = dict[str, Any]
GPU_MEM = resources.GPU_MEMORY
NODE = cluster_mod.NODE


@dataclass
class Published:
    registry: registry_mod.Registry
    chart: str  # oci://<registry>/gpushare
    previous: str  # its version, e.g. 0.1.0
    current: str  # this tree's

    def source(self, version: str) -> ChartSource:
        return ChartSource(self.chart, version, plain_http=True)

    def image(self, version: str) -> str:
        return f"{self.registry.address}/gpushare-webhook:{version}"


@pytest.fixture(scope="module")
def published(chart: PodRelease) -> Iterator[Published]:
    cluster = chart.cluster
    assert cluster.net is not None and cluster.node is not None and cluster.node.containerd is not None
    root = chart.root / "releases"
    reg = registry_mod.Registry(registry_mod.build(), root / "registry", host=cluster.net.host_ip).start()
    try:
        cluster.node.containerd.trust_registry(reg.address, registry_mod.hosts_toml(reg.address))
        previous, commit = releases.previous()
        tree = releases.checkout(commit, root / f"tree-{previous}")
        releases.publish(reg.address, tree, previous, root / "dist")
        current = releases.current()
        ref = releases.publish(reg.address, helm.ROOT, current, root / "dist")
        yield Published(reg, ref, previous, current)
    finally:
        reg.stop()
        # The package's release as the other modules expect it: from this checkout, with the bed's image.
        _replace(chart, ChartSource())


def _installed(chart: PodRelease) -> bool:
    done = chart.api.helm("status", "gs", "--namespace", NAMESPACE, check=False, timeout=60)
    return done.returncode == 0


def _replace(chart: PodRelease, source: ChartSource) -> None:
    """Uninstall whatever release is there and install from `source`, waiting as `helm install --wait`."""
    if _installed(chart):
        chart.uninstall()
    wait("the release's pods gone", lambda: not chart.api.pods(NAMESPACE), 180)
    chart.source = source
    chart.install()


def _our_images(chart: PodRelease) -> set[str]:
    """The images of the release's pods but the second kube-scheduler's and a Job's; pods on their way out
    (a replaced replica still in its preStop sleep) are not counted."""
    return {
        c["image"]
        for p in serving_pods(chart)
        for c in p["spec"]["containers"]
        if p["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "scheduler"
        and not p["metadata"].get("deletionTimestamp")
    }


def _pulled(work: Workloads, image: str) -> bool:
    """Whether the node's containerd holds `image`, which only a pull can have put there."""
    containerd = work.cluster.node.containerd if work.cluster.node else None
    assert containerd is not None
    return image in containerd.ctr("images", "list", "--quiet").stdout.split()


def test_a_release_installs_from_oci_and_the_node_pulls_its_image(
    work: Workloads, published: Published
) -> None:
    chart = work.chart
    image = published.image(published.current)
    assert not _pulled(work, image)
    _replace(chart, published.source(published.current))
    assert _our_images(chart) == {image}  # the chart's default: the image released with it
    assert _pulled(work, image)
    events = work.cluster.kubectl(
        "get", "events", "-n", NAMESPACE, "--field-selector", "reason=Pulled"
    ).stdout
    assert image in events or "Successfully pulled" in events, events
    work.apply(work.pod("share", {GPU_MEM: 3}))
    pod = work.running("share")
    index = int(pod["metadata"]["annotations"][resources.ANN_MEM_IDX])
    assert work.report("share")["env"][resources.ENV_VISIBLE_DEVICES] == fake_uuid(index)


@dataclass
class AdmissionStream:
    """Valid GPU pods sent through admission every `every` seconds (server-side dry run: the webhooks
    judge them, nothing is stored or placed), and every answer that was not an admission."""

    chart: PodRelease
    namespace: str
    every: float = 0.2
    sent: int = 0
    refused: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _pod(self) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "stream-", "namespace": self.namespace},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {GPU_MEM: "1"}}}]},
        }

    def _run(self) -> None:
        path = rest.path("pods", namespace=self.namespace)
        while not self._stop.wait(self.every):
            self.sent += 1
            try:
                self.chart.api.request("POST", path, query={"dryRun": "All"}, body=self._pod())
            except errors.ApiError as err:
                self.refused.append(f"{time.strftime('%H:%M:%S')} {err}")

    def __enter__(self) -> AdmissionStream:
        self._thread = threading.Thread(target=self._run, name="admission-stream", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=30)


def _state(work: Workloads, names: list[str]) -> dict[str, tuple[str, int, str]]:
    """Per pod: its container's ID and restarts, and its placement annotation."""
    out = {}
    for name in names:
        pod = work.get(name)
        status = pod["status"]["containerStatuses"][0]
        out[name] = (
            status["containerID"],
            status["restartCount"],
            pod["metadata"]["annotations"][resources.ANN_ALLOCATION],
        )
    return out


def _ledger_once(work: Workloads) -> None:
    pods = [p for p in work.chart.api.pods(work.namespace) if p["spec"].get("nodeName") == NODE]
    placement.check_invariant(pods, {NODE: 16})


def _place(work: Workloads, name: str, limits: dict[str, object]) -> None:
    work.apply(work.pod(name, limits))
    work.running(name)
    _ledger_once(work)


def test_an_upgrade_from_the_previous_release_and_its_rollback_keep_pods_and_admissions(
    work: Workloads, published: Published
) -> None:
    chart = work.chart
    _replace(chart, published.source(published.previous))
    assert _our_images(chart) == {published.image(published.previous)}
    running = ["four", "two", "card"]
    work.apply(work.pod("four", {GPU_MEM: 4}), work.pod("two", {GPU_MEM: 2}))
    work.apply(work.pod("card", {resources.NVIDIA_GPU: 1}))
    for name in running:
        work.running(name)
    _ledger_once(work)
    before = _state(work, running)
    revision = chart.revisions[-1]
    with AdmissionStream(chart, work.namespace) as stream:
        chart.source = published.source(published.current)
        chart.upgrade()
    assert _our_images(chart) == {published.image(published.current)}
    # 0.1.0's webhook replicas stop listening at once when told to stop (and are gone soon after), while
    # their endpoint may still be in kube-proxy's rules: the upgrade away from them can meet a connection
    # that fails (refused, no route), never a denial. 0.2.0's keep serving through a preStop sleep
    # (webhook.shutdownDelaySeconds): the rollback below, which stops them, must see no failure at all.
    assert stream.sent > 20, stream.sent
    assert all(unreached(r) for r in stream.refused), stream.refused
    print(
        f"upgrade from {published.previous}: {len(stream.refused)} of {stream.sent} calls failed to connect"
    )
    assert _state(work, running) == before
    _place(work, "after-upgrade", {GPU_MEM: 3})
    with AdmissionStream(chart, work.namespace) as stream:
        chart.rollback(revision)
    assert _our_images(chart) == {published.image(published.previous)}
    assert stream.sent > 20 and stream.refused == [], stream.refused
    assert _state(work, running) == before
    _place(work, "after-rollback", {GPU_MEM: 2})


def test_a_registry_that_is_down_fails_the_install_and_the_pull_with_their_own_messages(
    work: Workloads, published: Published
) -> None:
    chart = work.chart
    pod = work.pod("missing")
    pod["spec"]["containers"][0].update(image=published.image("9.9.9"), imagePullPolicy="IfNotPresent")
    work.apply(pod)
    waiting = wait(
        "the kubelet's pull error",
        lambda: next(
            (
                s["state"]["waiting"]
                for s in work.get("missing")["status"].get("containerStatuses") or []
                if s.get("state", {}).get("waiting", {}).get("reason") in ("ErrImagePull", "ImagePullBackOff")
            ),
            None,
        ),
        120,
    )
    assert "not found" in waiting.get("message", "") or waiting["reason"] == "ImagePullBackOff", waiting
    published.registry.stop()
    try:
        done = chart.api.helm(
            "upgrade",
            "gs",
            *published.source(published.current).args(),
            "--namespace",
            NAMESPACE,
            check=False,
            timeout=120,
        )
        assert done.returncode != 0
        assert "connection refused" in done.stderr, done.stderr
    finally:
        published.registry.start()
    assert ready(chart, "deployments", "webhook") == (2, 2)  # the failed upgrade changed nothing
