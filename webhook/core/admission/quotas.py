"""Warnings for a ResourceQuota or a Kueue ClusterQueue that names GPU resources so that nothing is counted.

The API server takes every spelling in a ResourceQuota's `spec.hard`, but counts an extended resource
(every GPU resource) only as `requests.<name>`: `limits.aliyun.com/gpu-mem` and a bare
`aliyun.com/gpu-mem` are stored, never used, and every pod is admitted (measured against kube-apiserver
and kube-controller-manager v1.36.3: tests/cluster/test_quota.py). A misspelt name (`aliyun.com/gpumem`)
is counted for nobody. Kueue takes any name in `coveredResources` and a flavor's `resources`: a misspelt
one admits workloads as if they asked for none of it. Each warning names the spelling that counts.

    hard_warnings({"limits.aliyun.com/gpu-mem": "8"}, GpuResourceNames())
    -> ['spec.hard[limits.aliyun.com/gpu-mem]: the API server counts aliyun.com/gpu-mem only as
        requests.aliyun.com/gpu-mem (an extended resource has no limits. quota), so this key limits
        nothing; write requests.aliyun.com/gpu-mem']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.admission import lookalikes
from webhook.core.specs import finding
from webhook.core.wire import resources

REQUESTS, LIMITS = "requests.", "limits."
KUEUE_GROUP = "kueue.x-k8s.io/"
_SHOWN = 60


def warnings(obj: Mapping[str, Any], names: resources.GpuResourceNames) -> list[str]:
    """The warnings for one object of any kind: only ResourceQuotas and ClusterQueues get any."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    kind, api = obj.get("kind"), obj.get("apiVersion")
    if kind == "ResourceQuota" and api == "v1":
        hard = spec.get("hard")
        return hard_warnings(hard, names) if isinstance(hard, Mapping) else []
    if kind == "ClusterQueue" and isinstance(api, str) and api.startswith(KUEUE_GROUP):
        return queue_warnings(spec, names)
    return []


def hard_warnings(hard: Mapping[object, object], names: resources.GpuResourceNames) -> list[str]:
    """One warning per key of a ResourceQuota's `spec.hard` that counts no GPU resource it seems to mean."""
    out = []
    for key in sorted(k for k in hard if isinstance(k, str)):
        prefix = REQUESTS if key.startswith(REQUESTS) else LIMITS if key.startswith(LIMITS) else ""
        name = key[len(prefix) :]
        meant = name if names.is_gpu(name) else lookalikes.suggestion(name, names)
        right = f"{REQUESTS}{meant}"
        if meant is None or (key == right and meant != names.count):
            continue  # not about GPUs, or counted
        if meant == names.count:
            why = (
                f"{meant} is a pod label (the GPUs a share is split over) that no pod requests, so this key "
                f"limits nothing; a share's memory is counted as {REQUESTS}{names.memory}"
            )
        elif prefix == REQUESTS:
            shown = finding.printable(name, _SHOWN)
            why = f"{shown} is no GPU resource, so nothing is counted; did you mean {right}?"
        else:
            extra = " (an extended resource has no limits. quota)" if prefix == LIMITS else ""
            why = f"the API server counts {meant} only as {right}{extra}, so this key limits nothing"
            why += f"; write {right}"
        out.append(f"spec.hard[{finding.printable(key, _SHOWN)}]: {why}")
    return out


def queue_warnings(spec: Mapping[str, Any], names: resources.GpuResourceNames) -> list[str]:
    """One warning per misspelt GPU resource name among a ClusterQueue's covered and flavor resources."""
    out = []
    groups = spec.get("resourceGroups")
    for g, group in enumerate(groups if isinstance(groups, list) else []):
        if not isinstance(group, Mapping):
            continue
        covered = group.get("coveredResources")
        for c, name in enumerate(covered if isinstance(covered, list) else []):
            out += _named(f"spec.resourceGroups[{g}].coveredResources[{c}]", name, names)
        flavors = group.get("flavors")
        for f, flavor in enumerate(flavors if isinstance(flavors, list) else []):
            listed = flavor.get("resources") if isinstance(flavor, Mapping) else None
            for r, resource in enumerate(listed if isinstance(listed, list) else []):
                if isinstance(resource, Mapping):
                    where = f"spec.resourceGroups[{g}].flavors[{f}].resources[{r}].name"
                    out += _named(where, resource.get("name"), names)
    return out


def _named(where: str, name: object, names: resources.GpuResourceNames) -> list[str]:
    if not isinstance(name, str):
        return []
    meant = lookalikes.suggestion(name, names)
    if meant is None:
        return []
    shown = finding.printable(name, _SHOWN)
    return [f"{where}: {shown} is no GPU resource, so Kueue counts it for no pod; did you mean {meant}?"]


@dataclass(frozen=True, slots=True)
class QuotaLine:
    """One GPU resource a ResourceQuota counts: what its namespace holds of it and may hold (as the
    quota's status and spec give them: quantities as the API server writes them)."""

    namespace: str
    quota: str
    resource: str  # requests.<a GPU resource>
    used: str  # "" until kube-controller-manager has counted it
    hard: str


def gpu_lines(objs: Iterable[Mapping[str, Any]], names: resources.GpuResourceNames) -> list[QuotaLine]:
    """The GPU resources that the ResourceQuotas `objs` count, by namespace, quota and resource."""
    out = []
    for obj in objs:
        meta, spec, status = (obj.get(k) for k in ("metadata", "spec", "status"))
        hard = spec.get("hard") if isinstance(spec, Mapping) else None
        if not isinstance(meta, Mapping) or not isinstance(hard, Mapping):
            continue
        used = status.get("used") if isinstance(status, Mapping) else None
        for key in sorted(k for k in hard if isinstance(k, str) and k.startswith(REQUESTS)):
            name = key[len(REQUESTS) :]
            if names.is_gpu(name) and name != names.count:
                counted = used.get(key, "") if isinstance(used, Mapping) else ""
                out.append(
                    QuotaLine(
                        str(meta.get("namespace", "")),
                        str(meta.get("name", "")),
                        key,
                        str(counted),
                        str(hard[key]),
                    )
                )
    return sorted(out, key=lambda line: (line.namespace, line.quota, line.resource))
