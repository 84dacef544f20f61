"""`gpushare inspect --namespaces`: GPU memory per namespace (a team) beside the ResourceQuotas that limit it.

PLACED is what the extender counts of the namespace's pods (and, on DRA nodes, its claims) on every GPU,
from the same map as the node table. The quota columns are each ResourceQuota's `requests.<GPU resource>`
as the API server counts it: every pod admitted, placed or still Pending, so USED can run ahead of PLACED.

    NAMESPACE  PLACED(GiB)  QUOTA  RESOURCE                     USED/HARD
    team-a     12           gpu    requests.aliyun.com/gpu-mem  12/16
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from webhook.cli.inspect import table
from webhook.core.admission import quotas
from webhook.kube import rest

HEADER = ("NAMESPACE", "PLACED({unit})", "QUOTA", "RESOURCE", "USED/HARD")


def read_quotas(api: Any, timeout: float) -> list[dict[str, Any]]:
    """Every ResourceQuota of the cluster (one list)."""
    return list(rest.list_all(api, rest.path("resourcequotas"), timeout=timeout))


def placed(cluster: table.ClusterUse) -> dict[str, int]:
    """Units held per namespace, every GPU of every node counted."""
    out: dict[str, int] = defaultdict(int)
    for node in cluster.nodes:
        for pod in node.pods:
            out[pod.namespace] += pod.units
    return dict(out)


def render_text(cluster: table.ClusterUse, lines: Sequence[quotas.QuotaLine]) -> str:
    held = placed(cluster)
    by_namespace: dict[str, list[quotas.QuotaLine]] = defaultdict(list)
    for line in lines:
        by_namespace[line.namespace].append(line)
    rows = [tuple(h.format(unit=cluster.unit) for h in HEADER)]
    for namespace in sorted({*held, *by_namespace}):
        first = (namespace, str(held.get(namespace, 0)))
        limits = by_namespace.get(namespace) or []
        if not limits:
            rows.append((*first, "-", "(no GPU quota)", ""))
        for i, line in enumerate(limits):
            rows.append((*(first if i == 0 else ("", "")), line.quota, line.resource, _used(line)))
    widths = [max(len(row[c]) for row in rows) for c in range(len(HEADER))]
    return "".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n" for row in rows
    )


def render_json(cluster: table.ClusterUse, lines: Sequence[quotas.QuotaLine]) -> str:
    held = placed(cluster)
    namespaces = sorted({*held, *(line.namespace for line in lines)})
    body = {
        "unit": cluster.unit,
        "namespaces": [
            {
                "namespace": namespace,
                "placed": held.get(namespace, 0),
                "quotas": [
                    {"quota": line.quota, "resource": line.resource, "used": line.used, "hard": line.hard}
                    for line in lines
                    if line.namespace == namespace
                ],
            }
            for namespace in namespaces
        ],
    }
    return json.dumps(body, indent=2) + "\n"


def _used(line: quotas.QuotaLine) -> str:
    return f"{line.used or '?'}/{line.hard}"
