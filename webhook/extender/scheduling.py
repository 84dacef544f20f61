"""Filter and prioritize: the pod's demand (core.demand) against each node's ledger (core.allocator),
the nodes it fits compared by core.ranking.

Read-only on the cache and never an API call, so both answer in microseconds per node; followers
answer them too. Filter takes the cache lock once for all nodes, so every node is judged on one state.
With `best_fit` filter keeps only the nodes where the pod fits its GPU(s) best (per policy): the GPU-level
choice then survives kube-scheduler's own scoring, which knows nothing of GPUs (docs/extender.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core.placement import accounting, allocator, demand, modes, ranking, wholecards
from webhook.extender import records, wire
from webhook.extender import wholecards as whole
from webhook.extender.cache import NOT_SYNCED, Cache

UNKNOWN_NODE = "node is not known to the gpushare extender yet (its watch has not shown it)"
PASS, FAIL, UNRESOLVABLE = "pass", "fail", "unresolvable"


def filter_nodes(
    cache: Cache, args: wire.ExtenderArgs, default_policy: allocator.Policy, best_fit: bool = True
) -> wire.FilterResult:
    if not cache.synced():
        # Every node would look emptier than it is (its running pods uncounted), or unknown: filter would
        # pass nodes that bind then refuses, or fail them all, a fit error on which kube-scheduler may
        # preempt pods. An Error is neither: kube-scheduler retries the pod after its backoff.
        return wire.filter_error(NOT_SYNCED)
    # Whatever this pod asks: a stale nomination or assumption would otherwise hold its memory against
    # it, and against every pod after it, until some other filter nominates or some bind arrives.
    cache.expire_assumptions(time.monotonic_ns())
    try:
        asked, cards = _demands(cache, args.pod)
    except demand.DemandError as err:
        return wire.filter_result(args, [], unresolvable=dict.fromkeys(args.node_names, str(err)))
    if cards.asks():
        return whole.filter_nodes(cache, args, cards)
    if not asked.asks():
        return wire.filter_result(args, list(args.node_names))
    notes = _annotations(args.pod)
    passed: list[str] = []
    ranked: dict[str, tuple[allocator.Policy, ranking.Rank]] = {}
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    need = asked.effective
    # The common pod (one GPU, at most one gpu-mem container) is judged by each node's largest free GPU,
    # kept per node by the cache: with 5,000 nodes per call this loop is the whole cost of filter.
    whole_only = asked.gpu_count == 1 and sum(1 for u in asked.containers if u) <= 1
    key = accounting.pod_key(args.pod)
    with cache.locked():
        cache.drop_nomination(key)  # asked again: its earlier nomination is not where it is
        # Nodes whose mode (ack.node.gpu.schedule) takes no shares: preemption cannot help there.
        blocked = cache.unshared()
        names: Sequence[str] = args.node_names
        if blocked:
            names = [name for name in args.node_names if name not in blocked]
            unresolvable = {name: blocked[name] for name in args.node_names if name in blocked}
        largest = cache.largest_free()
        policy = _one_policy(cache, notes, default_policy) if whole_only and best_fit else None
        if policy is not None:
            # Every node ranks by the same policy: the keys kept per pod size, the best in one min().
            ranks = cache.quick_ranks(need, policy)
            passed = ranking.best_ranked(names, ranks)
            rest = [name for name in names if name not in ranks]
        elif whole_only:
            get = largest.get
            passed = [name for name in names if get(name, -1) >= need]
            if best_fit and len(passed) > 1:
                passed = _best_quick(cache, passed, need, notes, default_policy)
            rest = [name for name in names if get(name, -1) < need]
        else:
            rest = list(names)
        messages: dict[int, str] = {}  # one string per distinct largest-free value, not one per node
        never: dict[int, str] = {}  # and per distinct largest GPU, for the nodes no GPU of fits
        capacity = cache.largest_gpu()
        for name in rest:
            top = largest.get(name)
            if top is None:
                failed[name] = UNKNOWN_NODE
            elif whole_only and top >= 0:
                size = capacity.get(name, top)
                if size < need:  # no GPU of the node is that large: preempting cannot help
                    message = never.get(size)
                    if message is None:
                        message = never[size] = allocator.EMPTIED + allocator.too_small(
                            size, need, cache.unit
                        )
                    unresolvable[name] = message
                    continue
                message = messages.get(top)
                if message is None:
                    message = messages[top] = allocator.too_small(top, need, cache.unit)
                failed[name] = message
            else:
                # The order prioritize and bind use (pod annotation, node label, --policy): the greedy
                # split of containers over GPUs depends on it.
                policy = modes.placement_policy(notes, cache.placement(name), default_policy)
                if best_fit:
                    ledger = cache.ledger(name)
                    value = None if ledger is None else ranking.rank(asked, ledger.gpus(), policy)
                    if value is not None:
                        passed.append(name)
                        ranked[name] = (policy, value)
                        continue
                verdict, reason = _judge(cache, name, asked, policy)
                if verdict is PASS:
                    passed.append(name)
                else:
                    (failed if verdict is FAIL else unresolvable)[name] = reason
        if ranked:  # with best_fit every node that passed this loop is ranked
            passed = ranking.best(ranked)
        if best_fit:
            _nominate(
                cache,
                pod=args.pod,
                key=key,
                passed=passed,
                asked=asked,
                notes=notes,
                default_policy=default_policy,
            )
    return wire.filter_result(args, passed, failed, unresolvable)


def _demands(cache: Cache, pod: Mapping[str, Any]) -> tuple[demand.GpuMemoryDemand, wholecards.CardDemand]:
    """The pod's demand, from the watch's record of it when it is the same pod (records.demands), in
    the cache's unit, so "write 3; the unit is GiB" names the unit the nodes are counted in."""
    meta = pod.get("metadata")
    record = cache.pod(accounting.pod_key(pod)) if isinstance(meta, Mapping) else None
    return records.demands(pod, record, cache.names, cache.unit)


def _nominate(
    cache: Cache,
    *,
    pod: Mapping[str, Any],
    key: str,
    passed: Sequence[str],
    asked: demand.GpuMemoryDemand,
    notes: Mapping[str, Any] | None,
    default_policy: allocator.Policy,
) -> None:
    """When best fit left one node, kube-scheduler will bind the pod there: count it now (Cache.nominate),
    where bind would place it, so the next pod's filter does not race its bind. Hold `cache.locked()`."""
    if len(passed) != 1:
        return
    ledger = cache.ledger(passed[0])
    if ledger is None:
        return
    policy = modes.placement_policy(notes, cache.placement(passed[0]), default_policy)
    placed = allocator.fit(asked, ledger.gpus(), policy, ledger.unit)
    if isinstance(placed, allocator.Fit):
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        cache.nominate(key, uid, passed[0], placed.allocation, time.monotonic_ns())


def _one_policy(
    cache: Cache, notes: Mapping[str, Any] | None, default_policy: allocator.Policy
) -> allocator.Policy | None:
    """The policy every node ranks this pod by, or None when nodes' labels differ (then per node). Hold
    `cache.locked()`."""
    fixed = allocator.pod_policy(notes)
    if fixed is not None:
        return fixed
    return None if cache.placements() else default_policy


def _best_quick(
    cache: Cache,
    names: Sequence[str],
    need: int,
    notes: Mapping[str, Any] | None,
    default_policy: allocator.Policy,
) -> list[str]:
    """The best of `names` for a pod that goes whole on one GPU: keys from each node's free memory per
    GPU, without building a placement. Hold `cache.locked()`. The pod's policy annotation wins over every
    node's label (modes.chosen_policy), so with one the nodes' labels are not looked at."""
    fixed = allocator.pod_policy(notes)
    policies: Mapping[str, allocator.Policy] = {} if fixed else cache.placements()
    default = modes.chosen_policy(fixed, None, default_policy)
    return ranking.best_quick(need, names, cache.free_asc(), policies, default, loads=cache.loads())


def _judge(
    cache: Cache, name: str, asked: demand.GpuMemoryDemand, policy: allocator.Policy
) -> tuple[str, str]:
    """One node the quick test could not settle (multi-container or multi-GPU pods, no healthy GPU):
    (PASS, ""), (FAIL, why) or (UNRESOLVABLE, why)."""
    ledger = cache.ledger(name)
    if ledger is None:
        return FAIL, UNKNOWN_NODE
    free_desc = ledger.free_desc()
    quick = allocator.quick_fit(asked, free_desc)
    if quick:
        return PASS, ""
    result = allocator.fit(asked, ledger.gpus(), policy, ledger.unit)
    if isinstance(result, allocator.Fit):
        return PASS, ""
    if not free_desc:
        # No healthy GPU at all: preempting pods cannot help on this node.
        return UNRESOLVABLE, ledger.device_problem or result.reason
    # kube-scheduler may preempt lower-priority pods on a node filter failed: say when that cannot help.
    never = allocator.never_fits(asked, ledger.gpus(), policy, ledger.unit)
    return (FAIL, result.reason) if never is None else (UNRESOLVABLE, never)


def prioritize(cache: Cache, args: wire.ExtenderArgs, default_policy: allocator.Policy) -> dict[str, int]:
    """0..10 per node from the GPU-level fit (core.ranking.scores: the best node of each policy 10);
    0 for nodes where the pod does not fit or that the cache does not know."""
    try:
        asked, cards = _demands(cache, args.pod)
    except demand.DemandError:
        return dict.fromkeys(args.node_names, allocator.MIN_SCORE)
    if cards.asks():
        # Every empty GPU is alike to a whole card: the extender has no preference among the nodes
        # that passed, and leaves the ranking to kube-scheduler's own scores.
        return dict.fromkeys(args.node_names, allocator.MIN_SCORE)
    notes = _annotations(args.pod)
    ranked: dict[str, tuple[allocator.Policy, ranking.Rank]] = {}
    with cache.locked():
        for name in args.node_names:
            ledger = cache.ledger(name)
            # The pod's annotation, else the node's ack.node.gpu.placement label, else --policy.
            policy = modes.placement_policy(notes, cache.placement(name), default_policy)
            value = None if ledger is None else ranking.rank(asked, ledger.gpus(), policy)
            if value is not None:
                ranked[name] = (policy, value)
    scores = ranking.scores(ranked)
    return {name: scores.get(name, allocator.MIN_SCORE) for name in args.node_names}


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's annotations, or None when absent or not an object (then the default policy applies)."""
    metadata = pod.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else None
