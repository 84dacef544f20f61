"""etcd, kube-apiserver and kube-controller-manager on 127.0.0.1, started as a real cluster's control plane
is, minus kubelets.

TLS everywhere the API server serves, RBAC and Node authorization, bound service-account tokens, the
default admission plugins, save the one that waits for a kubelet (see `_DISABLED_ADMISSION`), and the
controllers, save the two that act on Nodes as if kubelets ran (controllermanager.py).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from webhook.devcluster import controllermanager
from webhook.devcluster import pki as pkimod
from webhook.devcluster.process import Process

SERVICE_RANGE = "10.0.0.0/24"
ISSUER = "https://kubernetes.default.svc.cluster.local"
# TaintNodesByCondition taints every new Node not-ready until a kubelet reports Ready and the node
# lifecycle controller lifts it; with no kubelet here, nothing could ever be scheduled.
_DISABLED_ADMISSION = ("TaintNodesByCondition",)
# NodeRestriction is not on by default but every real cluster runs it (kubeadm, kops, managed ones).
_ENABLED_ADMISSION = ("NodeRestriction",)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ControlPlane:
    """`start()` brings up etcd, kube-apiserver and kube-controller-manager under `workdir`; `stop()` ends
    them (idempotent)."""

    bins: Path
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpushare-cp-")))
    processes: list[Process] = field(default_factory=list)
    port: int = 0
    pki: pkimod.Pki | None = None
    # Where kube-apiserver listens and what it advertises as the `kubernetes` Service's endpoint: loopback
    # when no pod needs to reach it, the host's end of a node's link when pods run (devcluster/nodenet.py).
    address: str = "127.0.0.1"
    service_range: str = SERVICE_RANGE
    # The cluster's default kube-scheduler, as kubeadm runs it: needed once pods that no test schedules
    # by hand (DaemonSets, the chart's Deployments, cluster DNS) must reach a node.
    default_scheduler: bool = False
    # Every Node has a kubelet: the node lifecycle controller runs (controllermanager.py).
    node_lifecycle: bool = False

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}"

    @property
    def service_ip(self) -> str:
        """The `kubernetes` Service's ClusterIP: the first address of the service range."""
        return str(next(ipaddress.ip_network(self.service_range).hosts()))

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    def start(self, timeout: float = 90.0) -> ControlPlane:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        self.pki = pki = pkimod.create(self.workdir / "pki", (self.address, self.service_ip, "127.0.0.1"))
        client_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client_port}"
        etcd = self._spawn(
            "etcd",
            [
                str(self.bins / "etcd"),
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",  # tests throw the data away; fsync only slows them
                "--log-level=warn",
            ],
        )
        etcd.wait_until(lambda: _get(f"{etcd_url}/health").get("health") == "true", timeout, "healthy")
        self.port = free_port()
        kubelet_crt, kubelet_key = pkimod.client(
            pki, "apiserver-kubelet-client", "kube-apiserver", ["system:masters"]
        )
        apiserver = self._spawn(
            "kube-apiserver",
            [
                str(self.bins / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                *self._endpoint_reconciler(),
                f"--secure-port={self.port}",
                f"--tls-cert-file={pki.crt('apiserver')}",
                f"--tls-private-key-file={pki.key('apiserver')}",
                "--tls-min-version=VersionTLS12",
                f"--client-ca-file={pki.ca_crt}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={self.service_range}",
                # Its identity towards kubelets (logs, exec, port-forward), authorized by their webhook.
                f"--kubelet-client-certificate={kubelet_crt}",
                f"--kubelet-client-key={kubelet_key}",
                # Kubelets are dialled at the address they report, not at a host name no DNS here knows.
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--authorization-mode=Node,RBAC",
                # The front proxy, as kubeadm configures it (pki.py): without it, kube-scheduler in a pod
                # logs "missing content for CA bundle" each time it reads extension-apiserver-authentication.
                f"--requestheader-client-ca-file={pki.crt('front-proxy-ca')}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.crt('front-proxy-client')}",
                f"--proxy-client-key-file={pki.key('front-proxy-client')}",
                f"--enable-admission-plugins={','.join(_ENABLED_ADMISSION)}",
                f"--disable-admission-plugins={','.join(_DISABLED_ADMISSION)}",
                "--allow-privileged=true",  # the device plugin's DaemonSet is privileged
                "--profiling=false",
                "--v=1",
            ],
        )
        apiserver.wait_until(self._ready, timeout, "ready")
        self.write_kubeconfig(
            self.admin_kubeconfig,
            user={
                "client-certificate": str(pki.crt("admin")),
                "client-key": str(pki.key("admin")),
            },
        )
        self._start_controller_manager(timeout)
        if self.default_scheduler:
            self._start_default_scheduler(timeout)

    def _endpoint_reconciler(self) -> list[str]:
        if ipaddress.ip_address(self.address).is_loopback:
            # From 1.37 the `kubernetes` Service's endpoint reconciler refuses a loopback address; no pod
            # reaches an API server on loopback through that Service anyway.
            return ["--endpoint-reconciler-type=none"]
        return []  # the default (lease): pods reach it at the Service's ClusterIP

    def _start_default_scheduler(self, timeout: float) -> None:
        """kube-scheduler as kubeadm starts it: user system:kube-scheduler (the default RBAC binds it),
        one instance, its probes on loopback at a free port."""
        assert self.pki is not None
        crt, key = pkimod.client(self.pki, "kube-scheduler", "system:kube-scheduler", [])
        kubeconfig = self.write_kubeconfig(
            self.workdir / "scheduler.kubeconfig",
            user={"client-certificate": str(crt), "client-key": str(key)},
        )
        config = self.workdir / "scheduler.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(kubeconfig)},
                    "leaderElection": {"leaderElect": False},
                }
            )
        )
        port = free_port()
        scheduler = self._spawn(
            "kube-scheduler",
            [
                str(self.bins / "kube-scheduler"),
                f"--config={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--profiling=false",
                "--v=1",
            ],
        )
        scheduler.wait_until(
            lambda: _healthy_insecure(f"https://127.0.0.1:{port}/healthz"), timeout, "healthy"
        )

    def _start_controller_manager(self, timeout: float) -> None:
        assert self.pki is not None
        crt, key = pkimod.client(self.pki, "controller-manager", controllermanager.USER, [])
        kubeconfig = self.write_kubeconfig(
            self.workdir / "controller-manager.kubeconfig",
            user={"client-certificate": str(crt), "client-key": str(key)},
        )
        port = free_port()
        manager = self._spawn(
            controllermanager.NAME,
            controllermanager.argv(
                self.bins, self.pki, kubeconfig, port, self.workdir, node_lifecycle=self.node_lifecycle
            ),
        )
        pki = self.pki
        manager.wait_until(lambda: controllermanager.healthy(pki, port), timeout, "healthy")
        # Healthy is not yet at work: the serviceaccount controller's first ServiceAccount says the
        # controllers run with their own credentials and their informers have synced.
        manager.wait_until(
            lambda: self._exists("/api/v1/namespaces/default/serviceaccounts/default"),
            timeout,
            "creating the default ServiceAccount",
        )

    def _spawn(self, name: str, argv: list[str]) -> Process:
        process = Process(name, argv, self.logs / f"{name}.log").start()
        self.processes.append(process)
        return process

    def _ready(self) -> bool:
        return self.get_raw("/readyz") == b"ok"

    def _exists(self, path: str) -> bool:
        try:
            self.get_raw(path)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return False
            raise
        return True

    def ssl_context(self) -> ssl.SSLContext:
        """A client context trusting the cluster CA, presenting the admin certificate."""
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca_crt))
        context.load_cert_chain(str(self.pki.crt("admin")), str(self.pki.key("admin")))
        return context

    def get_raw(self, path: str, timeout: float = 5.0) -> bytes:
        """GET `path` as admin (for /readyz, /metrics and the like)."""
        with urllib.request.urlopen(self.url + path, timeout=timeout, context=self.ssl_context()) as reply:
            body: bytes = reply.read()
            return body

    def write_kubeconfig(self, path: Path, user: dict[str, str], namespace: str = "default") -> Path:
        """A kubeconfig for this API server with the given `user` entry (token or client cert)."""
        assert self.pki is not None
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gpushare",
                    "cluster": {"server": self.url, "certificate-authority": str(self.pki.ca_crt)},
                }
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [
                {
                    "name": "gpushare",
                    "context": {"cluster": "gpushare", "user": "user", "namespace": namespace},
                }
            ],
            "current-context": "gpushare",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def stop(self) -> None:
        # The API server first, so it never logs a storm of etcd connection errors on the way down.
        for process in reversed(self.processes):
            process.stop()


def _healthy_insecure(url: str) -> bool:
    """A component's /healthz over its self-signed serving certificate (only whether it answers ok)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=2, context=context) as reply:
        body: bytes = reply.read()
        return body == b"ok"


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=2) as reply:
        data: dict[str, Any] = json.loads(reply.read())
        return data
