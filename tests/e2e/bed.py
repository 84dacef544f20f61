"""The end-to-end test bed: the chart installed by Helm into a real kube-apiserver, and our three parts
run on this host the way the chart runs them, each with its own ServiceAccount's token.

Everything a part gets is read back from the API server after `helm install`: the webhook's config
from its ConfigMap, the extender's and the device plugin's flags from their Deployment and DaemonSet,
kube-scheduler's KubeSchedulerConfiguration from the chart's ConfigMap. Only what a host cannot take
from a pod is changed: listen addresses, ports, the kubeconfig (a token of the chart's ServiceAccount)
and the device-plugin socket folder. No kubelet runs; Node objects carry GPU capacity in their status.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client
import yaml

from tests.chart.render import CHART, helm_binary
from webhook.core import resources
from webhook.devcluster import pki as pkimod
from webhook.devcluster.controlplane import ControlPlane, free_port
from webhook.devcluster.process import Process
from webhook.kube import client, errors, rest

Obj = dict[str, Any]
GPUSHARE = str(Path(sys.executable).with_name("gpushare"))
RELEASE = "gs"
NAMESPACE = "gpu-system"
FULLNAME = f"{RELEASE}-gpushare"
SCHEDULER_NAME = "gpushare-scheduler"
GROUP = "e2e-group"


def admin_api(cp: ControlPlane) -> kubernetes.client.ApiClient:
    return client.connect(client.ClientSettings(kubeconfig=str(cp.admin_kubeconfig)))


@dataclass
class Bed:
    """A started control plane plus the helpers the tests share; parts are started by the tests."""

    cp: ControlPlane
    root: Path
    api: kubernetes.client.ApiClient
    processes: list[Process] = field(default_factory=list)
    webhook_port: int = field(default_factory=free_port)
    extender_port: int = field(default_factory=free_port)

    # -- Helm ---------------------------------------------------------------------------------------
    def helm(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        binary = helm_binary()
        assert binary, "helm missing: scripts/install-helm installs it"
        argv = [binary, "--kubeconfig", str(self.cp.admin_kubeconfig), *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result

    def values(self, **overrides: Any) -> Obj:
        """The release's values: webhook at a host URL with our CA, scheduler mode (b), host extender."""
        assert self.cp.pki is not None
        base: Obj = {
            "webhook": {"url": f"https://127.0.0.1:{self.webhook_port}"},
            "certificates": {"mode": "provided", "provided": {"caCrt": self.cp.pki.ca_crt.read_text()}},
            "extender": {"urlPrefix": f"http://127.0.0.1:{self.extender_port}/gpushare-scheduler"},
            "scheduler": {"mode": "second"},
        }
        return _merge(base, overrides)

    def install(self, release: str = RELEASE, namespace: str = NAMESPACE, **overrides: Any) -> None:
        values = self.root / f"values-{release}.json"
        values.write_text(json.dumps(self.values(**overrides)))
        # No --wait: no kubelet runs the chart's pods. Hooks run (there are none with provided certificates).
        self.helm(
            "install",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--create-namespace",
            "--values",
            str(values),
        )

    def manifest(self, release: str = RELEASE, namespace: str = NAMESPACE) -> list[Obj]:
        out = self.helm("get", "manifest", release, "--namespace", namespace).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]

    # -- API helpers --------------------------------------------------------------------------------
    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        return rest.request(self.api, method, path, **kwargs)

    def configmap(self, name: str, key: str, namespace: str = NAMESPACE) -> str:
        data: str = self.request("GET", rest.path("configmaps", name, namespace))["data"][key]
        return data

    def container_args(self, plural: str, name: str, namespace: str = NAMESPACE) -> list[str]:
        obj = self.request("GET", rest.path(plural, name, namespace, group="apps"))
        args: list[str] = obj["spec"]["template"]["spec"]["containers"][0]["args"]
        return args

    def namespace(self, name: str, labels: Mapping[str, str] | None = None) -> str:
        """A namespace and its `default` ServiceAccount (which kube-controller-manager would create;
        the ServiceAccount admission plugin refuses pods until it exists)."""
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": dict(labels or {})},
        }
        _create(self, rest.path("namespaces"), body)
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
        _create(self, rest.path("serviceaccounts", namespace=name), sa)
        return name

    def token(self, name: str, namespace: str = NAMESPACE, bound_pod: Obj | None = None) -> str:
        """A bound token of ServiceAccount `name` (TokenRequest), as the kubelet would project it."""
        spec: Obj = {"expirationSeconds": 7200}
        if bound_pod is not None:
            meta = bound_pod["metadata"]
            spec["boundObjectRef"] = {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta["name"],
                "uid": meta["uid"],
            }
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        reply = self.request("POST", rest.path("serviceaccounts", name, namespace) + "/token", body=body)
        token: str = reply["status"]["token"]
        return token

    def kubeconfig(self, service_account: str, bound_pod: Obj | None = None) -> Path:
        path = self.root / "kubeconfigs" / f"{service_account}-{time.monotonic_ns()}.kubeconfig"
        return self.cp.write_kubeconfig(path, {"token": self.token(service_account, bound_pod=bound_pod)})

    def node(
        self, name: str, gpus: int, gib_each: int, labels: Mapping[str, str] | None = None, group: str = ""
    ) -> Obj:
        """A Node with GPU capacity in its status, as a kubelet with our device plugin would report it.
        A `group` node is labelled and tainted so only that group's pods (objects.in_group) land there:
        tests that count exact memory are not disturbed by other tests' pending pods."""
        node_labels = {"kubernetes.io/hostname": name, resources.GPU_COUNT_LABEL: str(gpus), **(labels or {})}
        body: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": node_labels}}
        if group:
            node_labels[GROUP] = group
            body["spec"] = {"taints": [{"key": GROUP, "value": group, "effect": "NoSchedule"}]}
        node = _create(self, rest.path("nodes"), body)
        capacity = {
            "cpu": "64",
            "memory": "512Gi",
            "pods": "250",
            resources.GPU_MEMORY: str(gpus * gib_each),
            resources.GPU_COUNT: str(gpus),
        }
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        node["status"] = {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        }
        updated: Obj = self.request("PUT", rest.path("nodes", name) + "/status", body=node)
        return updated

    def pods(self, namespace: str) -> list[Obj]:
        return list(rest.list_all(self.api, rest.path("pods", namespace=namespace)))

    def events(self, namespace: str, pod: str) -> list[Obj]:
        items = self.request(
            "GET",
            rest.path("events", namespace=namespace),
            query={"fieldSelector": f"involvedObject.name={pod}"},
        )["items"]
        return list(items)

    def wait(self, what: str, predicate: Any, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")

    # -- Our parts, run on this host as the chart runs them -------------------------------------------
    def spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Process:
        process = Process(name, argv, self.cp.logs / f"{name}.log", env={**os.environ, **(env or {})}).start()
        self.processes.append(process)
        return process

    def start_webhook(self) -> Process:
        assert self.cp.pki is not None
        cert, key = pkimod.serving(self.cp.pki, "webhook", ("localhost",), ("127.0.0.1",))
        config = self.root / "webhook-config.yaml"
        config.write_text(self.configmap(f"{FULLNAME}-webhook", "config.yaml"))
        process = self.spawn(
            "webhook",
            [
                GPUSHARE,
                "webhook",
                "--config",
                str(config),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.webhook_port),
                "--cert",
                str(cert),
                "--key",
                str(key),
                "--log-format",
                "text",
            ],
        )
        context = ssl.create_default_context(cafile=str(self.cp.pki.ca_crt))
        url = f"https://127.0.0.1:{self.webhook_port}/readyz"
        process.wait_until(lambda: _status(url, context) == 200, 30, "ready")
        return process

    def start_extender(self, identity: str = "extender-0") -> Process:
        args = _override(
            self.container_args("deployments", f"{FULLNAME}-extender"),
            {
                "--host": "127.0.0.1",
                "--port": str(self.extender_port),
                "--advertise-url": f"http://127.0.0.1:{self.extender_port}",
            },
        )
        kubeconfig = self.kubeconfig(f"{FULLNAME}-extender")
        process = self.spawn(
            identity,
            [GPUSHARE, *args, "--kubeconfig", str(kubeconfig), "--log-format", "text"],
            env={"POD_NAME": identity, "POD_NAMESPACE": NAMESPACE},
        )
        url = f"http://127.0.0.1:{self.extender_port}/readyz"
        process.wait_until(lambda: _status(url, None) == 200, 30, "ready")
        return process

    def start_scheduler(self) -> Process:
        config = yaml.safe_load(self.configmap(f"{FULLNAME}-scheduler", "config.yaml"))
        config["clientConnection"] = {"kubeconfig": str(self.kubeconfig(f"{FULLNAME}-scheduler"))}
        path = self.root / "scheduler-config.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        process = self.spawn(
            "kube-scheduler",
            [
                str(self.cp.bins / "kube-scheduler"),
                f"--config={path}",
                f"--secure-port={port}",
                "--bind-address=127.0.0.1",
                "--v=2",
            ],
        )
        context = ssl._create_unverified_context()  # the scheduler's self-signed serving cert
        process.wait_until(lambda: _status(f"https://127.0.0.1:{port}/readyz", context) == 200, 60, "ready")
        return process

    def device_plugin_pod(self, node: str) -> Obj:
        """The DaemonSet's pod on `node`, as its controller and the scheduler would leave it."""
        sa = f"{FULLNAME}-device-plugin"
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{sa}-{node}"},
            "spec": {
                "nodeName": node,
                "serviceAccountName": sa,
                "containers": [{"name": "device-plugin", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
        return _create(self, rest.path("pods", namespace=NAMESPACE), body)

    def device_plugin_kubeconfig(self, node: str) -> Path:
        """A kubeconfig with the device plugin's token bound to its pod on `node`: the API server then
        puts the node's name in the token, which the chart's ValidatingAdmissionPolicy checks."""
        return self.kubeconfig(f"{FULLNAME}-device-plugin", bound_pod=self.device_plugin_pod(node))

    def start_device_plugin(self, node: str, plugin_dir: Path, fake_gpus: str) -> Process:
        """The device plugin for `node` with fake GPUs, its token bound to a pod on that node as the
        kubelet would project it into the DaemonSet's pod."""
        args = _override(
            self.container_args("daemonsets", f"{FULLNAME}-device-plugin"),
            {"--device-plugin-dir": str(plugin_dir), "--health-port": str(free_port())},
        )
        kubeconfig = self.device_plugin_kubeconfig(node)
        return self.spawn(
            f"device-plugin-{node}",
            [
                GPUSHARE,
                *args,
                "--fake-gpus",
                fake_gpus,
                "--kubeconfig",
                str(kubeconfig),
                "--log-format",
                "text",
            ],
            env={"NODE_NAME": node, "POD_NAMESPACE": NAMESPACE},
        )

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            process.stop(grace=5)
        self.processes.clear()


def _override(args: Iterable[str], values: Mapping[str, str]) -> list[str]:
    """Chart args with the `--flag=value` entries named in `values` replaced."""
    out = []
    for arg in args:
        flag = arg.split("=", 1)[0]
        out.append(f"{flag}={values[flag]}" if flag in values else arg)
    return out


def _merge(base: Obj, extra: Mapping[str, Any]) -> Obj:
    out = dict(base)
    for key, value in extra.items():
        out[key] = (
            _merge(out[key], value)
            if isinstance(value, Mapping) and isinstance(out.get(key), dict)
            else value
        )
    return out


def _create(bed: Bed, path: str, body: Obj) -> Obj:
    try:
        created: Obj = bed.request("POST", path, body=body)
        return created
    except errors.ConflictError:
        existing: Obj = bed.request("GET", f"{path}/{body['metadata']['name']}")
        return existing


def _status(url: str, context: ssl.SSLContext | None) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as reply:
            status: int = reply.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code
