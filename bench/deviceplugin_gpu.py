"""Run the whole device plugin on this machine's real GPUs (NVML inventory, NVML health, NVML usage)
against the API stand-in and the kubelet stand-in, and check what a node with these GPUs would get.

It starts the plugin as the chart does but for the two stand-ins, then checks: the kubelet is sent one
device per GiB of each GPU (its memory rounded down) and one whole card per GPU; the Node's status and
annotation carry each GPU's count, memory, model and health as NVML reports them; a pod asking 1 GiB,
bound by the extender's binder, is given its GPU's real UUID in NVIDIA_VISIBLE_DEVICES; a child process
holding `--allocate` MiB through libcuda (bench/nvml_usage_probe.py), made a process of that pod's
container by a cgroup file under the plugin's `--proc-root`, shows on `/usage` as the container's use,
over its share, and the plugin writes a GPUMemoryOverShare Event on the pod; the NVML health watcher
keeps every GPU healthy. Prints each step and exits 1 on the first failed check, 2 when NVML is not
usable here.

    .venv/bin/python bench/deviceplugin_gpu.py [--allocate 1536] [--fake-gpus 0:16 (no GPU: the checks
        that need none)]

Needs the repository's runtime dependencies (the .venv has them) and, for the real path, an NVIDIA driver.
"""

# ruff: noqa: E501  (report lines are kept whole)
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
import uuid as uuid_mod
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpucheck
from gpucheck import check

from tests.standins.kubelet import Kubelet
from tests.standins.loopback import free_port
from webhook.core.node import devices
from webhook.core.placement import annotations as ann
from webhook.core.placement import modes
from webhook.core.usage import overshare
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.deviceplugin import app
from webhook.deviceplugin.settings import DevicePluginSettings
from webhook.extender.service import Extender
from webhook.extender.settings import ExtenderSettings
from webhook.extender.wire import BindingArgs

NODE = "gpu-node"
CID = "5f2c9a0e4b7d1c3a8e6f0b2d4c6a8e0f1b3d5c7a9e1f3b5d7c9a1e3f5b7d9c1a"  # a container ID


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.load(reply)


def _over_share(apiserver: ApiServer, port: int, root: Path, mib: int, *, uid: str, index: int) -> Any:
    """A child process holding `mib` MiB through libcuda, made a process of the pod's container (a cgroup
    file under the plugin's --proc-root, the pod Running with that container ID): the pod's 1 GiB share
    against real NVML memory. Returns the child (it exits by itself)."""
    apiserver.edit(
        "pods",
        "gpu-pod",
        {
            "status": {
                "phase": "Running",
                "containerStatuses": [{"name": "c0", "containerID": f"containerd://{CID}"}],
            }
        },
        "default",
    )
    probe = Path(__file__).with_name("nvml_usage_probe.py")
    seconds = 12
    child = subprocess.Popen(
        [sys.executable, str(probe), "--child", "--allocate", str(mib), "--seconds", str(seconds)]
    )
    cgroup = root / "proc" / str(child.pid) / "cgroup"
    cgroup.parent.mkdir(parents=True)
    cgroup.write_text(f"0::/kubepods/besteffort/pod{uid}/{CID}\n")
    deadline = time.monotonic() + seconds - 1
    report: Any = None
    mine: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not (mine and mine[0]["overShare"]):
        time.sleep(1.0)
        report = get_json(f"http://127.0.0.1:{port}/usage")
        mine = [c for c in report["containers"] if c["pod"] == "gpu-pod" and c["gpu"] == index]
    print(f"  /usage while the child ran: {json.dumps(report)[:1500]}")
    check(
        bool(mine) and mine[0]["usedBytes"] >= mib << 20 and mine[0]["processes"] >= 1,
        f"/usage counted the child's {mib} MiB (and its CUDA context) on the pod's container",
    )
    check(mine[0]["shareBytes"] == 1 << 30 and mine[0]["overShare"], "over its 1 GiB share")
    events = apiserver.wait_for(
        lambda: [e for e in apiserver.objects("events", "default") if e["reason"] == overshare.REASON],
        timeout=10,
        what="the over-share Event",
    )
    print(f"  Event: {events[0]['message']}")
    check(events[0]["involvedObject"]["uid"] == uid, f"a {overshare.REASON} Event on the pod")
    return child


def run(args: argparse.Namespace, root: Path) -> str:
    apiserver = ApiServer(bookmark_interval=0.2).start()
    kubelet = plugin = extender = child = None
    try:
        apiserver.add_node(NODE, labels={modes.MODE_LABEL: "share"})
        (root / "proc").mkdir()
        plugin_dir = root / "dp"
        kubelet = Kubelet(plugin_dir, also=(resources.NVIDIA_GPU,)).start()
        port = free_port()
        settings = DevicePluginSettings(
            node_name=NODE,
            fake_gpus=args.fake_gpus,
            api_host=apiserver.url,
            device_plugin_dir=plugin_dir,
            endpoint="gpushare.sock",
            health_port=port,
            usage_interval_s=1.0,
            pod_resources_socket=None,
            proc_root=root / "proc",  # the child's cgroup file makes it a process of the pod
            overshare_grace_s=0,
        )
        plugin = app.Plugin(settings).start()
        gpus = plugin.state.gpus
        gpucheck.show_gpus(gpus, "the fake inventory" if args.fake_gpus else "NVML")
        units = sum(g.memory_mib // devices.MIB_PER_GIB for g in gpus)
        kubelet.wait(lambda k: len(k.devices) == units, timeout=20)
        check(len(kubelet.healthy()) == units, f"the kubelet was sent {units} healthy devices (one per GiB)")
        cards = kubelet.resource(resources.NVIDIA_GPU)
        cards.wait(lambda k: len(k.devices) == len(gpus), timeout=20)
        check(len(cards.healthy()) == len(gpus), f"and {len(gpus)} whole cards ({resources.NVIDIA_GPU})")

        def published() -> ann.NodeDevices | None:
            raw = (
                apiserver.get("nodes", NODE)["metadata"]
                .get("annotations", {})
                .get(resources.NODE_DEVICES_ANNOTATION)
            )
            return None if raw is None else ann.NodeDevices.from_json(raw)

        annotated = apiserver.wait_for(published, timeout=20, what="the node's device annotation")
        node = apiserver.get("nodes", NODE)
        print(
            f"  node labels: {{{', '.join(f'{k}: {v}' for k, v in sorted(node['metadata'].get('labels', {}).items()) if 'accelerator' in k or 'gpushare' in k)}}}"
        )
        check(
            node["status"]["capacity"].get(resources.GPU_COUNT) == str(len(gpus)),
            f"node capacity {resources.GPU_COUNT} = {len(gpus)}",
        )
        check(
            [(d.index, d.uuid, d.memory, d.healthy, d.model) for d in annotated.devices]
            == [(g.index, g.uuid, g.memory_mib // devices.MIB_PER_GIB, True, g.model) for g in gpus],
            "the node annotation lists every GPU with its UUID, GiB, model, healthy",
        )

        extender = Extender(ExtenderSettings(host="127.0.0.1", port=0), apiserver.api)
        extender.start()
        check(extender.wait_synced(), "the extender synced")
        pod = apiserver.add_pod("gpu-pod", gpu_mem=[1], uid=str(uuid_mod.uuid4()))  # cgroups name real UIDs
        error = extender.binder.bind(BindingArgs("gpu-pod", "default", pod["metadata"]["uid"], NODE))
        check(error == "", f"the extender bound a 1 GiB pod to {NODE} ({error or 'no error'})")
        placed = ann.decode(apiserver.get("pods", "gpu-pod", "default")["metadata"]["annotations"])
        assert placed is not None
        index = sorted(placed.allocation.for_container(0))[0]
        envs = kubelet.admit(apiserver.get("pods", "gpu-pod", "default"))
        print(f"  Allocate env: {envs}")
        uuid = next(g.uuid for g in gpus if g.index == index)
        check(
            len(envs) == 1 and envs[0].get("NVIDIA_VISIBLE_DEVICES") == uuid,
            f"Allocate gave GPU {index}'s UUID in NVIDIA_VISIBLE_DEVICES",
        )

        if args.allocate and not args.fake_gpus:
            child = _over_share(apiserver, port, root, args.allocate, uid=pod["metadata"]["uid"], index=index)
        check(len(kubelet.healthy()) == units, "NVML health: every device still healthy")
        return "OK: the plugin served this machine's GPUs"
    finally:
        for stop in (extender, plugin, kubelet, apiserver):
            if stop is not None:
                stop.stop()
        if child is not None:
            child.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--allocate",
        type=int,
        default=1536,
        metavar="MIB",
        help="MiB a child of the pod (share 1 GiB) holds per GPU while /usage is read (0: none)",
    )
    gpucheck.add_fake_gpus(parser, "0:16,1:24")
    args = parser.parse_args()
    return gpucheck.main("deviceplugin_gpu", args, run, fake=bool(args.fake_gpus))


if __name__ == "__main__":
    sys.exit(main())
