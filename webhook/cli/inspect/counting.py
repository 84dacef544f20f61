"""`gpushare inspect`'s map counted from the cluster's raw objects: each node's ledger is
`webhook.core.placement.accounting.build` over its pods' annotations (the numbers the extender schedules
with), beside the shares our DRA driver's ResourceClaims hold on the GPUs its ResourceSlices publish.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.cli.inspect import table
from webhook.core.node import draslice, drause, gpulabels
from webhook.core.placement import accounting, modes
from webhook.core.wire import resources
from webhook.core.wire.units import unit_mib

# A lost node's pods stay bound, and their memory stays counted, until they are deleted (docs/operations.md).
NOT_READY = (
    "node not Ready ({status}): its pods keep their GPU memory until they are deleted (docs/operations.md)"
)


def cluster_use(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    unit: str = "GiB",
    names: resources.GpuResourceNames | None = None,
    keep_all: bool = False,
    *,
    slices: Sequence[Mapping[str, Any]] = (),
    claims: Sequence[Mapping[str, Any]] = (),
    driver: str = draslice.DEFAULT_DRIVER,
) -> table.ClusterUse:
    """The map from raw nodes and pods, and our DRA driver's ResourceSlices and the ResourceClaims
    allocated from them; nodes without GPUs or GPU pods are left out unless `keep_all`."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        by_node.setdefault(accounting.node_name_of(pod), []).append(pod)
    dra_gpus = drause.gpus(slices, driver)
    dra = drause.shares(claims, driver, dra_gpus)
    rows = []
    for node in sorted(nodes, key=lambda n: str((n.get("metadata") or {}).get("name") or "")):
        name = str((node.get("metadata") or {}).get("name") or "")
        ledger, skipped = accounting.build(node, by_node.get(name, ()), unit, names)
        mode, mode_problem = _mode(node)
        ready = _ready(node)
        problems = (
            *([] if ready in ("True", "") else [NOT_READY.format(status=ready)]),
            *ledger.problems(),
            *(f"pod {s.key}: {s.reason}" for s in skipped),
            *mode_problem,
            *(p for where, p in dra.problems if where == name),
        )
        gpus = [table.GpuUse(g.index, g.memory, g.used, g.healthy, g.model, g.uuid) for g in ledger.gpus()]
        uses = [
            table.PodUse(*_split_key(s.key), gpu, units, s.assigned)
            for s in ledger.shares()
            for gpu, units in sorted(s.allocation.per_gpu().items())
        ]
        shares = [s for s in dra.shares if s.node == name]
        if name in dra_gpus:
            gpus, claimed = _with_dra(gpus, dra_gpus[name], shares, unit)
            uses += claimed
        if not (keep_all or gpus or uses or problems):
            continue
        rows.append(
            table.NodeUse(
                name=name,
                address=_address(node),
                gpus=tuple(gpus),
                pods=tuple(uses),
                problems=problems,
                mode=mode,
                ready=ready in ("True", ""),
                model=gpulabels.model(g.model for g in gpus if g.model),
                device_list=str(
                    ((node.get("metadata") or {}).get("annotations") or {}).get(
                        resources.NODE_DEVICE_LIST_ANNOTATION, ""
                    )
                ),
            )
        )
    return table.ClusterUse(unit=unit, nodes=tuple(rows))


def _with_dra(
    gpus: list[table.GpuUse],
    published: Mapping[int, drause.DraGpu],
    shares: Sequence[drause.DraShare],
    unit: str,
) -> tuple[list[table.GpuUse], list[table.PodUse]]:
    """The node's GPUs with what the DRA shares hold counted in, and one row per share: beside the
    extender's placements, in the same unit (a share rounded up to whole units)."""
    mib = unit_mib(unit)
    uses = [
        table.PodUse(s.namespace, ", ".join(s.pods) or s.claim, s.gpu, -(-s.mib // mib), True, claim=s.claim)
        for s in sorted(shares, key=lambda s: (s.namespace, ", ".join(s.pods) or s.claim, s.gpu))
    ]
    held: dict[int, int] = {}
    for use in uses:
        held[use.gpu] = held.get(use.gpu, 0) + use.units
    by_index = {g.index: g for g in gpus}
    for index, gpu in published.items():
        known = by_index.get(index)
        if known is None:
            by_index[index] = table.GpuUse(
                index, gpu.memory_mib // mib, held.get(index, 0), True, gpu.model, gpu.uuid
            )
        else:  # the extender's ledger knows it too (a node switched modes): both count
            by_index[index] = dataclasses.replace(known, used=known.used + held.get(index, 0))
    return [by_index[i] for i in sorted(by_index)], uses


_DRA_MODES = frozenset(m.value for m in modes.Mode if m.dra)


def any_dra(nodes: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a node is in a DRA mode: only then are our driver's objects worth reading."""
    return any(_mode(n)[0] in _DRA_MODES for n in nodes)


def _mode(node: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The node's mode for the MODE column, and the problem when its label is not a known mode."""
    try:
        return modes.node_mode((node.get("metadata") or {}).get("labels")).value, ()
    except modes.ModeError as err:
        return "invalid", (str(err),)


def _ready(node: Mapping[str, Any]) -> str:
    """The Node's Ready condition ("True", "False", "Unknown"), "" when it has none (a Node no kubelet
    posts for, as in the stand-in's tests: counted as ready)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return str(condition.get("status") or "")
    return ""


def _address(node: Mapping[str, Any]) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if isinstance(address, dict) and address.get("type") == "InternalIP":
            return str(address.get("address") or "")
    return ""


def _split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name
