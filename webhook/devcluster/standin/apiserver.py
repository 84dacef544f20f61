"""A local Kubernetes API server STAND-IN for tests and `gpushare demo`: the official `kubernetes` client
talks to it unmodified.

It is not a real API server: no auth, no admission, no defaulting beyond uid/creationTimestamp/
resourceVersion (and `status.phase: Pending` on pod create), merge semantics for strategic merge patch.

Fixture API (`apiserver` in tests/conftest.py yields an `ApiServer`, started, stopped after the test):
  url                        "http://127.0.0.1:PORT"
  api                        a ready `kubernetes.client.ApiClient` (closed at stop); `new_client()` for more
  core / coordination        CoreV1Api(api) / CoordinationV1Api(api), typed Any for terse tests
  store                      the `apistore.Store` (direct, thread-safe); resources served: pods, nodes,
                             events, configmaps, secrets, namespaces, leases (coordination.k8s.io/v1),
                             mutating/validatingwebhookconfigurations (admissionregistration.k8s.io/v1),
                             resourceslices, resourceclaims (resource.k8s.io/v1)
  Seeding / inspecting (direct, no request counted):
    add_node(name, gpus=..., gpu_mem=..., capacity=..., labels=..., annotations=...) -> dict
    add_pod(name, namespace="default", gpu_mem=[...per container], node_name=..., phase=..., labels=...,
            annotations=..., containers=[...]) -> dict        (`pod_manifest(...)` builds without storing)
    put(obj) create-or-replace any object as given (status included) -> stored dict
    get(plural, name, namespace=None) -> dict | None;  objects(plural, namespace=None) -> list[dict]
    edit(plural, name, patch, namespace=None) merge-patch any field, status included
    remove(plural, name, namespace=None);  mark_deleting(name, namespace="default") sets deletionTimestamp
    set_pod_phase(name, phase, namespace="default");  resource_version -> int (current global rv)
    wait_for(predicate, timeout=5.0) poll until predicate() is truthy (raises AssertionError on timeout)
  Faults:
    fail_next(verb, resource, status=500, count=1)  verb: get list watch create update patch delete or "*";
        resource: "pods", "pods/binding", "pods/status", "nodes/status", "leases", ... or "*".
        A 410 on `watch` is sent the real way: HTTP 200 then an ERROR event holding a 410 Status.
    drop_watches()  cut every open watch stream (socket closed, no final chunk)
    compact()       forget history: watches/resumes from an older resourceVersion get 410 (ERROR event)
    latency = 0.05  seconds added to every request
    delay(verb, resource, seconds)  more seconds for those requests only (verb/resource as in fail_next;
        0 removes it), e.g. delay("create", "pods/binding", 0.3): slow Bindings, watches still flowing
    restart(new_port=False)  stop and start again with the same state (same port unless new_port)
    requests[(verb, resource)] counts, e.g. requests[("list", "pods")]; reset_counts()
    open_watches    number of live watch streams (poll it before drop_watches/compact in tests)
  bookmark_interval (s; the fixture uses 0.2) for allowWatchBookmarks; watch_timeout (s) when the
  request has no timeoutSeconds. Watches honour resourceVersion ("" / "0": synthetic ADDED of the
  current state first), labelSelector and fieldSelector (objects leaving the selection arrive as DELETED).
Semantics kept from the real server: one global resourceVersion; 409 Conflict on a stale
metadata.resourceVersion in PUT or patch bodies; the main resource ignores status and the status
subresource changes only status (pods, nodes); delete removes at once unless finalizers are set;
pods/binding follows `BindingREST.Create` (400/422/404/409 cases, 201 Status).

Client notes: the client sends a dict PATCH body as strategic merge patch (treated here as merge patch)
and a list as JSON patch; a JSON patch type with an object body gets 400, as on the real server.
pods/binding answers 201 with a Status: call with `_preload_content=False` (else pydantic ValueError).
Standalone: `python -m webhook.devcluster.standin.apiserver --port 8080`.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import kubernetes.client

from webhook.core.wire import resources
from webhook.devcluster.standin.apihttp import Controls, Fault, HttpServer
from webhook.devcluster.standin.apistore import Store
from webhook.devcluster.standin.apiwire import BY_PLURAL, ApiStatusError, Obj, now_rfc3339

T = TypeVar("T")


class ApiServer:
    """The stand-in: an HTTP/1.1 server on 127.0.0.1 over an `apistore.Store`. See the module docstring."""

    def __init__(
        self,
        port: int = 0,
        *,
        bookmark_interval: float = 1.0,
        watch_timeout: float = 300.0,
        history_limit: int = 200_000,
    ) -> None:
        self.store = Store(history_limit)
        self.controls = Controls(bookmark_interval, watch_timeout)
        self.requests = self.controls.requests
        self._port = port
        self._httpd: HttpServer | None = None
        self._thread: threading.Thread | None = None
        self._clients: list[kubernetes.client.ApiClient] = []
        self.api: kubernetes.client.ApiClient

    # --- lifecycle ---

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> ApiServer:
        self.controls.stopping = False
        self._httpd = HttpServer(self._port, self.store, self.controls)
        self._port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="apiserver-standin",
            daemon=True,
        )
        self._thread.start()
        if not self._clients:
            self.api = self.new_client()
        return self

    def _halt(self) -> None:
        self.controls.stopping = True
        with self.store.cond:
            self.store.cond.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.cut_connections()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def stop(self) -> None:
        for client in self._clients:
            client.close()  # type: ignore[no-untyped-call]  # kubernetes ships no type hints
        self._clients.clear()
        self._halt()

    def restart(self, new_port: bool = False) -> None:
        self._halt()
        if new_port:
            self._port = 0
        self.start()
        for client in self._clients:
            client.configuration.host = self.url

    def new_client(self) -> kubernetes.client.ApiClient:
        config = kubernetes.client.Configuration(host=self.url)
        client = kubernetes.client.ApiClient(config)
        self._clients.append(client)
        return client

    # Typed as Any: the generated client marks every field Optional, which only adds noise to tests.
    @property
    def core(self) -> Any:
        return kubernetes.client.CoreV1Api(self.api)

    @property
    def coordination(self) -> Any:
        return kubernetes.client.CoordinationV1Api(self.api)

    # --- faults and counters ---

    @property
    def latency(self) -> float:
        return self.controls.latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        self.controls.latency = seconds

    def fail_next(self, verb: str, resource: str, status: int = 500, count: int = 1) -> None:
        with self.controls.lock:
            self.controls.faults.append(Fault(verb, resource, status, count))

    def delay(self, verb: str, resource: str, seconds: float) -> None:
        with self.controls.lock:
            if seconds:
                self.controls.delays[(verb, resource)] = seconds
            else:
                self.controls.delays.pop((verb, resource), None)

    def reset_counts(self) -> None:
        with self.controls.lock:
            self.requests.clear()

    @property
    def open_watches(self) -> int:
        with self.controls.lock:
            return sum(not session.dropped for session in self.controls.watches)

    def drop_watches(self) -> None:
        with self.controls.lock:
            for session in self.controls.watches:
                session.dropped = True
        with self.store.cond:
            self.store.cond.notify_all()

    def compact(self) -> int:
        return self.store.compact()

    # --- direct seeding and inspection ---

    @property
    def resource_version(self) -> int:
        with self.store.cond:
            return self.store.rv

    def put(self, obj: Obj) -> Obj:
        return self.store.put(obj)

    def get(self, plural: str, name: str, namespace: str | None = None) -> Obj | None:
        rt = BY_PLURAL[plural]
        try:
            return self.store.get(rt, namespace if rt.namespaced else None, name)
        except ApiStatusError:
            return None

    def objects(self, plural: str, namespace: str | None = None) -> list[Obj]:
        return self.store.all(plural, namespace)

    def edit(self, plural: str, name: str, patch: Obj, namespace: str | None = None) -> Obj:
        return self.store.edit(plural, namespace, name, patch)

    def remove(self, plural: str, name: str, namespace: str | None = None) -> None:
        self.store.remove(plural, namespace, name)

    def mark_deleting(self, name: str, namespace: str = "default") -> Obj:
        return self.edit("pods", name, {"metadata": {"deletionTimestamp": now_rfc3339()}}, namespace)

    def set_pod_phase(self, name: str, phase: str, namespace: str = "default") -> Obj:
        return self.edit("pods", name, {"status": {"phase": phase}}, namespace)

    def add_node(
        self,
        name: str,
        *,
        gpus: int = 0,
        gpu_mem: int = 0,
        capacity: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> Obj:
        """A Ready node; `gpus`/`gpu_mem` set aliyun.com/gpu-count and aliyun.com/gpu-mem capacity."""
        cap = {"cpu": "32", "memory": "128Gi", "pods": "110", **(capacity or {})}
        if gpus:
            cap[resources.GPU_COUNT] = str(gpus)
        if gpu_mem:
            cap[resources.GPU_MEMORY] = str(gpu_mem)
        return self.put(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
                "status": {
                    "capacity": cap,
                    "allocatable": dict(cap),
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )

    def add_pod(self, name: str, namespace: str = "default", **kwargs: Any) -> Obj:
        return self.put(pod_manifest(name, namespace, **kwargs))

    def wait_for(self, predicate: Callable[[], T], timeout: float = 5.0, what: str = "condition") -> T:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.01)


def pod_manifest(
    name: str,
    namespace: str = "default",
    *,
    gpu_mem: list[int] | tuple[int, ...] = (),
    node_name: str | None = None,
    phase: str = "Pending",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[Obj] | None = None,
    uid: str | None = None,
) -> Obj:
    """A pod dict: one container per `gpu_mem` entry, each with that many `aliyun.com/gpu-mem` units."""
    if containers is None:
        containers = [
            {
                "name": f"c{i}",
                "image": "busybox",
                "resources": {"limits": {resources.GPU_MEMORY: str(units)}} if units else {},
            }
            for i, units in enumerate(gpu_mem or [0])
        ]
    meta: Obj = {
        "name": name,
        "namespace": namespace,
        "labels": labels or {},
        "annotations": annotations or {},
    }
    if uid:
        meta["uid"] = uid
    spec: Obj = {"containers": containers, "schedulerName": "default-scheduler"}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def main() -> None:
    parser = argparse.ArgumentParser(description="Kubernetes API stand-in for local runs (not a real server)")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    server = ApiServer(args.port).start()
    print(f"API stand-in serving on {server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
