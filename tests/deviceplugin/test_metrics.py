"""The device plugin's /metrics answer: its counters, the build it runs, and the usage series after them."""

from __future__ import annotations

from tests.serving import scraped
from webhook.core.wire import resources
from webhook.deviceplugin import metrics


def test_metrics_name_the_release_and_the_python_that_serve_them() -> None:
    status, kind, body = metrics.Metrics((resources.GPU_MEMORY, resources.NVIDIA_GPU)).scrape()
    assert (status, kind) == (200, metrics.TEXT)
    assert scraped.build_info(body) == scraped.THIS_BUILD
