"""The placement invariant under a storm, read from the API's own state: while claims of many sizes are
created and deleted at once and the drivers restart, the memory the allocated claims consume on each GPU
(each share counted once, by its shareID) never passes the GPU's memory. kube-scheduler is the real one;
the three nodes have no kubelet (pods stay bound, not Running), each its own driver publishing its GPUs.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import dra
from tests.e2e.bed import Bed
from webhook.core.placement import modes
from webhook.devcluster.process import Process
from webhook.kube import errors, rest

NODES = tuple(f"dra-storm-{i}" for i in range(3))
GROUP = "dra-storm"
GPUS = "0:16,1:16,2:24"
GIB = 1 << 30
CAPACITY = {(node, f"gpu-{i}"): size * GIB for node in NODES for i, size in enumerate((16, 16, 24))}
SIZES = ("1Gi", "2Gi", "2500Mi", "3Gi", "5Gi", "8Gi", "12Gi")
STORM_S = 40.0


@pytest.fixture(scope="module")
def drivers(bed: Bed) -> Iterator[dict[str, Process]]:
    dra.install(bed)
    root = Path(tempfile.mkdtemp(prefix="gpushare-storm-", dir="/tmp"))
    running: dict[str, Process] = {}
    try:
        for node in NODES:
            bed.node(node, 3, 16, {modes.MODE_LABEL: "dra"}, group=GROUP)
            running[node] = dra.start_driver(bed, node, GPUS, root / node)
        bed.wait("every driver's slice", lambda: set(dra.capacities(bed, NODES)) == set(CAPACITY), timeout=60)
        yield running
    finally:
        for process in running.values():
            process.stop()
        dra.forget_slices(bed, NODES)
        dra.uninstall(bed)
        shutil.rmtree(root, ignore_errors=True)


def _check(claims: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """The invariant on one read of every claim; what each GPU holds."""
    used = dra.consumed(claims)  # asserts that no shareID appears twice
    over = {key: (amount, CAPACITY[key]) for key, amount in used.items() if amount > CAPACITY[key]}
    assert not over, f"GPUs holding more than their memory: {over}"
    return used


class Storm:
    """Creators, deleters, driver restarts and the checker, each on its own thread, until `stop`."""

    def __init__(self, bed: Bed, namespace: str, drivers: dict[str, Process], seed: int) -> None:
        self.bed, self.namespace, self.drivers = bed, namespace, drivers
        self.random = random.Random(seed)
        self.stop = threading.Event()
        self.names: list[str] = []
        self.lock = threading.Lock()
        self.created = self.deleted = self.restarts = self.checks = 0
        self.failures: list[BaseException] = []

    def _loop(self, step: Any, pause: tuple[float, float]) -> None:
        try:
            while not self.stop.is_set():
                step()
                self.stop.wait(self.random.uniform(*pause))
        except BaseException as err:  # surfaced by run()
            self.failures.append(err)
            self.stop.set()

    def create(self) -> None:
        name = f"s{self.created}"
        self.created += 1
        memory = self.random.choice(SIZES)
        dra.create(self.bed, self.namespace, dra.claim(name, memory), dra.pod(name, name, GROUP))
        with self.lock:
            self.names.append(name)

    def delete(self) -> None:
        with self.lock:
            if len(self.names) < 4:
                return
            name = self.names.pop(self.random.randrange(len(self.names)))
        self.deleted += 1
        ns = self.namespace
        self.bed.request("DELETE", rest.path("pods", name, ns), query={"gracePeriodSeconds": 0})
        path = rest.path("resourceclaims", name, ns, group=dra.GROUP)
        self.bed.request("DELETE", path)
        try:  # without a kubelet nobody confirms the pod is gone: let the claim go with it
            body = {"metadata": {"finalizers": None}}
            self.bed.request("PATCH", path, body=body, content_type=rest.MERGE_PATCH)
        except errors.NotFoundError:
            pass

    def restart(self) -> None:
        node = self.random.choice(NODES)
        process = self.drivers[node]
        process.stop()
        process.start()
        self.restarts += 1

    def check(self) -> None:
        _check(dra.claims(self.bed, self.namespace))
        self.checks += 1

    def run(self, seconds: float) -> None:
        threads = [
            threading.Thread(target=self._loop, args=(self.create, (0.05, 0.2))),
            threading.Thread(target=self._loop, args=(self.create, (0.05, 0.2))),
            threading.Thread(target=self._loop, args=(self.delete, (0.1, 0.4))),
            threading.Thread(target=self._loop, args=(self.restart, (4.0, 8.0))),
            threading.Thread(target=self._loop, args=(self.check, (0.2, 0.5))),
        ]
        for thread in threads:
            thread.start()
        self.stop.wait(seconds)
        self.stop.set()
        for thread in threads:
            thread.join(30)
        if self.failures:
            raise self.failures[0]


def test_no_gpu_ever_holds_more_than_its_memory_under_a_storm(bed: Bed, drivers: dict[str, Process]) -> None:
    ns = bed.namespace("e2e-dra-storm")
    storm = Storm(bed, ns, drivers, seed=int(time.time()))
    try:
        storm.run(STORM_S)
        assert storm.created >= 50 and storm.deleted >= 10 and storm.restarts >= 3 and storm.checks >= 20

        # Settled: every pod kube-scheduler bound has its claim allocated on its node, and the others
        # are waiting for memory the bound ones hold.
        def settled() -> list[dict[str, Any]] | None:
            claims = {c["metadata"]["name"]: c for c in dra.claims(bed, ns)}
            for pod in bed.pods(ns):
                node = pod["spec"].get("nodeName")
                found = claims.get(pod["metadata"]["name"])
                if node and (found is None or [r["pool"] for r in dra.results(found)] != [node]):
                    return None
            return list(claims.values())

        claims = bed.wait("bound pods and allocated claims to agree", settled, timeout=60)
        used = _check(claims)
        allocated = [c for c in claims if dra.results(c)]
        shared = [key for key in used if sum(1 for c in allocated if _on(c, key)) >= 2]
        assert len(allocated) > len(CAPACITY) and shared, (
            "the storm should have packed several shares on a GPU"
        )
        print(  # shown with -s: what this run's storm did
            f"storm: {storm.created} claims created, {storm.deleted} deleted, {storm.restarts} driver "
            f"restarts, {storm.checks} invariant reads; settled: {len(allocated)} of {len(claims)} claims "
            f"allocated, {len(shared)} GPUs shared"
        )
        rounded = [c for c in allocated if _asked(c) == "2500Mi"]
        assert rounded and all(dra.results(c)[0]["consumedCapacity"]["memory"] == "3Gi" for c in rounded)
        # Restarted drivers found their slices current: no rewrite, no new pool generation.
        generations = {s["spec"]["pool"]["generation"] for s in _slices(bed)}
        assert generations == {1}
    finally:
        dra.release(bed, ns)


def _on(claim: dict[str, Any], key: tuple[str, str]) -> bool:
    return any((r["pool"], r["device"]) == key for r in dra.results(claim))


def _asked(claim: dict[str, Any]) -> str:
    return str(claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"])


def _slices(bed: Bed) -> list[dict[str, Any]]:
    found = rest.list_all(bed.api, rest.path("resourceslices", group=dra.GROUP))
    return [s for s in found if s["spec"]["driver"] == dra.DRIVER and s["spec"]["nodeName"] in NODES]
