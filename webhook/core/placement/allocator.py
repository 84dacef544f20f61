"""Choose the GPU(s) of one node for a pod's GPU-memory demand: fit, best-fit choice, and node scores.

Placement rules (gpu_count = 1): the whole pod goes on one GPU when one has room (as the original protocol,
one ALIYUN_COM_GPU_MEM_IDX); failing that, a pod of several gpu-mem containers may put each container on its
own GPU (best fit, largest container first). With the label `aliyun.com/gpu-count: M` the pod's total is split
evenly over M distinct GPUs, containers filled into them in index order. Unhealthy GPUs never take memory.
`binpack` picks the GPU with the least free memory that still fits, lowest index on ties; `spread` the one
holding the fewest shares (pods), then the most free memory, then the lowest index (core.placement.spreading),
for each container of a split pod and each GPU of a multi-GPU pod.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from webhook.core.placement import spreading
from webhook.core.placement.accounting import Gpu
from webhook.core.placement.annotations import Allocation
from webhook.core.specs import gpumem
from webhook.core.specs.demand import Demand
from webhook.core.wire import resources

MIN_SCORE = 0
MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority


class Policy(enum.StrEnum):
    BINPACK = "binpack"
    SPREAD = "spread"


_POLICIES = {policy.value: policy for policy in Policy}


def policy_of(pod_annotations: Mapping[str, str] | None, default: Policy = Policy.BINPACK) -> Policy:
    """The pod's placement policy from its annotation; the default when absent or unknown."""
    return pod_policy(pod_annotations) or default


def pod_policy(pod_annotations: Mapping[str, str] | None) -> Policy | None:
    """The policy the pod's annotation names; None when absent or unknown."""
    raw = (pod_annotations or {}).get(resources.PLACEMENT_POLICY_ANNOTATION)
    if not raw:
        return None
    return _POLICIES.get(str(raw).strip().lower())  # not Policy(...): filter reads it for every pod


@dataclass(frozen=True, slots=True)
class Fit:
    allocation: Allocation
    device_memory: int  # memory of the lowest-index chosen GPU: ALIYUN_COM_GPU_MEM_DEV


@dataclass(frozen=True, slots=True)
class NoFit:
    reason: str


def _pick(free: Mapping[int, int], need: int, policy: Policy, held: Mapping[int, int]) -> int | None:
    """`held`: the shares on each GPU (read by spread only)."""
    fitting = [(units, index) for index, units in free.items() if units >= need]
    if not fitting:
        return None
    if policy is Policy.SPREAD:
        return min(fitting, key=lambda f: spreading.order(held[f[1]], f[0], f[1]))[1]
    return min(fitting)[1]


def fit(
    demand: Demand, gpus: Sequence[Gpu], policy: Policy = Policy.BINPACK, unit: str = "GiB"
) -> Fit | NoFit:
    """Where the pod goes on this node, or why it cannot go there."""
    if not demand.asks():
        return Fit(Allocation({}), 0)
    healthy = [g for g in gpus if g.healthy]
    if not gpus:
        return NoFit("node has no GPUs for shared GPU memory")
    if not healthy:
        return NoFit(f"all {len(gpus)} GPUs of the node are unhealthy")
    free = {g.index: g.free for g in healthy}
    memory = {g.index: g.memory for g in gpus}
    # Other pods' shares per GPU: a split pod's own containers do not count against each other.
    held = {g.index: g.shares for g in healthy} if policy is Policy.SPREAD else {}
    largest = max(free.values())
    if demand.gpu_count > 1:
        return _fit_split(
            demand, free=free, held=held, memory=memory, policy=policy, unit=unit, largest=largest
        )
    wanted = [(i, u) for i, u in enumerate(demand.containers) if u > 0]
    whole = _pick(free, demand.effective, policy, held)
    if whole is not None:
        return Fit(Allocation({i: {whole: u} for i, u in wanted}), memory[whole])
    # Containers on separate GPUs; init containers would have no GPU of their own, so only without them.
    if len(wanted) > 1 and not any(demand.init_containers):
        left = dict(free)
        placed: dict[int, dict[int, int]] = {}
        for i, u in sorted(wanted, key=lambda w: (-w[1], w[0])):
            gpu = _pick(left, u, policy, held)
            if gpu is None:
                break
            left[gpu] -= u
            placed[i] = {gpu: u}
        else:
            first = min(g for gpus_ in placed.values() for g in gpus_)
            return Fit(Allocation(dict(sorted(placed.items()))), memory[first])
        parts = ", ".join(str(u) for _, u in wanted)
        return NoFit(
            f"{too_small(largest, demand.effective, unit)} on one GPU "
            f"or its containers ({parts}) on separate GPUs"
        )
    return NoFit(too_small(largest, demand.effective, unit))


def again(allocation: Allocation, gpus: Sequence[Gpu]) -> Fit | None:
    """`allocation` once more (the GPUs filter chose for the pod, in kube-scheduler's order) when every
    one of its GPUs is healthy and still has the room; None when not (then fit anew). A bind that fit
    anew would see the nominations of pods filtered after it, and could take a GPU one of them was
    counted on, where online best fit in kube-scheduler's order would not."""
    by_index = {g.index: g for g in gpus}
    per_gpu = allocation.per_gpu()
    if not per_gpu:
        return None
    for index, units in per_gpu.items():
        gpu = by_index.get(index)
        if gpu is None or gpu.free < units:
            return None
    return Fit(allocation, by_index[min(per_gpu)].memory)


# Filter's prefix for a pod that does not fit a node even emptied of pods: preempting cannot help there.
EMPTIED = "even with no other pod on it: "


def never_fits(demand: Demand, gpus: Sequence[Gpu], policy: Policy, unit: str) -> str | None:
    """Why the pod cannot go on this node even with no other pod on it, or None when it could."""
    result = fit(demand, [replace(g, used=0) for g in gpus], policy, unit)
    return None if isinstance(result, Fit) else EMPTIED + result.reason


def too_small(largest: int, need: int, unit: str) -> str:
    return f"largest free GPU has {largest} {gpumem.unit_plural(unit)}, pod needs {need}"


def _fit_split(
    demand: Demand,
    *,
    free: Mapping[int, int],
    held: Mapping[int, int],
    memory: Mapping[int, int],
    policy: Policy,
    unit: str,
    largest: int,
) -> Fit | NoFit:
    count, per = demand.gpu_count, demand.per_gpu
    if len(free) < count:
        return NoFit(f"pod asks for {count} GPUs, node has {len(free)} healthy")
    fitting = [(units, index) for index, units in free.items() if units >= per]
    if len(fitting) < count:
        return NoFit(
            f"pod needs {per} {gpumem.unit_plural(unit)} on each of {count} GPUs, {len(fitting)} have that "
            f"much free (largest free GPU has {largest} {gpumem.unit_plural(unit)})"
        )
    if policy is Policy.SPREAD:  # the `count` GPUs with the fewest shares: the least most and least sum
        order = sorted(fitting, key=lambda f: spreading.order(held[f[1]], f[0], f[1]))
    else:
        order = sorted(fitting)
    chosen = sorted(index for _, index in order[:count])
    # Pour containers into the chosen GPUs in order, `per` units per GPU; a container may span GPUs.
    room = {g: per for g in chosen}
    containers: dict[int, dict[int, int]] = {}
    slot = 0
    for i, units in enumerate(demand.containers):
        left = units
        while left > 0:
            gpu = chosen[slot]
            take = min(left, room[gpu])
            containers.setdefault(i, {})[gpu] = take
            room[gpu] -= take
            left -= take
            if room[gpu] == 0:
                slot += 1
    return Fit(Allocation(containers), memory[chosen[0]])


def quick_fit(demand: Demand, free_desc: Sequence[int]) -> bool | None:
    """A cheap answer from the node's free memory per healthy GPU, largest first, for filter at scale.

    True: it surely fits; False: it surely does not; None: ask `fit`.
    """
    if not demand.asks():
        return True
    if not free_desc:
        return False
    if demand.gpu_count > 1:
        return (
            None
            if len(free_desc) >= demand.gpu_count and free_desc[demand.gpu_count - 1] >= demand.per_gpu
            else False
        )
    if free_desc[0] >= demand.effective:
        return True
    return None if sum(1 for u in demand.containers if u) > 1 else False
