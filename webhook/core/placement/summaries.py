"""Per known node, the few numbers filter judges every node by, refreshed on read for the nodes changed
since: filter sees thousands of nodes per call, and most change between two calls not at all.

`quick_ranks(need, policy)` keeps, for the pod sizes filter was asked about lately, each node's best-fit key
(`core.placement.ranking.quick_rank`, from each GPU's free memory and, for spread, its shares), so filter
finds the best node with one `min()` over the names it was sent instead of ranking each of them in Python
(docs/extender.md, "Speed"). Not thread-safe: the extender's cache calls it under its lock. It reads the
cache's own ledgers and known nodes (no callback into the cache), so filter's refresh stays in core.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Mapping

from webhook.core.placement import accounting, ranking, spreading
from webhook.core.placement.allocator import Policy

# Why filter and bind place nothing on a node the summaries do not hold (the cache does not know it).
UNKNOWN_NODE = "node is not known to the gpushare extender yet (its watch has not shown it)"

# Pod sizes (with a policy) whose keys are kept: each changed node costs one quick_rank per kept size, and
# a size asked after it fell out costs one quick_rank per node, once.
KEPT_SIZES = 16


class Summaries:
    """`ledgers`: each node's ledger; `known`: the nodes known now (a ledger of another node is dropped
    from the summaries). Both the cache's own, read as they change."""

    def __init__(self, ledgers: Mapping[str, accounting.Ledger], known: Container[str]) -> None:
        self._ledgers, self._known = ledgers, known
        self._largest: dict[str, int] = {}  # free memory of the largest healthy GPU (-1: none healthy)
        self._capacity: dict[str, int] = {}  # memory of the largest healthy GPU, used or not
        self._free_asc: dict[str, tuple[int, ...]] = {}  # free per healthy GPU, smallest first
        # (shares, free) per healthy GPU, in spread's order; made when a spread pod asks (`_loads_of`), so
        # a cluster of binpack pods never pays for them
        self._loads: dict[str, tuple[spreading.Load, ...]] = {}
        self._ranks: OrderedDict[tuple[int, Policy], dict[str, ranking.Rank]] = OrderedDict()
        self._dirty: set[str] = set()

    def ledger(self, name: str) -> accounting.Ledger | None:
        """The node's ledger; None when the node is not known (the watch does not show it now)."""
        return self._ledgers.get(name) if name in self._known else None

    def changed(self, name: str) -> None:
        """The node's ledger (or its being known) changed: refresh its numbers at the next read."""
        self._dirty.add(name)

    def _refresh(self) -> None:
        if not self._dirty:
            return
        for name in self._dirty:
            ledger = self.ledger(name)
            if ledger is None:
                self._largest.pop(name, None)
                self._capacity.pop(name, None)
                self._free_asc.pop(name, None)
                self._loads.pop(name, None)
                for ranks in self._ranks.values():
                    ranks.pop(name, None)
                continue
            free_asc = ledger.free_asc()
            self._largest[name] = free_asc[-1] if free_asc else -1
            self._capacity[name] = ledger.largest_memory()
            self._free_asc[name] = free_asc
            self._loads.pop(name, None)
            for (need, policy), ranks in self._ranks.items():
                loads = self._loads_of(name) if policy is Policy.SPREAD else None
                value = ranking.quick_rank(need, free_asc, policy, loads)
                if value is None:
                    ranks.pop(name, None)
                else:
                    ranks[name] = value
        self._dirty.clear()

    def largest_free(self) -> Mapping[str, int]:
        self._refresh()
        return self._largest

    def largest_gpu(self) -> Mapping[str, int]:
        self._refresh()
        return self._capacity

    def free_asc(self) -> Mapping[str, tuple[int, ...]]:
        self._refresh()
        return self._free_asc

    def loads(self) -> Mapping[str, tuple[spreading.Load, ...]]:
        self._refresh()
        for name in self._free_asc:
            self._loads_of(name)
        return self._loads

    def _loads_of(self, name: str) -> tuple[spreading.Load, ...]:
        """The node's loads, made now if its ledger changed since they were last made. A known node."""
        loads = self._loads.get(name)
        if loads is None:
            ledger = self.ledger(name)
            loads = self._loads[name] = () if ledger is None else spreading.loads(ledger.gpus())
        return loads

    def quick_ranks(self, need: int, policy: Policy) -> Mapping[str, ranking.Rank]:
        """Per known node where a pod of `need` goes whole on one GPU, its key under `policy`; the nodes
        it does not fit are absent."""
        self._refresh()
        slot = (need, policy)
        ranks = self._ranks.get(slot)
        if ranks is not None:
            self._ranks.move_to_end(slot)
            return ranks
        ranks = {}
        spread = policy is Policy.SPREAD
        for name, free_asc in self._free_asc.items():
            value = ranking.quick_rank(need, free_asc, policy, self._loads_of(name) if spread else None)
            if value is not None:
                ranks[name] = value
        self._ranks[slot] = ranks
        if len(self._ranks) > KEPT_SIZES:
            self._ranks.popitem(last=False)
        return ranks
