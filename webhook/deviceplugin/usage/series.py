"""The usage series on /metrics, built at each scrape from the poller's latest report (a custom
collector): a pod's series exist while it runs on the node and vanish with it, so cardinality stays that
of the node's containers times their GPUs, with nothing to clean up.

Per GPU (`node`, `gpu` index, `uuid`): memory total, allocated (shares placed), used; utilisation;
health; memory of processes in no pod by `reason`; `gpushare_gpu_info` carries the `model`. Per container
(`namespace`, `pod`, `container`, `node`, `gpu`, `uuid`): share, used, utilisation, over-share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from webhook.core.usage import usage

GPU_LABELS = ["node", "gpu", "uuid"]
CONTAINER_LABELS = ["namespace", "pod", "container", "node", "gpu", "uuid"]

# name -> help; every name here is exported (tests/chart checks the dashboard and rules against them).
GPU_METRICS = {
    "gpushare_gpu_info": "A GPU of the node, its model in the label (always 1)",
    "gpushare_gpu_memory_total_bytes": "GPU memory",
    "gpushare_gpu_memory_allocated_bytes": "GPU memory held by the shares and whole cards placed on the GPU",
    "gpushare_gpu_memory_used_bytes": "GPU memory in use, as the driver reports it",
    "gpushare_gpu_utilization_ratio": "Share of time the GPU was busy (0-1)",
    "gpushare_gpu_healthy": "1 when the GPU is healthy, 0 after a critical XID until it recovers",
    "gpushare_gpu_unattributed_memory_used_bytes": (
        "GPU memory of processes not matched to a container, by reason (host, other_pod, "
        "unknown_container, unreadable)"
    ),
}
CONTAINER_METRICS = {
    "gpushare_container_gpu_memory_share_bytes": "GPU memory the container's share gives it on the GPU",
    "gpushare_container_gpu_memory_used_bytes": "GPU memory the container's processes use on the GPU",
    "gpushare_container_gpu_utilization_ratio": (
        "SM time of the container's processes on the GPU (0-1); absent where the driver does not offer it"
    ),
    "gpushare_container_gpu_memory_over_share": (
        "1 when the container has used more GPU memory than its share for longer than the grace period"
    ),
}


class UsageCollector(Collector):
    def __init__(self, latest: Callable[[], usage.NodeUsage | None]) -> None:
        self.latest = latest

    def describe(self) -> Iterator[Metric]:
        return iter(())  # series appear with the first report; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        report = self.latest()
        if report is None:
            return
        gpu = {name: _gauge(name, text, GPU_LABELS) for name, text in GPU_METRICS.items()}
        gpu["gpushare_gpu_info"] = _gauge(
            "gpushare_gpu_info", GPU_METRICS["gpushare_gpu_info"], [*GPU_LABELS, "model"]
        )
        unattributed = _gauge(
            "gpushare_gpu_unattributed_memory_used_bytes",
            GPU_METRICS["gpushare_gpu_unattributed_memory_used_bytes"],
            [*GPU_LABELS, "reason"],
        )
        uuids = {}
        for g in report.gpus:
            labels = [report.node, str(g.index), g.uuid]
            uuids[g.index] = g.uuid
            gpu["gpushare_gpu_info"].add_metric([*labels, g.model], 1)
            gpu["gpushare_gpu_memory_total_bytes"].add_metric(labels, g.total_bytes)
            gpu["gpushare_gpu_memory_allocated_bytes"].add_metric(labels, g.allocated_bytes)
            if g.used_bytes is not None:
                gpu["gpushare_gpu_memory_used_bytes"].add_metric(labels, g.used_bytes)
            if g.utilization is not None:
                gpu["gpushare_gpu_utilization_ratio"].add_metric(labels, g.utilization)
            gpu["gpushare_gpu_healthy"].add_metric(labels, 1 if g.healthy else 0)
            for reason in usage.REASONS:  # all four, 0 included: an alert can compare them
                unattributed.add_metric([*labels, reason], g.unattributed.get(reason, 0))
        gpu["gpushare_gpu_unattributed_memory_used_bytes"] = unattributed
        per = {name: _gauge(name, text, CONTAINER_LABELS) for name, text in CONTAINER_METRICS.items()}
        for c in report.containers:
            labels = [c.namespace, c.pod, c.container, report.node, str(c.gpu), uuids.get(c.gpu, "")]
            per["gpushare_container_gpu_memory_share_bytes"].add_metric(labels, c.share_bytes)
            per["gpushare_container_gpu_memory_used_bytes"].add_metric(labels, c.used_bytes)
            if c.utilization is not None:
                per["gpushare_container_gpu_utilization_ratio"].add_metric(labels, c.utilization)
            per["gpushare_container_gpu_memory_over_share"].add_metric(labels, 1 if c.over_share else 0)
        yield from gpu.values()
        yield from per.values()


def _gauge(name: str, text: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, labels=labels)
