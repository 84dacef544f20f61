"""GPUs reach real containers as today's GPU nodes hand them out: a CDI spec shaped as the NVIDIA toolkit
writes it (webhook/devcluster/toolkitcdi.py: nvidia.com/gpu devices by index and by UUID, each GPU's device
node the host's /dev/null at /dev/nvidia<i>, /dev/nvidiactl and a stand-in NVML library for all) lies in the
node's /var/run/cdi, our device plugin and DRA driver name each GPU's CDI device, and containerd (CDI on,
no NVIDIA runtime, no runtime class anywhere) injects it. Each container shows what it got: its /dev/nvidia*
nodes and the env var of each GPU device. Then the fallbacks: no spec with `auto` (the env, said in the
log and on the Node), no spec with `cdi-cri` forced (the pod refused with our message, as an event), and
specs that name GPUs by UUID only or by index only."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster.workloads import Workloads, node_mode, our_pods, ready, wait
from tests.e2e import dra
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.devcluster import cluster as cluster_mod
from webhook.devcluster import toolkitcdi
from webhook.devcluster.podrelease import FULLNAME, NAMESPACE
from webhook.gpus import inventory
from webhook.gpus.inventory import fake_uuid
from webhook.kube import rest

Obj = dict[str, Any]
GPU_MEM = resources.GPU_MEMORY
GPUS = inventory.parse_fake_gpus("0:16,1:16,2:16").gpus()  # the chart's simulated GPUs (podrelease.py)
_GPU_ENV = re.compile(r"^GPUSHARE_CDI_GPU_(\d+)$")


class Toolkit:
    """The node's toolkit spec: written, rewritten or removed by a test."""

    def __init__(self, work: Workloads) -> None:
        net = work.cluster.net
        assert net is not None
        self.path = net.folder("/var/run/cdi") / toolkitcdi.FILE_NAME
        self.library = work.cluster.workdir / "driver" / "libnvidia-ml.so.1"
        self.library.parent.mkdir(parents=True, exist_ok=True)
        self.library.write_text("a stand-in for the driver's NVML library\n")

    def write(self, names: tuple[str, ...] = ("index", "uuid")) -> None:
        self.path.write_text(yaml.safe_dump(toolkitcdi.spec(GPUS, str(self.library), names)))

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


@pytest.fixture
def toolkit(work: Workloads) -> Iterator[Toolkit]:
    found = Toolkit(work)
    found.write()
    try:
        yield found
    finally:
        found.remove()


def _got(report: Obj) -> tuple[list[int], list[int]]:
    """(GPUs by their /dev/nvidia<i> nodes, GPUs by their device's env var) of one container's report."""
    nodes = sorted(
        int(d.removeprefix("/dev/nvidia")) for d in report["devices"] if d[len("/dev/nvidia") :].isdigit()
    )
    env = sorted(int(m.group(1)) for key in report["env"] if (m := _GPU_ENV.match(key)))
    return nodes, env


def _assert_only(report: Obj, gpus: list[int]) -> None:
    """The container got exactly `gpus` through CDI: their device nodes and env, /dev/nvidiactl and the
    library (the spec's common edits), and the spec's NVIDIA_VISIBLE_DEVICES=void, which containerd applied
    over ours."""
    assert _got(report) == (gpus, gpus), report["devices"]
    assert "/dev/nvidiactl" in report["devices"]
    assert toolkitcdi.LIBRARY_PATH in report["mounts"]
    assert report["env"][resources.ENV_VISIBLE_DEVICES] == "void"


def _placed(pod: Obj) -> list[int]:
    found = ann.decode(pod["metadata"]["annotations"])
    assert found is not None, pod["metadata"]["annotations"]
    return sorted(found.allocation.per_gpu())


def _plugin_log(work: Workloads) -> str:
    done = work.cluster.kubectl("logs", "-n", NAMESPACE, f"daemonset/{FULLNAME}-device-plugin", check=False)
    return done.stdout


def _device_list(work: Workloads) -> str:
    node = work.chart.api.request("GET", rest.path("nodes", cluster_mod.NODE))
    return str((node["metadata"].get("annotations") or {}).get(resources.NODE_DEVICE_LIST_ANNOTATION, ""))


def test_a_share_and_a_whole_card_get_their_own_gpus_device_nodes_and_no_other(
    work: Workloads, toolkit: Toolkit
) -> None:
    work.apply(work.pod("share", {GPU_MEM: 3}))
    share = _placed(work.running("share"))
    _assert_only(work.report("share"), share)
    work.apply(work.pod("card", {resources.NVIDIA_GPU: 1}))
    card = _placed(work.running("card"))
    assert len(card) == 1 and card != share
    report = work.report("card")
    _assert_only(report, card)
    assert report["env"][resources.ENV_MEM_IDX] == str(card[0])  # our env beside the CDI device
    wait("device-list cdi-cri on the Node", lambda: _device_list(work) == "cdi-cri", 60)
    assert "GPUs handed to containers as CDI devices nvidia.com/gpu" in _plugin_log(work)
    # Our node agents run without a runtime class: nothing on this node but runc.
    for pod in our_pods(work.chart, "device-plugin"):
        assert "runtimeClassName" not in pod["spec"]
        assert pod["metadata"]["annotations"]["nvidia.cdi.k8s.io/container.device-plugin"] == (
            "management.nvidia.com/gpu=all"
        )
    assert ready(work.chart, "daemonsets", "device-plugin") == (1, 1)


def test_a_pod_split_over_two_gpus_gets_both_and_two_containers_each_their_own(
    work: Workloads, toolkit: Toolkit
) -> None:
    split = work.pod("split", {GPU_MEM: 8})
    split["metadata"]["labels"] = {resources.GPU_COUNT: "2"}
    work.apply(split)
    gpus = _placed(work.running("split"))
    assert len(gpus) == 2
    _assert_only(work.report("split"), gpus)
    work.kubectl("delete", "pod", "split", "--wait=true")
    pair = work.pod("pair", {GPU_MEM: 10})
    pair["spec"]["containers"].append({**pair["spec"]["containers"][0], "name": "second"})
    work.apply(pair)
    placed = ann.decode(work.running("pair")["metadata"]["annotations"])
    assert placed is not None
    per_container = {c: sorted(g) for c, g in placed.allocation.containers.items()}
    assert len({tuple(g) for g in per_container.values()}) == 2, per_container  # 10 + 10 > one 16 GiB GPU
    _assert_only(work.report("pair", container="main"), per_container[0])
    _assert_only(work.report("pair", container="second"), per_container[1])


def test_an_init_container_gets_the_gpu_of_its_pod(work: Workloads, toolkit: Toolkit) -> None:
    pod = work.pod("init", {GPU_MEM: 4})
    first = {**pod["spec"]["containers"][0], "name": "setup", "env": [{"name": "REPORT_SLEEP", "value": "0"}]}
    pod["spec"]["initContainers"] = [first]
    work.apply(pod)
    gpus = _placed(work.running("init"))
    _assert_only(work.report("init", container="setup"), gpus)
    _assert_only(work.report("init", container="main"), gpus)


def test_specs_naming_gpus_by_uuid_only_or_by_index_only_give_the_same_devices(
    work: Workloads, toolkit: Toolkit
) -> None:
    for names in (("uuid",), ("index",)):
        toolkit.write(names)
        name = f"by-{names[0]}"
        work.apply(work.pod(name, {GPU_MEM: 5}))
        _assert_only(work.report(name), _placed(work.running(name)))
        work.kubectl("delete", "pod", name, "--wait=true")


def test_a_dra_claim_gets_its_gpus_toolkit_device_beside_our_spec(work: Workloads, toolkit: Toolkit) -> None:
    with node_mode(work, "dra"):
        wait("the DRA driver Ready", lambda: ready(work.chart, "daemonsets", "dra-driver") == (1, 1), 180)
        for pod in our_pods(work.chart, "dra-driver"):
            assert "runtimeClassName" not in pod["spec"]
        claim = dra.claim("share", "3Gi")
        claim["metadata"]["namespace"] = work.namespace
        pod = work.pod("claimed")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "share"}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        assert "created" in work.apply(claim, pod)
        work.running("claimed", timeout=180)
        allocated = work.get("share", "resourceclaims", group="resource.k8s.io")["status"]["allocation"]
        index = int(allocated["devices"]["results"][0]["device"].rsplit("-", 1)[-1])
        report = work.report("claimed")
        _assert_only(report, [index])
        assert report["env"][resources.ENV_MEM_IDX] == str(index)  # from our own spec
        assert report["env"][resources.ENV_MEM_CONTAINER] == "3"
        work.kubectl("delete", "pod", "claimed", "--wait=true")


def test_without_a_spec_auto_hands_out_the_env_and_says_so(work: Workloads) -> None:
    Toolkit(work).remove()
    work.apply(work.pod("env", {GPU_MEM: 2}))
    gpus = _placed(work.running("env"))
    report = work.report("env")
    assert report["devices"] == []  # no CDI device, and no NVIDIA runtime on this node to act on the env
    assert report["env"][resources.ENV_VISIBLE_DEVICES] == fake_uuid(gpus[0])
    wait("device-list envvar on the Node", lambda: _device_list(work) == "envvar", 60)
    assert "GPUs handed to containers as NVIDIA_VISIBLE_DEVICES (device-list envvar): no CDI spec" in (
        _plugin_log(work)
    )


def _admission_error(work: Workloads, name: str) -> str | None:
    status = work.get(name)["status"]
    return status.get("message") if status.get("reason") == "UnexpectedAdmissionError" else None


def test_forced_cdi_without_a_spec_refuses_the_pod_with_our_message_as_an_event(work: Workloads) -> None:
    """Also `runtimeClassName: auto` against the real API server: with a RuntimeClass `nvidia` in the cluster
    (as the GPU Operator makes it, here on runc) the upgrade gives it to the node agents, without it none."""
    chart = work.chart
    Toolkit(work).remove()
    work.cluster.kubectl(
        "apply",
        "-f",
        "-",
        input="apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: nvidia}\nhandler: runc\n",
    )
    try:
        chart.upgrade(cdi={"deviceListStrategy": "cdi-cri"})
        wait("the device plugin Ready", lambda: ready(chart, "daemonsets", "device-plugin") == (1, 1), 180)
        (plugin,) = our_pods(chart, "device-plugin")
        assert plugin["spec"]["runtimeClassName"] == "nvidia"
        assert "--device-list-strategy=cdi-cri" in plugin["spec"]["containers"][0]["args"]
        work.apply(work.pod("forced", {GPU_MEM: 2}))
        message = wait("the pod refused at admission", lambda: _admission_error(work, "forced"), 120)
        assert (
            "is not a CDI device of kind nvidia.com/gpu in the specs read from /etc/cdi, /var/run/cdi"
            in message
        )
        assert "(device-list strategy cdi-cri)" in message and "gpushare: cannot allocate 2 GiB" in message
        events = work.kubectl("get", "events", "--field-selector", "involvedObject.name=forced", "-o", "yaml")
        reasons = {e["reason"]: e["message"] for e in yaml.safe_load(events)["items"]}
        assert "is not a CDI device" in reasons["UnexpectedAdmissionError"], reasons
    finally:
        work.cluster.kubectl("delete", "runtimeclass", "nvidia", "--ignore-not-found")
        chart.upgrade()
    (plugin,) = wait(
        "the device plugin back on its defaults",
        lambda: [p for p in our_pods(chart, "device-plugin") if "runtimeClassName" not in p["spec"]] or None,
        180,
    )
    assert "--device-list-strategy=auto" in plugin["spec"]["containers"][0]["args"]
    wait("the device plugin Ready", lambda: ready(chart, "daemonsets", "device-plugin") == (1, 1), 180)
