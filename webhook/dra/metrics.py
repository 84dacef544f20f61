"""The DRA driver's /metrics: the build it runs (`gpushare_build_info`), the claims the kubelet asked to
prepare and unprepare by result, and those calls' latency."""

from __future__ import annotations

import itertools

from webhook.dra import server
from webhook.nodeagent.metrics import AgentMetrics


class Metrics(AgentMetrics, server.Observer):
    def __init__(self) -> None:
        super().__init__()
        self.claims = self.counter(
            "gpushare_dra_claims",
            "Claims asked by the kubelet, by call and result",
            ["call", "result"],
            zero=itertools.product(("prepare", "unprepare"), ("ok", "failed")),
        )
        self.latency = self.histogram(
            "gpushare_dra_call_seconds",
            "NodePrepareResources and NodeUnprepareResources latency",
            ["call"],
            buckets=(0.001, 0.005, 0.01, 0.05, 0.25, 1, 5),
        )

    def called(self, call: str, seconds: float, claims: int, failed: int) -> None:
        self.claims.labels(call, "ok").inc(claims - failed)
        self.claims.labels(call, "failed").inc(failed)
        self.latency.labels(call).observe(seconds)
