"""Coming over from the original gpushare (docs/migrate.md), through the real control plane and a real
kubelet on the fake runtime: pods the original extender placed and its device plugin admitted run on the
node, then the switch goes in the documented order: our chart (the extender comes up and counts them),
the device plugin replaced, the original extender stopped (gpu-mem pods wait), the scheduler's extender
entry replaced by ours. Then the same in reverse, for the rollback.

The original is played by tests/e2e/original.py: its extender's writes (annotations, then a Binding)
and its device plugin (no preferred allocation, so the kubelet picks the device IDs of its pods).
Throughout, a judge reads the node's pods from the API server every 0.2 s: no GPU over its memory,
counted by our decoder and by the original's rule alike, and no pod placed before re-bound or
re-annotated. test_migration_daemonsets.py checks step 2's DaemonSet change.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import yaml

from tests.e2e import objects, original, placement, podresources, privatekubelet
from tests.e2e.bed import FULLNAME, GPUSHARE, Bed
from webhook.core.wire import resources
from webhook.devcluster import kubelet as kubeletmod
from webhook.devcluster import mounts
from webhook.devcluster.controlplane import free_port
from webhook.devcluster.process import Process
from webhook.devcluster.release import EXTENDER_SERVER_NAME
from webhook.gpus import inventory
from webhook.kube import rest

NODE = "migration-node-0"
GROUP = "migration"
SIZES = (16, 16)
UUIDS = tuple(inventory.fake_uuid(i) for i in range(len(SIZES)))
# The cluster's own kube-scheduler (mode a), under a profile name of its own: one named default-scheduler
# would also bind every other Pending pod of the bed (the chart's own Deployments).
CLUSTER_SCHEDULER = "cluster-scheduler"
OPT_OUT = "gpushare.aliyun.com/webhook-skip"  # the chart's webhook.optOutLabel
# What a placed pod must keep: its placement, and once assigned, the assignment.
PLACEMENT_KEYS = (
    resources.ANN_MEM_IDX,
    resources.ANN_MEM_POD,
    resources.ANN_MEM_DEV,
    resources.ANN_MEM_ASSIGNED,
    resources.ANN_MEM_ASSUME_TIME,
    resources.ANN_ALLOCATION,
)


@pytest.fixture(scope="module")
def kubelet(bed: Bed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeletmod.Kubelet]:
    with privatekubelet.running(bed, tmp_path_factory.mktemp("kubelet"), NODE, GROUP) as real:
        yield real


class Judge:
    """Reads the node's pods every 0.2 s on its own thread and keeps every broken promise it sees."""

    def __init__(self, bed: Bed) -> None:
        self.bed = bed
        self.problems: list[str] = []
        self.polls = 0
        self.frozen: dict[str, tuple[str, dict[str, str | None]]] = {}  # uid -> (node, annotations)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="migration-judge", daemon=True)

    def freeze(self, pod: Mapping[str, Any]) -> None:
        """From now on `pod` keeps its node and placement annotations."""
        notes = pod["metadata"].get("annotations") or {}
        with self._lock:
            self.frozen[pod["metadata"]["uid"]] = (
                pod["spec"]["nodeName"],
                {key: notes.get(key) for key in PLACEMENT_KEYS},
            )

    def __enter__(self) -> Judge:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Fails with what it saw, before any other failure of the test (chained to it)."""
        self._stop.set()
        self._thread.join(timeout=10)
        assert self.problems == [], f"{len(self.problems)} broken promises, first: {self.problems[:3]}"
        assert self.polls > 20, f"the judge read the pods only {self.polls} times"

    def _run(self) -> None:
        query = {"fieldSelector": f"spec.nodeName={NODE}"}
        while not self._stop.wait(0.2):
            stored = list(rest.list_all(self.bed.api, rest.path("pods"), query=query))
            with self._lock:
                self.polls += 1
                self.problems += _broken(stored, self.frozen)


def _broken(
    stored: list[dict[str, Any]], frozen: Mapping[str, tuple[str, Mapping[str, str | None]]]
) -> list[str]:
    """What is wrong in one reading of the node's pods. Ours counts a pod being deleted until it is gone,
    the original stopped at its deletion: the two rules are compared on the others."""
    used = placement.per_gpu(stored)
    found = [
        f"GPU {gpu} holds {gib} GiB of {SIZES[gpu]}" for (_, gpu), gib in used.items() if gib > SIZES[gpu]
    ]
    live = [p for p in stored if not p["metadata"].get("deletionTimestamp")]
    if placement.per_gpu(live) != original.ledger(live):
        found.append(f"the original's rule counts {original.ledger(live)}, ours {placement.per_gpu(live)}")
    by_uid = {p["metadata"]["uid"]: p for p in stored}
    for uid, (node, notes) in frozen.items():
        pod = by_uid.get(uid)
        now = pod and (pod["spec"]["nodeName"], {k: pod["metadata"]["annotations"].get(k) for k in notes})
        if now != (node, notes):
            found.append(f"pod {uid} was placed on {node} with {notes}, now {now}")
    return found


def _pod(name: str, gib: int) -> dict[str, Any]:
    body = objects.in_group(objects.gpu_pod(name, gib), GROUP)
    body["spec"]["schedulerName"] = CLUSTER_SCHEDULER
    return body


def _get(bed: Bed, ns: str, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = bed.request("GET", rest.path("pods", name, ns))
    return pod


def _running(bed: Bed, ns: str, name: str) -> dict[str, Any]:
    """The pod once the kubelet runs it and a device plugin has marked it assigned."""

    def done() -> dict[str, Any] | None:
        pod = _get(bed, ns, name)
        assigned = (pod["metadata"].get("annotations") or {}).get(resources.ANN_MEM_ASSIGNED) == "true"
        return pod if assigned and pod["status"].get("phase") == "Running" else None

    pod: dict[str, Any] = bed.wait(f"{ns}/{name} Running and assigned", done, timeout=60)
    return pod


def _place_as_original(bed: Bed, ns: str, name: str, gib: int) -> int:
    """Create a pod and bind it as the original extender would, on the GPU it would choose."""
    pod = bed.request("POST", rest.path("pods", namespace=ns), body=_pod(name, gib))
    stored = rest.list_all(bed.api, rest.path("pods"), query={"fieldSelector": f"spec.nodeName={NODE}"})
    gpu = original.best_fit(original.ledger(stored), NODE, SIZES, gib)
    original.bind(bed.api, pod, NODE, gpu, device_memory=sum(SIZES) // len(SIZES))
    return gpu


def _schedule(bed: Bed, ns: str, name: str, gib: int) -> int:
    """Create a pod for the cluster's kube-scheduler; the GPU it got once it runs."""
    bed.request("POST", rest.path("pods", namespace=ns), body=_pod(name, gib))
    notes = _running(bed, ns, name)["metadata"]["annotations"]
    return int(notes[resources.ANN_MEM_IDX])


def _gpu_mem(bed: Bed) -> str | None:
    """The Node's allocatable gpu-mem, as the kubelet last posted it from the registered plugin."""
    node = bed.request("GET", rest.path("nodes", NODE))
    value: str | None = node.get("status", {}).get("allocatable", {}).get(resources.GPU_MEMORY)
    return value


def _cluster_config(extenders: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": CLUSTER_SCHEDULER}],
        "extenders": extenders,
    }


def _original_entry() -> dict[str, Any]:
    """The extender entry of the original's config/scheduler-policy-config.yaml, its extender scaled
    to 0 (nothing listens at its NodePort's address)."""
    return {
        "urlPrefix": f"http://127.0.0.1:{free_port()}/gpushare-scheduler",
        "filterVerb": "filter",
        "bindVerb": "bind",
        "enableHTTPS": False,
        "nodeCacheCapable": True,
        "managedResources": [{"name": resources.GPU_MEMORY, "ignoredByScheduler": False}],
        "ignorable": False,
    }


def _our_entry(bed: Bed) -> list[dict[str, Any]]:
    """The `extenders` of the chart's mode (a) ConfigMap, as docs/install.md says to merge it."""
    text = bed.configmap(f"{FULLNAME}-scheduler-extender", "kube-scheduler-config.yaml")
    entries: list[dict[str, Any]] = yaml.safe_load(text)["extenders"]
    return entries


def _inspect(bed: Bed, *, extender: bool) -> dict[int, tuple[int, list[str]]]:
    """GPU -> (memory allocated, pods) on the node, from `gpushare inspect` through the API server or
    (`extender`) the extender's own ledger, with kube-scheduler's client certificate."""
    source = ["--kubeconfig", str(bed.cp.admin_kubeconfig)]
    if extender:
        files = bed.mounts(f"{FULLNAME}-scheduler")
        tls = _our_entry(bed)[0]["tlsConfig"]
        source = [
            "--extender",
            f"https://127.0.0.1:{bed.extender_port}/gpushare-scheduler",
            "--extender-server-name",
            EXTENDER_SERVER_NAME,
            "--extender-ca",
            mounts.on_host(tls["caFile"], files),
            "--extender-cert",
            mounts.on_host(tls["certFile"], files),
            "--extender-key",
            mounts.on_host(tls["keyFile"], files),
        ]
    argv = [GPUSHARE, "inspect", "-o", "json", *source, NODE]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    (node,) = json.loads(run.stdout)["nodes"]
    return {g["index"]: (g["allocated"], sorted(p["name"] for p in g["pods"])) for g in node["gpus"]}


def _stop(bed: Bed, process: Process) -> None:
    process.stop(grace=5)
    bed.processes.remove(process)


def _cordon(bed: Bed, unschedulable: bool) -> None:
    body = {"spec": {"unschedulable": unschedulable}}
    bed.request("PATCH", rest.path("nodes", NODE), body=body, content_type=rest.MERGE_PATCH)


def _devices(kubelet: kubeletmod.Kubelet) -> dict[tuple[str, str], set[str]]:
    """(pod, container) -> the gpu-mem device IDs the kubelet gave it (its PodResources)."""
    listed = podresources.devices(kubelet.pod_resources_socket, resources.GPU_MEMORY)
    return {key: set(ids) for key, ids in listed.items()}


def _restarts(pod: Mapping[str, Any]) -> list[tuple[str, int]]:
    return [
        (s.get("containerID", ""), s["restartCount"]) for s in pod["status"].get("containerStatuses") or []
    ]


def test_the_documented_switch_re_places_nothing_over_commits_nothing_and_counts_every_pod(
    bed: Bed, kubelet: kubeletmod.Kubelet
) -> None:
    # Before: the original's pods were created before our webhook existed (their namespace opts out).
    theirs = bed.namespace("e2e-migration-original", labels={OPT_OUT: "true"})
    ours = bed.namespace("e2e-migration")
    extender = next(p for p in bed.processes if p.name == "extender-0")
    _stop(bed, extender)  # not installed yet
    plugin = original.DevicePlugin(bed.api, NODE, kubelet.device_plugin_dir, UUIDS, SIZES).start()
    processes: list[Process] = []
    try:
        with Judge(bed) as judge:
            _switch(bed, kubelet, judge, plugin=plugin, theirs=theirs, ours=ours, processes=processes)
    finally:
        for process in processes:
            if process in bed.processes:
                _stop(bed, process)
        plugin.stop()
        if not any(p.name == "extender-0" and p.running() for p in bed.processes):
            bed.start_extender()


def _switch(
    bed: Bed,
    kubelet: kubeletmod.Kubelet,
    judge: Judge,
    *,
    plugin: original.DevicePlugin,
    theirs: str,
    ours: str,
    processes: list[Process],
) -> None:
    # The original's world: its extender places (best fit), its plugin admits and marks them assigned.
    bed.wait("gpu-mem from the original plugin", lambda: _gpu_mem(bed) == "32", timeout=60)
    assert _place_as_original(bed, theirs, "o1", 8) == 0
    assert _place_as_original(bed, theirs, "o2", 10) == 1
    before = {name: _running(bed, theirs, name) for name in ("o1", "o2")}
    assert sorted(plugin.answered) == [(f"{theirs}/o1", 0), (f"{theirs}/o2", 1)]
    for pod in before.values():
        assert resources.ANN_ALLOCATION not in pod["metadata"]["annotations"]
        judge.freeze(pod)
    devices = _devices(kubelet)
    assert {name for name, _ in devices} == {"o1", "o2"}

    # 1. Our chart: the extender starts with the original's pods there, and counts them at once (GPU
    #    sizes from the original plugin's gpu-count; no annotation of ours on the Node yet).
    bed.start_extender()
    counted = {0: (8, ["o1"]), 1: (10, ["o2"])}
    assert _inspect(bed, extender=True) == counted
    assert _inspect(bed, extender=False) == counted

    # 2. The device plugin replaced on the cordoned node: the original's goes, ours registers the same
    #    device IDs.
    _cordon(bed, True)
    plugin.stop()
    node = bed.request("GET", rest.path("nodes", NODE))
    assert resources.NODE_DEVICES_ANNOTATION not in node["metadata"].get("annotations", {})
    ours_plugin = bed.start_device_plugin(
        NODE,
        kubelet.device_plugin_dir,
        ",".join(f"{i}:{size}" for i, size in enumerate(SIZES)),
        extra=("--pod-resources-socket", str(kubelet.pod_resources_socket)),
    )
    processes.append(ours_plugin)

    def ours_registered() -> bool:
        notes = bed.request("GET", rest.path("nodes", NODE))["metadata"].get("annotations", {})
        return _gpu_mem(bed) == "32" and resources.NODE_DEVICES_ANNOTATION in notes

    bed.wait("our plugin registered and publishing", ours_registered, timeout=60)
    _cordon(bed, False)
    # The original extender still binds until step 3: its pod is admitted by our plugin.
    assert _place_as_original(bed, theirs, "o3", 5) == 1
    before["o3"] = _running(bed, theirs, "o3")
    assert len(plugin.answered) == 2  # marked assigned by our plugin, the original's being gone
    judge.freeze(before["o3"])

    # 3. The original extender stopped: the cluster's kube-scheduler cannot place gpu-mem pods, which
    #    wait; then its extender entry is replaced by ours.
    scheduler = bed.run_scheduler(CLUSTER_SCHEDULER, _cluster_config([_original_entry()]))
    processes.append(scheduler)
    bed.request("POST", rest.path("pods", namespace=ours), body=_pod("waiting", 9))

    def failed(words: str) -> list[str]:
        assert not _get(bed, ours, "waiting")["spec"].get("nodeName"), "the 9 GiB pod was placed"
        events = bed.events(ours, "waiting")
        return [e["message"] for e in events if e["reason"] == "FailedScheduling" and words in e["message"]]

    bed.wait("the waiting pod refused while no extender answers", lambda: failed("gpushare-scheduler/filter"))
    plain = objects.in_group(objects.pod("plain"), GROUP)  # asks no GPU: never sent to the extender
    plain["spec"]["schedulerName"] = CLUSTER_SCHEDULER
    bed.request("POST", rest.path("pods", namespace=ours), body=plain)
    bed.wait("the pod without GPU memory placed", lambda: _get(bed, ours, "plain")["spec"].get("nodeName"))
    _stop(bed, scheduler)
    scheduler = bed.run_scheduler(CLUSTER_SCHEDULER, _cluster_config(_our_entry(bed)))
    processes.append(scheduler)

    # Our extender counts every pod the original placed: 9 GiB fits the node's 9 free, but no GPU.
    bed.wait("our extender's reason", lambda: failed("largest free GPU has 8 GiB, pod needs 9"))
    # 2 GiB would go to GPU 1 (binpack) had o3 not been counted there.
    assert _schedule(bed, ours, "two", 2) == 0
    assert _schedule(bed, ours, "six", 6) == 0
    assert _schedule(bed, ours, "one", 1) == 1
    full = {0: (16, ["o1", "six", "two"]), 1: (16, ["o2", "o3", "one"])}
    assert _inspect(bed, extender=True) == full
    assert _inspect(bed, extender=False) == full
    assert not _get(bed, ours, "waiting")["spec"].get("nodeName")

    # Rollback: the original extender back in the scheduler, the original plugin back on the node.
    _stop(bed, scheduler)
    _stop(bed, ours_plugin)
    bed.wait("our plugin gone from the kubelet", lambda: _gpu_mem(bed) == "0", timeout=60)
    plugin.start()
    bed.wait("gpu-mem from the original plugin again", lambda: _gpu_mem(bed) == "32", timeout=60)
    bed.request("DELETE", rest.path("pods", "one", ours), query={"gracePeriodSeconds": 0})
    bed.wait("one gone", lambda: "one" not in {p["metadata"]["name"] for p in bed.pods(ours)})
    # The original counts our pods as we do (the judge compares both on every poll): GPU 1 has 1 free.
    assert _place_as_original(bed, theirs, "back", 1) == 1
    _running(bed, theirs, "back")
    assert plugin.answered[-1] == (f"{theirs}/back", 1)

    # Nothing placed before the switch was restarted or given other devices by the kubelet.
    for name, pod in before.items():
        now = _get(bed, theirs, name)
        assert now["metadata"]["uid"] == pod["metadata"]["uid"]
        assert _restarts(now) == _restarts(pod) and all(n == 0 for _, n in _restarts(now)), name
    after = _devices(kubelet)
    assert {k: v for k, v in after.items() if k in devices} == devices
