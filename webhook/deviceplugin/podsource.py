"""The GPU-memory pods of THIS node, kept from a watch (fieldSelector spec.nodeName=<node>), and the
marker that writes ALIYUN_COM_GPU_MEM_ASSIGNED back. No API list per Allocate (fault 6).

`PodStore` records the order pods arrived on the node: the kubelet watches the same stream and admits
pods in that order, which is what Allocate matching relies on (see core/matching.AllocationBook).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes.client

from webhook.core.node import podviews
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.kube import errors, pods

log = logging.getLogger(__name__)


class PodStore:
    """Pods by UID with their arrival number; `version` grows on every change; thread-safe."""

    def __init__(
        self,
        names: resources.GpuResourceNames | None = None,
        view: Callable[
            [Mapping[str, Any], int, resources.GpuResourceNames], podviews.PodView | None
        ] = podviews.pod_view,  # or podviews.card_view: the whole-card endpoint's pods
    ) -> None:
        self.names = names or resources.GpuResourceNames()
        self.view = view
        self._views: dict[str, podviews.PodView] = {}
        self._arrival: dict[str, int] = {}
        self._next = 1
        self.version = 0
        self.synced = threading.Event()
        self._changed = threading.Condition()

    def _uid(self, pod: Mapping[str, Any]) -> str:
        meta = pod.get("metadata") or {}
        return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")

    def _put(self, pod: Mapping[str, Any], arrival: int) -> None:
        uid = self._uid(pod)
        arrival = self._arrival.setdefault(uid, arrival)
        view = self.view(pod, arrival, self.names)
        if view is None:
            self._views.pop(uid, None)
        else:
            self._views[uid] = view

    def apply(self, kind: str, pod: Mapping[str, Any]) -> None:
        """A watch event: ADDED, MODIFIED or DELETED."""
        with self._changed:
            if kind == "DELETED":
                uid = self._uid(pod)
                self._views.pop(uid, None)
                self._arrival.pop(uid, None)
            else:
                self._put(pod, self._next)
                self._next += 1
            self.version += 1
            self._changed.notify_all()

    def resync(self, items: Iterable[Mapping[str, Any]]) -> None:
        """A full (re)list: known pods keep their arrival; new ones share one (then bind time decides)."""
        with self._changed:
            items = list(items)
            present = {self._uid(p) for p in items}
            for uid in set(self._arrival) - present:
                self._arrival.pop(uid, None)
                self._views.pop(uid, None)
            arrival = 0 if not self.synced.is_set() else self._next
            for pod in items:
                self._put(pod, arrival)
            self._next += 1
            self.version += 1
            self.synced.set()
            self._changed.notify_all()

    def snapshot(self) -> tuple[int, list[podviews.PodView]]:
        with self._changed:
            return self.version, list(self._views.values())

    def wait_newer(self, version: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.version != version, timeout)


@dataclass(eq=False)
class AssignMarker:
    """Writes the `assigned` annotations in a background thread, so Allocate never waits on the API;
    writes wait for `quiet_s` without new marks (at most 1 s), so they do not compete with a burst.

    409 (the pod changed, or was recreated under the name) is retried after a fresh read; 5xx and
    transport errors back off and retry; 404 means the pod is gone and there is nothing to mark.
    """

    api: kubernetes.client.ApiClient
    attempts: int = 8
    backoff_s: float = 0.05
    quiet_s: float = 0.05
    clock_ns: Callable[[], int] = time.time_ns

    def __post_init__(self) -> None:
        self._last_mark = 0.0
        self.failed: list[str] = []  # pods given up on, for metrics and tests
        self._queue: queue.Queue[podviews.PodView | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="assign-marker", daemon=True)
        self._thread.start()

    def mark(self, pod: podviews.PodView) -> None:
        self._last_mark = time.monotonic()
        self._queue.put(pod)

    def join(self, timeout: float = 10.0) -> bool:
        """Wait until every queued pod is written or given up on (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._queue.unfinished_tasks

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            pod = self._queue.get()
            try:
                if pod is None:
                    return
                # Write after the kubelet's admission burst, not during it: the API round trips would
                # take the GIL from the Allocate calls still coming (the local book already knows).
                deadline = time.monotonic() + 1.0
                while time.monotonic() - self._last_mark < self.quiet_s and time.monotonic() < deadline:
                    time.sleep(self.quiet_s / 2)
                self._write(pod)
            finally:
                self._queue.task_done()

    def _write(self, pod: podviews.PodView) -> None:
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                pods.patch_pod_annotations(
                    self.api, pod.namespace, pod.name, ann.assigned(self.clock_ns()), uid=pod.uid
                )
                return
            except errors.NotFoundError:
                log.info("pod %s is gone; not marking it assigned", pod.key)
                return
            except errors.ConflictError as err:
                if "UID in precondition" in str(err):
                    log.info("pod %s was replaced; not marking the new one assigned", pod.key)
                    return
                log.info("marking %s assigned conflicted (attempt %d), retrying", pod.key, attempt)
            except errors.ApiError as err:
                if not err.retryable:
                    log.error("cannot mark %s assigned: %s", pod.key, err)
                    self.failed.append(pod.key)
                    return
                log.warning("marking %s assigned failed (attempt %d): %s", pod.key, attempt, err)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        log.error("gave up marking %s assigned after %d attempts", pod.key, self.attempts)
        self.failed.append(pod.key)
