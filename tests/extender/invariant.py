"""The extender's one promise, checked from the API's stored pods: no shared GPU is ever over-committed.

`violations(pods, capacity)` reads only what the API server stores (spec.nodeName and the allocation
annotation, decoded here with `json`, not with the code under test): per GPU, the memory of the bound,
live pods must fit, and each bound pod must hold exactly what it asks for, once. `storm.run` checks it
all along a randomized run of concurrent binds against any API server.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core.wire import resources

Gpu = tuple[str, int]  # (node, GPU index)


def asked(pod: Mapping[str, Any]) -> int:
    """The pod's aliyun.com/gpu-mem: the sum of its containers' limits (init containers not counted)."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(limits.get(resources.GPU_MEMORY, 0))
    return total


def holds(pod: Mapping[str, Any]) -> bool:
    """Bound and not Succeeded/Failed, being deleted or not: a terminating pod's containers keep their GPU
    memory until the kubelet has stopped them, so it counts until the API removes it (docs/extender.md,
    Accounting)."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    return bool((pod.get("spec") or {}).get("nodeName"))


def stored_use(pods: Iterable[Mapping[str, Any]]) -> tuple[dict[Gpu, int], list[str]]:
    """Memory per GPU held by the live bound pods, and the pods whose placement is wrong."""
    used: dict[Gpu, int] = {}
    wrong: list[str] = []
    seen: set[str] = set()
    for pod in pods:
        if not holds(pod):
            continue
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')} (UID {meta.get('uid')})"
        if key in seen:
            wrong.append(f"pod {key} listed twice")
            continue
        seen.add(key)
        want = asked(pod)
        raw = (meta.get("annotations") or {}).get(resources.ANN_ALLOCATION)
        if raw is None:
            if want:
                wrong.append(f"pod {key} asks for {want} and is bound without a placement")
            continue
        node = str(pod["spec"]["nodeName"])
        got = 0
        for gpus in json.loads(raw).values():
            for gpu, units in gpus.items():
                used[(node, int(gpu))] = used.get((node, int(gpu)), 0) + int(units)
                got += int(units)
        if got != want:
            wrong.append(f"pod {key} asks for {want} and holds {got}")
    return used, wrong


def violations(pods: Iterable[Mapping[str, Any]], capacity: Mapping[Gpu, int]) -> list[str]:
    """Every broken promise in this state of the API: over-committed GPUs, misplaced pods."""
    used, found = stored_use(pods)
    for gpu, units in sorted(used.items()):
        if units > capacity.get(gpu, 0):
            found.append(f"GPU {gpu[1]} of node {gpu[0]} holds {units} of {capacity.get(gpu, 0)}")
    return found
