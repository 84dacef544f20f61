"""kube-scheduler (configured from the chart's KubeSchedulerConfiguration) calls our extender, which
binds through the API server with the chart's RBAC."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.e2e import objects, placement
from tests.e2e.bed import Bed
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.kube import rest

ISOLATION = {"cgpu.disable.isolation": "false"}


def _group_nodes(bed: Bed, group: str, count: int, gpus: int, gib: int) -> dict[str, int]:
    names = [f"{group}-node-{i}" for i in range(count)]
    for name in names:
        bed.node(name, gpus, gib, labels=ISOLATION, group=group)
    return dict.fromkeys(names, gib)


def _pod(name: str, *gib: int, group: str) -> dict[str, Any]:
    body = objects.gpu_pod(name, *gib)
    return objects.in_group(body, group)


def _create_all(bed: Bed, ns: str, bodies: list[dict[str, Any]]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda b: bed.request("POST", rest.path("pods", namespace=ns), body=b), bodies))


def _bound(bed: Bed, ns: str) -> list[dict[str, Any]]:
    return [p for p in bed.pods(ns) if p["spec"].get("nodeName")]


def test_gpu_mem_pods_are_bound_by_the_extender_with_annotations(bed: Bed) -> None:
    ns = bed.namespace("e2e-place")
    capacity = _group_nodes(bed, "place", 2, gpus=2, gib=16)
    bed.request("POST", rest.path("pods", namespace=ns), body=_pod("one", 10, group="place"))
    bed.request("POST", rest.path("pods", namespace=ns), body=_pod("two", 4, 2, group="place"))
    pods = bed.wait("both pods bound", lambda: len(_bound(bed, ns)) == 2 and _bound(bed, ns))
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "gpushare-scheduler"
        notes = pod["metadata"]["annotations"]
        placed = ann.decode(notes)
        assert placed is not None and not placed.assigned
        assert notes[resources.ANN_MEM_ASSIGNED] == "false"  # the device plugin flips it at Allocate
        assert int(notes[resources.ANN_MEM_POD]) == sum(
            int(c["resources"]["limits"][resources.GPU_MEMORY]) for c in pod["spec"]["containers"]
        )
        assert notes[resources.ANN_MEM_DEV] == "16"
    placement.check_invariant(pods, capacity)
    events = bed.events(ns, "one")
    assert any(
        e["reason"] == "Scheduled" and e.get("reportingComponent", e["source"].get("component", ""))
        for e in events
    )


def test_a_pod_too_big_for_every_gpu_stays_pending_with_our_message(bed: Bed) -> None:
    ns = bed.namespace("e2e-toobig")
    _group_nodes(bed, "toobig", 1, gpus=2, gib=16)
    # 20 GiB fits the node's 32 GiB in total but no single 16 GiB GPU: only the extender can tell.
    bed.request("POST", rest.path("pods", namespace=ns), body=_pod("huge", 20, group="toobig"))

    def failed() -> list[str]:
        return [e["message"] for e in bed.events(ns, "huge") if e["reason"] == "FailedScheduling"]

    messages = bed.wait("a FailedScheduling event", failed)
    pod = bed.request("GET", rest.path("pods", "huge", ns))
    assert not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"
    # kube-scheduler counts nodes per distinct reason ("1 <our reason>, 2 node(s) didn't match ..."),
    # so our reason names the sizes, not the node.
    assert any("0/" in m and "largest free GPU has 16 GiB" in m and "needs 20" in m for m in messages), (
        messages
    )


def test_two_hundred_pods_at_once_over_twenty_nodes_never_over_commit(bed: Bed) -> None:
    ns = bed.namespace("e2e-burst")
    capacity = _group_nodes(bed, "burst", 20, gpus=2, gib=16)
    rng = random.Random(7)
    sizes = [rng.choice([1, 2, 3, 4, 6, 8]) for _ in range(200)]  # about 1.2x the 640 GiB there is
    _create_all(bed, ns, [_pod(f"p{i}", size, group="burst") for i, size in enumerate(sizes)])

    def settled() -> list[dict[str, Any]] | None:
        pods = bed.pods(ns)
        placement.check_invariant(pods, capacity)  # checked on every poll, not only at the end
        free = {key: 16 - used for key, used in placement.per_gpu(pods).items()}
        pending = [p for p in pods if not p["spec"].get("nodeName")]
        smallest = min((_gib(p) for p in pending), default=None)
        best_free = max([*free.values(), *(16 for _ in range(40 - len(free)))], default=0)
        return pods if smallest is None or smallest > best_free else None

    pods = bed.wait("every pod placed or no GPU left for the pending ones", settled, timeout=120)
    used = placement.check_invariant(pods, capacity)
    assert sum(used.values()) >= 0.9 * 640  # nearly full: pending pods are pending for want of room


def test_an_extender_crash_in_the_middle_loses_nothing(bed: Bed) -> None:
    ns = bed.namespace("e2e-restart")
    capacity = _group_nodes(bed, "restart", 4, gpus=2, gib=16)
    first = [_pod(f"a{i}", 2, group="restart") for i in range(30)]
    second = [_pod(f"b{i}", 2, group="restart") for i in range(40)]  # 70 x 2 GiB > the 128 GiB there is
    _create_all(bed, ns, first)
    bed.wait("some pods bound", lambda: len(_bound(bed, ns)) >= 5)
    extender = next(p for p in bed.processes if p.name == "extender-0")
    extender.stop(grace=0)  # SIGKILL: no lease release, no cleanup
    bed.processes.remove(extender)
    _create_all(bed, ns, second)
    bed.start_extender()
    pods = bed.wait("all memory placed", lambda: len(_bound(bed, ns)) == 64 and bed.pods(ns), timeout=90)
    used = placement.check_invariant(pods, capacity)
    assert sorted(used.values()) == [16] * 8


def _gib(pod: dict[str, Any]) -> int:
    return sum(int(c["resources"]["limits"][resources.GPU_MEMORY]) for c in pod["spec"]["containers"])
