"""`gpushare inspect` output: the GPU-memory map as values and its text tables and JSON.

The text is laid out like `kubectl inspect gpushare` (columns `GPU<i>(Allocated/Total)`, a cluster
line `Allocated/Total GPU Memory In Cluster:`), so people and scripts used to it keep working.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PodUse:
    """The memory one pod holds on one GPU; `assigned` is false until the device plugin allocated it."""

    namespace: str
    name: str
    gpu: int
    units: int
    assigned: bool


@dataclass(frozen=True, slots=True)
class GpuUse:
    index: int
    total: int
    used: int
    healthy: bool = True
    model: str = ""
    uuid: str = ""


@dataclass(frozen=True, slots=True)
class NodeUse:
    name: str
    address: str
    unit: str
    gpus: tuple[GpuUse, ...]
    pods: tuple[PodUse, ...]  # one entry per (pod, GPU): a multi-GPU pod appears once per GPU
    problems: tuple[str, ...] = ()  # over-commits, unreadable annotations, pods never placed
    mode: str = ""  # ack.node.gpu.schedule as the parts read it (core/modes.py); "" when not known
    model: str = ""  # the GPU model as the aliyun.accelerator/nvidia_name label writes it, or "mixed"

    @property
    def total(self) -> int:
        return sum(g.total for g in self.gpus)

    @property
    def used(self) -> int:
        return sum(g.used for g in self.gpus)

    @property
    def pending(self) -> int:
        """Memory of pods placed on this node whose device-plugin allocation has not happened yet."""
        return sum(p.units for p in self.pods if not p.assigned)


@dataclass(frozen=True, slots=True)
class ClusterUse:
    unit: str
    nodes: tuple[NodeUse, ...]

    @property
    def total(self) -> int:
        return sum(n.total for n in self.nodes)

    @property
    def used(self) -> int:
        return sum(n.used for n in self.nodes)


def percent(used: int, total: int) -> int:
    """Whole percent, rounded down as the original tool prints it; 0 for an empty cluster."""
    return used * 100 // total if total else 0


def render_text(cluster: ClusterUse, details: bool = False) -> str:
    lines = _detail_lines(cluster) if details else _summary_lines(cluster)
    lines += [
        "-" * 62,
        f"Allocated/Total GPU Memory In Cluster ({cluster.unit}):",
        f"{cluster.used}/{cluster.total} ({percent(cluster.used, cluster.total)}%)",
    ]
    lines += [f"warning: {n.name}: {p}" for n in cluster.nodes for p in n.problems]
    return "\n".join(lines) + "\n"


def _summary_lines(cluster: ClusterUse) -> list[str]:
    width = max((len(n.gpus) for n in cluster.nodes), default=0)
    with_pending = any(n.pending for n in cluster.nodes)
    header = ["NAME", "IPADDRESS", *(f"GPU{i}(Allocated/Total)" for i in range(width))]
    if with_pending:
        header.append("PENDING(Allocated)")
    header.append(f"GPU Memory({cluster.unit})")
    header += ["MODE", "MODEL"]  # after the original columns, so scripts reading those keep working
    rows = [header]
    for node in cluster.nodes:
        cells = {g.index: _gpu_cell(g) for g in node.gpus}
        row = [node.name, node.address or "-", *(cells.get(i, "") for i in range(width))]
        if with_pending:
            row.append(str(node.pending) if node.pending else "")
        row.append(f"{node.used}/{node.total}")
        row += [node.mode or "-", node.model or "-"]
        rows.append(row)
    out = _table(rows)
    if with_pending:
        out.append("PENDING: memory of pods placed but not yet allocated (ASSIGNED=false), included above")
    return out


def _detail_lines(cluster: ClusterUse) -> list[str]:
    out: list[str] = []
    for node in cluster.nodes:
        indexes = [g.index for g in node.gpus]
        for p in node.pods:  # memory on a GPU the node no longer reports still gets a column
            if p.gpu not in indexes:
                indexes.append(p.gpu)
        out += [f"NAME:       {node.name}", f"IPADDRESS:  {node.address or '-'}"]
        out += [f"MODE:       {node.mode or '-'}", f"MODEL:      {node.model or '-'}", ""]
        rows = [["NAME", "NAMESPACE", *(f"GPU{i}(Allocated)" for i in indexes), "ASSIGNED"]]
        for (namespace, name), uses in _by_pod(node.pods).items():
            held = {u.gpu: u.units for u in uses}
            assigned = "true" if all(u.assigned for u in uses) else "false"
            rows.append([name, namespace, *(str(held.get(i, 0)) for i in indexes), assigned])
        out += _table(rows)
        gpus = {g.index: g for g in node.gpus}
        out.append("Allocated/Total:  " + "  ".join(_gpu_detail(i, gpus.get(i)) for i in indexes))
        out.append(f"Allocated:        {node.used} ({percent(node.used, node.total)}%)")
        out.append(f"Total:            {node.total}")
        if node.pending:
            out.append(f"Pending:          {node.pending} (placed, ASSIGNED=false)")
        out.append("-" * 62)
    return out[:-1] if out else out


def _by_pod(uses: Sequence[PodUse]) -> dict[tuple[str, str], list[PodUse]]:
    grouped: dict[tuple[str, str], list[PodUse]] = {}
    for u in sorted(uses, key=lambda u: (u.namespace, u.name, u.gpu)):
        grouped.setdefault((u.namespace, u.name), []).append(u)
    return grouped


def _gpu_cell(gpu: GpuUse) -> str:
    return f"{gpu.used}/{gpu.total}" + ("" if gpu.healthy else " (unhealthy)")


def _gpu_detail(index: int, gpu: GpuUse | None) -> str:
    return f"GPU{index} " + (_gpu_cell(gpu) if gpu is not None else "(missing)")


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def to_json(cluster: ClusterUse) -> dict[str, Any]:
    return {
        "unit": cluster.unit,
        "total": cluster.total,
        "allocated": cluster.used,
        "percent": round(cluster.used * 100 / cluster.total, 1) if cluster.total else 0.0,
        "nodes": [
            {
                "name": n.name,
                "address": n.address,
                "total": n.total,
                "allocated": n.used,
                "pending": n.pending,
                "mode": n.mode,
                "model": n.model,
                "gpus": [
                    {
                        "index": g.index,
                        "total": g.total,
                        "allocated": g.used,
                        "healthy": g.healthy,
                        "model": g.model,
                        "uuid": g.uuid,
                        "pods": [
                            {
                                "namespace": p.namespace,
                                "name": p.name,
                                "allocated": p.units,
                                "assigned": p.assigned,
                            }
                            for p in n.pods
                            if p.gpu == g.index
                        ],
                    }
                    for g in n.gpus
                ],
                "problems": list(n.problems),
            }
            for n in cluster.nodes
        ],
    }


def render_json(cluster: ClusterUse) -> str:
    return json.dumps(to_json(cluster), indent=2) + "\n"
