"""A node's own namespaces on this host, what kind gives a node with a container, without the container:
a network namespace linked to the host by a veth pair, and a mount namespace in which the folders the
kubelet and the container runtime own (/var/lib/kubelet, /var/log/pods, /var/run/cdi, ...) are
bind-mounted from the node's workdir. Processes of the node run inside both (`enter`).

Addresses come from the node's slot N (the first free one on this machine): the link 10.255.N.0/30
(host .1, node .2), pods 10.244.N.0/24 on the node's bridge, Services 10.96.N.0/24. The host routes the
pod and Service ranges to the node, whose kube-proxy turns Service IPs into pod IPs, so the API server on
the host reaches webhooks through their Services as on a kubeadm node. The node has no default route:
nothing it or its pods send can leave this machine.

Several nodes make one cluster when each is given the first (`first=`): they share its Service range and
DNS address (the host routes Services to the first node only, so that node must be one no test takes
away), and each routes the other nodes' links and pod ranges through the host, which forwards between
them as a network between machines would. `cut()` takes the node off that network at once, as a pulled
cable or a dead machine does; `mend()` puts it back.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from webhook.devcluster.process import Process

# The folders a kubelet and containerd write outside their configured roots; each is bind-mounted from
# the workdir in the node's mount namespace, so two nodes (or a node and the machine) never share them.
NODE_FOLDERS = (
    "/run/containerd",  # the shims' sockets and runc's state, whatever containerd's own state folder
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/etc/cdi",
    "/var/run/cdi",
)
SLOTS = range(1, 200)
# Every node's pod range and link lie inside these; each node routes them through the host.
CLUSTER_PODS = "10.244.0.0/16"
CLUSTER_LINKS = "10.255.0.0/16"


class NodeNetError(RuntimeError):
    """The node's namespaces could not be made; the message says which step failed."""


def unavailable() -> str | None:
    """Why no node can be made here, or None when one can."""
    if os.geteuid() != 0:
        return "a node with a container runtime needs root (namespaces, mounts, cgroups)"
    for tool in ("unshare", "nsenter", "ip", "mount"):
        if not any(Path(folder, tool).exists() for folder in os.get_exec_path()):
            return f"{tool} is not installed: `bash scripts/runtime-bins --packages` installs it"
    return None


@dataclass
class NodeNamespaces:
    workdir: Path
    slot: int = 0
    holder: Process | None = None
    # Short, for the node's unix sockets (at most 107 bytes a path; a pytest workdir can be longer).
    sockets: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpushare-node-", dir="/tmp")))
    processes: list[Process] = field(default_factory=list)
    # The cluster's first node, whose Service range and DNS address this one shares; None: this is it.
    first: NodeNamespaces | None = None

    # -- addresses ----------------------------------------------------------------------------------
    @property
    def host_ip(self) -> str:
        return f"10.255.{self.slot}.1"

    @property
    def node_ip(self) -> str:
        return f"10.255.{self.slot}.2"

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.slot}.0/24"

    @property
    def pod_gateway(self) -> str:
        return f"10.244.{self.slot}.1"

    @property
    def service_cidr(self) -> str:
        return self.first.service_cidr if self.first is not None else f"10.96.{self.slot}.0/24"

    @property
    def dns_ip(self) -> str:
        return self.first.dns_ip if self.first is not None else f"10.96.{self.slot}.10"

    @property
    def host_link(self) -> str:
        return f"gsnode{self.slot}"

    @property
    def pid(self) -> int:
        assert self.holder is not None, "start() first"
        return self.holder.pid

    def folder(self, path: str) -> Path:
        """Where `path` of the node (one of NODE_FOLDERS) lies on the host."""
        return self.workdir / "fs" / path.strip("/").replace("/", "_")

    # -- life ---------------------------------------------------------------------------------------
    def start(self) -> NodeNamespaces:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._claim_slot()
        # A process that only holds the namespaces: every process of the node enters them (`enter`).
        self.holder = Process(
            "node-namespaces",
            ["unshare", "--mount", "--net", "--uts", "--propagation", "private", "sleep", "infinity"],
            self.workdir / "namespaces.log",
        ).start()
        self.holder.wait_until(self._entered, 10, "in its namespaces")
        _run(["ip", "link", "set", f"{self.host_link}p", "netns", str(self.pid)])
        _run(["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_link])
        _run(["ip", "link", "set", self.host_link, "up"])
        inside = [
            ["hostname", "gpushare-node"],
            ["ip", "link", "set", "lo", "up"],
            ["ip", "link", "set", f"{self.host_link}p", "name", "eth0"],
            ["ip", "addr", "add", f"{self.node_ip}/30", "dev", "eth0"],
            ["ip", "link", "set", "eth0", "up"],
            # The node routes between its pods' bridge and the host (its own namespace's setting only).
            ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
            # Volumes with mount propagation need a shared root inside (its own peer group: nothing
            # propagates to the host's mounts).
            ["mount", "--make-rshared", "/"],
        ]
        for argv in inside:
            _run(self.enter(argv))
        for path in NODE_FOLDERS:
            source = self.folder(path)
            source.mkdir(parents=True, exist_ok=True)
            _run(self.enter(["mkdir", "-p", path]))
            _run(self.enter(["mount", "--bind", str(source), path]))
        self._route()

    def _route(self) -> None:
        """The host's routes to the node's ranges, and the node's to the other nodes through the host
        (replaced, so that `mend()` can run them again: a link that went down lost its routes)."""
        own = [self.pod_cidr] if self.first is not None else [self.pod_cidr, self.service_cidr]
        for cidr in own:
            _run(["ip", "route", "replace", cidr, "via", self.node_ip, "dev", self.host_link])
        for cidr in (CLUSTER_PODS, CLUSTER_LINKS):
            _run(self.enter(["ip", "route", "replace", cidr, "via", self.host_ip, "dev", "eth0"]))

    def cut(self) -> None:
        """The node off the network at once: the host's end of its link down, so nothing reaches it and
        nothing it sends arrives (connections to it fail as to a machine that is gone)."""
        _run(["ip", "link", "set", self.host_link, "down"])

    def mend(self) -> None:
        """The link up again and its routes back."""
        _run(["ip", "link", "set", self.host_link, "up"])
        self._route()

    def _claim_slot(self) -> None:
        """The first slot whose ranges no route of this machine covers and whose link name is free:
        creating the veth pair is the lock."""
        routed = _routed()
        for slot in SLOTS:
            self.slot = slot
            ranges = (f"10.255.{slot}.0/30", self.pod_cidr, f"10.96.{slot}.0/24")
            if any(ipaddress.ip_network(cidr).overlaps(net) for cidr in ranges for net in routed):
                continue
            done = subprocess.run(
                ["ip", "link", "add", self.host_link, "type", "veth", "peer", "name", f"{self.host_link}p"],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode == 0:
                return
        raise NodeNetError(f"no free node slot on this machine (links gsnode{SLOTS[0]}..{SLOTS[-1]} exist)")

    def _entered(self) -> bool:
        mine = os.readlink("/proc/self/ns/net")
        return os.readlink(f"/proc/{self.pid}/ns/net") != mine

    def enter(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the node's namespaces."""
        return ["nsenter", "-t", str(self.pid), "--mount", "--net", "--uts", "--", *argv]

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> Process:
        """A long-running process of the node, inside its namespaces, logging to logs/<name>.log."""
        process = Process(name, self.enter(argv), self.workdir / "logs" / f"{name}.log", env=env).start()
        self.processes.append(process)
        return process

    def run(self, argv: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`argv` inside the node, to completion; NodeNetError with its output when it fails."""
        return _run(self.enter(argv), timeout)

    def stop(self) -> None:
        """Every process of the node killed (those its runtime left too), then its namespaces and link
        gone with the holder."""
        for process in reversed(self.processes):
            process.stop(grace=5)
        self.processes.clear()
        if self.holder is not None and self.holder.running():
            kill_namespace(self.pid)
            self.holder.stop(grace=1)
        self.holder = None
        if self.slot:
            subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, check=False)
        shutil.rmtree(self.sockets, ignore_errors=True)


def kill_namespace(holder: int) -> None:
    """SIGKILL every process in the network namespace of `holder` but the holder: what a runtime leaves
    behind when it stops (its shims) dies with the node."""
    try:
        target = os.readlink(f"/proc/{holder}/ns/net")
    except OSError:
        return
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == holder:
            continue
        with contextlib.suppress(OSError):
            if os.readlink(entry / "ns" / "net") == target:
                os.kill(int(entry.name), signal.SIGKILL)


def _routed() -> list[ipaddress.IPv4Network]:
    """The destinations this machine routes somewhere, but the default route."""
    listed = json.loads(_run(["ip", "-json", "-4", "route", "show", "table", "all"]).stdout or "[]")
    nets = []
    for route in listed:
        dst = route.get("dst", "default")
        if dst != "default" and not dst.startswith(("127.", "local", "broadcast")):
            with contextlib.suppress(ValueError):
                nets.append(ipaddress.ip_network(dst, strict=False))
    return [net for net in nets if isinstance(net, ipaddress.IPv4Network) and net.prefixlen > 0]


def _run(argv: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise NodeNetError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done
