"""Faults as they happen to the chart's pods: the webhook's pods deleted, the leading extender killed in a
burst, the device plugin's pod restarted, the kubelet and containerd restarted, and `helm upgrade` and
`helm rollback` while workloads run. What must hold is read from the API server and from the containers."""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.cluster.workloads import Workloads, our_pods, rolled_out, unreached, wait
from tests.e2e import objects, placement, podresources
from webhook.core.wire import resources
from webhook.devcluster import objects as devobjects
from webhook.devcluster.podrelease import FULLNAME, NAMESPACE
from webhook.kube import rest

Obj = dict[str, Any]
GPU_MEM = resources.GPU_MEMORY
NODE = "gpu-node"


def test_with_the_webhook_pods_deleted_gpu_pods_fail_closed_until_a_new_one_is_ready(work: Workloads) -> None:
    chart = work.chart
    # Settled first: an earlier test's upgrade may still be replacing a webhook pod.
    wait(
        "the webhook's two pods, rolled out",
        lambda: rolled_out(chart, "webhook") and len(our_pods(chart, "webhook")) == 2,
        180,
    )
    old = {p["metadata"]["name"] for p in our_pods(chart, "webhook")}
    assert len(old) == 2
    # Stopped at once (one second of grace, the preStop sleep cut short), as a crash or a lost node stops
    # them: a graceful delete keeps them serving through webhook.shutdownDelaySeconds while their
    # replacements start, and leaves no gap to see.
    work.cluster.kubectl("delete", "pod", "-n", NAMESPACE, *old, "--wait=false", "--grace-period=1")
    outcomes: list[tuple[str, str]] = []  # (kind, outcome) of each try, in order
    for i in range(600):
        ready = rolled_out(chart, "webhook") and not old & {
            p["metadata"]["name"] for p in our_pods(chart, "webhook")
        }
        plain = work.apply(work.pod(f"plain-{i}"))
        assert "created" in plain, plain  # pods without GPUs never depend on the webhook
        gpu = work.apply(work.pod(f"gpu-{i}", {GPU_MEM: 1}))
        if "created" in gpu:
            outcomes.append(("admitted", ""))
        else:
            assert 'failed calling webhook "pods.mutate.gpushare.aliyun.com"' in gpu, gpu
            assert unreached(gpu), gpu  # it never reached a server of ours: no answer of ours among them
            outcomes.append(("refused", gpu))
        if ready:
            break
        time.sleep(0.2)
    kinds = [kind for kind, _ in outcomes]
    assert "refused" in kinds, "no try met the gap: the webhook's replacement was never awaited"
    assert kinds[-1] == "admitted", outcomes[-3:]
    # Admitted pods went through the webhook: the isolation selector is there on each.
    for pod in work.chart.api.pods(work.namespace):
        if pod["metadata"]["name"].startswith("gpu-"):
            assert pod["spec"]["nodeSelector"] == {resources.ISOLATION_KEY: "false"}, pod["metadata"]["name"]


def _bare_nodes(work: Workloads, count: int) -> dict[str, int]:
    """Node objects with two 16 GiB GPUs each and no kubelet (what the extender counts is the same),
    tainted so that only the burst's pods land there; removed by the test."""
    names = [f"burst-{i}" for i in range(count)]
    for name in names:
        devobjects.gpu_node(
            work.chart.api.api,
            name,
            2,
            16,
            {resources.ISOLATION_KEY: "false", "gpushare-burst": "true"},
            taints=[{"key": "gpushare-burst", "value": "true", "effect": "NoSchedule"}],
        )
    return dict.fromkeys(names, 16)


def _burst_pod(name: str, gib: int) -> Obj:
    body = objects.gpu_pod(name, gib)
    body["spec"]["nodeSelector"] = {"gpushare-burst": "true"}
    body["spec"]["tolerations"] = [{"key": "gpushare-burst", "operator": "Exists", "effect": "NoSchedule"}]
    return body


def test_killing_the_leading_extender_during_a_burst_of_500_pods_over_commits_nothing(
    work: Workloads,
) -> None:
    chart = work.chart
    capacity = _bare_nodes(work, 25)  # 800 GiB; the burst asks about 1,250
    rng = random.Random(33)
    bodies = [_burst_pod(f"p{i}", rng.choice([1, 2, 3, 4])) for i in range(500)]
    lease_path = rest.path("leases", "gpushare-extender", NAMESPACE, group="coordination.k8s.io")
    leader = chart.api.request("GET", lease_path)["spec"]["holderIdentity"]
    created = 0
    lock = threading.Lock()

    def create(body: Obj) -> None:
        nonlocal created
        chart.api.request("POST", rest.path("pods", namespace=work.namespace), body=body)
        with lock:
            created += 1

    stop = threading.Event()
    reads: list[int] = []
    broken: list[BaseException] = []

    def monitor() -> None:
        """The invariant on every read of the stored pods while the burst and the failover go on."""
        while not stop.is_set():
            try:
                placement.check_invariant(chart.api.pods(work.namespace), capacity)
                reads.append(len(reads))
            except BaseException as err:  # reported by the test's thread
                broken.append(err)
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(create, body) for body in bodies]
            wait("a third of the burst created", lambda: created >= 160, 120, every=0.05)
            # SIGKILL the leader's container, as a crash would: no lease released, nothing cleaned up.
            pod = chart.api.request("GET", rest.path("pods", leader, NAMESPACE))
            container = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
            assert work.cluster.node is not None and work.cluster.node.containerd is not None
            killed = work.cluster.node.containerd.ctr("tasks", "kill", "--signal", "SIGKILL", container)
            assert killed.returncode == 0, killed.stderr
            for future in futures:
                future.result()

        last: list[str] = []

        def settled() -> list[Obj] | None:
            pods = chart.api.pods(work.namespace)
            free = [16 - placement.per_gpu(pods).get((n, g), 0) for n in capacity for g in range(2)]
            pending = [p for p in pods if not p["spec"].get("nodeName")]
            smallest = min((_gib(p) for p in pending), default=None)
            last[:] = [
                f"{len(pods) - len(pending)} bound, {len(pending)} pending, smallest {smallest}, free {free}"
            ]
            return pods if smallest is None or smallest > max(free) else None

        try:
            pods = wait("every pod placed or no GPU left for the pending ones", settled, 300, every=1)
        except TimeoutError as err:
            raise TimeoutError(f"{err}: {last}") from None
        stop.set()
        watcher.join()
        assert not broken, broken[0]
        used = placement.check_invariant(pods, capacity)
        assert sum(used.values()) >= 0.95 * 800, sum(used.values())
        restarted = chart.api.request("GET", rest.path("pods", leader, NAMESPACE))
        assert restarted["status"]["containerStatuses"][0]["restartCount"] >= 1
        assert len(reads) >= 10, reads
        wait("both extender replicas ready again", lambda: rolled_out(chart, "extender"), 120)
    finally:
        stop.set()
        work.delete_namespace()
        for name in capacity:
            work.cluster.kubectl("delete", "node", name, "--wait=false", check=False)


def _gib(pod: Obj) -> int:
    return sum(int(c["resources"]["limits"][GPU_MEM]) for c in pod["spec"]["containers"])


def _running_state(work: Workloads, name: str) -> tuple[str, int]:
    status = work.get(name)["status"]["containerStatuses"][0]
    return status["containerID"], status["restartCount"]


def _exec_env(work: Workloads, name: str) -> dict[str, str]:
    """The container's env, read now through the API server, the kubelet and containerd (kubectl exec)."""
    out = work.kubectl(
        "exec", name, "--", "python", "-c", "import json, os; print(json.dumps(dict(os.environ)))"
    )
    env: dict[str, str] = json.loads(out)
    return {k: v for k, v in env.items() if k.startswith(("NVIDIA_", "ALIYUN_COM_GPU_MEM_"))}


def _wait_for_exec(work: Workloads, name: str, timeout: float = 90) -> None:
    """Until the kubelet serves exec for the pod: a restarted kubelet answers "pod does not exist" until its
    pod manager holds the pod again, filled from the API server after it starts (CI saw it after the
    device plugin had already registered again)."""
    last: list[str] = []

    def execs() -> bool:
        done = work.cluster.kubectl("--namespace", work.namespace, "exec", name, "--", "true", check=False)
        last[:] = [done.stderr.strip()]
        return done.returncode == 0

    try:
        wait(f"the kubelet serving exec for {name}", execs, timeout)
    except TimeoutError as err:
        raise TimeoutError(f"{err}; last: {last[0] if last else ''}") from None


def _place_one_more(work: Workloads, name: str, gib: int) -> Obj:
    work.apply(work.pod(name, {GPU_MEM: gib}))
    pod = work.running(name)
    placement.check_invariant(
        [p for p in work.chart.api.pods(work.namespace) if p["spec"].get("nodeName") == NODE], {NODE: 16}
    )
    return pod


def test_a_restarted_device_plugin_is_registered_again_and_running_pods_keep_their_gpus(
    work: Workloads,
) -> None:
    chart = work.chart
    work.apply(work.pod("before", {GPU_MEM: 5}))
    work.running("before")
    state, env = _running_state(work, "before"), _exec_env(work, "before")
    old = [p["metadata"]["name"] for p in our_pods(chart, "device-plugin")]
    work.cluster.kubectl("delete", "pod", "-n", NAMESPACE, *old, "--wait=true")

    def registered() -> bool:
        pods = our_pods(chart, "device-plugin")
        ready = [p for p in pods if p["metadata"]["name"] not in old and _pod_ready(p)]
        node = chart.api.request("GET", rest.path("nodes", NODE))
        return bool(ready) and node["status"]["allocatable"].get(GPU_MEM) == "48"

    wait("a new device plugin registered with the kubelet", registered, 180)
    assert _running_state(work, "before") == state
    assert _exec_env(work, "before") == env
    _place_one_more(work, "after", 4)


def _pod_ready(pod: Obj) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def test_kubelet_and_containerd_restarted_running_pods_keep_their_gpus_and_env(work: Workloads) -> None:
    node = work.cluster.node
    assert node is not None
    work.apply(work.pod("share", {GPU_MEM: 6}), work.pod("card", {resources.NVIDIA_GPU: 1}))
    names = ("share", "card")
    for name in names:
        work.running(name)
    before = {name: (_running_state(work, name), _exec_env(work, name)) for name in names}
    socket = node.kubelet_dir / "pod-resources" / "kubelet.sock"
    devices = {
        resource: {k: v for k, v in podresources.devices(socket, resource).items() if k[0] in names}
        for resource in (GPU_MEM, resources.NVIDIA_GPU)
    }
    assert devices[GPU_MEM] and devices[resources.NVIDIA_GPU], devices

    node.restart_containerd()
    node.restart_kubelet()

    def served() -> bool:
        found = work.chart.api.request("GET", rest.path("nodes", NODE))["status"]["allocatable"]
        return bool(found.get(GPU_MEM) == "48" and found.get(resources.NVIDIA_GPU) == "3")

    wait("the device plugin registered with the new kubelet", served, 180)
    for name in names:
        _wait_for_exec(work, name)
        assert (_running_state(work, name), _exec_env(work, name)) == before[name], name
    for resource, given in devices.items():
        now = {k: v for k, v in podresources.devices(socket, resource).items() if k[0] in names}
        assert now == given, resource
    _place_one_more(work, "after", 3)


def test_helm_upgrade_and_rollback_with_workloads_running(work: Workloads) -> None:
    chart = work.chart
    work.apply(work.pod("steady", {GPU_MEM: 2}))
    work.running("steady")
    state, env = _running_state(work, "steady"), _exec_env(work, "steady")
    revision = len(chart.revisions)
    chart.upgrade(logLevel="debug")  # a new pod template for every part: each rolls
    args = chart.api.container_args("deployments", f"{FULLNAME}-webhook")
    assert "--log-level=debug" in args, args
    _place_one_more(work, "after-upgrade", 2)
    chart.rollback(revision)
    args = chart.api.container_args("deployments", f"{FULLNAME}-webhook")
    assert "--log-level=info" in args, args
    _place_one_more(work, "after-rollback", 2)
    assert _running_state(work, "steady") == state
    assert _exec_env(work, "steady") == env
