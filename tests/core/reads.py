"""The findings of one pod template, as the webhook's verdict reads them (core.specs.podread)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.specs import podread, templates
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources


def findings(
    metadata: Mapping[str, Any],
    spec: Mapping[str, Any],
    prefix: str,
    names: resources.GpuResourceNames,
    unit: str = podread.DEFAULT_UNIT,
) -> list[Finding]:
    """Every finding of the template at `prefix` ("" for a Pod, "spec.template" for a Deployment)."""
    return podread.read(templates.PodTemplate(prefix, metadata, spec), names, unit).findings()
