"""What every node agent's /metrics has: its own registry with `gpushare_build_info`, and families whose
known label values are exported at 0 from the start, not only after their first event."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import prometheus_client

from webhook.serving import buildinfo


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        buildinfo.register(self.registry)

    def counter(
        self, name: str, doc: str, labels: Sequence[str] = (), zero: Iterable[tuple[str, ...]] = ()
    ) -> prometheus_client.Counter:
        """A counter; each label tuple in `zero` is exported at 0 at once."""
        family = prometheus_client.Counter(name, doc, labels, registry=self.registry)
        for values in zero:
            family.labels(*values)
        return family

    def gauge(self, name: str, doc: str) -> prometheus_client.Gauge:
        return prometheus_client.Gauge(name, doc, registry=self.registry)

    def histogram(
        self, name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]
    ) -> prometheus_client.Histogram:
        return prometheus_client.Histogram(name, doc, labels, buckets=buckets, registry=self.registry)
