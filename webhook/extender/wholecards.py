"""Filter for pods asking whole cards (`nvidia.com/gpu`): on nodes whose mode shares GPUs (our device
plugin serves the cards there) the pod needs that many healthy GPUs holding nothing; on `default` and
`topology` nodes NVIDIA's plugin serves the cards and kube-scheduler's own resource fit has counted
them, so those nodes pass untouched.
"""

from __future__ import annotations

from webhook.core import modes, wholecards
from webhook.core.allocator import NoFit
from webhook.extender import wire
from webhook.extender.cache import Cache

UNKNOWN_NODE = "node is not known to the gpushare extender yet (its watch has not shown it)"


def ours(cache: Cache, node: str) -> modes.Mode | str | None:
    """The node's mode when our plugin serves its whole cards (a shared mode); None when NVIDIA's
    does; a string when the node is unknown or its mode label unreadable (then nothing serves cards)."""
    mode = cache.mode(node)
    if mode is None:
        return UNKNOWN_NODE
    if isinstance(mode, modes.Mode):  # first: a Mode is a str too
        return mode if mode.shares else None
    return mode


def filter_nodes(cache: Cache, args: wire.ExtenderArgs, cards: wholecards.CardDemand) -> wire.FilterResult:
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    with cache.locked():
        for name in args.node_names:
            mode = ours(cache, name)
            if mode is None:
                passed.append(name)
                continue
            if not isinstance(mode, modes.Mode):
                (failed if mode == UNKNOWN_NODE else unresolvable)[name] = mode
                continue
            ledger = cache.ledger(name)
            gpus = ledger.gpus() if ledger is not None else ()
            result = wholecards.fit(cards, gpus)
            if not isinstance(result, NoFit):
                passed.append(name)
            elif wholecards.unresolvable(gpus, cards):
                unresolvable[name] = result.reason
            else:
                failed[name] = result.reason
    return wire.filter_result(args, passed, failed, unresolvable)
