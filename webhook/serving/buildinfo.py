"""`gpushare_build_info{version, python} 1` on a part's /metrics registry: which release and which Python
answer the scrape, the build-info gauge Prometheus's own servers export (`prometheus_build_info`), so a
query can tell the replicas of two releases apart during a rollout (`... * on(pod) group_left(version)`).

    buildinfo.register(registry)   # once per registry, where the part builds it
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Gauge

from webhook import __version__

NAME = "gpushare_build_info"


def register(registry: CollectorRegistry) -> None:
    """Add the gauge to `registry`, set to 1 under this release's version and this Python's."""
    gauge = Gauge(
        NAME,
        "The gpushare release and Python version serving these metrics; always 1.",
        ["version", "python"],
        registry=registry,
    )
    gauge.labels(__version__, platform.python_version()).set(1)
