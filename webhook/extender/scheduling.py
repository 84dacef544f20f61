"""Filter and prioritize: the pod's ask read once (core.placement.podask), then every node judged and ranked
from it in core, whatever the pod asks (core.placement.filtering: core.placement.allocator fits shares,
core.placement.wholecards whole cards, core.placement.ranking compares): one call, no branch here.

Read-only on the cache but for filter's nomination, and never an API call, so both answer in microseconds
per node; followers answer them too. Filter takes the cache lock once for all nodes, so every node is
judged on one state. With `best_fit` filter keeps only the nodes where the pod fits its GPU(s) best (per
policy): the GPU-level choice then survives kube-scheduler's own scoring, which knows nothing of GPUs
(docs/extender.md). The shell only reads the cache's state and writes the nomination: core never calls
back into it.
"""

from __future__ import annotations

import time

from webhook.core.placement import allocator, filtering, podask, summaries
from webhook.core.specs.finding import Finding
from webhook.extender import wire
from webhook.extender.cache import NOT_SYNCED, Cache

UNKNOWN_NODE = summaries.UNKNOWN_NODE


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
        # From the watch's record when it is the same pod, in the cache's unit, so "write 3; the unit is
        # GiB" names the unit the nodes are counted in.
        ask = podask.read(args.pod, cache.state.pods, cache.names, cache.unit)
    except Finding as err:
        return wire.filter_result(args, [], unresolvable=dict.fromkeys(args.node_names, str(err)))
    with cache.locked():
        # Asked again: its earlier nomination is not where it is (pods of cards or of nothing get none).
        cache.drop_nomination(ask.key)
        choice = filtering.choose(ask, cache.state, args.node_names, default_policy, best_fit)
        if choice.nominee is not None:
            # Best fit left one node: kube-scheduler will bind the pod there. Counted now (Cache.nominate),
            # where bind would place it, so the next pod's filter does not race its bind.
            node, allocation = choice.nominee
            cache.nominate(ask.key, ask.uid, node, allocation, time.monotonic_ns())
    return wire.filter_result(args, choice.passed, choice.failed, choice.unresolvable)


def prioritize(cache: Cache, args: wire.ExtenderArgs, default_policy: allocator.Policy) -> dict[str, int]:
    """0..10 per node from the GPU-level fit (core.placement.filtering.scores, filter's keys); 0 for
    nodes where the pod does not fit or that the cache does not know."""
    try:
        ask = podask.read(args.pod, cache.state.pods, cache.names, cache.unit)
    except Finding:
        return dict.fromkeys(args.node_names, allocator.MIN_SCORE)
    with cache.locked():
        return filtering.scores(ask, cache.state, args.node_names, default_policy)
