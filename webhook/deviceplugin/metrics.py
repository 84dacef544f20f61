"""The device plugin's /metrics: the build it runs (`gpushare_build_info`), Allocate and reconciliation
counts by `resource` (both endpoints share them), the usage poll's count and cost, over-share Events and
evictions, and the usage series (deviceplugin/usage/series.py). Those are rendered once per poll, on the
poller's thread, and appended at each scrape: 8 GPUs and 100 containers are ~500 series, 4 ms to format,
which a scrape then never pays."""

from __future__ import annotations

import itertools

import prometheus_client

from webhook.core.usage import usage
from webhook.deviceplugin import server
from webhook.deviceplugin.usage import overshareactions, poller, series
from webhook.nodeagent.metrics import AgentMetrics
from webhook.serving import probeserver

TEXT = "text/plain; version=0.0.4; charset=utf-8"


class Metrics(AgentMetrics, server.Observer, poller.Observer, overshareactions.Observer):
    def __init__(self, resource_names: tuple[str, ...]) -> None:
        super().__init__()
        self._usage_text = b""  # the latest report's series, rendered by `reported`
        results = ("ok", "failed")
        self.allocations = self.counter(
            "gpushare_device_plugin_allocations",
            "Allocate calls by resource and result",
            ["resource", "result"],
            zero=itertools.product(resource_names, ("ok", "refused")),
        )
        self.latency = self.histogram(
            "gpushare_device_plugin_allocate_seconds",
            "Allocate latency by resource",
            ["resource"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1, 5),
        )
        self.list_bytes = self.gauge(
            "gpushare_device_plugin_list_bytes", "Size of the last ListAndWatch message"
        )
        self.corrections = self.counter(
            "gpushare_device_plugin_annotation_corrections",
            "Containers whose placement annotations were corrected to the GPUs the kubelet's devices show",
            ["resource"],
            zero=[(name,) for name in resource_names],
        )
        self.polls = self.counter(
            "gpushare_device_plugin_usage_polls",
            "GPU usage polls by result",
            ["result"],
            zero=[(r,) for r in results],
        )
        self.poll_seconds = self.gauge(
            "gpushare_device_plugin_usage_poll_seconds", "Wall time of the last GPU usage poll"
        )
        self.poll_cpu = self.counter(
            "gpushare_device_plugin_usage_poll_cpu_seconds",
            "CPU time spent polling GPU usage (NVML, cgroups, matching)",
        )
        self.events = self.counter(
            "gpushare_device_plugin_overshare_events",
            "Over-share Events recorded on pods, by result",
            ["result"],
            zero=[(r,) for r in results],
        )
        self.evictions = self.counter(
            "gpushare_device_plugin_overshare_evictions",
            "Evictions of pods over their GPU memory share (opt-in), by result",
            ["result"],
            zero=[(r,) for r in ("evicted", "refused", "failed")],
        )

    def allocated(self, resource: str, seconds: float, ok: bool) -> None:
        self.allocations.labels(resource, "ok" if ok else "refused").inc()
        self.latency.labels(resource).observe(seconds)

    def streamed(self, size: int) -> None:
        self.list_bytes.set(size)

    def corrected(self, resource: str, containers: int) -> None:
        self.corrections.labels(resource).inc(containers)

    def polled(self, seconds: float, cpu_seconds: float, ok: bool) -> None:
        self.polls.labels("ok" if ok else "failed").inc()
        self.poll_seconds.set(seconds)
        self.poll_cpu.inc(max(0.0, cpu_seconds))

    def event_posted(self, ok: bool) -> None:
        self.events.labels("ok" if ok else "failed").inc()

    def eviction(self, result: str) -> None:
        self.evictions.labels(result).inc()

    def reported(self, report: usage.NodeUsage) -> None:
        registry = prometheus_client.CollectorRegistry()
        registry.register(series.UsageCollector(lambda: report))
        self._usage_text = prometheus_client.generate_latest(registry)  # replaced whole: scrapes see one

    def render(self) -> bytes:
        return prometheus_client.generate_latest(self.registry) + self._usage_text

    def scrape(self) -> probeserver.Reply:
        """`GET /metrics`: the counters now, the usage series of the latest poll."""
        return 200, TEXT, self.render()
