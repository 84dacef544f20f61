"""`gpushare demo` without the control-plane binaries: the API stand-in, and the demo in the two roles
the stand-in lacks. As the API server would, it sends each pod to the webhook (`/mutate`, then
`/validate`, AdmissionReview v1) and stores it only when allowed; as kube-scheduler would, it asks the
extender's `filter`, `prioritize` and `bind` for every pending pod. The webhook, the extender and the
device plugins are the real `gpushare` programs.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes.client

from webhook.devcluster import objects, process, release
from webhook.devcluster.controlplane import free_port
from webhook.devcluster.demo import plan
from webhook.devcluster.process import Process
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import client, rest

Obj = dict[str, Any]
EXTENDER_PREFIX = "/gpushare-scheduler"
DESCRIPTION = """the API STAND-IN (webhook/devcluster/standin), not Kubernetes.
  It imitates the Kubernetes API in this process: no authentication, no admission chain, and no
  kube-scheduler runs. The demo plays both: it sends each pod to the webhook as the API server would,
  and calls the extender's filter, prioritize and bind as kube-scheduler would."""


class StandinCluster:
    kubelets = False
    nodes = plan.NODES

    def __init__(self, workdir: Path, say: Callable[[str], None]) -> None:
        self.workdir = workdir
        self.say = say
        self.server = ApiServer()
        self.processes: list[Process] = []
        self.socket_dirs: list[Path] = []
        self.webhook_port = free_port()
        self.extender_port = free_port()
        self._api: kubernetes.client.ApiClient | None = None

    @property
    def api(self) -> kubernetes.client.ApiClient:
        assert self._api is not None, "start() first"
        return self._api

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    def start(self) -> None:
        self.server.start()
        self._api = client.connect(client.ClientSettings(host=self.server.url))
        self.say(f"API stand-in at {self.server.url}")
        certs = self.workdir / "certs"
        webhook = self._spawn(
            "webhook",
            ["webhook", "--host", "127.0.0.1", "--port", str(self.webhook_port), "--cert-dir", str(certs)],
        )
        webhook.wait_until(lambda: self._webhook_ready(certs / "ca.crt"), 30, "ready")
        self.say(f"webhook at https://127.0.0.1:{self.webhook_port} (development certificates in {certs})")
        extender = self._spawn(
            "extender",
            [
                "extender",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.extender_port),
                "--server",
                self.server.url,
            ],
        )
        url = f"http://127.0.0.1:{self.extender_port}/readyz"
        extender.wait_until(lambda: process.http_status(url, None) == 200, 30, "ready")
        self.say(f"extender at http://127.0.0.1:{self.extender_port}{EXTENDER_PREFIX}")

    def start_node(self, node: str, fake_gpus: str, labels: Mapping[str, str]) -> None:
        """The device plugin of `node` (its Node object, `labels` included, is the demo's)."""
        plugin_dir = process.socket_dir(node)
        self.socket_dirs.append(plugin_dir)
        argv = ["device-plugin", "--fake-gpus", fake_gpus, "--api-host", self.server.url]
        argv += ["--device-plugin-dir", str(plugin_dir), "--health-port", str(free_port())]
        self._spawn(f"device-plugin-{node}", argv, env={"NODE_NAME": node})

    def namespace(self, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        objects.create_or_get(self.api, rest.path("namespaces"), body)

    def create_pod(self, namespace: str, body: Obj) -> str:
        """Admit `body` through the webhook as the API server would; store it when allowed. Returns the
        denial message, or "" when the pod was created."""
        for path in ("/mutate", "/validate"):
            response = self._review(path, namespace, body)
            if not response.get("allowed"):
                return str(response.get("status", {}).get("message", "denied"))
            if response.get("patch"):
                patch = jsonpatch.JsonPatch(json.loads(base64.b64decode(response["patch"])))
                body = patch.apply(body)
        rest.request(self.api, "POST", rest.path("pods", namespace=namespace), body=body)
        return ""

    def schedule(self, namespace: str) -> None:
        """One scheduling pass, the calls kube-scheduler makes with `nodeCacheCapable: true`."""
        nodes = [n["metadata"]["name"] for n in rest.list_all(self.api, rest.path("nodes"))]
        for pod in rest.list_all(self.api, rest.path("pods", namespace=namespace)):
            if pod["spec"].get("nodeName"):
                continue
            args = {"Pod": pod, "NodeNames": nodes}
            fits = self._extender("filter", args).get("NodeNames") or []
            if not fits:
                continue  # stays Pending, as with kube-scheduler
            scores = self._extender("prioritize", {**args, "NodeNames": fits})
            best = max(scores, key=lambda s: s["Score"])["Host"]
            meta = pod["metadata"]
            binding = {
                "PodName": meta["name"],
                "PodNamespace": namespace,
                "PodUID": meta["uid"],
                "Node": best,
            }
            error = self._extender("bind", binding).get("Error")
            if error:
                self.say(f"bind of {meta['name']} to {best} failed: {error}")

    def dead(self) -> str:
        return process.dead(self.processes)

    def inspect_args(self) -> list[str]:
        return ["--server", self.server.url]

    def kubeconfig_hint(self) -> str:
        return f"--server {self.server.url}"

    def after(self, placed: list[Obj], say: Callable[[str], None]) -> None:
        say(
            "(No kubelet runs here: no container starts, so the device plugins' Allocate is never "
            "called and placed pods stay PENDING.)"
        )

    def stop(self) -> None:
        for child in reversed(self.processes):
            child.stop(grace=5)
        if self._api is not None:
            self._api.close()  # type: ignore[no-untyped-call]  # kubernetes ships no type hints
        self.server.stop()
        for folder in self.socket_dirs:
            shutil.rmtree(folder, ignore_errors=True)

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Process:
        argv = [release.GPUSHARE, *args, "--log-format", "text"]
        child = Process(name, argv, self.logs / f"{name}.log", env=process.child_env(env)).start()
        self.processes.append(child)
        return child

    def _webhook_ready(self, ca: Path) -> bool:
        if not ca.is_file():
            return False
        context = ssl.create_default_context(cafile=str(ca))
        return process.http_status(f"https://127.0.0.1:{self.webhook_port}/readyz", context) == 200

    def _review(self, path: str, namespace: str, pod: Obj) -> Obj:
        request = {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"]["name"],
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "gpushare-demo"},
            "object": {**pod, "metadata": {**pod["metadata"], "namespace": namespace}},
            "dryRun": False,
        }
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        context = ssl.create_default_context(cafile=str(self.workdir / "certs" / "ca.crt"))
        reply: Obj = _post(f"https://127.0.0.1:{self.webhook_port}{path}", review, context)
        response: Obj = reply["response"]
        return response

    def _extender(self, verb: str, body: Obj) -> Any:
        return _post(f"http://127.0.0.1:{self.extender_port}{EXTENDER_PREFIX}/{verb}", body, None)


def _post(url: str, body: Obj, context: ssl.SSLContext | None) -> Any:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10, context=context) as reply:
        return json.loads(reply.read())
