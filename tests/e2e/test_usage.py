"""GPU usage per pod against the real kubelet (fake runtime) and the real API server: a pod the extender
placed and the kubelet admitted gets its series on the plugin's /metrics once a (fake) GPU process in its
container's cgroup appears, an over-share becomes a Warning Event written with the plugin's own token,
`gpushare inspect --usage` reads the plugin through the API server's pod proxy, and the series go with the
pod. No process runs here: the fake NVML's processes (--fake-processes) carry PIDs whose cgroup files,
under --proc-root, name the pod UID and container ID the kubelet reports.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import objects, privatekubelet
from tests.e2e.bed import Bed
from webhook.cli.inspect import command
from webhook.cli.inspect.settings import InspectSettings
from webhook.core.placement import annotations as ann
from webhook.core.usage import cgroups, overshare
from webhook.core.wire import resources
from webhook.devcluster import kubelet as kubeletmod
from webhook.devcluster import process
from webhook.devcluster.controlplane import free_port
from webhook.gpus import inventory
from webhook.kube import client, errors, pods, rest

NODE = "usage-node-0"
GROUP = "usage"
AGENT_LABEL = "e2e-usage-agent"
GIB = 1 << 30


@dataclass
class Agent:
    root: Path
    port: int

    def processes(self, *entries: tuple[int, int, str, str]) -> None:
        """(pid, GPU, memory, cgroup file text) of each GPU process the fake NVML reports."""
        lines = ["processes:"]
        for pid, gpu, memory, cgroup in entries:
            folder = self.root / "proc" / str(pid)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "cgroup").write_text(cgroup)
            lines.append(f"  - {{gpu: {gpu}, pid: {pid}, memory: {memory}, utilization: 0.3}}")
        (self.root / "processes.yaml").write_text("\n".join(lines) + "\n")

    def series(self, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as reply:
                text = reply.read().decode()
        except urllib.error.URLError:
            return {}  # not serving yet
        return {
            tuple(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name and labels.items() <= s.labels.items()
        }


@pytest.fixture(scope="module")
def kubelet(bed: Bed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[kubeletmod.Kubelet]:
    with privatekubelet.running(bed, tmp_path_factory.mktemp("kubelet"), NODE, GROUP) as real:
        yield real


@pytest.fixture(scope="module")
def agent(bed: Bed, kubelet: kubeletmod.Kubelet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    """Our device plugin beside the kubelet, two fake GPUs of 16 GiB, usage every second, 2 s of grace."""
    found = Agent(tmp_path_factory.mktemp("usage"), free_port())
    found.processes()
    plugin = bed.start_device_plugin(
        NODE,
        kubelet.device_plugin_dir,
        "0:16,1:16",
        extra=(
            "--pod-resources-socket",
            str(kubelet.pod_resources_socket),
            "--health-port",
            str(found.port),
            "--proc-root",
            str(found.root / "proc"),
            "--fake-processes",
            str(found.root / "processes.yaml"),
            "--usage-interval",
            "1",
            "--overshare-grace",
            "2",
        ),
    )
    try:
        bed.wait("gpu-mem from the kubelet", lambda: _allocatable(bed) == "32", timeout=60)
        yield found
    finally:
        plugin.stop()


def _allocatable(bed: Bed) -> Any:
    return (
        bed.request("GET", rest.path("nodes", NODE))
        .get("status", {})
        .get("allocatable", {})
        .get(resources.GPU_MEMORY)
    )


def _running(bed: Bed, ns: str, body: dict[str, Any], *, address: bool = False) -> dict[str, Any]:
    bed.request("POST", rest.path("pods", namespace=ns), body=body)
    name = body["metadata"]["name"]

    def running() -> dict[str, Any] | None:
        pod: dict[str, Any] = bed.request("GET", rest.path("pods", name, ns))
        status = pod.get("status", {})
        return pod if status.get("phase") == "Running" and (status.get("podIP") or not address) else None

    found: dict[str, Any] = bed.wait(f"pod {name} Running on the real kubelet", running, timeout=90)
    return found


def _cgroup(pod: dict[str, Any]) -> str:
    """The cgroup file of a process in the pod's first container, as containerd with systemd names it."""
    uid = pod["metadata"]["uid"].replace("-", "_")
    container_id = cgroups.runtime_container_id(pod["status"]["containerStatuses"][0]["containerID"])
    qos = pod["status"]["qosClass"].lower()
    slice_ = f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice"
    return f"0::/{slice_}/cri-containerd-{container_id}.scope\n"


def test_a_pods_gpu_use_shows_beside_its_share_goes_over_it_and_leaves_with_the_pod(
    bed: Bed, agent: Agent
) -> None:
    ns = bed.namespace("e2e-usage")
    pod = _running(bed, ns, objects.in_group(objects.gpu_pod("train", 4), GROUP))
    (gpu,) = _placement(pod).gpu_indexes
    mine = {"namespace": ns, "pod": "train", "container": "c0", "node": NODE, "gpu": str(gpu)}
    share = "gpushare_container_gpu_memory_share_bytes"
    bed.wait("the share, before any use", lambda: agent.series(share, **mine))
    agent.processes((4242, gpu, "3GiB", _cgroup(pod)))
    bed.wait(
        "the container's use on /metrics",
        lambda: (
            agent.series("gpushare_container_gpu_memory_used_bytes", **mine, uuid=inventory.fake_uuid(gpu))
            == {tuple(sorted({**mine, "uuid": inventory.fake_uuid(gpu)}.items())): 3 * GIB}
        ),
    )
    assert list(agent.series("gpushare_container_gpu_memory_share_bytes", **mine).values()) == [4 * GIB]
    assert list(agent.series("gpushare_container_gpu_memory_over_share", **mine).values()) == [0]

    agent.processes((4242, gpu, "6GiB", _cgroup(pod)))
    bed.wait(
        "over-share after the grace",
        lambda: list(agent.series("gpushare_container_gpu_memory_over_share", **mine).values()) == [1],
    )
    (event,) = bed.wait(
        "the over-share Event, written with the plugin's own token",
        lambda: [e for e in bed.events(ns, "train") if e["reason"] == overshare.REASON],
    )
    assert event["type"] == "Warning" and event["source"]["host"] == NODE
    assert (
        f"uses 6.0 GiB of GPU {gpu}" in event["message"] and "above its share of 4.0 GiB" in event["message"]
    )

    bed.request("DELETE", rest.path("pods", "train", ns), query={"gracePeriodSeconds": 0})
    bed.wait(
        "the pod's series gone",
        lambda: not agent.series("gpushare_container_gpu_memory_used_bytes", pod="train"),
    )
    assert not agent.series("gpushare_container_gpu_memory_share_bytes", pod="train")
    # Its process, were it still there, is blamed on no pod.
    other = agent.series("gpushare_gpu_unattributed_memory_used_bytes", gpu=str(gpu), reason="other_pod")
    assert list(other.values()) == [6 * GIB]


def test_inspect_reads_each_plugin_through_the_api_servers_pod_proxy(
    bed: Bed, agent: Agent, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A second node without a kubelet: its plugin runs on this host, its pod is placed by the extender and
    given the status a kubelet would write (running, its container's ID), and the plugin's pod object gets
    this host's address (the kubelet node's InternalIP), which the API server's proxy dials."""
    node, group = "usage-proxy-node", "usage-proxy"
    bed.node(node, 2, 16, {resources.ISOLATION_KEY: "false"}, group=group)  # the webhook's selector
    other = Agent(tmp_path_factory.mktemp("usage-proxy"), free_port())
    other.processes()
    bed.start_device_plugin(
        node,
        process.socket_dir(node),
        "0:16,1:16",
        extra=(
            "--pod-resources-socket=",
            f"--health-port={other.port}",
            f"--proc-root={other.root / 'proc'}",
            f"--fake-processes={other.root / 'processes.yaml'}",
            "--usage-interval=1",
            "--overshare-grace=0",
        ),
    )
    ns = bed.namespace("e2e-usage-inspect")
    bed.request(
        "POST", rest.path("pods", namespace=ns), body=objects.in_group(objects.gpu_pod("infer", 2), group)
    )
    pod = bed.wait("the extender's placement", lambda: _placed(bed, ns, "infer"), timeout=60)
    container_id = "5f2c9a0e4b7d1c3a8e6f0b2d4c6a8e0f1b3d5c7a9e1f3b5d7c9a1e3f5b7d9c1a"
    _kubelet_status(
        bed, ns, "infer", {"phase": "Running", "containerStatuses": [_status("c0", container_id)]}
    )
    (gpu,) = _placement(pod).gpu_indexes
    uid = pod["metadata"]["uid"]
    other.processes((77, gpu, "3GiB", f"0::/kubepods/burstable/pod{uid}/{container_id}\n"))
    bed.wait(
        "the pod's use on the plugin",
        lambda: other.series("gpushare_container_gpu_memory_used_bytes", pod="infer"),
    )
    # The plugin's pod, as its DaemonSet would run it on the node, at this host's address.
    (host,) = [
        a["address"]
        for a in bed.request("GET", rest.path("nodes", NODE))["status"]["addresses"]
        if a["type"] == "InternalIP"
    ]
    body = objects.in_group(objects.pod("plugin", labels={AGENT_LABEL: "true"}), group)
    body["spec"]["nodeName"] = node
    body["spec"]["containers"][0]["ports"] = [{"name": "health", "containerPort": other.port}]
    bed.request("POST", rest.path("pods", namespace=ns), body=body)
    _kubelet_status(
        bed, ns, "plugin", {"phase": "Running", "podIP": host, "podIPs": [{"ip": host}], "hostIP": host}
    )
    out = io.StringIO()
    settings = InspectSettings(
        nodes=(node,),
        output="json",
        client=client.ClientSettings(kubeconfig=str(bed.cp.admin_kubeconfig)),
        usage=True,
        agent_namespace=ns,
        agent_selector=f"{AGENT_LABEL}=true",
    )

    def shown() -> Any:
        out.seek(0)
        out.truncate()
        assert command.run(settings, out) == 0
        (row,) = json.loads(out.getvalue())["nodes"]
        return row if not row["problems"] and any(g["usedBytes"] for g in row["gpus"]) else None

    row = bed.wait("inspect's usage through the pod proxy", shown)
    placed = {p["name"]: p for g in row["gpus"] for p in g["pods"]}
    assert (placed["infer"]["allocated"], placed["infer"]["usedBytes"], placed["infer"]["overShare"]) == (
        2,
        3 * GIB,
        True,
    )
    assert row["gpus"][gpu]["usedBytes"] == 3 * GIB
    # Without the plugin's port the API server has nowhere to go: the node says why, inspect still shows.
    bed.request("DELETE", rest.path("pods", "plugin", ns), query={"gracePeriodSeconds": 0})
    bed.wait(
        "the plugin pod gone", lambda: not [p for p in bed.pods(ns) if p["metadata"]["name"] == "plugin"]
    )
    out.seek(0)
    out.truncate()
    assert command.run(settings, out) == 0
    assert json.loads(out.getvalue())["nodes"][0]["problems"] == [
        "usage: no gpushare device plugin pod on this node"
    ]


def _placed(bed: Bed, ns: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = bed.request("GET", rest.path("pods", name, ns))
    return pod if pod["spec"].get("nodeName") and ann.decode(pod["metadata"].get("annotations")) else None


def _placement(pod: dict[str, Any]) -> ann.Placement:
    placement = ann.decode(pod["metadata"]["annotations"])
    assert placement is not None
    return placement


def _status(name: str, container_id: str) -> dict[str, Any]:
    return {
        "name": name,
        "containerID": f"containerd://{container_id}",
        "image": "registry.k8s.io/pause:3.10",
        "imageID": "",
        "ready": True,
        "restartCount": 0,
        "started": True,
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
    }


def _kubelet_status(bed: Bed, ns: str, name: str, status: dict[str, Any]) -> None:
    """What the kubelet would write into the pod's status (no kubelet runs on that node)."""
    bed.request(
        "PATCH",
        rest.path("pods", name, ns) + "/status",
        body={"status": status},
        content_type=rest.MERGE_PATCH,
    )


def test_only_the_opt_in_lets_the_plugin_evict_and_eviction_honours_disruption_budgets(
    bed: Bed, agent: Agent
) -> None:
    ns = bed.namespace("e2e-usage-evict")
    body = objects.in_group(objects.pod("victim", labels={"app": "victim"}), GROUP)
    body["spec"]["nodeName"] = NODE  # no GPU: no scheduler of the bed would place it
    pod = _running(bed, ns, body)
    uid = pod["metadata"]["uid"]
    # The chart as installed (evict off) grants no pods/eviction: the plugin's token is refused.
    plugin_api = client.connect(client.ClientSettings(kubeconfig=str(bed.device_plugin_kubeconfig(NODE))))
    try:
        with pytest.raises(errors.ForbiddenError, match="pods/eviction"):
            pods.evict_pod(plugin_api, ns, "victim", uid)
    finally:
        plugin_api.close()
    # What the opt-in's call does, as the API server answers it.
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-victim"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "victim"}}},
    }
    bed.request("POST", rest.path("poddisruptionbudgets", namespace=ns, group="policy"), body=budget)
    with pytest.raises(errors.ApiError) as refused:
        pods.evict_pod(bed.api, ns, "victim", uid)
    assert refused.value.status == 429  # retried by the plugin, counted as "refused"
    bed.request("DELETE", rest.path("poddisruptionbudgets", "keep-victim", ns, group="policy"))
    with pytest.raises(errors.ConflictError):
        pods.evict_pod(bed.api, ns, "victim", "00000000-0000-0000-0000-000000000000")
    pods.evict_pod(bed.api, ns, "victim", uid)
    bed.wait(
        "the evicted pod gone",
        lambda: not [p for p in bed.pods(ns) if p["metadata"]["name"] == "victim"],
        timeout=60,
    )
