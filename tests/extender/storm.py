"""Randomized concurrent binds against an API server and an in-process extender, the invariant checked
all along from the API's stored pods (`invariant.violations`).

Scheduler threads create pods (re-created under the same names with new UIDs), bind each with up to
`duplicates` simultaneous calls to the same or other nodes (some naming an older UID), and delete pods,
often while their binds run; the extender is restarted along the way; its API calls get the faults of
`chaos.Faults`. Entry: `run(connect, Workload(...), Faults(...))` where `connect()` returns a new
`kubernetes.client.ApiClient` for the API server under test (the stand-in's `new_client`, or
`webhook.kube.client.connect(ClientSettings(host=url, token=..., ca_file=...))` for a real one).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from tests.extender import chaos, factory
from tests.extender.invariant import Gpu, stored_use, violations
from tests.extender.stormrun import Report, Workload
from webhook.extender import service
from webhook.extender.settings import ExtenderSettings
from webhook.kube import errors, pods, rest, watch

__all__ = ["Report", "Workload", "default_extender", "run"]  # storm.Workload(...) is the entry

PREFIX = "/gpushare-scheduler"


def default_extender(api: Any) -> service.Extender:
    return service.Extender(ExtenderSettings(host="127.0.0.1", port=0, bind_backoff_s=0.01), api)


def run(
    connect: Callable[[], Any],
    workload: Workload | None = None,
    faults: chaos.Faults | None = None,
    make_extender: Callable[[Any], service.Extender] = default_extender,
    disturb: Callable[[], None] | None = None,
) -> Report:
    """Drive `workload` against the API server that `connect()` reaches (a new `ApiClient` per call:
    the driver's own and one per extender incarnation) and an in-process extender built by
    `make_extender(api)`, its binder's API calls passing through `chaos.FaultyBindingApi` (on threads)
    and `chaos.FaultyAsyncBindingApi` (on the event loop). The invariant is checked from the API's
    stored pods all along; the Report lists every violation.
    `disturb()`, when given, is called `workload.disturbances` times along the way (the stand-in:
    cut the watches and compact, so the extender re-lists)."""
    return _Run(connect, workload or Workload(), faults or chaos.Faults(), make_extender, disturb).go()


class _Run:
    def __init__(
        self,
        connect: Callable[[], Any],
        workload: Workload,
        faults: chaos.Faults,
        make_extender: Callable[[Any], service.Extender],
        disturb: Callable[[], None] | None,
    ) -> None:
        self.connect, self.w, self.faults, self.make_extender = connect, workload, faults, make_extender
        self.disturb = disturb
        # Bind counts at which to restart the extender or disturb the API server, soonest last.
        restarts = [
            (workload.binds * (i + 1) // (workload.restarts + 1), "restart") for i in range(workload.restarts)
        ]
        disturbances = workload.disturbances if disturb else 0
        self.plan = sorted(
            restarts
            + [(workload.binds * (2 * i + 1) // (2 * disturbances), "disturb") for i in range(disturbances)],
            reverse=True,
        )
        self.api = connect()
        self.report = Report()
        self.lock = threading.Lock()
        self.serving = threading.Event()
        self.stop = threading.Event()
        self.nodes = [f"{workload.node_prefix}-{i}" for i in range(len(workload.gpus))]
        self.capacity = {
            (n, i): size
            for n, sizes in zip(self.nodes, workload.gpus, strict=True)
            for i, size in enumerate(sizes)
        }
        self.uids: list[list[str]] = [[] for _ in range(workload.names)]  # per name: UIDs, newest last
        self.bodies: list[dict[str, Any]] = [{} for _ in range(workload.names)]  # per name: newest pod
        self.live: list[bool] = [False] * workload.names
        self.bound: list[bool] = [False] * workload.names  # a bind of its newest UID answered ""
        self.slot_locks = [threading.Lock() for _ in range(workload.names)]
        self.ext: service.Extender | None = None
        self.ext_api: Any = None
        self.stored: dict[str, Mapping[str, Any]] = {}
        self.incarnation = 0

    # --- API objects ---

    def _path(self, plural: str, name: str = "") -> str:
        return rest.path(plural, name, namespace=self.w.namespace)

    def _setup(self) -> None:
        for body, where in (
            ({"metadata": {"name": self.w.namespace}}, rest.path("namespaces")),
            ({"metadata": {"name": "default"}}, self._path("serviceaccounts")),  # no controller-manager
        ):
            with contextlib.suppress(errors.ConflictError, errors.NotFoundError):  # exists / not served
                rest.request(self.api, "POST", where, body=body)
        self._cleanup()
        for name, sizes in zip(self.nodes, self.w.gpus, strict=True):
            cordoned = {**factory.node(name, *sizes), "spec": {"unschedulable": True}}  # no real pods here
            rest.request(self.api, "POST", rest.path("nodes"), body=cordoned)

    def _cleanup(self) -> None:
        for pod in pods.list_pods(self.api, self.w.namespace)[0]:
            self._delete(pod["metadata"]["name"])
        for name in self.nodes:
            with contextlib.suppress(errors.NotFoundError):
                rest.request(self.api, "DELETE", rest.path("nodes", name))

    def _delete(self, name: str) -> None:
        with contextlib.suppress(errors.NotFoundError):  # at once: no kubelet confirms a graceful one
            rest.request(self.api, "DELETE", self._path("pods", name), body={"gracePeriodSeconds": 0})

    def _create(self, slot: int, rng: random.Random) -> None:
        units = rng.choice((1, 2, 3, 4, 5, 6, 8, 10, 12))
        shape = rng.random()
        if shape < 0.15:  # two GPUs, half each
            manifest = factory.pod(f"p{slot}", 2 * units, gpu_count=2)
        elif shape < 0.3:  # two containers
            manifest = factory.pod(f"p{slot}", units, rng.randint(1, 4))
        else:
            manifest = factory.pod(f"p{slot}", units)
        del manifest["metadata"]["uid"]
        manifest["metadata"]["namespace"] = self.w.namespace
        manifest["spec"].update(schedulerName="gpushare-invariant", automountServiceAccountToken=False)
        for container in manifest["spec"]["containers"]:
            container["image"] = "registry.k8s.io/pause:3.10"
        created = rest.request(self.api, "POST", self._path("pods"), body=manifest)
        self.uids[slot].append(str(created["metadata"]["uid"]))
        self.bodies[slot] = created
        self.live[slot] = True

    # --- the extender under test ---

    def _start_extender(self) -> None:
        self.incarnation += 1
        self.ext_api = self.connect()
        ext = self.make_extender(self.ext_api)
        injector = chaos.Injector(self.faults, self.w.seed * 1000 + self.incarnation)
        ext.binder.api = chaos.FaultyBindingApi(ext.binder.api, injector)
        if ext.app.loop_api is not None:  # binds on the event loop meet the same faults
            ext.app.loop_api = chaos.FaultyAsyncBindingApi(ext.app.loop_api, injector)
        ext.start()
        if not ext.wait_synced(30):
            raise AssertionError("the extender did not sync within 30 s")
        self.ext = ext
        self.serving.set()

    def _stop_extender(self) -> None:
        self.serving.clear()
        ext = self.ext
        if ext is None:
            return
        ext.stop()  # graceful: binds already received finish
        faulty = ext.binder.api
        assert isinstance(faulty, chaos.FaultyBindingApi)
        faulty.kill()
        self.report.injected.update(faulty.injected)
        self.report.sent += faulty.sent
        self.ext_api.close()
        self.ext = None

    # --- scheduler threads and the checker ---

    def _bind(self, slot: int, uid: str, node: str) -> None:
        name = f"p{slot}"
        ext = self.ext
        body = {"PodName": name, "PodNamespace": self.w.namespace, "PodUID": uid, "Node": node}
        try:
            if ext is None:
                raise ConnectionError("no extender")
            error = _post(ext.url, f"{PREFIX}/bind", json.dumps(body).encode())["Error"]
        except (OSError, http.client.HTTPException):
            with self.lock:
                self.report.unreachable += 1
            return
        with self.lock:
            if error:
                self.report.refused += 1
                self.report.errors[_shape(error)] += 1
            else:
                self.report.bound += 1
                self.bound[slot] = self.bound[slot] or uid == self.uids[slot][-1]

    def _filter(self, slot: int) -> str | None:
        """Filter over every node, as kube-scheduler asks it; the first node it passes, or None."""
        ext = self.ext
        body = {"Pod": self.bodies[slot], "Nodes": None, "NodeNames": self.nodes}
        try:
            if ext is None:
                raise ConnectionError("no extender")
            passed = _post(ext.url, f"{PREFIX}/filter", json.dumps(body).encode())["NodeNames"]
        except (OSError, http.client.HTTPException):
            return None
        with self.lock:
            self.report.filters += 1
        return str(passed[0]) if passed else None

    def _step(self, rng: random.Random) -> None:
        slot = rng.randrange(self.w.names)
        name = f"p{slot}"
        delete = self.w.delete_bound if self.bound[slot] else self.w.delete
        if not self.live[slot] or rng.random() < delete:
            with self.slot_locks[slot]:
                if self.live[slot]:
                    self._delete(name)
                    self.live[slot] = self.bound[slot] = False
                    with self.lock:
                        self.report.deletes += 1
                else:
                    self._create(slot, rng)
                    with self.lock:
                        self.report.creates += 1
            return
        uids = self.uids[slot]
        first = rng.choice(self.nodes)
        if rng.random() < self.w.filter_first:
            chosen = self._filter(slot)
            if chosen is None or rng.random() < self.w.filter_only:
                return  # no node fits, or kube-scheduler gave the pod up after filter
            first = chosen
        calls = []
        for _ in range(rng.randint(1, self.w.duplicates)):
            node = rng.choice(self.nodes) if rng.random() < self.w.other_node else first
            uid = rng.choice(uids) if rng.random() < self.w.stale_uid else uids[-1]
            calls.append(threading.Thread(target=self._bind, args=(slot, uid, node)))
        with self.lock:
            self.report.binds += len(calls)
        for call in calls:
            call.start()
        for call in calls:
            call.join()

    def _caller(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            self.serving.wait()
            with self.lock:
                if self.report.binds >= self.w.binds:
                    return
                due = self.plan.pop()[1] if self.plan and self.plan[-1][0] <= self.report.binds else ""
                self.report.restarts += due == "restart"
            if due == "restart":
                self._stop_extender()
                self._start_extender()
            elif due == "disturb" and self.disturb is not None:
                self.disturb()
            self._step(rng)

    def _judge(self, stored: Iterable[Mapping[str, Any]]) -> None:
        stored = list(stored)
        found = violations(stored, self.capacity)
        with self.lock:
            self.report.checks += 1
            self.report.bad_states += bool(found)
            self.report.violations += [v for v in found if v not in self.report.violations]

    def _on_pod(self, event: watch.WatchEvent) -> None:
        """Every state of the namespace's pods, as the watch shows them one change at a time."""
        if event.type == watch.RESYNC:
            self.stored = {o["metadata"]["name"]: o for o in event.objects}
        elif event.object is not None and event.type == watch.DELETED:
            self.stored.pop(event.object["metadata"]["name"], None)
        elif event.object is not None:
            self.stored[event.object["metadata"]["name"]] = event.object
        self._judge(self.stored.values())

    def _extender_counts(self) -> dict[Gpu, int]:
        assert self.ext is not None
        counted = {}
        for name in self.nodes:
            view = self.ext.cache.view(name)
            for gpu in view.gpus if view is not None else ():
                counted[(name, gpu.index)] = gpu.used
        return counted

    def _settled(self) -> None:
        """Quiet: the extender never counts less than the API holds; once every pod is deleted, nothing."""
        deadline = time.monotonic() + 10
        while True:
            held, _ = stored_use(pods.list_pods(self.api, self.w.namespace)[0])
            counted = self._extender_counts()
            short = {g: (c, held.get(g, 0)) for g, c in counted.items() if c < held.get(g, 0)}
            if not short or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for (node, gpu), (c, h) in sorted(short.items()):
            self.report.violations.append(f"extender counts {c} on GPU {gpu} of {node}; the API holds {h}")
        for slot in range(self.w.names):
            self._delete(f"p{slot}")
        deadline = time.monotonic() + 3  # DELETED events take milliseconds; a leak never goes
        while any(self._extender_counts().values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for (node, gpu), c in sorted(self._extender_counts().items()):
            if c:
                self.report.leaked.append(f"extender still counts {c} on GPU {gpu} of {node}, no pods left")

    def go(self) -> Report:
        started = time.monotonic()
        quick = watch.WatchSettings(backoff=watch.Backoff(initial=0.05, maximum=0.5))  # never blind for long
        checker = watch.Watcher(
            self.api, self._path("pods"), self._on_pod, settings=quick, name="invariant checker"
        )
        try:
            self._setup()
            checker.start()
            if not checker.wait_synced(30):
                raise AssertionError("the checker's watch did not sync within 30 s")
            self._start_extender()
            callers = [
                threading.Thread(target=self._caller, args=(self.w.seed * 100 + i,), name=f"scheduler-{i}")
                for i in range(self.w.callers)
            ]
            for caller in callers:
                caller.start()
            for caller in callers:
                caller.join()
            self.stop.set()
            time.sleep(0.2)  # the checker's watch shows the last changes
            checker.stop()
            self._judge(pods.list_pods(self.api, self.w.namespace)[0])
            self._settled()
        finally:
            self.stop.set()
            checker.stop()
            self._stop_extender()
            with contextlib.suppress(errors.ApiError):
                self._cleanup()
            self.api.close()
        self.report.seconds = time.monotonic() - started
        return self.report


def _shape(error: str) -> str:
    """An Error text with names and numbers blanked, to count errors by kind."""
    error = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "U", error)
    return re.sub(r"\d+", "N", re.sub(r"(pod|node) \S+", r"\1 X", error))


def _post(base_url: str, path: str, body: bytes) -> Any:
    """One POST on a fresh connection (httpx would build an SSL context per call: ~10 ms each)."""
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()
