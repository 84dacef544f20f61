"""What the device plugin does about a container over its share (core/usage/overshare.py decides when): a log
line, a Warning Event `GPUMemoryOverShare` on the pod (within a node-wide budget), and, only when the
opt-in policy is on and the node is labelled `share`, an eviction through the Eviction API (so
PodDisruptionBudgets hold; retried while the budget refuses). API calls run on their own thread: a slow
API server never delays a poll.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import kubernetes.client

from webhook.core.usage import overshare, usage
from webhook.kube import errors, pods

log = logging.getLogger(__name__)
COMPONENT = "gpushare-device-plugin"


class Observer:
    """Counts for /metrics; the default counts nothing."""

    def event_posted(self, ok: bool) -> None:
        pass

    def eviction(self, result: str) -> None:  # evicted, refused (a disruption budget), failed
        pass


@dataclass(frozen=True, slots=True)
class _Job:
    kind: str  # "event" or "evict"
    row: usage.ContainerUsage
    message: str = ""


@dataclass(eq=False)
class OverShareActions:
    api: kubernetes.client.ApiClient
    node_name: str
    labels: Callable[[], Mapping[str, object]]  # the node's, read when an eviction is due
    observer: Observer = field(default_factory=Observer)
    _: KW_ONLY
    evict: bool = False
    budget: overshare.EventBudget = field(default_factory=overshare.EventBudget)
    retry_s: float = 60.0
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._jobs: queue.Queue[_Job | None] = queue.Queue(maxsize=256)
        self._tried: dict[str, float] = {}  # pod UID -> last eviction attempt
        self._evicted: set[str] = set()
        self._refused: set[str] = set()  # pods whose eviction the node's mode refuses (logged once)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="over-share", daemon=True)

    def start(self) -> OverShareActions:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._put(None)
            self._thread.join(timeout=5)

    def handle(self, findings: Sequence[overshare.Finding], report: usage.NodeUsage) -> None:
        """Called by the poller after each observation."""
        now = self.clock()
        uuids = {g.index: g.uuid for g in report.gpus}
        for finding in findings:
            row = finding.usage
            message = overshare.describe(finding, uuids.get(row.gpu, ""))
            if finding.change is overshare.Change.CLEARED:
                log.info("pod %s/%s: %s", row.namespace, row.pod, message)
                continue
            log.warning("pod %s/%s: %s", row.namespace, row.pod, message)
            if self.budget.take(now):
                self._put(_Job("event", row, message))
            else:
                log.info(
                    "not recording an Event for pod %s/%s: the node's Event budget is spent",
                    row.namespace,
                    row.pod,
                )
        if self.evict:
            self._evictions(report, now)

    def _evictions(self, report: usage.NodeUsage, now: float) -> None:
        over = {row.pod_uid: row for row in report.over_share()}
        with self._lock:
            for uid in set(self._tried) - set(over):
                del self._tried[uid]
            self._refused &= set(over)
            self._evicted &= {c.pod_uid for c in report.containers}
            due = [
                row
                for uid, row in over.items()
                if uid not in self._evicted and now - self._tried.get(uid, -self.retry_s) >= self.retry_s
            ]
        refusal = overshare.eviction_refusal(self.labels()) if due else None
        for row in due:
            if refusal is not None:
                if row.pod_uid not in self._refused:
                    self._refused.add(row.pod_uid)
                    log.warning("not evicting pod %s/%s: %s", row.namespace, row.pod, refusal)
                continue
            with self._lock:
                self._tried[row.pod_uid] = now
            self._put(_Job("evict", row))

    def _put(self, job: _Job | None) -> None:
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            log.warning("over-share actions are backing up (API server slow?); dropping one")

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job.kind == "event":
                self._event(job.row, job.message)
            else:
                self._evict(job.row)

    def _event(self, row: usage.ContainerUsage, message: str) -> None:
        involved: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": row.pod, "namespace": row.namespace, "uid": row.pod_uid},
        }
        try:
            pods.create_event(
                self.api,
                involved,
                overshare.REASON,
                message,
                type_="Warning",
                component=COMPONENT,
                host=self.node_name,
            )
        except errors.ApiError as err:
            log.warning("recording the over-share Event of pod %s/%s failed: %s", row.namespace, row.pod, err)
            self.observer.event_posted(False)
            return
        self.observer.event_posted(True)

    def _evict(self, row: usage.ContainerUsage) -> None:
        key = f"{row.namespace}/{row.pod}"
        try:
            pods.evict_pod(self.api, row.namespace, row.pod, row.pod_uid)
        except errors.NotFoundError:
            log.info("pod %s is gone; nothing to evict", key)
            return
        except errors.ApiError as err:
            result = "refused" if err.status == 429 else "failed"
            log.warning("evicting pod %s for its GPU memory over its share failed: %s; retrying", key, err)
            self.observer.eviction(result)
            return
        with self._lock:
            self._evicted.add(row.pod_uid)
        log.warning("evicted pod %s: container %r over its share of GPU %d", key, row.container, row.gpu)
        self.observer.eviction("evicted")
