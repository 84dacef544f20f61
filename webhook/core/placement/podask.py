"""What one pod asks of the extender's filter and prioritize, read once per call into one value: its key and
UID, its GPU-memory and whole-card demand (from one walk of its containers), and the placement policy its
annotation names. Every node is then judged from that value (core.placement.filtering): nothing re-reads
the pod per node, nor reaches back into the extender for it.

The watch's record of the same pod (same UID and gpu-count label) lends its demand, as the extender's
records reuse it: container resources never change, so the body is not walked again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from webhook.core.placement import accounting, allocator
from webhook.core.placement.allocator import Policy
from webhook.core.specs import podread
from webhook.core.specs.demand import Demand
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources


class Remembered(Protocol):
    """What a record of a pod keeps of its demand (the extender's records.PodRecord is one)."""

    @property
    def uid(self) -> str: ...
    @property
    def count_label(self) -> object: ...
    @property
    def demand(self) -> Demand | None: ...
    @property
    def demand_error(self) -> str: ...
    @property
    def cards(self) -> Demand: ...


@dataclass(frozen=True, slots=True)
class PodAsk:
    key: str
    uid: str
    memory: Demand
    cards: Demand
    policy: Policy | None  # the pod's placement-policy annotation; None: the node's label or the default
    need: int  # memory.effective, computed once: filter compares it with every node
    asks_cards: bool
    # One GPU, at most one gpu-mem container: judged by each node's largest free GPU alone.
    whole_only: bool


def count_label(meta: Any, names: resources.GpuResourceNames) -> object:
    """The gpu-count label as written: the only input of a pod's demand that may change."""
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels.get(names.count) if isinstance(labels, Mapping) else labels


def lends(record: Remembered, uid: str, label: object) -> bool:
    """Whether `record`'s demand is the demand of the pod with this UID and gpu-count label."""
    return bool(uid) and record.uid == uid and record.count_label == label


def remembered_or_read(
    pod: Mapping[str, Any], record: Remembered | None, names: resources.GpuResourceNames, unit: str
) -> tuple[Demand, Demand]:
    """`record`'s demands when it is of the same pod (UID) with the same gpu-count label; else read anew.
    The first Finding when they cannot be read."""
    meta = pod.get("metadata")
    uid = str(meta.get("uid") or "") if isinstance(meta, Mapping) else ""
    if record is not None and lends(record, uid, count_label(meta, names)):
        if record.demand is None:
            raise Finding.of_text(record.demand_error)
        return record.demand, record.cards
    return podread.of_pod(pod, names, unit).demands()


def read(
    pod: Mapping[str, Any],
    known: Mapping[str, Remembered],
    names: resources.GpuResourceNames,
    unit: str,
) -> PodAsk:
    """The pod's ask; `known`: the watch's records by pod key. the first Finding when its demand is unreadable
    (`unit` names the unit the nodes are counted in, in the message)."""
    meta = pod.get("metadata")
    key = accounting.pod_key(pod) if isinstance(meta, Mapping) else ""
    record = known.get(key) if key else None
    memory, cards = remembered_or_read(pod, record, names, unit)
    meta = meta or {}  # a Mapping now: an unreadable one raised above
    notes = meta.get("annotations")
    need = memory.effective
    return PodAsk(
        key=key or accounting.pod_key(pod),
        uid=str(meta.get("uid") or ""),
        memory=memory,
        cards=cards,
        policy=allocator.pod_policy(notes if isinstance(notes, Mapping) else None),
        need=need,
        asks_cards=cards.effective > 0,
        whole_only=memory.gpu_count == 1 and sum(1 for u in memory.containers if u) <= 1,
    )
