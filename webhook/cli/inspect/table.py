"""`gpushare inspect` output: the GPU-memory map as values and its text tables and JSON.

The text is laid out like `kubectl inspect gpushare` (columns `GPU<i>(Allocated/Total)`, a cluster
line `Allocated/Total GPU Memory In Cluster:`), so people and scripts used to it keep working.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.core.wire.units import unit_mib

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class PodUse:
    """The memory one pod holds on one GPU; `assigned` is false until the device plugin allocated it."""

    namespace: str
    name: str
    gpu: int
    units: int
    assigned: bool
    used_bytes: int | None = None  # --usage: what its containers use of the GPU
    over_share: bool = False  # --usage: a container above its share longer than the plugin's grace
    claim: str = ""  # a DRA share: the ResourceClaim holding it (`name` is then the pod using it)


@dataclass(frozen=True, slots=True)
class GpuUse:
    index: int
    total: int
    used: int
    healthy: bool = True
    model: str = ""
    uuid: str = ""
    used_bytes: int | None = None  # --usage: in use, as the driver reports it; None when not known
    utilization: float | None = None
    unattributed: Mapping[str, int] = field(default_factory=dict)  # --usage: memory of processes in no pod


class _Sums:
    """`total` and `used`, summed over the GPUs `_gpus` yields: a node's, or the whole cluster's."""

    __slots__ = ()

    def _gpus(self) -> Iterator[GpuUse]:
        raise NotImplementedError

    @property
    def total(self) -> int:
        return sum(g.total for g in self._gpus())

    @property
    def used(self) -> int:
        return sum(g.used for g in self._gpus())


@dataclass(frozen=True, slots=True)
class NodeUse(_Sums):
    name: str
    address: str
    gpus: tuple[GpuUse, ...]
    pods: tuple[PodUse, ...]  # one entry per (pod, GPU): a multi-GPU pod appears once per GPU
    problems: tuple[str, ...] = ()  # over-commits, unreadable annotations, pods never placed
    mode: str = ""  # ack.node.gpu.schedule as the parts read it (core/placement/modes.py); "" when not known
    model: str = ""  # the GPU model as the aliyun.accelerator/nvidia_name label writes it, or "mixed"
    # How its device plugin hands GPUs to containers (envvar, cdi-cri, both; docs/cdi.md); "" when not known
    device_list: str = ""
    ready: bool = True  # the Node's Ready condition is True (or the Node has none)

    def _gpus(self) -> Iterator[GpuUse]:
        return iter(self.gpus)

    @property
    def pending(self) -> int:
        """Memory of pods placed on this node whose device-plugin allocation has not happened yet."""
        return sum(p.units for p in self.pods if not p.assigned)


@dataclass(frozen=True, slots=True)
class ClusterUse(_Sums):
    unit: str
    nodes: tuple[NodeUse, ...]
    usage: bool = False  # --usage: GPUs and pods carry what they use

    def _gpus(self) -> Iterator[GpuUse]:
        return (g for n in self.nodes for g in n.gpus)


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
    if cluster.usage:
        used = sum(g.used_bytes or 0 for n in cluster.nodes for g in n.gpus)
        share = round(units(used, cluster.unit) * 100 / cluster.total) if cluster.total else 0
        lines += [
            f"Used/Total GPU Memory In Cluster ({cluster.unit}):",
            f"{amount(used, cluster.unit)}/{cluster.total} ({share}%)",
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
    with_device_list = any(n.device_list for n in cluster.nodes)
    if with_device_list:
        header.append("DEVICE LIST")
    rows = [header]
    for node in cluster.nodes:
        cells = {g.index: _gpu_cell(g, cluster) for g in node.gpus}
        row = [node.name, node.address or "-", *(cells.get(i, "") for i in range(width))]
        if with_pending:
            row.append(str(node.pending) if node.pending else "")
        row.append(f"{node.used}/{node.total}")
        row += [node.mode or "-", node.model or "-"]
        if with_device_list:
            row.append(node.device_list or "-")
        rows.append(row)
    out = _table(rows)
    if with_pending:
        out.append("PENDING: memory of pods placed but not yet allocated (ASSIGNED=false), included above")
    if cluster.usage:
        out.append(f"(used N): GPU memory in use now ({cluster.unit}), as each node's device plugin reads it")
    return out


def _detail_lines(cluster: ClusterUse) -> list[str]:
    out: list[str] = []
    for node in cluster.nodes:
        indexes = [g.index for g in node.gpus]
        for p in node.pods:  # memory on a GPU the node no longer reports still gets a column
            if p.gpu not in indexes:
                indexes.append(p.gpu)
        out += [f"NAME:       {node.name}", f"IPADDRESS:  {node.address or '-'}"]
        out += [f"MODE:       {node.mode or '-'}", f"MODEL:      {node.model or '-'}"]
        if node.device_list:
            out.append(f"DEVICE LIST: {node.device_list}")
        out.append("")
        columns = [f"GPU{i}(Allocated)" for i in indexes]
        if cluster.usage:
            columns = [c for i in indexes for c in (f"GPU{i}(Allocated)", f"GPU{i}(Used)")]
        rows = [["NAME", "NAMESPACE", *columns, "ASSIGNED", *(["OVER SHARE"] if cluster.usage else [])]]
        for (namespace, name), uses in _by_pod(node.pods).items():
            held = {u.gpu: u for u in uses}
            assigned = "true" if all(u.assigned for u in uses) else "false"
            cells = []
            for i in indexes:
                cells.append(str(held[i].units) if i in held else "0")
                if cluster.usage:
                    cells.append(amount(held[i].used_bytes, cluster.unit) if i in held else "-")
            over = [u.gpu for u in uses if u.over_share]
            extra = [", ".join(f"GPU{i}" for i in over)] if cluster.usage else []
            claims = sorted({u.claim for u in uses if u.claim})
            shown = f"{name} (claim {', '.join(claims)})" if claims else name
            rows.append([shown, namespace, *cells, assigned, *extra])
        out += _table(rows)
        gpus = {g.index: g for g in node.gpus}
        out.append("Allocated/Total:  " + "  ".join(_gpu_detail(i, gpus.get(i), cluster) for i in indexes))
        if cluster.usage:
            out += _usage_detail(node, cluster.unit)
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


def _gpu_cell(gpu: GpuUse, cluster: ClusterUse) -> str:
    used = f" (used {amount(gpu.used_bytes, cluster.unit)})" if cluster.usage else ""
    return f"{gpu.used}/{gpu.total}{used}" + ("" if gpu.healthy else " (unhealthy)")


def _gpu_detail(index: int, gpu: GpuUse | None, cluster: ClusterUse) -> str:
    return f"GPU{index} " + (_gpu_cell(gpu, cluster) if gpu is not None else "(missing)")


def _usage_detail(node: NodeUse, unit: str) -> list[str]:
    """Per GPU: in use, busy, and memory of processes in no pod (by reason)."""
    out = []
    for g in node.gpus:
        busy = f", busy {round(g.utilization * 100)}%" if g.utilization is not None else ""
        outside = ", ".join(
            f"{reason} {amount(b, unit)}" for reason, b in sorted(g.unattributed.items()) if b
        )
        line = f"Used GPU{g.index}:        {amount(g.used_bytes, unit)} of {g.total}{busy}"
        out.append(line + (f"; in no pod: {outside}" if outside else ""))
    return out


def units(amount_bytes: int, unit: str) -> float:
    """Bytes in the cluster's gpu-mem unit (GiB, MiB or <N>MiB)."""
    return amount_bytes / (unit_mib(unit) * MIB)


def amount(amount_bytes: int | None, unit: str) -> str:
    """What is used, in the unit: one decimal, whole MiB in MiB mode; "-" when not known."""
    if amount_bytes is None:
        return "-"
    value = units(amount_bytes, unit)
    return f"{value:.0f}" if unit == "MiB" else f"{value:.1f}"


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
                "deviceList": n.device_list,
                "ready": n.ready,
                "gpus": [
                    {
                        "index": g.index,
                        "total": g.total,
                        "allocated": g.used,
                        "healthy": g.healthy,
                        "model": g.model,
                        "uuid": g.uuid,
                        **(_gpu_usage(g) if cluster.usage else {}),
                        "pods": [
                            {
                                "namespace": p.namespace,
                                "name": p.name,
                                "allocated": p.units,
                                "assigned": p.assigned,
                                **({"claim": p.claim} if p.claim else {}),
                                **(
                                    {"usedBytes": p.used_bytes, "overShare": p.over_share}
                                    if cluster.usage
                                    else {}
                                ),
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


def _gpu_usage(g: GpuUse) -> dict[str, Any]:
    return {
        "usedBytes": g.used_bytes,
        "utilization": g.utilization,
        "unattributedBytes": dict(g.unattributed),
    }


def render_json(cluster: ClusterUse) -> str:
    return json.dumps(to_json(cluster), indent=2) + "\n"
