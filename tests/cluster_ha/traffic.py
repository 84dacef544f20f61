"""What a cluster's users do while a node goes or the chart rolls: a steady stream of pod creations,
GPU and non-GPU mixed, each answer recorded with its time, and a watch on the stored pods that checks the
invariant (Σ per GPU ≤ its capacity, each pod placed once) on every poll.

`admit_only`: the creations are server-side dry runs (the webhooks judge them, nothing is stored or
placed), so a stream of minutes costs no GPU memory. Otherwise GPU pods are created for real, each deleted
once bound and a few seconds old so the GPUs never fill, and every bind is timed: the extender places
throughout."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.e2e import placement
from webhook.core.wire import resources
from webhook.devcluster.podrelease import PodRelease
from webhook.kube import errors, rest

Obj = dict[str, Any]
# Two of every five pods ask for GPU memory (1 GiB); the rest ask for none.
GPU_EVERY = (True, True, False, False, False)


@dataclass(frozen=True, slots=True)
class Answer:
    at: float  # time.monotonic() of the request
    gpu: bool
    error: str  # "" when created


@dataclass
class Traffic:
    chart: PodRelease
    namespace: str
    capacity: dict[str, int]  # node -> GiB per GPU
    rate: float = 5.0  # pods a second
    admit_only: bool = False
    image: str = ""  # the pods' image (real pods only)
    answers: list[Answer] = field(default_factory=list)
    bound: dict[str, float] = field(default_factory=dict)  # GPU pod -> when first seen bound
    created: dict[str, float] = field(default_factory=dict)  # GPU pod -> when created
    polls: int = 0
    broken: list[BaseException] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def _pod(self, name: str, gpu: bool) -> Obj:
        container: Obj = {"name": "main", "image": self.image or "x", "imagePullPolicy": "Never"}
        container["command"] = ["sleep", "3600"]
        spec: Obj = {"containers": [container], "terminationGracePeriodSeconds": 0}
        if gpu:
            container["resources"] = {"limits": {resources.GPU_MEMORY: "1"}}
        else:  # never scheduled: what is judged is its admission, and no node spends CPU on it
            spec["nodeSelector"] = {"gpushare.test/nowhere": "true"}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}

    def _create(self) -> None:
        path = rest.path("pods", namespace=self.namespace)
        query = {"dryRun": "All"} if self.admit_only else None
        start = time.monotonic()
        for i, gpu in zip(itertools.count(), itertools.cycle(GPU_EVERY), strict=False):
            due = start + i / self.rate
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return
            name = f"{'gpu' if gpu else 'plain'}-{i}"
            at = time.monotonic()
            try:
                self.chart.api.request("POST", path, query=query, body=self._pod(name, gpu))
            except errors.ApiError as err:
                self.answers.append(Answer(at, gpu, str(err)))
                continue
            self.answers.append(Answer(at, gpu, ""))
            if gpu and not self.admit_only:
                self.created[name] = at

    def _watch(self) -> None:
        """The invariant on every read of the stored pods; bound GPU pods timed, then deleted."""
        while not self._stop.wait(0.5):
            try:
                pods = self.chart.api.pods(self.namespace)
                placement.check_invariant(pods, self.capacity)
                self.polls += 1
                now = time.monotonic()
                for pod in pods:
                    name = pod["metadata"]["name"]
                    if name.startswith("gpu-") and pod["spec"].get("nodeName"):
                        self.bound.setdefault(name, now)
                        if now - self.bound[name] > 3 and not pod["metadata"].get("deletionTimestamp"):
                            self._delete(name)
            except BaseException as err:  # reported by the test's thread
                self.broken.append(err)
                return

    def _delete(self, name: str) -> None:
        try:
            self.chart.api.request(
                "DELETE", rest.path("pods", name, self.namespace), body={"gracePeriodSeconds": 0}
            )
        except errors.ApiError as err:
            if err.status != 404:
                raise

    def __enter__(self) -> Traffic:
        for target in (self._create, self._watch):
            thread = threading.Thread(target=target, name=f"traffic-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    # -- what the stream saw -------------------------------------------------------------------------
    def failures(self, gpu: bool) -> list[Answer]:
        return [a for a in self.answers if a.gpu == gpu and a.error]

    def sent(self, gpu: bool) -> int:
        return sum(1 for a in self.answers if a.gpu == gpu)

    def longest_bind_gap(self, since: float, until: float) -> float:
        """The longest stretch in [since, until] with no GPU pod bound (the extender not placing)."""
        times = sorted(t for t in self.bound.values() if since <= t <= until)
        edges = [since, *times, until]
        return max(b - a for a, b in itertools.pairwise(edges))

    def slowest_bind(self) -> float:
        waits = [self.bound[n] - self.created[n] for n in self.created if n in self.bound]
        return max(waits, default=0.0)
