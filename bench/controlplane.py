"""Benchmarks against the real control plane (scripts/kube-bins): kube-scheduler throughput with our
extender beside the same kube-scheduler without one, and the webhook's latency as the API server sees
it beside the webhook's own timing.

Run: .venv/bin/python bench/controlplane.py [--nodes 100] [--pods 800]

Scheduling: N nodes x 8 GPUs. (a) gpu-mem pods (4 GiB each) scheduled by the chart's kube-scheduler
profile, which calls our extender for filter, prioritize and bind; (b) pods asking `nvidia.com/gpu: 1`
on nodes advertising 8 whole GPUs, scheduled by the same kube-scheduler binary and client settings with
no extender. Pods are created first with their scheduler stopped; the clock runs from the scheduler's
start (spawn, start-up included) to the last pod bound. Goal (issue 10): (a) >= 0.5x (b).

Beside our webhook runs a no-op one on the same stack for the same pods (bench/admission_apiserver.py,
which compares the two in detail): the mutating webhook's mean as kube-apiserver sees it is printed beside
the no-op's.
"""
# ruff: noqa: E501  (report lines are kept whole)

from __future__ import annotations

import argparse
import re
import ssl
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import admission_apiserver
import realbed
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e import objects
from tests.e2e.bed import Bed
from webhook.core.wire import resources
from webhook.devcluster.controlplane import free_port
from webhook.devcluster.process import Process
from webhook.kube import rest

WHOLE = "whole-gpu-scheduler"


def _nodes(bed: Bed, prefix: str, count: int, whole: bool) -> None:
    def one(i: int) -> None:
        name = f"{prefix}-{i}"
        if whole:
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"bench": prefix}},
            }
            node = bed.request("POST", rest.path("nodes"), body=body)
            capacity = {"cpu": "64", "memory": "512Gi", "pods": "250", resources.NVIDIA_GPU: "8"}
            node["status"] = {"capacity": capacity, "allocatable": capacity}
            bed.request("PUT", rest.path("nodes", name) + "/status", body=node)
        else:
            bed.node(name, 8, 16, labels={"cgpu.disable.isolation": "false", "bench": prefix})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(count)))


def _create(bed: Bed, ns: str, bodies: list[dict[str, Any]]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda b: bed.request("POST", rest.path("pods", namespace=ns), body=b), bodies))


def _bound(bed: Bed, ns: str) -> int:
    return sum(
        1 for p in rest.list_all(bed.api, rest.path("pods", namespace=ns)) if p["spec"].get("nodeName")
    )


def _time_until_bound(bed: Bed, ns: str, pods: int, start: Any) -> float:
    """Seconds from spawning the scheduler to the last pod bound. The clock starts before readiness: a
    fast scheduler binds most pods before its /readyz answers, so a clock started there reads ~0."""
    t0 = time.monotonic()
    process: Process = start()
    ready = time.monotonic() - t0
    while _bound(bed, ns) < pods:
        if time.monotonic() - t0 > 600:
            raise SystemExit(f"{ns}: only {_bound(bed, ns)}/{pods} bound after 600 s; logs in {bed.cp.logs}")
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    process.stop()
    print(f"  {ns}: scheduler ready after {ready:.2f} s, all {pods} pods bound after {elapsed:.2f} s")
    return elapsed


def _whole_scheduler(bed: Bed, qps: int = 0) -> Process:
    """The same binary and the chart's client settings, one profile, no extender; `qps` lifts the
    client's rate limit (default 50 requests/s, burst 100), which caps how fast it can bind."""
    config = yaml.safe_load(bed.configmap("gs-gpushare-scheduler", "config.yaml"))
    config.pop("extenders")
    config["profiles"] = [{"schedulerName": WHOLE}]
    config["clientConnection"] = {"kubeconfig": str(bed.kubeconfig("gs-gpushare-scheduler"))}
    if qps:
        config["clientConnection"].update(qps=qps, burst=2 * qps)
    path = bed.root / "whole-scheduler.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    process = bed.spawn(
        WHOLE,
        [
            str(bed.cp.bins / "kube-scheduler"),
            f"--config={path}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
        ],
    )
    context = ssl._create_unverified_context()
    process.wait_until(
        lambda: (
            urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context, timeout=2).status
            == 200
        ),
        60,
        "ready",
    )
    return process


def _histogram_mean(text: str, metric: str, label: str = "") -> tuple[float, float]:
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith(metric + "_sum") and label in line:
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith(metric + "_count") and label in line:
            count += float(line.rsplit(" ", 1)[1])
    return (total / count if count else float("nan")), count


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=800)
    args = parser.parse_args()
    with realbed.started("gpushare-bench-") as bed:
        cp = bed.cp
        bed.start_webhook()
        # A no-op webhook on the same stack for the same pods: what any webhook costs the API server.
        noop_port = admission_apiserver.start_noop(bed)[1]
        admission_apiserver.register_copy(bed, noop_port, admission_apiserver.NOOP)
        bed.start_extender()
        print(
            f"kube-apiserver/kube-scheduler {bed.cp.bins.name}; {args.nodes} nodes x 8 GPUs; {args.pods} pods per run"
        )
        _nodes(bed, "share", args.nodes, whole=False)
        _nodes(bed, "whole", args.nodes, whole=True)
        _nodes(bed, "whole-fast", args.nodes, whole=True)
        bed.namespace("bench-share")
        bed.namespace("bench-whole")
        bed.namespace("bench-whole-fast")
        share = [objects.gpu_pod(f"s{i}", 4) for i in range(args.pods)]
        for body in share:
            body["spec"]["nodeSelector"] = {"bench": "share"}
        whole = [
            objects.pod(f"w{i}", objects.container(limits={resources.NVIDIA_GPU: "1"}))
            for i in range(args.pods)
        ]
        for body in whole:
            body["spec"]["nodeSelector"] = {"bench": "whole"}
            body["spec"]["schedulerName"] = WHOLE
        t = time.monotonic()
        _create(bed, "bench-share", share)
        _create(bed, "bench-whole", whole)
        for body in whole:  # (b) fills its nodes exactly: (c) gets nodes of its own
            body["metadata"]["name"] = "f" + body["metadata"]["name"]
            body["spec"]["nodeSelector"] = {"bench": "whole-fast"}
        _create(bed, "bench-whole-fast", whole)
        created = 3 * args.pods / (time.monotonic() - t)
        share_s = _time_until_bound(bed, "bench-share", args.pods, bed.start_scheduler)
        whole_s = _time_until_bound(bed, "bench-whole", args.pods, lambda: _whole_scheduler(bed))
        fast_s = _time_until_bound(
            bed, "bench-whole-fast", args.pods, lambda: _whole_scheduler(bed, qps=1000)
        )
        a, b = args.pods / share_s, args.pods / whole_s
        print(f"pod creation through the API server and both webhooks: {created:.0f} pods/s")
        print(f"(a) gpu-mem pods, kube-scheduler + gpushare extender: {a:7.1f} pods/s ({share_s:.2f} s)")
        print(f"(b) nvidia.com/gpu pods, same kube-scheduler, no extender: {b:7.1f} pods/s ({whole_s:.2f} s)")
        print(
            f"(c) as (b) with the client limit lifted (qps 1000): {args.pods / fast_s:7.1f} pods/s ({fast_s:.2f} s)"
        )
        print(f"ratio (a)/(b): {a / b:.2f}x  (goal >= 0.5x); (a)/(c): {a * fast_s / args.pods:.2f}x")

        api_metrics = cp.get_raw("/metrics").decode()
        ours = realbed.webhook_metrics(bed)
        seen, n = _histogram_mean(
            api_metrics,
            "apiserver_admission_webhook_admission_duration_seconds",
            'name="pods.mutate.gpushare.aliyun.com"',
        )
        noop, _ = _histogram_mean(
            api_metrics,
            "apiserver_admission_webhook_admission_duration_seconds",
            f'name="{admission_apiserver.NOOP}pods.mutate.gpushare.aliyun.com"',
        )
        own = {m.group(1) for m in re.finditer(r"^(gpushare_webhook_\w*duration\w*)_sum", ours, re.M)}
        print(
            f"mutating webhook as kube-apiserver sees it: mean {seen * 1000:.2f} ms over {n:.0f} calls; "
            f"a no-op webhook on the same stack for the same pods: {noop * 1000:.2f} ms ({seen / noop:.2f}x)"
        )
        for metric in sorted(own):
            mean, count = _histogram_mean(ours, metric, 'endpoint="mutate"')
            print(f"the webhook's own {metric} (/mutate): mean {mean * 1000:.2f} ms over {count:.0f}")
        # Where run (a)'s time goes: kube-scheduler calls filter and prioritize one pod at a time.
        extender = realbed.extender_metrics(bed)
        for route in ("filter", "prioritize", "bind"):
            mean, count = _histogram_mean(
                extender, "gpushare_extender_request_duration_seconds", f'endpoint="{route}"'
            )
            print(f"the extender's own {route} time: mean {mean * 1000:.2f} ms over {count:.0f} calls")


if __name__ == "__main__":
    main()
