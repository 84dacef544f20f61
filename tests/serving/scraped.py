"""The build-info series a part's /metrics must show: one `gpushare_build_info`, 1, labelled with this
release and this Python (webhook.serving.buildinfo)."""

from __future__ import annotations

import platform

from prometheus_client.parser import text_string_to_metric_families

from webhook import __version__
from webhook.serving import buildinfo

THIS_BUILD = [({"version": __version__, "python": platform.python_version()}, 1.0)]


def build_info(text: str | bytes) -> list[tuple[dict[str, str], float]]:
    """Every `gpushare_build_info` sample of a scrape, as (labels, value)."""
    decoded = text.decode() if isinstance(text, bytes) else text
    return [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(decoded)
        for sample in family.samples
        if sample.name == buildinfo.NAME
    ]
