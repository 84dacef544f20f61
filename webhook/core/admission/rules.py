"""GPU resource rules for one pod template: the findings of its read (core.specs.podread: the resource
rules, judged in the one walk of its containers), then the MPS compute share annotation.

Rules are values, not exceptions, so one denial message lists every problem of an object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.node import mps
from webhook.core.specs import finding, podread, templates
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources


def check(read: podread.PodRead) -> list[Finding]:
    """Every GPU resource problem of one pod template, in a stable order: its read's findings
    (containers, then init containers, each by resource name; the gpu-count label, the mixed-pod rule,
    init containers' memory), then the MPS compute share."""
    out = read.findings()
    notes = read.annotations
    if isinstance(notes, templates.OBJECT) and mps.COMPUTE_PERCENT_ANNOTATION in notes:
        out += _check_compute_percent(read.path, notes)
    return out


def check_pod_spec(
    metadata: Mapping[str, Any],
    spec: Mapping[str, Any],
    prefix: str,
    names: resources.GpuResourceNames,
    unit: str = podread.DEFAULT_UNIT,
) -> list[Finding]:
    """`check` of the template at `prefix` ("" for a Pod, "spec.template" for a Deployment)."""
    return check(podread.read(templates.PodTemplate(prefix, metadata, spec), names, unit))


def _check_compute_percent(path: str, notes: Mapping[str, Any]) -> list[Finding]:
    """The MPS compute share annotation: a whole percent 1..100 (core/node/mps.py reads it at Allocate)."""
    raw = notes[mps.COMPUTE_PERCENT_ANNOTATION]
    try:
        mps.compute_percent(raw)
    except mps.MpsError:
        at = templates.key_path(templates.join(path, "metadata.annotations"), mps.COMPUTE_PERCENT_ANNOTATION)
        problem = "must be a whole percent of the GPU's compute between 1 and 100 (MPS nodes only)"
        return [finding.showing(at, None, raw, problem, 'write e.g. "30", or remove the annotation')]
    return []
