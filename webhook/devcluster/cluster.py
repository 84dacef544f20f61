"""A cluster whose nodes run real containers: the control plane on this host (with the default
kube-scheduler), each node in namespaces of its own with containerd, the kubelet and kube-proxy
(node.py), and cluster DNS (clusterdns.py). Every image it runs was built here (scripts/node-images);
nothing is pulled. The end-to-end tests of the chart as pods (tests/cluster, one node; tests/cluster_ha,
several) and `gpushare demo` use it.

    cluster = Cluster(kube_bins, runtime_bins, images, workdir).start()          # one node, "gpu-node"
    cluster = Cluster(..., nodes=(NodeSpec("system"), NodeSpec("gpu-a", labels)))  # several
    cluster.kubectl("get", "pods", "-A")
    cluster.add_node(NodeSpec("gpu-c", labels))
    cluster.stop()

The first node carries the Service range the host routes (nodenet.py): a test takes other nodes away.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from webhook.devcluster import binaries, clusterdns, nodenet, scripts
from webhook.devcluster.controlplane import ControlPlane
from webhook.devcluster.node import RuntimeNode
from webhook.devcluster.nodenet import NodeNamespaces
from webhook.devcluster.process import Process

NODE = "gpu-node"


def unavailable(kube_bins: Path | None, runtime_bins: Path | None) -> str | None:
    """Why no such cluster can run here (one line), or None when it can."""
    reason = nodenet.unavailable()
    if reason is not None:
        return reason
    if kube_bins is None or not binaries.complete(kube_bins, binaries.NAMES + binaries.NODE_NAMES):
        return "kube-apiserver, kubelet, kube-proxy or kubectl is not built: run `bash scripts/kube-bins`"
    if runtime_bins is None:
        return "containerd, the CNI plugins or CoreDNS is not built: run `bash scripts/runtime-bins`"
    for tool in ("runc", "iptables"):
        if not any(Path(folder, tool).exists() for folder in os.get_exec_path()):
            return f"{tool} is not installed: `bash scripts/runtime-bins --packages` installs it"
    return None


def build_images(timeout: float = 1800) -> Path:
    """scripts/node-images: every image the node runs, built here from pinned binaries and this
    checkout; the folder of their archives."""
    return Path(scripts.last_line("node-images", timeout=timeout))


def image_names(images: Path) -> dict[str, str]:
    """Role (pause, coredns, kube-scheduler, gpushare) -> image name, from the folder's `names`."""
    pairs = (line.split(maxsplit=1) for line in (images / "names").read_text().splitlines() if line.strip())
    return {role: name for role, name in pairs}


@dataclass(frozen=True)
class NodeSpec:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)  # registered with the Node


@dataclass
class Cluster:
    kube_bins: Path
    runtime_bins: Path
    images: Path  # scripts/node-images' folder
    workdir: Path
    labels: Mapping[str, str] = field(default_factory=dict)  # the one node's, when `nodes` is empty
    nodes: Sequence[NodeSpec] = ()  # several nodes, the first one never taken away
    net: NodeNamespaces | None = None  # the first node's
    cp: ControlPlane | None = None
    node: RuntimeNode | None = None  # the first node
    running: dict[str, RuntimeNode] = field(default_factory=dict)  # every node by name

    @property
    def names(self) -> dict[str, str]:
        return image_names(self.images)

    @property
    def kubeconfig(self) -> Path:
        assert self.cp is not None, "start() first"
        return self.cp.admin_kubeconfig

    @property
    def processes(self) -> list[Process]:
        """Every long-running process of the cluster, for post-mortems."""
        nets = [node.net for node in self.running.values()] or ([self.net] if self.net else [])
        return [*(self.cp.processes if self.cp else []), *(p for net in nets for p in net.processes)]

    def start(self, timeout: float = 180) -> Cluster:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        first, *others = self.nodes or (NodeSpec(NODE, self.labels),)
        self.net = net = NodeNamespaces(self.workdir / "node").start()
        self.cp = ControlPlane(
            self.kube_bins,
            self.workdir / "controlplane",
            address=net.host_ip,
            service_range=net.service_cidr,
            default_scheduler=True,
            node_lifecycle=bool(self.nodes),  # several nodes: every one a kubelet's, none bare
        ).start()
        self.node = self._start_node(first, net, timeout)
        for spec in others:
            self.add_node(spec, timeout)
        dns = clusterdns.manifests(self.names["coredns"], net.dns_ip)
        self.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(dns))
        self.kubectl(
            "rollout",
            "status",
            "-n",
            clusterdns.NAMESPACE,
            f"deployment/{clusterdns.NAME}",
            f"--timeout={timeout:.0f}s",
            timeout=timeout + 10,
        )

    def add_node(self, spec: NodeSpec, timeout: float = 180) -> RuntimeNode:
        """Another node joined to the running cluster, Ready when this returns."""
        assert self.net is not None, "start() first"
        net = NodeNamespaces(self.workdir / f"node-{spec.name}", first=self.net).start()
        return self._start_node(spec, net, timeout)

    def _start_node(self, spec: NodeSpec, net: NodeNamespaces, timeout: float) -> RuntimeNode:
        assert self.cp is not None
        node = RuntimeNode(
            self.kube_bins,
            self.runtime_bins,
            self.cp,
            net,
            images=sorted(self.images.glob("*.tar")),
            sandbox_image=self.names["pause"],
            name=spec.name,
            labels=spec.labels,
        )
        self.running[spec.name] = node  # before it starts: stop() ends what a failed start left
        return node.start(timeout)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """kubectl as the cluster's admin; RuntimeError with its stderr when it fails and `check`."""
        argv = [str(self.kube_bins / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args]
        done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    def stop(self) -> None:
        """Everything ended, the nodes first; each step runs even if one before it failed."""
        nodes = list(self.running.values())  # each registered before it starts (_start_node)
        nets = [node.net for node in nodes] or ([self.net] if self.net else [])  # or only the first's
        with contextlib.ExitStack() as steps:
            for net in nets:  # the images' layers (~1 GB a node), once no mount holds them; logs stay
                steps.callback(shutil.rmtree, net.workdir / "containerd" / "root", ignore_errors=True)
            steps.callback(lambda: self.cp.stop() if self.cp is not None else None)
            for net in nets:  # run last to first: every node's processes, then its namespaces
                steps.callback(net.stop)
            for node in nodes:
                steps.callback(node.stop)
