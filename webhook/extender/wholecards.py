"""Filter for pods asking whole cards (`nvidia.com/gpu`): on nodes whose mode shares GPUs (our device
plugin serves the cards there) the pod needs that many healthy GPUs holding nothing; on `default` and
`topology` nodes NVIDIA's plugin serves the cards and kube-scheduler's own resource fit has counted
them, so those nodes pass untouched, unless gpu-mem shares placed while the node shared GPUs still run
there: NVIDIA's plugin, which knows nothing of them, could hand out their GPU whole.
"""

from __future__ import annotations

from webhook.core.placement import filtering, modes, wholecards
from webhook.core.placement.allocator import NoFit
from webhook.core.specs.demand import Demand
from webhook.extender import wire
from webhook.extender.cache import Cache

UNKNOWN_NODE = filtering.UNKNOWN_NODE
SHARES_LEFT = (
    "gpu-mem shares placed while the node shared GPUs still run on it, and NVIDIA's plugin, which serves "
    "whole GPUs here, could hand out their GPU: whole GPUs wait until they end"
)


def ours(cache: Cache, node: str) -> modes.Mode | str | None:
    """The node's mode when our plugin serves its whole cards (a shared mode); None when NVIDIA's
    does; a string when the node is unknown or its mode label unreadable (then nothing serves cards)."""
    mode = cache.mode(node)
    if mode is None:
        return UNKNOWN_NODE
    if isinstance(mode, modes.Mode):  # first: a Mode is a str too
        return mode if mode.shares else None
    return mode


def refusal(cache: Cache, node: str, mode: modes.Mode | str | None) -> str | None:
    """Why no whole card may go to `node` now (`mode`: `ours`), bind as filter; None when one may.
    Hold `locked()`."""
    if mode is None:  # NVIDIA's plugin chooses the GPU: none may hold a share of ours
        ledger = cache.ledger(node)
        return SHARES_LEFT if ledger is not None and any(g.used for g in ledger.gpus()) else None
    return cache.unshared().get(node)  # ours: not while NVIDIA's plugin's own card pods still run


def filter_nodes(cache: Cache, args: wire.ExtenderArgs, cards: Demand) -> wire.FilterResult:
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    with cache.locked():
        for name in args.node_names:
            mode = ours(cache, name)
            if mode is not None and not isinstance(mode, modes.Mode):
                (failed if mode == UNKNOWN_NODE else unresolvable)[name] = mode
                continue
            refused = refusal(cache, name, mode)
            if refused is not None:
                failed[name] = refused  # until those pods end
                continue
            if mode is None:
                passed.append(name)
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
