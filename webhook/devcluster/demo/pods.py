"""`gpushare demo` on a node that runs containers (cluster.py): the chart installed with Helm as pods of our
image (podrelease.py), as a user installs it, and the demo's pods real containers that print the GPU env
the device plugin gave them. Used where root may run such a node and its pieces are built; the images are
built here first (scripts/node-images), minutes the first time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import kubernetes.client

from webhook.core.wire import resources
from webhook.devcluster import cluster as clustermod
from webhook.devcluster import process
from webhook.devcluster.cluster import Cluster
from webhook.devcluster.demo import plan
from webhook.devcluster.podrelease import NAMESPACE, PodRelease

Obj = dict[str, Any]
# What each of the demo's containers runs: one line of the GPU env it was given, then it sleeps.
REPORT = (
    "import os, time\n"
    "gpu = ('NVIDIA_VISIBLE_DEVICES', 'ALIYUN_COM_GPU_MEM_')\n"
    "print(' '.join(f'{k}={v}' for k, v in sorted(os.environ.items()) if k.startswith(gpu)), flush=True)\n"
    "time.sleep(10**9)\n"
)


def description(kube_bins: Path, runtime_bins: Path) -> str:
    return (
        "the real control plane and a node that RUNS CONTAINERS: etcd, kube-apiserver,\n"
        f"  kube-controller-manager and kube-scheduler from {kube_bins};\n"
        f"  containerd, runc, the CNI plugins and CoreDNS from {runtime_bins}, with the real kubelet and\n"
        "  kube-proxy; the chart installed with Helm, each part a pod of our image."
    )


class PodsCluster:
    kubelets = True
    nodes = plan.ONE_NODE

    def __init__(
        self, kube_bins: Path, runtime_bins: Path, workdir: Path, say: Callable[[str], None]
    ) -> None:
        self.kube_bins = kube_bins
        self.runtime_bins = runtime_bins
        self.workdir = workdir
        self.say = say
        self.cluster: Cluster | None = None
        self._release: PodRelease | None = None

    @property
    def release(self) -> PodRelease:
        assert self._release is not None, "start() first"
        return self._release

    @property
    def api(self) -> kubernetes.client.ApiClient:
        return self.release.api.api

    @property
    def logs(self) -> Path:
        return self.workdir

    def start(self) -> None:
        self.say("building the node's images with podman (scripts/node-images; minutes the first time) ...")
        images = clustermod.build_images()
        ((node, gpus),) = self.nodes
        self.cluster = Cluster(
            self.kube_bins, self.runtime_bins, images, self.workdir / "cluster", labels=plan.NODE_LABELS
        ).start()
        assert self.cluster.cp is not None
        self.say(
            f"kube-apiserver at {self.cluster.cp.url}; node {node}: containerd, kubelet, kube-proxy, CoreDNS"
        )
        self._release = PodRelease(self.cluster, self.workdir / "release")
        self.release.install(fake_gpus=gpus)
        self.say(
            f"helm install gs charts/gpushare -n {NAMESPACE} --wait (our image, simulation.gpus={gpus}, "
            "scheduler.mode=second): every part is a pod, Ready through its own probes:"
        )
        listed = self.cluster.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide").stdout
        for line in listed.splitlines():
            self.say(f"  {line}")

    def start_node(self, node: str, fake_gpus: str, labels: Mapping[str, str]) -> None:
        """The node registered itself at start; its device plugin is the chart's DaemonSet pod."""

    def namespace(self, name: str) -> None:
        self.release.api.namespace(name)

    def create_pod(self, namespace: str, body: Obj) -> str:
        """`body` with each container turned into one of our image that prints its GPU env."""
        assert self.cluster is not None
        for container in body["spec"]["containers"]:
            container.update(image=self.cluster.names["gpushare"], imagePullPolicy="Never")
            container["command"] = ["python", "-c", REPORT]
        return self.release.api.create_pod(namespace, body)

    def schedule(self, namespace: str) -> None:
        """kube-scheduler (the chart's, as a pod) does it."""

    def inspect_args(self) -> list[str]:
        return ["--kubeconfig", str(self.cluster.kubeconfig if self.cluster else "")]

    def kubeconfig_hint(self) -> str:
        return f"--kubeconfig {self.cluster.kubeconfig if self.cluster else ''}"

    def dead(self) -> str:
        return process.dead(self.cluster.processes) if self.cluster else ""

    def after(self, placed: list[Obj], say: Callable[[str], None]) -> None:
        assert self.cluster is not None
        say("\nWhat each container got (its log: the env the device plugin's Allocate gave it):")
        for pod in placed:
            name = pod["metadata"]["name"]
            got = self.cluster.kubectl("logs", "-n", plan.NAMESPACE, name, check=False).stdout.strip()
            say(f"  {name}: {got or '(no output yet)'}")
        say(
            f"(Real containers from our image on containerd and runc; the GPUs are simulated, so "
            f"{resources.ENV_VISIBLE_DEVICES} names GPUs that do not exist.)"
        )

    def stop(self) -> None:
        if self._release is not None:
            self.release.api.api.close()  # type: ignore[no-untyped-call]  # kubernetes ships no type hints
        if self.cluster is not None:
            self.cluster.stop()
