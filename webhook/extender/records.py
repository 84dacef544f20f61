"""What the extender's cache keeps of a pod: its demand, its placement and its state, read once per event.

`record_of` reuses the previous record's demand for the same pod (UID) and gpu-count label: container
resources never change, and most events are status updates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.placement import accounting, podask
from webhook.core.placement import annotations as ann
from webhook.core.specs import podread
from webhook.core.specs.demand import NO_DEMAND, Demand
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources

UNASKED = "carries a gpushare placement but asks for no GPU memory and no whole GPU: not counted"


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What the cache keeps of a pod: enough to bind it and to count it, not the whole object."""

    key: str
    uid: str
    node: str
    demand: Demand | None
    demand_error: str = ""
    policy: str = ""
    share: accounting.PodShare | None = None
    problem: str = ""
    count_label: object = None  # the gpu-count label as last read: the only input of `demand` that may change
    ended: bool = False  # Succeeded/Failed: holds no memory any more
    deleting: bool = False  # has a deletionTimestamp: still holds its memory until the API removes it
    cards: Demand = NO_DEMAND  # whole cards (nvidia.com/gpu) it asks for
    created: str = ""  # metadata.creationTimestamp, RFC 3339 in UTC: orders pods of one name


def record_of(
    pod: Mapping[str, Any],
    names: resources.GpuResourceNames,
    previous: PodRecord | None = None,
    unit: str = "GiB",
) -> PodRecord | None:
    """The cache's record of a pod; None for pods that neither ask for GPU memory nor hold any.

    `previous` (the record of the same key) lends its demand when the pod is the same (UID) with the same
    gpu-count label: container resources of a pod never change, and most events are status updates."""
    meta = pod.get("metadata") or {}
    key = accounting.pod_key(pod)
    uid = str(meta.get("uid") or "")
    count_label = podask.count_label(meta, names)
    problem = ""
    try:
        share = accounting.share_of(pod)
    except ann.AnnotationError as err:
        share, problem = None, str(err)
    asked: Demand | None
    cards = NO_DEMAND
    if previous is not None and podask.lends(previous, uid, count_label):
        asked, demand_error, cards = previous.demand, previous.demand_error, previous.cards
    else:
        try:
            # One walk for both demands, as filter reads a pod (unit: for the messages)
            (asked, cards), demand_error = podread.of_pod(pod, names, unit).demands(), ""
        except Finding as err:
            asked, demand_error = None, str(err)
    asks = (asked is not None and asked.asks()) or cards.asks()
    if share is not None and not asks and not demand_error:
        # Anyone may write these annotations on a pod they create: memory is counted only for a pod that
        # asks for it (and whose asking the quota and the webhook see), or a tenant could fill any GPU.
        share, problem = None, UNASKED
    if share is None and not problem and not demand_error and not asks:
        return None
    return PodRecord(
        key=key,
        uid=uid,
        node=accounting.node_name_of(pod),
        demand=asked,
        demand_error=demand_error,
        policy=str((meta.get("annotations") or {}).get(resources.PLACEMENT_POLICY_ANNOTATION, "")),
        share=share,
        problem=problem,
        count_label=count_label,
        ended=not accounting.holds_memory(pod),
        deleting=accounting.being_deleted(pod),
        cards=cards,
        created=str(meta.get("creationTimestamp") or ""),
    )
