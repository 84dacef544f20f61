"""GPU usage of a node, per GPU and per container, against the shares placed: NVML's samples (memory
and utilisation per process) matched to pods through each process's cgroup (core/usage/cgroups.py) and to
shares through the pods' placements (core/usage/podshares.py).

A process in no pod (on the host), in a pod this node does not run, in a container its pod's status
does not list yet, or whose cgroup could not be read is counted per GPU under that reason, never
blamed on a pod. Pure: the shell samples NVML and reads /proc; this module only matches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from webhook.core.node import devices
from webhook.core.usage import cgroups
from webhook.core.usage.podshares import MIB, PodShares

# Why a process's memory is counted on no container (the `reason` label of the unattributed metric).
HOST = "host"  # its cgroup is in no pod: a host process or system service
OTHER_POD = "other_pod"  # a pod cgroup of no running pod of this node (static pod, just deleted)
UNKNOWN_CONTAINER = "unknown_container"  # its pod is known, its container not (yet) in the pod's status
UNREADABLE = "unreadable"  # the process ended, or its cgroup file could not be read
REASONS = (HOST, OTHER_POD, UNKNOWN_CONTAINER, UNREADABLE)


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One compute process on one GPU, as NVML reports it (PIDs of the host's PID namespace)."""

    pid: int
    memory_bytes: int | None  # None: the driver cannot say (reported as 0)
    utilization: float | None = None  # SM time ratio (0-1) since the last sample; None: not offered


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one instant; None where NVML failed or offers nothing."""

    index: int
    memory_used_bytes: int | None = None
    utilization: float | None = None  # the GPU's busy ratio (0-1)
    processes: tuple[ProcessSample, ...] = ()
    process_utilization: bool = False  # per-process utilisation is offered on this GPU


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    """What one container holds and uses of one GPU."""

    namespace: str
    pod: str
    container: str
    pod_uid: str
    gpu: int
    share_bytes: int
    used_bytes: int = 0
    utilization: float | None = None
    processes: int = 0
    over_share: bool = False  # above its share for longer than the grace period (core/usage/overshare.py)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.pod_uid, self.container, self.gpu)

    @property
    def above_share(self) -> bool:
        return self.used_bytes > self.share_bytes


@dataclass(frozen=True, slots=True)
class GpuUsage:
    index: int
    uuid: str
    total_bytes: int
    allocated_bytes: int  # the shares placed on it (what the extender's ledger counts)
    used_bytes: int | None  # the device's own figure; None when NVML could not say
    utilization: float | None
    healthy: bool = True
    unattributed: Mapping[str, int] = field(default_factory=dict)  # reason -> bytes of such processes
    model: str = ""


@dataclass(frozen=True, slots=True)
class NodeUsage:
    node: str
    sampled_at: float  # seconds since the epoch
    gpus: tuple[GpuUsage, ...] = ()
    containers: tuple[ContainerUsage, ...] = ()

    def over_share(self) -> tuple[ContainerUsage, ...]:
        return tuple(c for c in self.containers if c.over_share)


def attribute(
    *,
    node: str,
    sampled_at: float,
    gpus: Sequence[devices.Gpu],
    unhealthy: Iterable[int],
    samples: Sequence[GpuSample],
    origins: Mapping[int, cgroups.ContainerRef | None],
    pods: Iterable[PodShares],
) -> NodeUsage:
    """Match every sampled process to its container and every container to its share.

    `origins` maps a PID to its cgroup's pod and container (None: in no pod); a PID missing from it
    could not be read. Every container holding a share on a GPU is listed, used or not; a container
    using a GPU without a share is listed with a share of 0.
    """
    sick = frozenset(unhealthy)
    pod_list = list(pods)
    by_uid = {uid: pod for pod in pod_list for uid in pod.cgroup_uids}
    rows: dict[tuple[str, str, int], _Row] = {}
    for pod in pod_list:
        for (container, index), share in pod.shares.items():
            rows[(pod.uid, container, index)] = _Row(pod, container, index, share)
    sample_of = {s.index: s for s in samples}
    gpu_rows = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        sample = sample_of.get(gpu.index) or GpuSample(gpu.index)
        unattributed: dict[str, int] = {}
        for proc in sample.processes:
            memory = proc.memory_bytes or 0
            owner, reason = _owner(proc.pid, origins, by_uid)
            if owner is None:
                unattributed[reason] = unattributed.get(reason, 0) + memory
                continue
            pod, container = owner
            row = rows.setdefault((pod.uid, container, gpu.index), _Row(pod, container, gpu.index, 0))
            row.add(memory, proc.utilization)
        if sample.process_utilization:
            for row in rows.values():
                if row.gpu == gpu.index:
                    row.utilization_offered = True
        gpu_rows.append(
            GpuUsage(
                index=gpu.index,
                uuid=gpu.uuid,
                total_bytes=gpu.memory_mib * MIB,
                allocated_bytes=sum(p.held.get(gpu.index, 0) for p in pod_list),
                used_bytes=sample.memory_used_bytes,
                utilization=sample.utilization,
                healthy=gpu.index not in sick,
                unattributed=unattributed,
                model=gpu.model,
            )
        )
    containers = tuple(sorted((r.usage() for r in rows.values()), key=_order))
    return NodeUsage(node, sampled_at, tuple(gpu_rows), containers)


def _owner(
    pid: int, origins: Mapping[int, cgroups.ContainerRef | None], by_uid: Mapping[str, PodShares]
) -> tuple[tuple[PodShares, str] | None, str]:
    if pid not in origins:
        return None, UNREADABLE
    ref = origins[pid]
    if ref is None:
        return None, HOST
    pod = by_uid.get(ref.pod_uid.lower())
    if pod is None:
        return None, OTHER_POD
    container = pod.containers.get(ref.container_id) if ref.container_id else None
    if container is None:
        return None, UNKNOWN_CONTAINER
    return (pod, container), ""


class _Row:
    """A container's figures on one GPU while they are summed."""

    __slots__ = ("container", "gpu", "memory", "pod", "processes", "share", "util", "utilization_offered")

    def __init__(self, pod: PodShares, container: str, gpu: int, share: int) -> None:
        self.pod, self.container, self.gpu, self.share = pod, container, gpu, share
        self.memory = 0
        self.processes = 0
        self.util = 0.0
        self.utilization_offered = False

    def add(self, memory: int, utilization: float | None) -> None:
        self.memory += memory
        self.processes += 1
        self.util += utilization or 0.0

    def usage(self) -> ContainerUsage:
        return ContainerUsage(
            namespace=self.pod.namespace,
            pod=self.pod.name,
            container=self.container,
            pod_uid=self.pod.uid,
            gpu=self.gpu,
            share_bytes=self.share,
            used_bytes=self.memory,
            # Several processes' SM time adds up; the GPU's own time caps it.
            utilization=min(1.0, self.util) if self.utilization_offered else None,
            processes=self.processes,
        )


def _order(c: ContainerUsage) -> tuple[str, str, str, int]:
    return (c.namespace, c.pod, c.container, c.gpu)
