"""A node that runs real containers: containerd (runc, the CNI plugins), the real kubelet and kube-proxy,
inside the node's own namespaces (nodenet.py), registered with a control plane on this host.

    net = nodenet.NodeNamespaces(workdir / "node").start()
    cp = ControlPlane(bins, address=net.host_ip, service_range=net.service_cidr, default_scheduler=True)
    node = RuntimeNode(bins, runtime_bins, cp.start(), net, images=tars).start()

The kubelet is configured as kubeadm configures one, where these machines allow it: client-certificate
identity `system:node:<name>` (Node authorization, NodeRestriction), webhook authentication and
authorization of its own API, the cgroupfs driver with QoS cgroups under a root of the node's own
(`/gpushare-node-<slot>`: two nodes, or a node and the machine, never share a cgroup), cluster DNS at
the Service range's tenth address. cgroups v1 stay allowed (`failCgroupV1: false`): these machines are
hybrid. Eviction thresholds sit at the floor so a busy shared disk never evicts the tests' pods, and image
garbage collection is off, since every image was imported and none can be pulled again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml

from webhook.devcluster import kubelet as kubeletmod
from webhook.devcluster import pki as pkimod
from webhook.devcluster.containerd import Containerd
from webhook.devcluster.controlplane import ControlPlane
from webhook.devcluster.nodenet import CLUSTER_PODS, NodeNamespaces
from webhook.devcluster.process import Process, http_status

CGROUPS = Path("/sys/fs/cgroup")
KUBE_PROXY_HEALTH_PORT = 10256


@dataclass
class RuntimeNode:
    kube_bins: Path
    runtime_bins: Path
    cp: ControlPlane
    net: NodeNamespaces
    images: Sequence[Path] = ()  # archives imported into containerd before the kubelet starts
    sandbox_image: str = "localhost/pause:gpushare"  # among them (scripts/node-images)
    name: str = "gpu-node"
    labels: Mapping[str, str] = field(default_factory=dict)  # registered with the Node
    containerd: Containerd | None = None
    kubelet: Process | None = None
    proxy: Process | None = None

    @property
    def cgroup_root(self) -> str:
        return f"/gpushare-node-{self.net.slot}"

    @property
    def kubelet_dir(self) -> Path:
        """The node's /var/lib/kubelet, as the host sees it."""
        return self.net.folder("/var/lib/kubelet")

    def start(self, timeout: float = 120) -> RuntimeNode:
        try:
            self._make_cgroups()
            self.containerd = Containerd(self.runtime_bins, self.net, self.sandbox_image).start()
            self.containerd.import_images(self.images)
            self.start_proxy(timeout)
            self.start_kubelet(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    # -- the kubelet ---------------------------------------------------------------------------------
    def start_kubelet(self, timeout: float = 120) -> Process:
        assert self.containerd is not None and self.cp.pki is not None
        workdir = self.net.workdir
        kubeconfig = kubeletmod.identity(self.cp, self.name, workdir)
        config = workdir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self._kubelet_config()))
        argv = [
            str(self.kube_bins / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.net.node_ip}",
            "--v=2",
        ]
        if self.labels:
            argv.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in self.labels.items()))
        started = datetime.now(UTC)
        self.kubelet = self.net.spawn("kubelet", argv)

        def ready() -> bool:  # a status of this kubelet's, not the Ready a predecessor left
            return kubeletmod.node_ready(self.cp, self.name, since=started)

        self.kubelet.wait_until(ready, timeout, "Ready")
        return self.kubelet

    def _kubelet_config(self) -> dict[str, object]:
        assert self.containerd is not None and self.cp.pki is not None
        return {
            **kubeletmod.base_config(self.containerd.endpoint),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cp.pki.ca_crt)},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupsPerQOS": True,
            "cgroupRoot": self.cgroup_root,
            "clusterDNS": [self.net.dns_ip],
            "clusterDomain": "cluster.local",
            "resolvConf": "",  # pods get the cluster's DNS only, never this machine's resolvers
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "containerLogMaxSize": "10Mi",
        }

    def restart_kubelet(self, timeout: float = 120) -> Process:
        """The kubelet stopped (SIGTERM) and started again; its pods keep running meanwhile."""
        self._stop(self.kubelet)
        return self.start_kubelet(timeout)

    def restart_containerd(self, timeout: float = 60) -> None:
        """containerd stopped (SIGTERM) and started again; the containers' shims keep them running."""
        assert self.containerd is not None
        self.containerd.stop()
        self.containerd.start(timeout)

    def crash(self) -> None:
        """The node lost at once: its kubelet, containerd and kube-proxy SIGKILLed and its network cut
        (nodenet.cut). Its containers keep running, cut off, as on a machine that is partitioned away:
        nothing tells the API server anything, the node lifecycle controller has to notice."""
        for process in (self.kubelet, self.proxy, self.containerd.process if self.containerd else None):
            if process is not None:
                process.kill()
                if process in self.net.processes:
                    self.net.processes.remove(process)
        self.kubelet = self.proxy = None
        if self.containerd is not None:
            self.containerd.process = None
        self.net.cut()

    def recover(self, timeout: float = 120) -> None:
        """The lost node back: its network mended, then containerd, kube-proxy and the kubelet started
        as a machine's boot starts them; the kubelet reconciles the containers it finds."""
        assert self.containerd is not None
        self.net.mend()
        self.containerd.start(timeout)
        self.start_proxy(timeout)
        self.start_kubelet(timeout)

    # -- kube-proxy ----------------------------------------------------------------------------------
    def start_proxy(self, timeout: float = 60) -> Process:
        """kube-proxy in iptables mode as user system:kube-proxy (the default RBAC binds it). The node's
        namespace cannot set the machine-wide conntrack sysctls, so it is told not to (as kind does)."""
        assert self.cp.pki is not None
        workdir = self.net.workdir
        crt, key = pkimod.client(self.cp.pki, f"kube-proxy-{self.name}", "system:kube-proxy", [])
        kubeconfig = self.cp.write_kubeconfig(
            workdir / "kube-proxy.kubeconfig", user={"client-certificate": str(crt), "client-key": str(key)}
        )
        health = f"{self.net.node_ip}:{KUBE_PROXY_HEALTH_PORT}"
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": self.name,
            "mode": "iptables",
            # Every node's pods: traffic from outside them (the API server on the host) to a Service is
            # masqueraded, so a reply from a pod on another node comes back through this node's NAT.
            "clusterCIDR": CLUSTER_PODS,
            "healthzBindAddress": health,
            "metricsBindAddress": "127.0.0.1:10249",
            "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }
        path = workdir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        self.proxy = self.net.spawn(
            "kube-proxy", [str(self.kube_bins / "kube-proxy"), f"--config={path}", "--v=1"]
        )
        url = f"http://{health}/livez"
        self.proxy.wait_until(lambda: http_status(url, None) == 200, timeout, "serving")
        return self.proxy

    # -- cgroups and teardown ------------------------------------------------------------------------
    def _hierarchies(self) -> list[Path]:
        return [d for d in CGROUPS.iterdir() if d.is_dir() and (d / "cgroup.procs").exists()]

    def _make_cgroups(self) -> None:
        """The kubelet's cgroup root in every hierarchy (it must exist before the kubelet starts)."""
        for hierarchy in self._hierarchies():
            folder = hierarchy / self.cgroup_root.strip("/")
            folder.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset is empty until given its parent's
                if (folder / name).exists() and not (folder / name).read_text().strip():
                    (folder / name).write_text((hierarchy / name).read_text())

    def _kill_pods(self) -> None:
        """SIGKILL every process in the node's cgroups (its containers, whatever the runtime's state),
        then remove the cgroups."""
        roots = [hierarchy / self.cgroup_root.strip("/") for hierarchy in self._hierarchies()]
        for _ in range(50):
            pids = {
                int(pid)
                for root in roots
                for folder in _below(root)
                for pid in _read(folder / "cgroup.procs").split()
            }
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        for root in roots:
            for folder in _below(root):  # the deepest first
                with contextlib.suppress(OSError):
                    folder.rmdir()

    def _stop(self, process: Process | None) -> None:
        if process is not None:
            process.stop(grace=10)
            if process in self.net.processes:
                self.net.processes.remove(process)

    def stop(self) -> None:
        self._stop(self.kubelet)
        self.kubelet = None
        self._kill_pods()
        if self.containerd is not None:
            self.containerd.stop()
        self._stop(self.proxy)
        self.proxy = None


def _below(root: Path) -> list[Path]:
    """`root` and every cgroup below it, the deepest first (folders that vanish meanwhile are skipped)."""
    return [Path(folder) for folder, _, _ in os.walk(root, topdown=False)]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
