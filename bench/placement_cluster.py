"""The nodes and pods bench/placement.py (and bench/dra.py) place: fake GPU nodes and whole-card nodes,
pods created at once or in order, a run started and watched to saturation, the cluster cleared between
rounds."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from placement_measures import Bindings  # the script's directory is on sys.path when it runs

from tests.e2e import objects
from tests.e2e.bed import Bed
from webhook.core.wire import resources
from webhook.devcluster.process import Process
from webhook.kube import rest

PLAIN = "plain-scheduler"


def gpu_nodes(bed: Bed, group: str, sizes: list[int], gpus: int) -> dict[str, int]:
    """One node per entry of `sizes` (GiB per GPU), `gpus` GPUs each; node -> GiB per GPU."""
    names = {f"{group}-{i}": size for i, size in enumerate(sizes)}
    labels = {"cgpu.disable.isolation": "false"}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: bed.node(n, gpus, names[n], labels=labels, group=group), names))
    return names


def card_nodes(bed: Bed, group: str, count: int, cards: int = 8) -> None:
    """`count` nodes of `cards` nvidia.com/gpu each (bench/dra.py asks more, for 5,000 pods on 200)."""

    def one(i: int) -> None:
        name = f"{group}-{i}"
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"e2e-group": group}},
        }
        node = bed.request("POST", rest.path("nodes"), body=body)
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "250", resources.NVIDIA_GPU: str(cards)}
        node["status"] = {"capacity": capacity, "allocatable": capacity}
        bed.request("PUT", rest.path("nodes", name) + "/status", body=node)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(count)))


def create(bed: Bed, ns: str, bodies: list[dict[str, Any]]) -> None:
    """The pods, in any order (eight at a time)."""
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda b: bed.request("POST", rest.path("pods", namespace=ns), body=b), bodies))


def create_in_order(bed: Bed, ns: str, bodies: list[dict[str, Any]]) -> None:
    """The pods one after another: a running kube-scheduler's queue takes them in the order they arrive.
    (Its first list of pods made before it started is not in name order: with kube-scheduler v1.36 the
    pods of a packing run arrived as p00146, p00396, p00461, ...)"""
    for body in bodies:
        bed.request("POST", rest.path("pods", namespace=ns), body=body)


def saturate(
    bed: Bed,
    ns: str,
    pods: int,
    start: Any,
    *,
    feed: Any = None,
    quiet_s: float = 8.0,
    limit_s: float = 900,
) -> Process:
    """Start a scheduler, then `feed()` (the pods, when not made before), and wait until every pod is
    bound or nothing was bound for `quiet_s`."""
    with Bindings(bed, ns) as seen:
        process: Process = start()
        if feed is not None:
            feed()
        t0 = time.monotonic()
        while seen.count() < pods and time.monotonic() - seen.last_change < quiet_s:
            if time.monotonic() - t0 > limit_s:
                raise SystemExit(f"{ns}: no saturation after {limit_s} s; logs in {bed.cp.logs}")
            time.sleep(0.2)
    return process


def stop(bed: Bed, process: Process) -> None:
    process.stop(grace=5)
    bed.processes.remove(process)


def clear(bed: Bed, groups: list[str]) -> None:
    """Delete the pods (at once: no kubelet confirms) and the nodes of `groups` (each its namespace and
    node label), and wait until the API shows none."""
    if not groups:
        return
    for group in groups:
        bed.request("DELETE", rest.path("pods", namespace=group), query={"gracePeriodSeconds": 0})
        bed.request("DELETE", rest.path("nodes"), query={"labelSelector": f"e2e-group={group}"})
    for group in groups:
        bed.wait(
            f"{group} cleared",
            lambda g=group: (
                not rest.request(bed.api, "GET", rest.path("pods", namespace=g))["items"]
                and not rest.request(
                    bed.api, "GET", rest.path("nodes"), query={"labelSelector": f"e2e-group={g}"}
                )["items"]
            ),
            timeout=120,
        )
    time.sleep(2)  # the watches (the extender's, kube-scheduler's) have seen the deletions


def card_pods(group: str, count: int) -> list[dict[str, Any]]:
    """`count` pods of one `nvidia.com/gpu` each for the plain scheduler, on the nodes of `group`."""
    cards = [
        objects.pod(f"w{i:05d}", objects.container(limits={resources.NVIDIA_GPU: "1"})) for i in range(count)
    ]
    for body in cards:
        body["spec"].update(nodeSelector={"e2e-group": group}, schedulerName=PLAIN)
    return cards
