"""The usage report on the wire: the device plugin's `GET /usage` answers `encode(NodeUsage)` and
`gpushare inspect --usage` reads it back with `decode`, which names the field of any answer it cannot read.

    {"node": "n1", "sampledAt": 1767225600.0,
     "gpus": [{"index": 0, "uuid": "GPU-...", "model": "...", "totalBytes": ..., "allocatedBytes": ...,
               "usedBytes": ... | null, "utilization": 0.4 | null, "healthy": true,
               "unattributed": {"host": ...}}],
     "containers": [{"namespace": "ml", "pod": "train", "container": "main", "podUID": "...", "gpu": 0,
                     "shareBytes": ..., "usedBytes": ..., "utilization": 0.3 | null, "processes": 1,
                     "overShare": false}]}
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from webhook.core.usage import usage

MAX_BYTES = 1 << 62  # no GPU holds more: anything above is a broken answer, not memory


class ReportError(ValueError):
    """A usage report that cannot be read; names the field."""


def encode(report: usage.NodeUsage) -> dict[str, Any]:
    return {
        "node": report.node,
        "sampledAt": report.sampled_at,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "totalBytes": g.total_bytes,
                "allocatedBytes": g.allocated_bytes,
                "usedBytes": g.used_bytes,
                "utilization": g.utilization,
                "healthy": g.healthy,
                "unattributed": dict(g.unattributed),
            }
            for g in report.gpus
        ],
        "containers": [
            {
                "namespace": c.namespace,
                "pod": c.pod,
                "container": c.container,
                "podUID": c.pod_uid,
                "gpu": c.gpu,
                "shareBytes": c.share_bytes,
                "usedBytes": c.used_bytes,
                "utilization": c.utilization,
                "processes": c.processes,
                "overShare": c.over_share,
            }
            for c in report.containers
        ],
    }


def dumps(report: usage.NodeUsage) -> bytes:
    return json.dumps(encode(report), separators=(",", ":")).encode()


def loads(body: bytes) -> usage.NodeUsage:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise ReportError("the answer is not JSON") from None
    return decode(data)


def decode(data: object) -> usage.NodeUsage:
    top = _object(data, "report")
    gpus = tuple(_gpu(g, f"gpus[{i}]") for i, g in enumerate(_list(top, "gpus", "report")))
    containers = tuple(
        _container(c, f"containers[{i}]") for i, c in enumerate(_list(top, "containers", "report"))
    )
    return usage.NodeUsage(
        node=_text(top, "node", "report"),
        sampled_at=_number(top, "sampledAt", "report"),
        gpus=gpus,
        containers=containers,
    )


def _gpu(raw: object, where: str) -> usage.GpuUsage:
    g = _object(raw, where)
    unattributed = _object(g.get("unattributed", {}), f"{where}.unattributed")
    return usage.GpuUsage(
        index=_count(g, "index", where),
        uuid=_text(g, "uuid", where),
        model=_text(g, "model", where, optional=True),
        total_bytes=_count(g, "totalBytes", where),
        allocated_bytes=_count(g, "allocatedBytes", where),
        used_bytes=_count(g, "usedBytes", where) if g.get("usedBytes") is not None else None,
        utilization=_ratio(g, "utilization", where),
        healthy=_flag(g, "healthy", where),
        unattributed={str(k): _count(unattributed, k, f"{where}.unattributed") for k in unattributed},
    )


def _container(raw: object, where: str) -> usage.ContainerUsage:
    c = _object(raw, where)
    return usage.ContainerUsage(
        namespace=_text(c, "namespace", where),
        pod=_text(c, "pod", where),
        container=_text(c, "container", where),
        pod_uid=_text(c, "podUID", where),
        gpu=_count(c, "gpu", where),
        share_bytes=_count(c, "shareBytes", where),
        used_bytes=_count(c, "usedBytes", where),
        utilization=_ratio(c, "utilization", where),
        processes=_count(c, "processes", where),
        over_share=_flag(c, "overShare", where),
    )


def _object(raw: object, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ReportError(f"{where} is not an object")
    return raw


def _list(obj: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = obj.get(key)
    if not isinstance(value, list):
        raise ReportError(f"{where}.{key} is not a list")
    return value


def _text(obj: Mapping[str, Any], key: str, where: str, optional: bool = False) -> str:
    value = obj.get(key, "" if optional else None)
    if not isinstance(value, str):
        raise ReportError(f"{where}.{key} is not a string")
    return value


def _count(obj: Mapping[str, Any], key: str, where: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BYTES:
        raise ReportError(f"{where}.{key} is not a whole number from 0 to 2^62: {value!r}"[:200])
    return value


def _number(obj: Mapping[str, Any], key: str, where: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ReportError(f"{where}.{key} is not a number")
    return float(value)


def _ratio(obj: Mapping[str, Any], key: str, where: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ReportError(f"{where}.{key} is not a ratio from 0 to 1: {value!r}"[:200])
    return float(value)


def _flag(obj: Mapping[str, Any], key: str, where: str) -> bool:
    value = obj.get(key)
    if not isinstance(value, bool):
        raise ReportError(f"{where}.{key} is not true or false")
    return value
