"""The extender's Kubernetes I/O: pods/binding, pod GET, and list+watch of nodes and pods into the Cache.

Private adapter over the official client, written while `webhook.kube` was not there yet; it keeps the
client's exceptions inside this module (they become `binder.ApiFailure` or a logged retry). Raw JSON
(`_preload_content=False`) throughout: the 201 Status of pods/binding does not deserialise (contracts
§7), and 40,000 pods are read far faster as dicts than as generated models.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import kubernetes.client
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from webhook.extender.binder import ApiFailure
from webhook.extender.cache import Cache

log = logging.getLogger(__name__)
WATCH_TIMEOUT_S = 300


def _failure(err: Exception) -> ApiFailure:
    if isinstance(err, ApiException):
        message = err.reason or ""
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(err.body or "{}").get("message") or message
        return ApiFailure(int(err.status or 0), message)
    return ApiFailure(0, f"{type(err).__name__}: {err}")


_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


class KubeBindingApi:
    """binder.BindingApi through the official client."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        # Any: the raw-response calls (_preload_content=False) return urllib3 responses, not the typed models.
        self.core: Any = kubernetes.client.CoreV1Api(api)

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            meta["uid"] = uid  # a precondition: 409 if the pod was re-created under the same name
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            response = self.core.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)
            response.release_conn()
        except _ERRORS as err:
            raise _failure(err) from None

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            response = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
            pod: dict[str, Any] = json.loads(response.data)
            return pod
        except ApiException as err:
            if err.status == 404:
                return None
            raise _failure(err) from None
        except _ERRORS as err:
            raise _failure(err) from None


class Watcher:
    """List, then watch from the list's resourceVersion; resume after drops, re-list on 410 Gone."""

    def __init__(
        self,
        name: str,
        lister: Callable[..., Any],
        on_list: Callable[[Iterable[Mapping[str, Any]]], None],
        on_event: Callable[[str, Mapping[str, Any]], None],
        *,
        backoff_s: float = 0.2,
        max_backoff_s: float = 5.0,
    ) -> None:
        self.name = name
        self._lister = lister
        self._on_list = on_list
        self._on_event = on_event
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self.relists = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # already closed; stopping must not fail
                log.debug("closing watch stream", exc_info=True)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        rv = ""
        delay = self._backoff_s
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._list()
                    self.relists += 1
                rv = self._watch(rv)
                delay = self._backoff_s
            except _ERRORS as err:
                failure = _failure(err)
                if failure.status == 410:
                    rv = ""
                    continue
                if not self._stop.is_set():
                    log.warning(
                        "watch failed", extra={"fields": {"resource": self.name, "error": str(failure)}}
                    )
                self._stop.wait(delay)
                delay = min(self._max_backoff_s, delay * 2)

    def _list(self) -> str:
        response = self._lister(_preload_content=False)
        body = json.loads(response.data)
        self._on_list(body.get("items") or [])
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, rv: str) -> str:
        """Stream events until the watch ends; returns the resourceVersion to resume from ("": re-list)."""
        response = self._lister(
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_S,
            _preload_content=False,
        )
        self._response = response
        try:
            buffer = b""
            for chunk in response.stream(64 * 1024, decode_content=True):
                if self._stop.is_set():
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        code = obj.get("code")
                        return "" if code == 410 else rv
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if kind != "BOOKMARK":
                        self._on_event(str(kind), obj)
                    if new_rv:
                        rv = str(new_rv)
        finally:
            self._response = None
            response.release_conn()
        return rv


def watchers(cache: Cache, api: kubernetes.client.ApiClient) -> list[Watcher]:
    """The two feeds of the cache: all nodes, and all pods (the cache keeps only GPU-memory ones)."""
    core = kubernetes.client.CoreV1Api(api)
    return [
        Watcher("nodes", core.list_node, cache.nodes_resync, cache.node_event),
        Watcher("pods", core.list_pod_for_all_namespaces, cache.pods_resync, cache.pod_event),
    ]
