"""Filter and prioritize: the pod's demand (core.demand) against each node's ledger (core.allocator).

Read-only on the cache and never an API call, so both answer in microseconds per node; followers
answer them too. Filter takes the cache lock once for all nodes, so every node is judged on one state.
"""

from __future__ import annotations

from webhook.core import allocator, demand
from webhook.extender import wire
from webhook.extender.cache import Cache

UNKNOWN_NODE = "node is not known to the gpushare extender yet (its watch has not shown it)"


def filter_nodes(
    cache: Cache, args: wire.ExtenderArgs, default_policy: allocator.Policy
) -> wire.FilterResult:
    try:
        asked = demand.pod_demand(args.pod, cache.names)
    except demand.DemandError as err:
        return wire.filter_result(args, [], unresolvable=dict.fromkeys(args.node_names, str(err)))
    if not asked.asks():
        return wire.filter_result(args, list(args.node_names))
    policy = allocator.policy_of((args.pod.get("metadata") or {}).get("annotations"), default_policy)
    simple = asked.gpu_count == 1
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    # The common pod (one GPU, fits whole) is judged by the node's largest free GPU alone: with 5,000
    # nodes per call this loop is the whole cost of filter, so it avoids calls and attribute lookups.
    need = asked.effective
    whole_only = simple and sum(1 for u in asked.containers if u) <= 1
    ledger_of = cache.ledger
    with cache.locked():
        for name in args.node_names:
            ledger = ledger_of(name)
            if ledger is None:
                failed[name] = UNKNOWN_NODE
                continue
            free_desc = ledger.free_desc()
            if whole_only and free_desc:
                if free_desc[0] >= need:
                    passed.append(name)
                else:
                    failed[name] = allocator.too_small(free_desc[0], need, ledger.unit)
                continue
            quick = allocator.quick_fit(asked, free_desc)
            if quick:
                passed.append(name)
            elif quick is False and simple and free_desc:
                failed[name] = allocator.too_small(free_desc[0], asked.effective, ledger.unit)
            else:
                result = allocator.fit(asked, ledger.gpus(), policy, ledger.unit)
                if isinstance(result, allocator.Fit):
                    passed.append(name)
                elif not free_desc:
                    # No healthy GPU at all: preempting pods cannot help on this node.
                    unresolvable[name] = ledger.device_problem or result.reason
                else:
                    failed[name] = result.reason
    return wire.filter_result(args, passed, failed, unresolvable)


def prioritize(cache: Cache, args: wire.ExtenderArgs, default_policy: allocator.Policy) -> dict[str, int]:
    """0..10 per node; 0 for nodes where the pod does not fit or that the cache does not know."""
    try:
        asked = demand.pod_demand(args.pod, cache.names)
    except demand.DemandError:
        return dict.fromkeys(args.node_names, allocator.MIN_SCORE)
    policy = allocator.policy_of((args.pod.get("metadata") or {}).get("annotations"), default_policy)
    scores: dict[str, int] = {}
    with cache.locked():
        for name in args.node_names:
            ledger = cache.ledger(name)
            scores[name] = (
                allocator.MIN_SCORE if ledger is None else allocator.score(asked, ledger.gpus(), policy)
            )
    return scores
