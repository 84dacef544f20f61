"""`gpushare demo` on the real control plane: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler built by `scripts/kube-bins`, the chart installed by Helm, and our parts started exactly as
the end-to-end bed starts them (`release.Release`). The API server calls the webhook and kube-scheduler
calls the extender; the demo only creates objects and watches. Where root may run kubelets, each node is
a real kubelet on the CRI fake runtime (`kubelet.Kubelet`, each with a device-plugin folder of its own),
so the placed pods are admitted, get their devices from the plugin's Allocate, and run.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import kubernetes.client

from webhook.devcluster import process, release
from webhook.devcluster.controlplane import ControlPlane
from webhook.devcluster.demo import plan
from webhook.devcluster.kubelet import Kubelet

Obj = dict[str, Any]


def description(bins: Path, no_kubelet: str | None) -> str:
    """What runs; `no_kubelet`: why no kubelet can run here (None: one per node does)."""
    nodes = (
        "A real kubelet per node, on the CRI fake runtime:\n  pods are admitted and Running, "
        "though no container runs."
        if no_kubelet is None
        else f"No kubelet runs ({no_kubelet}):\n  Nodes are objects with GPU capacity, "
        "and nothing runs the pods."
    )
    return (
        "the real control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler from\n"
        f"  {bins};\n  the chart installed with Helm. {nodes}"
    )


class RealCluster:
    nodes = plan.NODES

    def __init__(self, bins: Path, workdir: Path, say: Callable[[str], None], kubelets: bool) -> None:
        self.cp = ControlPlane(bins, workdir / "controlplane")
        self.workdir = workdir
        self.say = say
        self.kubelets = kubelets
        self._release: release.Release | None = None
        self._kubelets: list[Kubelet] = []
        self.socket_dirs: list[Path] = []

    @property
    def release(self) -> release.Release:
        assert self._release is not None, "start() first"
        return self._release

    @property
    def api(self) -> kubernetes.client.ApiClient:
        return self.release.api

    @property
    def logs(self) -> Path:
        return self.cp.logs

    def start(self) -> None:
        self.cp.start()
        self.say(f"kube-apiserver at {self.cp.url}")
        self._release = release.Release(self.cp, self.workdir, release.admin_api(self.cp))
        self.release.install()
        self.say(
            f"helm install {release.RELEASE} charts/gpushare -n {release.NAMESPACE} (scheduler.mode=second)"
        )
        self.release.start_webhook()
        self.say(f"webhook at https://127.0.0.1:{self.release.webhook_port}, registered by the chart")
        self.release.start_extender()
        self.say(
            f"extender at https://127.0.0.1:{self.release.extender_port} (HTTP/2, kube-scheduler's client "
            f"certificate required), probes at http://127.0.0.1:{self.release.extender_health_port}"
        )
        self.release.start_scheduler()
        self.say(f"kube-scheduler {release.SCHEDULER_NAME}, with the chart's configuration")

    def start_node(self, node: str, fake_gpus: str, labels: Mapping[str, str]) -> None:
        """The device plugin of `node`; with kubelets, first the kubelet that registers the Node."""
        plugin_dir = process.socket_dir(node)
        self.socket_dirs.append(plugin_dir)
        extra: tuple[str, ...] = ()
        if self.kubelets:
            # Under /tmp, as the plugin's folder: the kubelet's sockets lie below it, and a unix socket
            # path holds at most 107 bytes.
            root = Path(tempfile.mkdtemp(prefix=f"gpushare-kl-{node}-", dir="/tmp"))
            self.socket_dirs.append(root)
            kubelet = Kubelet(self.cp.bins, self.cp, root, node=node, labels=labels, plugin_dir=plugin_dir)
            self._kubelets.append(kubelet)
            kubelet.start()
            self.say(f"kubelet {node}: registered, fake runtime, device plugins in {plugin_dir}")
            extra = ("--pod-resources-socket", str(kubelet.pod_resources_socket))
        self.release.start_device_plugin(node, plugin_dir, fake_gpus, extra=extra)

    def namespace(self, name: str) -> None:
        self.release.namespace(name)

    def create_pod(self, namespace: str, body: Obj) -> str:
        return self.release.create_pod(namespace, body)

    def schedule(self, namespace: str) -> None:
        """kube-scheduler does it."""

    def dead(self) -> str:
        kubelets = [child for kubelet in self._kubelets for child in kubelet.processes]
        return process.dead([*self.cp.processes, *kubelets, *self.release.processes])

    def inspect_args(self) -> list[str]:
        return ["--kubeconfig", str(self.cp.admin_kubeconfig)]

    def after(self, placed: list[Obj], say: Callable[[str], None]) -> None:
        if self.kubelets:
            say(
                "(A real kubelet runs each node on the CRI fake runtime: it called the device plugins' "
                "Allocate and the pods are Running, though no container runs.)"
            )
        else:
            say(
                "(No kubelet runs here: no container starts, so the device plugins' Allocate is never "
                "called and placed pods stay PENDING.)"
            )

    def kubeconfig_hint(self) -> str:
        return f"--kubeconfig {self.cp.admin_kubeconfig}"

    def stop(self) -> None:
        if self._release is not None:
            self._release.stop_all()
            self._release.api.close()  # type: ignore[no-untyped-call]  # kubernetes ships no type hints
        for kubelet in self._kubelets:
            kubelet.stop()
        self.cp.stop()
        for folder in self.socket_dirs:
            shutil.rmtree(folder, ignore_errors=True)
