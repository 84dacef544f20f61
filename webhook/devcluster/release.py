"""The chart installed by Helm into a running API server, and our three parts run on this host the way
the chart runs them, each with its own ServiceAccount's token: the end-to-end bed and `gpushare demo`.

Everything a part gets is read back from the API server after `helm install`: the webhook's config
from its ConfigMap, the extender's and the device plugin's flags from their Deployment and DaemonSet,
kube-scheduler's KubeSchedulerConfiguration from the chart's ConfigMap. Only what a host cannot take
from a pod is changed: listen addresses, ports, the kubeconfig (a token of the chart's ServiceAccount)
and the device-plugin socket folder. No kubelet runs; Node objects carry GPU capacity in their status.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client
import yaml

from webhook.devcluster import helm, mounts, objects
from webhook.devcluster import pki as pkimod
from webhook.devcluster.controlplane import ControlPlane, free_port
from webhook.devcluster.process import Process, child_env, http_status
from webhook.kube import client, errors, rest

Obj = dict[str, Any]
GPUSHARE = str(Path(sys.executable).with_name("gpushare"))
RELEASE = "gs"
NAMESPACE = "gpu-system"
FULLNAME = f"{RELEASE}-gpushare"
SCHEDULER_NAME = "gpushare-scheduler"
EXTENDER_SERVER_NAME = f"{FULLNAME}-extender.{NAMESPACE}.svc"  # tlsConfig.serverName the chart renders


def kube_version(bins: Path) -> str:
    """The version the built kube-apiserver reports (`v1.36.3`)."""
    argv = [str(bins / "kube-apiserver"), "--version"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    return out.split()[-1]


def admin_api(cp: ControlPlane) -> kubernetes.client.ApiClient:
    return client.connect(client.ClientSettings(kubeconfig=str(cp.admin_kubeconfig)))


@dataclass
class Release:
    """A started control plane, the release and our parts on this host; `stop_all()` ends the parts."""

    cp: ControlPlane
    root: Path
    api: kubernetes.client.ApiClient
    processes: list[Process] = field(default_factory=list)
    webhook_port: int = field(default_factory=free_port)
    extender_port: int = field(default_factory=free_port)
    extender_health_port: int = 0  # set by start_extender

    # -- Helm ---------------------------------------------------------------------------------------
    def helm(
        self, *args: str, check: bool = True, timeout: float = 120, major: int | None = None
    ) -> subprocess.CompletedProcess[str]:
        binary = helm.binary(major)
        if binary is None:
            raise RuntimeError("helm missing: `bash scripts/install-helm` installs it")
        argv = [binary, "--kubeconfig", str(self.cp.admin_kubeconfig), *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result

    def values(self, **overrides: Any) -> Obj:
        """The release's values: webhook at a host URL with our CA, scheduler mode (b), host extender
        over HTTPS with the extender's pairs signed by our CA (the serving one also for 127.0.0.1)."""
        assert self.cp.pki is not None
        extender_pems = mounts.extender_pems(
            self.cp.pki, (EXTENDER_SERVER_NAME,), ("127.0.0.1",), "gpushare-scheduler"
        )
        base: Obj = {
            "webhook": {"url": f"https://127.0.0.1:{self.webhook_port}"},
            "certificates": {
                "mode": "provided",
                "provided": {"caCrt": self.cp.pki.ca_crt.read_text(), "extender": extender_pems},
            },
            # HTTP/2, as a default (selfManaged) install serves it; with provided certificates `auto` would
            # turn it off, the CA being possibly shared (here it is: the cluster's).
            "extender": {
                "urlPrefix": f"https://127.0.0.1:{self.extender_port}/gpushare-scheduler",
                "http2": True,
            },
            # The chart refuses a kube-scheduler image newer than the cluster (its default may be).
            "scheduler": {"mode": "second", "image": {"tag": kube_version(self.cp.bins)}},
        }
        return merge(base, overrides)

    def install(self, release: str = RELEASE, namespace: str = NAMESPACE, **overrides: Any) -> None:
        values = self.root / f"values-{release}.json"
        values.write_text(json.dumps(self.values(**overrides)))
        # No --wait: no kubelet runs the chart's pods. Hooks run (there are none with provided certificates).
        self.helm(
            "install",
            release,
            str(helm.CHART),
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
        args: list[str] = self.pod_spec(plural, name, namespace)["containers"][0]["args"]
        return args

    def pod_spec(self, plural: str, name: str, namespace: str = NAMESPACE) -> Obj:
        spec: Obj = self.request("GET", rest.path(plural, name, namespace, group="apps"))["spec"]
        return spec["template"]["spec"]  # type: ignore[no-any-return]

    def mounts(self, name: str) -> dict[str, Path]:
        """The Secret volumes of Deployment `name`'s pod, written here: mountPath -> folder."""
        return mounts.write_mounts(self.api, self.pod_spec("deployments", name), NAMESPACE, self.root / name)

    def create_pod(self, namespace: str, body: Obj) -> str:
        """Create pod `body` through the API server: the admission webhook's denial, or "" when created."""
        try:
            self.request("POST", rest.path("pods", namespace=namespace), body=body)
        except errors.ApiError as err:
            if "denied the request" in err.message:
                return err.message
            raise
        return ""

    def namespace(self, name: str, labels: Mapping[str, str] | None = None) -> str:
        """A namespace, once kube-controller-manager has put in it what pods need: the `default`
        ServiceAccount (the ServiceAccount admission plugin refuses pods until it exists) and the
        `kube-root-ca.crt` ConfigMap (a kubelet cannot mount a pod's service-account token volume
        without it)."""
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": dict(labels or {})},
        }
        objects.create_or_get(self.api, rest.path("namespaces"), body)
        self.wait_for_object(rest.path("serviceaccounts", "default", name))
        self.wait_for_object(rest.path("configmaps", "kube-root-ca.crt", name))
        return name

    def wait_for_object(self, path: str, timeout: float = 30.0) -> Obj:
        """The object at `path` once it exists: for one a controller makes."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                found: Obj = self.request("GET", path)
                return found
            except errors.NotFoundError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{path} not made after {timeout:.0f} s: is kube-controller-manager running? "
                        f"(its log: {self.cp.logs / 'kube-controller-manager.log'})"
                    ) from None
                time.sleep(0.1)

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

    def pods(self, namespace: str) -> list[Obj]:
        return list(rest.list_all(self.api, rest.path("pods", namespace=namespace)))

    # -- Our parts, run on this host as the chart runs them -------------------------------------------
    def spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Process:
        process = Process(name, argv, self.cp.logs / f"{name}.log", env=child_env(env)).start()
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
        process.wait_until(lambda: http_status(url, context) == 200, 30, "ready")
        return process

    def start_extender(self, identity: str = "extender-0") -> Process:
        """The extender with the chart's flags and certificates (its Secret's files, as mounted). Its
        plain probe port, when the chart gives it one (HTTP/2), is `extender_health_port`."""
        files = self.mounts(f"{FULLNAME}-extender")
        self.extender_health_port = free_port()
        args = _override(
            self.container_args("deployments", f"{FULLNAME}-extender"),
            {
                "--host": "127.0.0.1",
                "--port": str(self.extender_port),
                "--advertise-url": f"https://127.0.0.1:{self.extender_port}",
                "--health-port": str(self.extender_health_port),
            },
        )
        args = [_on_host(arg, files) for arg in args]
        kubeconfig = self.kubeconfig(f"{FULLNAME}-extender")
        process = self.spawn(
            identity,
            [GPUSHARE, *args, "--kubeconfig", str(kubeconfig), "--log-format", "text"],
            env={"POD_NAME": identity, "POD_NAMESPACE": NAMESPACE},
        )
        url, context = self.extender_probe_url("/readyz")
        process.wait_until(lambda: http_status(url, context) == 200, 30, "ready")
        return process

    def extender_probe_url(self, path: str) -> tuple[str, ssl.SSLContext | None]:
        """Where the kubelet would probe the extender (`path`: /healthz, /readyz or /metrics), and the TLS
        context to reach it with (None: plain HTTP, the probe port the chart gives it over HTTP/2)."""
        if "--http2" in self.container_args("deployments", f"{FULLNAME}-extender"):
            return f"http://127.0.0.1:{self.extender_health_port}{path}", None
        assert self.cp.pki is not None
        context = ssl.create_default_context(cafile=str(self.cp.pki.ca_crt))
        return f"https://127.0.0.1:{self.extender_port}{path}", context

    def start_scheduler(self, *, plain: str = "", qps: int = 0, burst: int = 0) -> Process:
        """kube-scheduler with the chart's configuration (mode b's ConfigMap).

        `plain`: the same binary and client settings as a reference without us: one profile of that
        scheduler name, no extender. `qps` lifts the client's rate limit (default 50/s, burst 100); the
        burst is twice it unless `burst` is given."""
        config = yaml.safe_load(self.configmap(f"{FULLNAME}-scheduler", "config.yaml"))
        if qps:
            config["clientConnection"] = {"qps": qps, "burst": burst or 2 * qps}
        if plain:  # kube-scheduler's defaults otherwise (percentageOfNodesToScore too)
            config.pop("extenders", None)
            config.pop("percentageOfNodesToScore", None)
            config["profiles"] = [{"schedulerName": plain}]
        return self.run_scheduler(plain or "kube-scheduler", config)

    def run_scheduler(self, name: str, config: Obj) -> Process:
        """kube-scheduler with KubeSchedulerConfiguration `config` (mode a: a cluster's own configuration
        with the chart's `extenders` entry merged in), logged as `name`. It connects as the chart's
        scheduler ServiceAccount; its extenders' tlsConfig files are those of the Secret volume the chart
        mounts into the scheduler's pod (the files mode (a) copies to the control-plane nodes)."""
        config = dict(config)
        config["clientConnection"] = {
            **(config.get("clientConnection") or {}),
            "kubeconfig": str(self.kubeconfig(f"{FULLNAME}-scheduler")),
        }
        files = self.mounts(f"{FULLNAME}-scheduler")
        for extender in config.get("extenders") or []:
            tls = extender.get("tlsConfig") or {}
            for key in ("caFile", "certFile", "keyFile"):
                if key in tls:
                    tls[key] = mounts.on_host(tls[key], files)
        path = self.root / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        process = self.spawn(
            name,
            [
                str(self.cp.bins / "kube-scheduler"),
                f"--config={path}",
                f"--secure-port={port}",
                "--bind-address=127.0.0.1",
                "--v=2",
            ],
        )
        context = ssl._create_unverified_context()  # the scheduler's self-signed serving cert

        def ready() -> bool:
            # kube-scheduler serves /readyz from 1.31 on; 1.30 answers 404 there and has /healthz only.
            status = http_status(f"https://127.0.0.1:{port}/readyz", context)
            return status == 200 or (
                status == 404 and http_status(f"https://127.0.0.1:{port}/healthz", context) == 200
            )

        process.wait_until(ready, 60, "ready")
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
        return objects.create_or_get(self.api, rest.path("pods", namespace=NAMESPACE), body)

    def device_plugin_kubeconfig(self, node: str) -> Path:
        """A kubeconfig with the device plugin's token bound to its pod on `node`: the API server then
        puts the node's name in the token, which the chart's ValidatingAdmissionPolicy checks."""
        return self.kubeconfig(f"{FULLNAME}-device-plugin", bound_pod=self.device_plugin_pod(node))

    def start_device_plugin(
        self, node: str, plugin_dir: Path, fake_gpus: str, extra: Sequence[str] = ()
    ) -> Process:
        """The device plugin for `node` with fake GPUs, its token bound to a pod on that node as the
        kubelet would project it into the DaemonSet's pod; `extra` flags go after the chart's."""
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
                *extra,
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


def _on_host(arg: str, files: Mapping[str, Path]) -> str:
    """A `--flag=/mounted/path` arg pointing at the file written on this host."""
    flag, eq, value = arg.partition("=")
    return f"{flag}={mounts.on_host(value, files)}" if eq else arg


def merge(base: Obj, extra: Mapping[str, Any]) -> Obj:
    """`extra` laid over `base`, maps merged key by key, as Helm merges values files."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = (
            merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), dict) else value
        )
    return out
