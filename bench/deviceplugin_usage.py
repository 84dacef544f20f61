"""GPU usage cost in the device plugin, 8 GPUs and 100 GPU containers on the node (one process each, on
the fake NVML of tests/gpus/fakenvml.py with per-process samples, cgroup files in a proc folder, the pods'
shares from their placements), as the plugin runs it:

* polling: CPU time of one usage poll (NVML calls, 100 cgroup reads, matching, over-share tracking) on
  the poller's thread, and what it makes of one core at the default interval (10 s) and the shortest (1 s);
  goal <= 2 % of one core;
* scrape: GET /metrics over HTTP from the plugin's probe server (the allocation counters plus 8 GPUs' and
  100 containers' usage series), p50/p99/max; goal <= 50 ms. Reference in the same run: the same registry
  without the usage series.

Run: .venv/bin/python bench/deviceplugin_usage.py
"""

# ruff: noqa: E501  (report lines are kept whole)
from __future__ import annotations

import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.gpus.fakenvml import GIB, FakeNvml
from tests.standins.loopback import free_port
from webhook.core.node import devices
from webhook.core.placement import annotations as ann
from webhook.core.usage import overshare, podshares
from webhook.devcluster.standin.apiserver import pod_manifest
from webhook.deviceplugin import metrics, state
from webhook.deviceplugin.usage import pods as usagepods
from webhook.deviceplugin.usage import poller as usagepoller
from webhook.gpus.cgroupreader import CgroupReader
from webhook.gpus.usage.nvml import NvmlUsage
from webhook.serving import probeserver

GPUS = 8
CONTAINERS = 100
POLLS = 200
SCRAPES = 300


def node(tmp: Path) -> tuple[usagepoller.UsagePoller, FakeNvml]:
    gpus = [
        devices.Gpu(i, f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, str(i))}", 141 * 1024, "H200")
        for i in range(GPUS)
    ]
    dstate = state.DeviceState(gpus, devices.Granularity())
    store = usagepods.PodSharesStore(GIB, {g.index: g.memory_mib * podshares.MIB for g in gpus})
    nvml = FakeNvml(GPUS)
    pods = []
    for n in range(CONTAINERS):
        gpu, uid, cid = n % GPUS, str(uuid.uuid4()), uuid.uuid4().hex * 2
        placement = ann.encode(ann.Placement(ann.Allocation({0: {gpu: 10}}), 141, 1, True))
        pod = pod_manifest(
            f"train-{n}", f"team-{n % 7}", gpu_mem=[10], node_name="n1", annotations=placement, uid=uid
        )
        pod["status"] = {
            "phase": "Running",
            "containerStatuses": [{"name": "c0", "containerID": f"containerd://{cid}"}],
        }
        pods.append(pod)
        pid = 10_000 + n
        (tmp / str(pid)).mkdir()
        path = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice"
        (tmp / str(pid) / "cgroup").write_text(f"0::/{path}/cri-containerd-{cid}.scope\n")
        nvml.start(gpu, pid, (8 + n % 5) * GIB, sm=20 + n % 50)  # some above their 10 GiB share
    store.resync(pods)
    poller = usagepoller.UsagePoller(
        source=NvmlUsage(nvml, gpus),
        reader=CgroupReader(tmp),
        pods=store,
        state=dstate,
        node_name="n1",
        tracker=overshare.OverShareTracker(60, 600),
        interval_s=10,
    )
    return poller, nvml


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def scrape(port: int) -> list[float]:
    took = []
    for _ in range(SCRAPES):
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            reply.read()
        took.append(time.perf_counter() - started)
    return took


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="usagebench") as tmp:
        poller, nvml = node(Path(tmp))
        cpu = []
        for _ in range(POLLS):
            nvml.tick(1_000_000)  # a second of samples per process, as between two polls
            started = time.thread_time()
            report = poller.poll_once()
            cpu.append(time.thread_time() - started)
    assert (
        len(report.containers) == CONTAINERS
        and sum(c.used_bytes > 0 for c in report.containers) == CONTAINERS
    )
    names = ("aliyun.com/gpu-mem", "nvidia.com/gpu")
    with_usage = metrics.Metrics(names)
    render = []
    for _ in range(20):
        started = time.thread_time()
        with_usage.reported(report)  # on the poller's thread, once per poll
        render.append(time.thread_time() - started)
    plain = metrics.Metrics(names)
    results = {}
    for label, registry in (("with usage", with_usage), ("reference, no usage", plain)):
        port = free_port()
        httpd = probeserver.serve(port, lambda: True, registry.registry, {"/metrics": registry.scrape})
        try:
            scrape(port)  # warm
            results[label] = scrape(port)
        finally:
            httpd.shutdown()
            httpd.server_close()
    body = with_usage.render()
    mean = statistics.mean(cpu) + statistics.mean(render)
    print(f"GPU usage, {GPUS} GPUs x {CONTAINERS} containers (one process each), fake NVML")
    print(
        f"  poll CPU: mean {statistics.mean(cpu) * 1000:.2f} ms  p99 {pct(cpu, 0.99):.2f} ms  over {POLLS} polls"
    )
    print(f"  rendering its series for /metrics: mean {statistics.mean(render) * 1000:.2f} ms per poll")
    for interval in (10, 1):
        share = mean / interval * 100  # the poll and the rendering
        print(
            f"    at --usage-interval {interval:>2} s: {share:.3f} % of one core  target <= 2 %: "
            f"{'PASS' if share <= 2 else 'FAIL'}"
        )
    series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    print(f"  /metrics: {len(body) / 1024:.0f} KiB, {series} series")
    for label, took in results.items():
        verdict = (
            f"  target <= 50 ms: {'PASS' if max(took) * 1000 <= 50 else 'FAIL'}"
            if label == "with usage"
            else ""
        )
        print(
            f"    scrape {label}: p50 {pct(took, 0.5):.2f} ms  p99 {pct(took, 0.99):.2f} ms  "
            f"max {max(took) * 1000:.2f} ms{verdict}"
        )
    ratio = pct(results["with usage"], 0.5) / pct(results["reference, no usage"], 0.5)
    print(f"    ratio with usage / reference: p50 {ratio:.1f}x")


if __name__ == "__main__":
    main()
