"""What each container of a pod on the node may use of each GPU (its share, in bytes), and the IDs its
containers run under: the owner side of GPU usage (core/usage/usage.py matches processes to it).

The share is the container's placement, as Allocate answers it (core/node/podviews: the
`ALIYUN_COM_GPU_MEM_CONTAINER` it was told); a whole card's share is the whole GPU. What the pod holds
per GPU is what the extender's ledger counts (core/accounting.share_of). Pure: reads pod dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.node import podviews
from webhook.core.placement import accounting
from webhook.core.placement import annotations as ann
from webhook.core.usage import cgroups
from webhook.core.wire import resources

MIB = 1 << 20
# Static pods: the kubelet names the cgroup after this UID (the config hash); the API's mirror pod has
# another metadata.uid and carries the hash here.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_STATUS_KEYS = ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")


@dataclass(frozen=True, slots=True)
class PodShares:
    """One pod of the node: who it is, its containers by runtime ID, and the shares it holds."""

    uid: str
    namespace: str
    name: str
    cgroup_uids: frozenset[str]  # the UIDs its cgroups may carry: metadata.uid, a static pod's hash
    containers: Mapping[str, str] = field(default_factory=dict)  # runtime container ID -> name
    shares: Mapping[tuple[str, int], int] = field(default_factory=dict)  # (container, GPU) -> bytes
    held: Mapping[int, int] = field(default_factory=dict)  # GPU index -> bytes the pod holds (ledger)


def pod_shares(
    pod: Mapping[str, Any],
    unit_bytes: int,
    gpu_bytes: Mapping[int, int],
    names: resources.GpuResourceNames | None = None,
) -> PodShares | None:
    """Read a pod dict; None once it ended (Succeeded, Failed): its series go with it.

    `unit_bytes` is one unit of aliyun.com/gpu-mem in bytes; `gpu_bytes` each GPU's memory, a whole
    card's share. A pod asking nothing still gets an entry: a process of it on a GPU has a share of 0.
    """
    if not accounting.holds_memory(pod):
        return None
    names = names or resources.GpuResourceNames()
    meta = pod.get("metadata") or {}
    uid = str(meta.get("uid") or "")
    notes = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    cgroup_uids = {uid.lower()} if uid else set()
    mirror = notes.get(MIRROR_ANNOTATION) if notes else None
    if isinstance(mirror, str) and mirror:
        cgroup_uids.add(mirror.lower())
    shares: dict[tuple[str, int], int] = {}
    view = podviews.pod_view(pod, 0, names)
    for slot in view.slots if view is not None else ():
        for gpu, units in slot.gpus.items():
            key = (slot.container, gpu)
            shares[key] = shares.get(key, 0) + units * unit_bytes
    cards = podviews.card_view(pod, 0, names)
    for slot in cards.slots if cards is not None else ():
        for gpu, units in slot.gpus.items():
            key = (slot.container, gpu)
            shares[key] = shares.get(key, 0) + gpu_bytes.get(gpu, units * unit_bytes)
    return PodShares(
        uid=uid,
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        cgroup_uids=frozenset(cgroup_uids),
        containers=_container_ids(pod.get("status")),
        shares=shares,
        held=_held(pod, unit_bytes),
    )


def _container_ids(status: object) -> dict[str, str]:
    ids: dict[str, str] = {}
    if not isinstance(status, Mapping):
        return ids
    for key in _STATUS_KEYS:
        entries = status.get(key)
        for entry in entries if isinstance(entries, list) else ():
            if not isinstance(entry, Mapping):
                continue
            raw, name = entry.get("containerID"), entry.get("name")
            if isinstance(raw, str) and raw and isinstance(name, str):
                ids[cgroups.runtime_container_id(raw)] = name
    return ids


def _held(pod: Mapping[str, Any], unit_bytes: int) -> dict[int, int]:
    try:
        share = accounting.share_of(pod)
    except ann.AnnotationError:
        return {}  # the ledger skips it too; Allocate refused it
    if share is None:
        return {}
    return {gpu: units * unit_bytes for gpu, units in share.allocation.per_gpu().items()}
