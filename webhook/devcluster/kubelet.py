"""A real kubelet for a local control plane, on the CRI fake runtime (`fakecri`, built by scripts/kube-bins).

No container ever runs: `fakecri` (k8s.io/cri-client's fake runtime) keeps sandboxes and containers in
memory and reports them running. Everything else is the kubelet's own: node registration, pod admission,
the device manager (which dials our device plugin over its real gRPC, calls GetPreferredAllocation and
Allocate, and checkpoints what it gave), and the PodResources API.

    kubelet = Kubelet(bins, cp, workdir, node="kl-node", taints=("gpushare-e2e=kubelet:NoSchedule",)).start()
    ...
    kubelet.stop()

Fixed by the kubelet, not by us: its device-plugin folder is /var/lib/kubelet/device-plugins/ (a
constant of the device-plugin API), so only one such kubelet runs on a machine at a time, as root; unless it
is given a `plugin_dir` of its own: then it runs in a mount namespace of its own (`unshare`) where that
folder is bind-mounted over the constant one, so several kubelets run side by side (`gpushare demo`).
It runs with cgroups v1 allowed and without QoS cgroups or node-allocatable enforcement: those need a
host the kubelet owns, and change nothing the device manager does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

from webhook.devcluster import pki as pkimod
from webhook.devcluster.controlplane import ControlPlane, free_port
from webhook.devcluster.process import Process

NAMES = ("kubelet", "fakecri")
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")


class KubeletUnavailable(RuntimeError):
    """This machine cannot run the kubelet here; the message says why."""


def available(bins: Path) -> str | None:
    """Why a kubelet cannot run here, or None when it can."""
    missing = [name for name in NAMES if not os.access(bins / name, os.X_OK)]
    if missing:
        return f"{', '.join(missing)} not built in {bins}: run `bash scripts/kube-bins`"
    if os.geteuid() != 0:
        return "the kubelet needs root (it owns /var/lib/kubelet/device-plugins and the pod folders)"
    return None


def private_available(bins: Path) -> str | None:
    """Why a kubelet with a `plugin_dir` of its own cannot run here, or None when it can."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed: each kubelet needs a mount namespace of its own"
    return available(bins)


@dataclass
class Kubelet:
    bins: Path
    cp: ControlPlane
    workdir: Path
    node: str = "kubelet-node"
    labels: Mapping[str, str] = field(default_factory=dict)  # registered with the Node
    taints: Sequence[str] = ()  # key=value:Effect, registered with the Node
    # Its own device-plugin folder (a mount namespace of its own, see above); None: the machine's.
    plugin_dir: Path | None = None
    processes: list[Process] = field(default_factory=list)

    @property
    def device_plugin_dir(self) -> Path:
        """Where a device plugin for this kubelet puts its socket and finds the kubelet's."""
        return self.plugin_dir or DEVICE_PLUGIN_DIR

    @property
    def root_dir(self) -> Path:
        return self.workdir / "root"

    @property
    def pod_resources_socket(self) -> Path:
        return self.root_dir / "pod-resources" / "kubelet.sock"

    def start(self, timeout: float = 60.0) -> Kubelet:
        reason = available(self.bins) if self.plugin_dir is None else private_available(self.bins)
        if reason is not None:
            raise KubeletUnavailable(reason)
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        assert self.cp.pki is not None
        self.workdir.mkdir(parents=True, exist_ok=True)
        DEVICE_PLUGIN_DIR.mkdir(parents=True, exist_ok=True)  # the mount point, when plugin_dir is set
        cri = self.workdir / "cri.sock"
        fakecri = self._spawn("fakecri", [str(self.bins / "fakecri"), f"unix://{cri}"])
        fakecri.wait_until(cri.exists, timeout, "listening")
        kubeconfig = identity(self.cp, self.node, self.workdir)
        config = self.workdir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self._config(cri)))
        kubelet = self._spawn(
            "kubelet",
            [
                *self._namespace(),
                str(self.bins / "kubelet"),
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.root_dir}",
                f"--cert-dir={self.workdir / 'pki'}",
                f"--hostname-override={self.node}",
                *([f"--node-labels={_pairs(self.labels)}"] if self.labels else []),
                *([f"--register-with-taints={','.join(self.taints)}"] if self.taints else []),
                "--v=2",
            ],
        )
        kubelet.wait_until(lambda: node_ready(self.cp, self.node), timeout, "Ready")

    def _namespace(self) -> list[str]:
        """The command that runs the kubelet with `plugin_dir` mounted over the constant folder, in a mount
        namespace of its own: private, so neither the mount nor what the kubelet mounts (its root folder
        onto itself, the pods' token tmpfs) reaches the machine's, and all of it goes with the kubelet."""
        if self.plugin_dir is None:
            return []
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        mount = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            mount,
            "sh",
            str(self.plugin_dir),
            str(DEVICE_PLUGIN_DIR),
        ]

    def _config(self, cri: Path) -> dict[str, object]:
        assert self.cp.pki is not None
        return {
            **base_config(f"unix://{cri}"),
            # Its own API on a free port (it shares the machine's network), with client-certificate
            # authentication only.
            "port": free_port(),
            "healthzPort": 0,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.cp.pki.ca_crt)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
        }

    def _spawn(self, name: str, argv: list[str]) -> Process:
        process = Process(name, argv, self.cp.logs / f"{name}-{self.node}.log").start()
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop(grace=5)
        self.processes.clear()
        unmount_under(self.workdir)


def identity(cp: ControlPlane, node: str, workdir: Path) -> Path:
    """A kubeconfig with the identity a kubelet has in a real cluster (user system:node:<node> in group
    system:nodes), so Node authorization and NodeRestriction apply to it."""
    assert cp.pki is not None
    crt, key = pkimod.client(cp.pki, f"kubelet-{node}", f"system:node:{node}", ["system:nodes"])
    return cp.write_kubeconfig(
        workdir / "kubelet.kubeconfig", user={"client-certificate": str(crt), "client-key": str(key)}
    )


def node_ready(cp: ControlPlane, node: str, since: datetime | None = None) -> bool:
    """Whether Node `node` exists and its kubelet reports it Ready; with `since`, in a status posted at
    or after that time (a restarted kubelet's, not the Ready its predecessor left)."""
    try:
        found = json.loads(cp.get_raw(f"/api/v1/nodes/{node}"))
    except OSError:
        return False
    for condition in found.get("status", {}).get("conditions", []):
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            if since is None:
                return True
            beat = datetime.fromisoformat(condition.get("lastHeartbeatTime", "1970-01-01T00:00:00Z"))
            return beat >= since.replace(microsecond=0)
    return False


def base_config(runtime_endpoint: str) -> dict[str, object]:
    """What every kubelet here is configured with, whatever runs its containers."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "readOnlyPort": 0,
        "containerRuntimeEndpoint": runtime_endpoint,
        "imageServiceEndpoint": runtime_endpoint,
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,  # the machines here have cgroups v1
        "failSwapOn": False,
        # Device-plugin capacity reaches the Node with the next status update: every second here
        # (default 10 s), posted only when it changed (or each minute), so tests wait seconds.
        "nodeStatusUpdateFrequency": "1s",
        "nodeStatusReportFrequency": "1m",
        "registerNode": True,
    }


def unmount_under(folder: Path) -> None:
    """Detach what the kubelet mounted below `folder` (its root folder bind-mounted onto itself, each
    pod's token tmpfs): it leaves them when it stops, and they would pin the folder forever."""
    prefix = str(folder.resolve()) + "/"
    with open("/proc/self/mounts") as table:
        points = [line.split()[1] for line in table]
    # /proc/self/mounts escapes spaces and such as octal (\040); our folders have none.
    for point in reversed(points):
        if point.startswith(prefix):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def _pairs(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in labels.items())
