"""containerd as a node's container runtime: its configuration, its start inside the node's namespaces,
and the images a node runs, imported from tar files (nothing is pulled).

The configuration is containerd 2.x's version 3, the CRI plugin's settings only where ours differ from its
defaults: runc (Debian's; crun refuses these machines' hybrid cgroups) with cgroupfs, as the kubelet;
the sandbox image pinned to the one we build; the CNI plugins we build and the node's network list; the
pods' network namespaces under containerd's state folder (not the machine's /var/run/netns); no
oom_score_adj below containerd's own, since these machines keep CAP_SYS_RESOURCE from root (runc
could not give a sandbox -998). CDI is on by default in 2.x, reading /etc/cdi and /var/run/cdi of the
node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from webhook.devcluster.nodenet import NodeNamespaces
from webhook.devcluster.process import Process, child_env

NAMESPACE = "k8s.io"  # containerd's namespace of the CRI plugin: the kubelet's images and containers
CNI_NETWORK = "gpushare-node"


@dataclass
class Containerd:
    bins: Path  # scripts/runtime-bins' folder: bin/ and cni/
    node: NodeNamespaces
    sandbox_image: str
    process: Process | None = None

    @property
    def root(self) -> Path:
        return self.node.workdir / "containerd"

    @property
    def socket(self) -> Path:
        return self.node.sockets / "containerd.sock"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    @property
    def registry_hosts(self) -> Path:
        """containerd's registry config folder: one `<host:port>/hosts.toml` per registry it may pull from,
        read at each pull."""
        return self.root / "certs.d"

    def trust_registry(self, address: str, hosts_toml: str) -> None:
        """Pull from the registry at `address` (host:port) as `hosts_toml` says (plain HTTP for the bed's)."""
        folder = self.registry_hosts / address
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts.toml").write_text(hosts_toml)

    def config(self) -> str:
        runc = shutil.which("runc") or "runc"
        return f"""version = 3
root = "{self.root / "root"}"
state = "{self.root / "state"}"

[grpc]
  address = "{self.socket}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{self.sandbox_image}"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "{self.registry_hosts}"

[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{self.bins / "cni"}"]
    conf_dir = "{self.root / "cni"}"
"""

    def cni_config(self) -> dict[str, object]:
        """The pods' network: a bridge with the node as gateway and masquerade off the pod range, hosts
        from the node's pod range; loopback and portmap (hostPorts) beside it."""
        node = self.node
        return {
            "cniVersion": "1.0.0",
            "name": CNI_NETWORK,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": node.pod_cidr, "gateway": node.pod_gateway}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }

    def start(self, timeout: float = 30) -> Containerd:
        (self.root / "cni").mkdir(parents=True, exist_ok=True)
        (self.root / "cni" / "10-gpushare-node.conflist").write_text(json.dumps(self.cni_config(), indent=2))
        config = self.root / "config.toml"
        config.write_text(self.config())
        self.process = self.node.spawn(
            "containerd",
            [str(self.bins / "bin" / "containerd"), "--config", str(config), "--log-level", "warn"],
            # It starts the shims by name: ours first on its PATH.
            env=child_env(
                {"PATH": f"{self.bins / 'bin'}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}
            ),
        )
        self.process.wait_until(lambda: self.ctr("version").returncode == 0, timeout, "serving")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(grace=10)
            self.node.processes.remove(self.process)
            self.process = None

    def ctr(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`ctr` against this containerd, in the CRI's namespace."""
        argv = [str(self.bins / "bin" / "ctr"), "--address", str(self.socket), "--namespace", NAMESPACE]
        return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout, check=False)

    def import_images(self, tars: Iterable[Path]) -> list[str]:
        """Each tar (docker or OCI archive) imported for the kubelet; the image names now known."""
        for tar in tars:
            done = self.ctr("images", "import", "--local", str(tar))
            if done.returncode != 0:
                raise RuntimeError(f"ctr images import {tar} failed: {done.stderr.strip()}")
        listed = self.ctr("images", "list", "--quiet")
        return listed.stdout.split()
