"""`gpushare demo`: a small GPU cluster on this machine, then the webhook refusing a pod, the extender
placing the others, and the `gpushare inspect` table.

The real control plane when `scripts/kube-bins` built it and Helm is there: on a node that runs containers,
the chart's parts as pods (`pods.py`), where root may run one and `scripts/runtime-bins` built its pieces;
else (said in one line why) with our parts on this host and a real kubelet per node on the CRI fake runtime
where root may run one (`real.py`); else the API stand-in, said so on screen (`standin.py`). Whatever
happens, every child is stopped before returning: Ctrl-C (KeyboardInterrupt, exit 130 in the CLI) and
SIGTERM (exit 0) included.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TextIO

import kubernetes.client

from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.devcluster import binaries, cluster, helm, objects, release
from webhook.devcluster import kubelet as kubeletmod
from webhook.devcluster.demo import plan
from webhook.devcluster.demo import pods as demo_pods
from webhook.devcluster.demo import real as demo_real
from webhook.devcluster.demo import standin as demo_standin
from webhook.kube import rest

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class DemoSettings:
    once: bool = False  # stop after the table instead of waiting for Ctrl-C
    standin: bool = False  # the stand-in even when the real binaries are built
    fake_runtime: bool = False  # kubelets on the CRI fake runtime even where a node could run containers
    workdir: Path | None = None  # logs, certificates, kubeconfigs (default: a new temporary folder)
    timeout_s: float = 90.0  # for each wait: parts ready, pods placed


class Cluster(Protocol):
    kubelets: bool  # a real kubelet runs each node (it registers the Node, and runs the pods)
    nodes: tuple[tuple[str, str], ...]  # (node, its GPUs as --fake-gpus takes them)

    @property
    def api(self) -> kubernetes.client.ApiClient: ...
    @property
    def logs(self) -> Path: ...
    def start(self) -> None: ...
    def start_node(self, node: str, fake_gpus: str, labels: Mapping[str, str]) -> None: ...
    def namespace(self, name: str) -> None: ...
    def create_pod(self, namespace: str, body: Obj) -> str: ...
    def schedule(self, namespace: str) -> None: ...
    def inspect_args(self) -> list[str]: ...
    def kubeconfig_hint(self) -> str: ...
    def dead(self) -> str: ...
    def after(self, placed: list[Obj], say: Callable[[str], None]) -> None: ...
    def stop(self) -> None: ...


class DemoError(Exception):
    """The demo could not go on (a part did not start, pods were not placed in time)."""


class _Terminated(Exception):
    """SIGTERM: stop like Ctrl-C, but it was asked for, so exit 0."""


def run(settings: DemoSettings, out: TextIO = sys.stdout) -> int:
    def say(line: str) -> None:
        print(line, file=out, flush=True)

    workdir = settings.workdir or Path(tempfile.mkdtemp(prefix="gpushare-demo-"))
    cluster = choose(settings, workdir, say)
    try:
        with _sigterm_raises():
            cluster.start()
            show(cluster, settings, say)
            if settings.once:
                return 0
            say(f"\nEverything keeps running (logs in {cluster.logs}). Try:")
            say(f"  gpushare inspect -d {cluster.kubeconfig_hint()}")
            say("Ctrl-C stops it all.")
            while True:
                time.sleep(3600)
    except _Terminated:
        return 0
    finally:
        _stop(cluster, say)


def choose(settings: DemoSettings, workdir: Path, say: Callable[[str], None]) -> Cluster:
    bins = binaries.locate()
    missing = []
    if bins is None:
        missing.append("the control-plane binaries (build them: bash scripts/kube-bins, needs Go)")
    if helm.binary() is None:
        missing.append("helm (bash scripts/install-helm)")
    if not helm.CHART.is_dir():
        # Installed with `pip install .`, the package is a copy without the chart beside it.
        missing.append(
            f"the chart (not at {helm.CHART}): install the package from the checkout with pip install -e ., "
            "as bash scripts/test does"
        )
    if bins is not None and not missing and not settings.standin:
        if not settings.fake_runtime:
            runtime = binaries.runtime()
            why_not = cluster.unavailable(bins, runtime)
            if why_not is None and runtime is not None:
                say(f"gpushare demo: {demo_pods.description(bins, runtime)}")
                return demo_pods.PodsCluster(bins, runtime, workdir, say)
            say(f"gpushare demo: no node that runs containers here ({why_not}).")
        no_kubelet = kubeletmod.private_available(bins)
        say(f"gpushare demo: {demo_real.description(bins, no_kubelet)}")
        return demo_real.RealCluster(bins, workdir, say, kubelets=no_kubelet is None)
    say(f"gpushare demo: {demo_standin.DESCRIPTION}")
    if missing and not settings.standin:
        say("For the real control plane it needs " + "; ".join(missing) + ".")
    return demo_standin.StandinCluster(workdir, say)


def show(cluster: Cluster, settings: DemoSettings, say: Callable[[str], None]) -> None:
    """Nodes with their device plugins, the pods, the refusal, the placements and the table."""
    for name, fake in cluster.nodes:
        gpus = _sizes(fake)
        labels = {**plan.NODE_LABELS, resources.GPU_COUNT_LABEL: str(len(gpus))}
        if not cluster.kubelets:  # else the kubelet registers its Node, its capacity from the plugin
            objects.gpu_node(cluster.api, name, len(gpus), max(gpus), labels)
        cluster.start_node(name, fake, labels)
    _wait(
        cluster,
        settings,
        "the device plugins to publish their GPUs",
        lambda: all(_published(cluster, name, sum(_sizes(fake))) for name, fake in cluster.nodes),
    )
    for name, fake in cluster.nodes:
        say(f"node {name}: GPUs {fake.replace(',', ', ')} (index:GiB), device plugin with --fake-gpus {fake}")
    cluster.namespace(plan.NAMESPACE)
    say("")
    for name, gib in plan.PODS:
        denial = cluster.create_pod(plan.NAMESPACE, _pod(name, {resources.GPU_MEMORY: str(gib)}))
        if denial:
            raise DemoError(f"pod {name} was refused: {denial}")
        say(f"pod {plan.NAMESPACE}/{name}: {resources.GPU_MEMORY}: {gib} created")
    name, resource, value = plan.REFUSED
    denial = cluster.create_pod(plan.NAMESPACE, _pod(name, {resource: value}))
    if not denial:
        raise DemoError(f"pod {name} ({resource}: {value}) was admitted; the webhook should refuse it")
    say(f"pod {plan.NAMESPACE}/{name}: {resource}: {value} REFUSED:")
    say("\n".join(f"  {line}" for line in denial.splitlines()))
    say("")
    what = "every pod to be placed" + (" and Running" if cluster.kubelets else "")
    placed = _wait(cluster, settings, what, lambda: _placed(cluster))
    for pod in placed:
        decoded = ann.decode(pod["metadata"].get("annotations", {}))
        where = ",".join(map(str, decoded.gpu_indexes)) if decoded else "?"
        phase = pod.get("status", {}).get("phase", "Pending")
        say(f"pod {pod['metadata']['name']} -> {pod['spec']['nodeName']} GPU {where}, {phase}")
    say(f"\n$ gpushare inspect {cluster.kubeconfig_hint()}")
    table = subprocess.run(
        [release.GPUSHARE, "inspect", *cluster.inspect_args()],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if table.returncode != 0:
        raise DemoError(f"gpushare inspect failed: {table.stderr.strip()}")
    say(table.stdout.rstrip())
    cluster.after(placed, say)


def _sizes(fake_gpus: str) -> list[int]:
    """GiB per GPU of a --fake-gpus value (index:GiB,...)."""
    return [int(spec.split(":")[1]) for spec in fake_gpus.split(",")]


def _published(cluster: Cluster, node: str, gib: int) -> bool:
    stored = rest.request(cluster.api, "GET", rest.path("nodes", node))
    if resources.NODE_DEVICES_ANNOTATION not in stored["metadata"].get("annotations", {}):
        return False
    # A kubelet admits a gpu-mem pod only once its device manager advertises the plugin's devices.
    allocatable = stored.get("status", {}).get("allocatable", {})
    return not cluster.kubelets or allocatable.get(resources.GPU_MEMORY) == str(gib)


def _placed(cluster: Cluster) -> list[Obj]:
    """The demo's pods, once all are bound (and Running, where kubelets run them)."""
    cluster.schedule(plan.NAMESPACE)
    pods = list(rest.list_all(cluster.api, rest.path("pods", namespace=plan.NAMESPACE)))
    done = len(pods) == len(plan.PODS) and all(p["spec"].get("nodeName") for p in pods)
    if cluster.kubelets:
        done = done and all(p.get("status", {}).get("phase") == "Running" for p in pods)
    return sorted(pods, key=lambda p: str(p["metadata"]["name"])) if done else []


def _pod(name: str, limits: dict[str, str]) -> Obj:
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "gpushare-demo"}},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
    }


def _wait(cluster: Cluster, settings: DemoSettings, what: str, predicate: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + settings.timeout_s
    while time.monotonic() < deadline:
        dead = cluster.dead()
        if dead:
            raise DemoError(f"while waiting for {what}, {dead}")
        result = predicate()
        if result:
            return result
        time.sleep(0.3)
    raise DemoError(f"gave up after {settings.timeout_s:.0f} s waiting for {what}")


def _stop(cluster: Cluster, say: Callable[[str], None]) -> None:
    # A second Ctrl-C while the children are stopping would leave some of them running.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        say("stopping the demo's processes ...")
        cluster.stop()
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    def terminated(signum: int, frame: FrameType | None) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
