"""High availability as a cluster shows it (docs/operations.md): the chart's replicas apart on three
nodes, a GPU node lost and back, a drain, a node added, a rolling upgrade and a rollback under a stream
of pods. What must hold is read from the API server on every poll; each time measured is printed."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from typing import Any

from tests.cluster.workloads import Workloads, our_pods, ready, serving_pods, unreached, wait
from tests.cluster_ha.conftest import (
    GIB_PER_GPU,
    GIB_TOTAL,
    GPU_A,
    GPU_B,
    GPU_C,
    GPU_LABELS,
    SYSTEM,
    ha_values,
)
from tests.cluster_ha.traffic import Traffic
from tests.e2e import placement
from webhook.core.wire import resources
from webhook.devcluster import release
from webhook.devcluster.cluster import NodeSpec
from webhook.devcluster.podrelease import FULLNAME, NAMESPACE, PodRelease
from webhook.kube import rest

Obj = dict[str, Any]
GPU_MEM = resources.GPU_MEMORY
LEASE = "gpushare-extender"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
# How long the tests' workloads tolerate an unreachable node before eviction (the default is 300 s).
TOLERATION_S = 10
TIMES: dict[str, float] = {}


def test_replicas_run_on_different_nodes_under_their_budgets(chart: PodRelease) -> None:
    """The chart's defaults (preferred anti-affinity) put the webhook's and the extender's two replicas
    on two nodes each; each part's PodDisruptionBudget keeps one of them through a drain."""
    for part in ("webhook", "extender"):
        assert ready(chart, "deployments", part) == (2, 2)
        nodes = [p["spec"]["nodeName"] for p in our_pods(chart, part)]
        assert len(nodes) == 2 and len(set(nodes)) == 2, (part, nodes)
        budget = chart.api.request(
            "GET", rest.path("poddisruptionbudgets", f"{FULLNAME}-{part}", NAMESPACE, group="policy")
        )
        assert budget["spec"]["minAvailable"] == 1, budget["spec"]
        assert budget["status"]["disruptionsAllowed"] == 1, budget["status"]
    assert ready(chart, "daemonsets", "device-plugin") == (2, 2)
    plugins = sorted(p["spec"]["nodeName"] for p in our_pods(chart, "device-plugin"))
    assert plugins == [GPU_A, GPU_B]


# -- helpers -------------------------------------------------------------------------------------------
def lease_holder(chart: PodRelease) -> str:
    lease = chart.api.request("GET", rest.path("leases", LEASE, NAMESPACE, group="coordination.k8s.io"))
    return str(lease["spec"].get("holderIdentity") or "")


def node_of(chart: PodRelease, pod: str) -> str:
    return str(chart.api.request("GET", rest.path("pods", pod, NAMESPACE))["spec"].get("nodeName", ""))


def node_ready(chart: PodRelease, node: str) -> str:
    """The Node's Ready condition: "True", "False" or "Unknown" (the kubelet stopped posting)."""
    found = chart.api.request("GET", rest.path("nodes", node))
    conditions = {c["type"]: c["status"] for c in found["status"].get("conditions", [])}
    return str(conditions.get("Ready", ""))


def allocatable_gib(chart: PodRelease, node: str) -> int:
    found = chart.api.request("GET", rest.path("nodes", node))
    return int(found["status"].get("allocatable", {}).get(GPU_MEM, "0"))


def deployment(name: str, replicas: int, gib: int, image: str, **spec: Any) -> Obj:
    """gpu-mem pods spread evenly over the GPU nodes, tolerating an unreachable or not-ready node for
    TOLERATION_S (the default, 300 s, is the admission plugin's) so eviction comes within the test."""
    labels = {"app": name}
    tolerations = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": TOLERATION_S}
        for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
    ]
    pod_spec: Obj = {
        "terminationGracePeriodSeconds": 1,
        "tolerations": tolerations,
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                # A lost (unreachable) or cordoned node is no domain: replacements may all go elsewhere.
                "nodeTaintsPolicy": "Honor",
                "labelSelector": {"matchLabels": labels},
            }
        ],
        "containers": [
            {
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
                "resources": {"limits": {GPU_MEM: str(gib)}},
            }
        ],
        **spec,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def app_pods(work: Workloads, app: str) -> list[Obj]:
    return [
        p for p in work.chart.api.pods(work.namespace) if p["metadata"].get("labels", {}).get("app") == app
    ]


def running_on(pods: list[Obj]) -> dict[str, list[str]]:
    """Node -> the running, undeleted pods there."""
    found: dict[str, list[str]] = {}
    for pod in pods:
        statuses = pod["status"].get("containerStatuses") or []
        alive = statuses and all("running" in s.get("state", {}) for s in statuses)
        if alive and not pod["metadata"].get("deletionTimestamp"):
            found.setdefault(pod["spec"]["nodeName"], []).append(pod["metadata"]["name"])
    return found


def spread(work: Workloads, app: str, counts: list[int]) -> dict[str, list[str]] | None:
    """Node -> the app's running pods, once as many nodes hold as many as `counts` says (in any order)."""
    found = running_on(app_pods(work, app))
    return found if sorted(len(v) for v in found.values()) == sorted(counts) else None


def inspect_json(work: Workloads) -> Obj:
    shown = subprocess.run(
        [release.GPUSHARE, "inspect", "-o", "json"],
        env={"KUBECONFIG": str(work.cluster.kubeconfig), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    found: Obj = json.loads(shown.stdout)
    return found


def inspected(work: Workloads, node: str) -> Obj:
    return next(n for n in inspect_json(work)["nodes"] if n["name"] == node)


def measured(name: str, seconds: float) -> None:
    """A time docs/operations.md states, printed (pytest -s shows it) and kept for the run's summary."""
    TIMES[name] = round(seconds, 1)
    print(f"measured: {name}: {seconds:.1f} s")


def settle_leader_on_a_gpu_node(chart: PodRelease) -> str:
    """The extender's leader on a GPU node, so that losing that node loses the leader: if it leads from
    the system node, its pod is deleted (gracefully, releasing the lease) and the follower, which the
    anti-affinity put on another node, takes over."""
    holder = lease_holder(chart)
    if node_of(chart, holder) != SYSTEM:
        return holder
    chart.api.request("DELETE", rest.path("pods", holder, NAMESPACE))

    def moved() -> str | None:
        now = lease_holder(chart)
        return now if now and now != holder and node_of(chart, now) in (GPU_A, GPU_B) else None

    found = wait("the extender's lease held from a GPU node", moved, 120)
    wait("both extender replicas ready", lambda: ready(chart, "deployments", "extender") == (2, 2), 180)
    return str(found)


# -- a GPU node lost, and back -------------------------------------------------------------------------
def test_a_lost_gpu_node_frees_its_pods_once_and_comes_back(work: Workloads) -> None:
    chart, cluster = work.chart, work.cluster
    image = cluster.names["gpushare"]
    leader = settle_leader_on_a_gpu_node(chart)
    victim = node_of(chart, leader)
    survivor = GPU_B if victim == GPU_A else GPU_A
    trainer = deployment("trainer", 4, 4, image)
    trainer["metadata"]["namespace"] = work.namespace
    assert "created" in work.apply(trainer)
    placed = wait("4 trainers running, 2 a node", lambda: spread(work, "trainer", [2, 2]), 180)
    lost = set(placed[victim])
    webhooks_there = [
        p["metadata"]["name"] for p in our_pods(chart, "webhook") if p["spec"]["nodeName"] == victim
    ]

    node = cluster.running[victim]
    try:
        with Traffic(chart, work.namespace, dict(GIB_PER_GPU), admit_only=True) as traffic:
            time.sleep(2)
            t0 = time.monotonic()
            node.crash()
            wait("a follower leading", lambda: _leads_elsewhere(chart, leader, victim), 120, every=0.2)
            measured("extender follower leads after the leader's node is lost", time.monotonic() - t0)
            wait(
                f"{victim} NotReady (Unknown)", lambda: node_ready(chart, victim) == "Unknown", 180, every=0.5
            )
            measured("node marked Unknown (node-monitor-grace-period)", time.monotonic() - t0)
            shown = inspected(work, victim)
            assert shown["ready"] is False, shown
            wait(
                "the lost node's pods evicted",
                lambda: all(
                    p["metadata"].get("deletionTimestamp")
                    for p in app_pods(work, "trainer")
                    if p["metadata"]["name"] in lost
                ),
                180,
            )
            measured("its pods evicted (taint-based eviction)", time.monotonic() - t0)
            # Terminating on a node that may come back: they keep their memory until they are gone.
            assert inspected(work, victim)["allocated"] == 4 * len(lost)
            wait(
                "replacements running on the surviving node",
                lambda: len(running_on(app_pods(work, "trainer")).get(survivor, [])) == 4,
                180,
            )
            measured("the Deployment's replacements run on the surviving GPU node", time.monotonic() - t0)
            # The operator's word that the node is down for good: pod GC deletes its pods, freeing memory
            # once.
            cluster.kubectl("taint", "node", victim, f"{OUT_OF_SERVICE}=nodeshutdown:NoExecute")
            wait(
                "the lost node's pods gone",
                lambda: not lost & {p["metadata"]["name"] for p in app_pods(work, "trainer")},
                180,
            )
            measured("its pods deleted after the out-of-service taint", time.monotonic() - t0)
            wait("their memory freed", lambda: inspected(work, victim)["allocated"] == 0, 60)
            time.sleep(5)  # GPU admissions after the dead endpoints left
        assert not traffic.broken, traffic.broken
        assert traffic.failures(gpu=False) == [], traffic.failures(gpu=False)[:3]  # no GPU: never refused
        refused = traffic.failures(gpu=True)
        # Fail closed: the API server could not reach a webhook, never an answer of ours. Either webhook: a
        # pod's mutating call may reach a live replica and its validating call the lost one.
        for answer in refused:
            assert unreached(answer.error), answer
        admitted_again = max((a.at for a in refused), default=t0) - t0
        measured(
            f"GPU pods admitted again ({len(refused)} of {traffic.sent(True)} refused, "
            f"webhook replicas on the lost node: {len(webhooks_there)})",
            admitted_again,
        )
        assert traffic.polls > 20
    except BaseException:
        # Back before the failure is reported: the tests after this one need all three nodes.
        cluster.kubectl("taint", "node", victim, f"{OUT_OF_SERVICE}-", check=False)
        if node.kubelet is None:
            node.recover()
        raise

    # Back: the operator lifts the taint and the machine boots.
    cluster.kubectl("taint", "node", victim, f"{OUT_OF_SERVICE}-")
    t1 = time.monotonic()
    node.recover()
    wait(f"{victim} Ready", lambda: node_ready(chart, victim) == "True", 180)
    wait(
        "its device plugin registered again",
        lambda: (
            allocatable_gib(chart, victim) == GIB_TOTAL[victim]
            and ready(chart, "daemonsets", "device-plugin") == (2, 2)
        ),
        180,
    )
    measured("the node back: Ready, its device plugin registered", time.monotonic() - t1)
    assert inspected(work, victim)["allocated"] == 0  # nothing counted twice
    pinned = work.pod("pinned", {GPU_MEM: 3}, nodeSelector={"kubernetes.io/hostname": victim})
    assert "created" in work.apply(pinned)
    assert work.running("pinned", 120)["spec"]["nodeName"] == victim
    assert inspected(work, victim)["allocated"] == 3
    placement.check_invariant(work.chart.api.pods(work.namespace), dict(GIB_PER_GPU))


# -- kubectl drain -------------------------------------------------------------------------------------
def test_a_drain_keeps_every_budget_and_places_the_evicted_pods_again(work: Workloads) -> None:
    chart, cluster = work.chart, work.cluster
    serve = deployment("serve", 4, 2, cluster.names["gpushare"])
    serve["metadata"]["namespace"] = work.namespace
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "serve", "namespace": work.namespace},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "serve"}}},
    }
    assert "created" in work.apply(serve, budget)
    wait(
        "4 serve pods running on both GPU nodes",
        lambda: sorted(len(v) for v in running_on(app_pods(work, "serve")).values()) == [2, 2],
        180,
    )
    wait(
        "the budget allows one",
        lambda: work.get("serve", "poddisruptionbudgets", "policy")["status"].get("disruptionsAllowed") == 1,
        60,
    )
    lowest: dict[str, int] = {"serve": 4, "webhook": 2, "extender": 2}
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.3):
            counts = {
                "serve": sum(1 for p in app_pods(work, "serve") if _ready(p)),
                "webhook": sum(1 for p in our_pods(chart, "webhook") if _ready(p)),
                "extender": sum(1 for p in our_pods(chart, "extender") if _ready(p)),
            }
            for key, value in counts.items():
                lowest[key] = min(lowest[key], value)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    try:
        cluster.kubectl(
            "drain", GPU_A, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=300s", timeout=330
        )
        measured("kubectl drain of a GPU node", time.monotonic() - t0)
        placed = wait("the evicted serve pods placed again", lambda: spread(work, "serve", [4]), 180)
        measured("the evicted gpu-mem pods running again", time.monotonic() - t0)
        assert GPU_A not in placed, placed
        wait(
            "our parts whole again",
            lambda: (
                ready(chart, "deployments", "webhook") == (2, 2)
                and ready(chart, "deployments", "extender") == (2, 2)
            ),
            180,
        )
    finally:
        stop.set()
        watcher.join(10)
        cluster.kubectl("uncordon", GPU_A)
    assert lowest == {"serve": 3, "webhook": 1, "extender": 1} or (
        lowest["serve"] >= 3 and lowest["webhook"] >= 1 and lowest["extender"] >= 1
    ), lowest
    placement.check_invariant(work.chart.api.pods(work.namespace), dict(GIB_PER_GPU))


def _leads_elsewhere(chart: PodRelease, leader: str, lost: str) -> str | None:
    """The Lease's holder once it is another replica than `leader`, on a node other than `lost`."""
    now = lease_holder(chart)
    return now if now and now != leader and node_of(chart, now) != lost else None


def _ready(pod: Obj) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


# -- a node added --------------------------------------------------------------------------------------
def test_a_node_added_while_running_takes_gpu_pods(work: Workloads) -> None:
    chart, cluster = work.chart, work.cluster
    t0 = time.monotonic()
    cluster.add_node(NodeSpec(GPU_C, GPU_LABELS))
    measured("a node added: its kubelet Ready", time.monotonic() - t0)
    wait("its device plugin Ready", lambda: ready(chart, "daemonsets", "device-plugin") == (3, 3), 180)
    wait("its GPU memory advertised", lambda: allocatable_gib(chart, GPU_C) == GIB_TOTAL[GPU_C], 120)
    measured("a node added: its device plugin serving", time.monotonic() - t0)
    pod = work.pod("first", {GPU_MEM: 8}, nodeSelector={"kubernetes.io/hostname": GPU_C})
    assert "created" in work.apply(pod)
    assert work.running("first", 120)["spec"]["nodeName"] == GPU_C
    measured("a node added: its first gpu-mem pod running", time.monotonic() - t0)


# -- a rolling upgrade and a rollback under load -------------------------------------------------------
def test_a_rolling_upgrade_and_a_rollback_under_a_stream_of_pods(work: Workloads) -> None:
    chart, cluster = work.chart, work.cluster
    image = cluster.names["gpushare"]
    repository, tag = image.rsplit(":", 1)
    upgraded = f"{tag}-next"
    for node in cluster.running.values():  # the new tag on every node, as a registry would serve it
        assert node.containerd is not None
        done = node.containerd.ctr("images", "tag", "--force", image, f"{repository}:{upgraded}")
        assert done.returncode == 0, done.stderr
    capacity = {name: GIB_PER_GPU[name] for name in cluster.running if name in GIB_PER_GPU}
    with Traffic(chart, work.namespace, capacity, rate=5.0, image=image) as traffic:
        time.sleep(5)
        t0 = time.monotonic()
        chart.upgrade(**ha_values(), image={"tag": upgraded})
        t1 = time.monotonic()
        measured("helm upgrade --wait to a new image tag under 5 pods/s", t1 - t0)
        ours = [
            c["image"]
            for p in serving_pods(chart)
            for c in p["spec"]["containers"]
            if c["image"].startswith(repository)
        ]
        assert ours and all(i.endswith(f":{upgraded}") for i in ours), ours
        time.sleep(5)
        t2 = time.monotonic()
        chart.rollback(chart.revisions[-2])
        t3 = time.monotonic()
        measured("helm rollback --wait under 5 pods/s", t3 - t2)
        time.sleep(5)
    assert not traffic.broken, traffic.broken
    assert traffic.failures(gpu=True) == [] and traffic.failures(gpu=False) == [], (
        traffic.failures(gpu=True)[:3],
        traffic.failures(gpu=False)[:3],
    )
    assert traffic.sent(True) > 40 and traffic.polls > 40
    for since, until, what in ((t0, t1, "upgrade"), (t2, t3, "rollback")):
        gap = traffic.longest_bind_gap(since, until)
        measured(f"longest stretch without a GPU pod bound during the {what}", gap)
        assert gap < 20, (what, gap)
    measured("slowest GPU pod from creation to bound", traffic.slowest_bind())
