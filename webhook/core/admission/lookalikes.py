"""Warnings for resource names that look like a GPU resource but are not one (`nvidia.com/gpus`).

Such a typo passes the API server (any domain-qualified name is a valid extended resource) and leaves
the pod Pending with "Insufficient nvidia.com/gpus"; a warning at apply time names the likely fix. A
warning, not a denial: a close name may be another vendor's real resource.
"""

from __future__ import annotations

import difflib
import functools

from webhook.core.specs import finding, specview
from webhook.core.wire import resources

# SequenceMatcher ratio from which a name counts as a typo: nvidia.com/gpus 0.97, aliyun.com/gpu-memory
# 0.92, aliyun/gpu-mem 0.88; real neighbours stay below (nvidia.com/gpu.shared 0.80).
CUTOFF = 0.85
_NAME_LIMIT = 20
_RESOURCE_LIMIT = 40
_MEMO = 1024


@functools.lru_cache(maxsize=_MEMO)
def suggestion(name: str, names: resources.GpuResourceNames) -> str | None:
    """The GPU resource name `name` is probably a typo of; None when it is one or is not close to one."""
    if "/" not in name or names.is_gpu(name):
        return None  # cpu, memory, hugepages-2Mi ... have no domain; GPU names are not typos
    known = sorted({*names.whole_device, names.memory, names.count})
    lowered = name.lower()
    for candidate in known:
        if candidate.lower() == lowered:
            return candidate
    close = difflib.get_close_matches(lowered, known, n=1, cutoff=CUTOFF)
    return close[0] if close else None


def warnings(view: specview.SpecView) -> list[str]:
    """One warning per container and misspelt resource name, naming the container and the likely name."""
    out: list[str] = []
    names = view.names
    for entry in view.containers:
        # The container's domain-qualified names that are no GPU name, each once (the walk sorted them).
        for section, name in entry.other_names:
            meant = suggestion(name, names)
            if meant is not None:
                raw_name = entry.body.get("name")
                who = finding.printable(raw_name, _NAME_LIMIT) if isinstance(raw_name, str) else "?"
                shown = finding.printable(name, _RESOURCE_LIMIT)
                out.append(f'container "{who}": {section}[{shown}] is no GPU resource; did you mean {meant}?')
    return out
