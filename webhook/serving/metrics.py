"""Prometheus request metrics on a per-app registry (never the global one, so tests can run many apps).

`RequestMetrics(registry, namespace)` gives `<namespace>_requests_total{endpoint, outcome}` and
`<namespace>_request_duration_seconds{endpoint}`; the admission webhook and the extender both use it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# Admission calls are fast (sub-millisecond rules) but the API server waits at most 1-30 s.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RequestMetrics:
    """Request counter by endpoint and outcome, and a latency histogram by endpoint."""

    def __init__(self, registry: CollectorRegistry, namespace: str, outcome_label: str = "outcome") -> None:
        self.registry = registry
        self.requests = Counter(
            "requests",
            "Requests handled, by endpoint and outcome.",
            ["endpoint", outcome_label],
            namespace=namespace,
            registry=registry,
        )
        self.latency = Histogram(
            "request_duration_seconds",
            "Time to answer a request, by endpoint.",
            ["endpoint"],
            namespace=namespace,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

        # labels() takes a lock and builds a key per call; a request's labelled children are looked up
        # once and kept (the label values are a handful of fixed strings).
        self._counters: dict[tuple[str, str], Counter] = {}
        self._histograms: dict[str, Histogram] = {}

    def observe(self, endpoint: str, outcome: str, seconds: float) -> None:
        counter = self._counters.get((endpoint, outcome))
        if counter is None:
            counter = self._counters[endpoint, outcome] = self.requests.labels(endpoint, outcome)
        histogram = self._histograms.get(endpoint)
        if histogram is None:
            histogram = self._histograms[endpoint] = self.latency.labels(endpoint)
        counter.inc()
        histogram.observe(seconds)
