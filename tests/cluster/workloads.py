"""Pods as a user writes them, in a namespace of a test's own, and what their containers report: each
prints, once, one JSON line with its environment, mount points and /dev/nvidia* device nodes (`report`),
then sleeps (REPORT_SLEEP seconds, forever by default), so the container keeps running for tests that
restart the node beneath it."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from webhook.core.wire import resources
from webhook.devcluster import binaries
from webhook.devcluster import cluster as cluster_mod
from webhook.devcluster.cluster import Cluster
from webhook.devcluster.podrelease import FULLNAME, NAMESPACE, PodRelease
from webhook.kube import rest

Obj = dict[str, Any]
T = TypeVar("T")
REPORT = (
    "import glob, json, os, time\n"
    "mounts = [line.split()[1] for line in open('/proc/mounts')]\n"
    "gpus = sorted(glob.glob('/dev/nvidia*'))\n"
    "print(json.dumps({'env': dict(os.environ), 'mounts': mounts, 'devices': gpus}), flush=True)\n"
    "time.sleep(float(os.environ.get('REPORT_SLEEP', 10**9)))\n"
)


# The cluster each package's fixture runs now (tests/cluster, tests/cluster_ha): what a failed test's
# report shows.
CURRENT: list[Cluster] = []


def running_cluster(tmp_path_factory: pytest.TempPathFactory, **spec: Any) -> Iterator[Cluster]:
    """The body of each package's `cluster` fixture: skipped with the reason where no node can run here,
    else a Cluster of `spec` (its labels or nodes) started on images built here, and stopped after."""
    kube, runtime = binaries.locate(), binaries.runtime()
    reason = cluster_mod.unavailable(kube, runtime)
    if reason is not None:
        pytest.skip(f"no node with a container runtime here: {reason}")
    assert kube is not None and runtime is not None
    images = cluster_mod.build_images()
    found = Cluster(kube, runtime, images, tmp_path_factory.mktemp("cluster"), **spec)
    CURRENT.append(found)
    try:
        yield found.start()
    finally:
        CURRENT.remove(found)
        found.stop()


@pytest.fixture
def work(chart: PodRelease, request: pytest.FixtureRequest) -> Iterator[Workloads]:
    """A namespace of the test's own for its pods, deleted (and waited for) afterwards."""
    name = request.node.name.lower().replace("_", "-")[:50].strip("-")
    workloads = Workloads(chart, chart.api.namespace(name))
    try:
        yield workloads
    finally:
        workloads.delete_namespace()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report shows the cluster's pods, nodes, recent events and each process's tail."""
    report = yield
    if report.failed and CURRENT:
        post_mortem(report, CURRENT[-1])
    return report


def post_mortem(report: pytest.TestReport, found: Cluster) -> None:
    """The cluster's pods, recent events and each process's last lines, added to a failed test's report."""
    if found.cp is None:
        return
    sections = [f"logs of every process: {found.workdir}"]
    for args in (
        ("get", "pods", "-A", "-o", "wide"),
        ("get", "nodes", "-o", "wide"),
        ("get", "events", "-A", "--sort-by=.lastTimestamp"),
    ):
        done = found.kubectl(*args, check=False)
        sections.append(f"--- kubectl {' '.join(args)}\n{(done.stdout + done.stderr)[-4000:]}")
    done = found.kubectl(
        "logs", "-n", NAMESPACE, "-l", "app.kubernetes.io/instance=gs", "--tail=8", check=False
    )
    sections.append(f"--- our pods' logs (last lines)\n{(done.stdout + done.stderr)[-4000:]}")
    for process in found.processes:
        sections.append(f"--- {process.name} (last lines)\n{process.tail(10)}")
    report.sections.append(("cluster", "\n".join(sections)))


# How the API server words a call to a webhook of ours that reached no server of ours: it failed while
# dialing (refused by a stopping pod, no route to a lost node), the Service had no endpoints, or a kept-alive
# connection's server vanished and only the call's timeout ended it. An answer of ours (a 500, a denial)
# carries none of these: GPU pods fail closed, never on a word of ours.
OUR_WEBHOOKS = (
    'failed calling webhook "pods.mutate.gpushare.aliyun.com"',
    'failed calling webhook "pods.validate.gpushare.aliyun.com"',
)
UNREACHABLE = ("dial tcp", "no endpoints available", "context deadline exceeded")


def unreached(error: str) -> bool:
    """Whether the API server refused because it could not reach our webhook, not on an answer of ours."""
    return any(hook in error for hook in OUR_WEBHOOKS) and any(reason in error for reason in UNREACHABLE)


def wait(what: str, check: Callable[[], T | None], timeout: float = 120, every: float = 0.5) -> T:
    """`check()` once it returns something other than None or False; TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None and found is not False:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        time.sleep(every)


def ready(chart: PodRelease, plural: str, part: str) -> tuple[int, int]:
    """(ready, wanted) pods of the release's Deployment or DaemonSet `part` ("webhook", "device-plugin")."""
    found = chart.api.request("GET", rest.path(plural, f"{FULLNAME}-{part}", NAMESPACE, group="apps"))
    status = found["status"]
    if plural == "daemonsets":
        return status.get("numberReady", 0), status.get("desiredNumberScheduled", 0)
    return status.get("readyReplicas", 0), found["spec"]["replicas"]


def rolled_out(chart: PodRelease, part: str) -> bool:
    """Whether Deployment `part` runs only up-to-date pods, all of them ready."""
    found = chart.api.request("GET", rest.path("deployments", f"{FULLNAME}-{part}", NAMESPACE, group="apps"))
    status, want = found["status"], found["spec"]["replicas"]
    return all(status.get(key, 0) == want for key in ("readyReplicas", "updatedReplicas", "replicas"))


def our_pods(chart: PodRelease, component: str) -> list[Obj]:
    """The release's pods of one component ("webhook", "extender", "device-plugin", ...)."""
    return [
        p
        for p in chart.api.pods(NAMESPACE)
        if p["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
    ]


def serving_pods(chart: PodRelease) -> list[Obj]:
    """The release's pods of its Deployments and DaemonSets: a Job's pods are left out. The certificate
    CronJob runs at renewSchedule (03:17 by default, kube-controller-manager's time), and its finished pod
    keeps the image it ran with, through any rollout, until the next run replaces it."""
    return [p for p in chart.api.pods(NAMESPACE) if not owned_by(p, "Job")]


def owned_by(obj: Obj, kind: str) -> bool:
    """Whether one of `obj`'s owners is of `kind` ("Job", "CronJob", ...)."""
    return any(o.get("kind") == kind for o in obj["metadata"].get("ownerReferences") or ())


def allocatable(work: Workloads, resource: str) -> int:
    node = work.chart.api.request("GET", rest.path("nodes", cluster_mod.NODE))
    return int(node["status"].get("allocatable", {}).get(resource, "0"))


@contextlib.contextmanager
def node_mode(work: Workloads, mode: str) -> Iterator[None]:
    """The node relabelled `mode` (ack.node.gpu.schedule) for the block, then `share` again, with the
    device plugin serving GPU memory once more before the next test."""
    cluster = work.cluster
    cluster.kubectl(
        "label", "node", cluster_mod.NODE, f"{resources.ACK_SCHEDULE_LABEL}={mode}", "--overwrite"
    )
    try:
        yield
    finally:
        cluster.kubectl(
            "label", "node", cluster_mod.NODE, f"{resources.ACK_SCHEDULE_LABEL}=share", "--overwrite"
        )
        wait(
            "the device plugin Ready again",
            lambda: ready(work.chart, "daemonsets", "device-plugin") == (1, 1),
            180,
        )
        wait("GPU memory advertised again", lambda: allocatable(work, resources.GPU_MEMORY) == 48, 120)


@dataclass
class Workloads:
    chart: PodRelease
    namespace: str

    @property
    def cluster(self) -> Cluster:
        return self.chart.cluster

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        done = self.cluster.kubectl("--namespace", self.namespace, *args, input=input, check=check)
        return done.stdout + done.stderr if not check else done.stdout

    def pod(self, name: str, limits: Mapping[str, object] | None = None, **spec: Any) -> Obj:
        """A pod of our image whose container reports its env and mounts, asking `limits`."""
        names = self.cluster.names
        container: Obj = {
            "name": "main",
            "image": names["gpushare"],
            "imagePullPolicy": "Never",
            "command": ["python", "-c", REPORT],
        }
        if limits:
            container["resources"] = {"limits": dict(limits)}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [container], **spec},
        }

    def apply(self, *bodies: Obj) -> str:
        """`kubectl apply` of `bodies`, as a user applies a manifest; its output (stderr included when
        it fails, without raising)."""
        manifest = "\n---\n".join(json.dumps(body) for body in bodies)
        done = self.cluster.kubectl("apply", "-f", "-", input=manifest, check=False)
        return done.stdout + done.stderr

    def get(self, name: str, plural: str = "pods", group: str = "") -> Obj:
        found: Obj = self.chart.api.request("GET", rest.path(plural, name, self.namespace, group=group))
        return found

    def running(self, name: str, timeout: float = 120) -> Obj:
        """Pod `name` once its containers run (or TimeoutError, with its conditions)."""

        def check() -> Obj | None:
            found = self.get(name)
            statuses = found["status"].get("containerStatuses") or []
            return found if statuses and all("running" in s.get("state", {}) for s in statuses) else None

        try:
            return wait(f"pod {name} running", check, timeout)
        except TimeoutError as err:
            raise TimeoutError(f"{err}; status: {json.dumps(self.get(name)['status'])[:2000]}") from None

    def report(self, name: str, timeout: float = 60, container: str = "") -> Obj:
        """What pod `name`'s container (its first, or `container`) printed: {"env": {...}, "mounts": [...],
        "devices": [/dev/nvidia*]}."""

        def check() -> Obj | None:
            text = self.kubectl("logs", name, *(("-c", container) if container else ()), check=False)
            for line in text.splitlines():
                if line.startswith("{"):
                    parsed: Obj = json.loads(line)
                    return parsed
            return None

        return wait(f"pod {name}'s report", check, timeout)

    def delete_namespace(self) -> None:
        self.cluster.kubectl(
            "delete", "namespace", self.namespace, "--wait=true", "--timeout=180s", check=False
        )
