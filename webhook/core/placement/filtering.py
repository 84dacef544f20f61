"""Filter and prioritize, from the pod's ask (core.placement.podask, read once per call) and the extender
cache's node state: which nodes it fits, the best of them per policy (core.placement.ranking), where best
fit nominates it, and prioritize's scores by the same keys, so filter, prioritize and bind agree.

`choose` takes one step per kind of pod, so the extender calls it once whatever the pod asks: whole cards
by core.placement.wholecards' rules, a pod asking nothing of ours passes every node, and a gpu-mem pod is
kept off the nodes whose mode takes no shares, then fitted.

The extender hands in its own dicts (`NodeState`, under its lock) and gets plain values back: nothing here
calls into the extender, and no node re-reads the pod. With thousands of nodes per call the common pod (one
GPU, at most one gpu-mem container) is judged from the summaries' per-node numbers, not node by node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from webhook.core.placement import accounting, allocator, modes, ranking, wholecards
from webhook.core.placement.allocator import Policy
from webhook.core.placement.annotations import Allocation
from webhook.core.placement.podask import PodAsk, Remembered
from webhook.core.placement.summaries import UNKNOWN_NODE, Summaries
from webhook.core.specs.demand import Demand

PASS, FAIL, UNRESOLVABLE = "pass", "fail", "unresolvable"


@dataclass(frozen=True, slots=True)
class NodeState:
    """What filter and prioritize read of the extender's cache: its own containers, by reference (so one
    value serves every call), read under its lock."""

    unit: str
    summaries: Summaries  # with each known node's ledger (`ledger`)
    placements: Mapping[str, Policy]  # each node's ack.node.gpu.placement policy, where it names one
    blocked: Mapping[str, str]  # nodes that take no share of ours, with the reason (extender's blocks)
    pods: Mapping[str, Remembered]  # the watch's records by pod key: they lend the pod's demand
    # Each known node's mode, or why its mode label is unreadable: who serves its whole cards
    node_modes: Mapping[str, modes.Mode | str]

    def ledger(self, name: str) -> accounting.Ledger | None:
        """The node's ledger; None when the watch does not show the node now."""
        return self.summaries.ledger(name)


@dataclass(slots=True)
class Choice:
    """Filter's answer; `nominee`: where best fit left the pod alone, and the GPUs bind would give it."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    nominee: tuple[str, Allocation] | None = None


def choose(
    ask: PodAsk, state: NodeState, names: Sequence[str], default: Policy, best_fit: bool = True
) -> Choice:
    """The nodes of `names` (kube-scheduler's order) the pod fits; with `best_fit` only the best of each
    policy, so kube-scheduler's own scores, which know nothing of GPUs, keep the GPU-level choice."""
    if ask.asks_cards:
        return _whole_cards(ask.cards, state, names)
    if not ask.need:  # nothing of ours to place: every node, known or not, is kube-scheduler's to judge
        return Choice(passed=list(names))
    out = Choice()
    names = _unblocked(state, names, out)
    _fit_memory(ask, state, names, default=default, best_fit=best_fit, out=out)
    if best_fit and len(out.passed) == 1:
        out.nominee = _nominee(ask, state, out.passed[0], default)
    return out


def _whole_cards(cards: Demand, state: NodeState, names: Sequence[str]) -> Choice:
    """A pod of whole cards, node by node (core.placement.wholecards.judge). Never nominated: every empty
    GPU is alike to a card, so there is no best node to count it on before bind."""
    out = Choice()
    for name in names:
        refused = wholecards.judge(cards, state, name)
        if refused is None:
            out.passed.append(name)
        else:
            reason, final = refused
            (out.unresolvable if final else out.failed)[name] = reason
    return out


def _unblocked(state: NodeState, names: Sequence[str], out: Choice) -> Sequence[str]:
    """`names` less the nodes whose mode takes no shares, which go to `out` as unresolvable: preemption
    cannot help there."""
    blocked = state.blocked
    if not blocked:  # most clusters
        return names
    out.unresolvable = {name: blocked[name] for name in names if name in blocked}
    return [name for name in names if name not in blocked]


def _fit_memory(
    ask: PodAsk, state: NodeState, names: Sequence[str], *, default: Policy, best_fit: bool, out: Choice
) -> None:
    """The gpu-mem pod's fit on each of `names`, into `out`: the quick test from the summaries' numbers
    first, the rest node by node."""
    need, whole_only = ask.need, ask.whole_only
    summaries = state.summaries
    largest = summaries.largest_free()
    # Every node ranks by one policy when the pod names it or no node's label does.
    policy = (ask.policy or (None if state.placements else default)) if whole_only and best_fit else None
    if policy is not None:  # the keys kept per pod size, the best in one min()
        ranks = summaries.quick_ranks(need, policy)
        out.passed = ranking.best_ranked(names, ranks)
        rest = [name for name in names if name not in ranks]
    elif whole_only:
        get = largest.get
        out.passed = [name for name in names if get(name, -1) >= need]
        if best_fit and len(out.passed) > 1:
            # The pod's annotation wins over every node's label: with one, the labels are not looked at.
            policies = {} if ask.policy else state.placements
            fallback = modes.chosen_policy(ask.policy, None, default)
            free_asc, loads = summaries.free_asc(), summaries.loads()
            out.passed = ranking.best_quick(need, out.passed, free_asc, policies, fallback, loads=loads)
        rest = [name for name in names if get(name, -1) < need]
    else:
        rest = list(names)
    if rest:  # most calls: the quick test settled every node
        _judge_rest(ask, state, rest, largest=largest, default=default, best_fit=best_fit, out=out)


def _judge_rest(
    ask: PodAsk,
    state: NodeState,
    rest: Sequence[str],
    *,
    largest: Mapping[str, int],
    default: Policy,
    best_fit: bool,
    out: Choice,
) -> None:
    """The nodes the quick test did not pass (`largest`: the summaries' largest free), node by node, into
    `out`."""
    need, whole_only = ask.need, ask.whole_only
    capacity = state.summaries.largest_gpu()
    messages: dict[int, str] = {}  # one string per distinct largest-free value, not one per node
    never: dict[int, str] = {}  # and per distinct largest GPU, for the nodes no GPU of fits
    ranked: dict[str, tuple[Policy, ranking.Rank]] = {}
    for name in rest:
        top = largest.get(name)
        if top is None:
            out.failed[name] = UNKNOWN_NODE
        elif whole_only and top >= 0:
            size = capacity.get(name, top)
            if size < need:  # no GPU of the node is that large: preempting cannot help
                message = never.get(size)
                if message is None:
                    message = never[size] = allocator.EMPTIED + allocator.too_small(size, need, state.unit)
                out.unresolvable[name] = message
                continue
            message = messages.get(top)
            if message is None:
                message = messages[top] = allocator.too_small(top, need, state.unit)
            out.failed[name] = message
        else:
            # The order prioritize and bind use (pod annotation, node label, --policy): the greedy split
            # of containers over GPUs depends on it.
            policy = modes.chosen_policy(ask.policy, state.placements.get(name), default)
            if best_fit:
                ledger = state.ledger(name)
                value = None if ledger is None else ranking.rank(ask.memory, ledger.gpus(), policy)
                if value is not None:
                    out.passed.append(name)
                    ranked[name] = (policy, value)
                    continue
            verdict, reason = _judge(ask, state.ledger(name), policy)
            if verdict is PASS:
                out.passed.append(name)
            else:
                (out.failed if verdict is FAIL else out.unresolvable)[name] = reason
    if ranked:  # with best_fit every node that passed this loop is ranked
        out.passed = ranking.best(ranked)


def _judge(ask: PodAsk, ledger: accounting.Ledger | None, policy: Policy) -> tuple[str, str]:
    """One node the quick test could not settle (multi-container or multi-GPU pods, no healthy GPU):
    (PASS, ""), (FAIL, why) or (UNRESOLVABLE, why)."""
    if ledger is None:
        return FAIL, UNKNOWN_NODE
    free_desc = ledger.free_desc()
    if allocator.quick_fit(ask.memory, free_desc):
        return PASS, ""
    result = allocator.fit(ask.memory, ledger.gpus(), policy, ledger.unit)
    if isinstance(result, allocator.Fit):
        return PASS, ""
    if not free_desc:
        # No healthy GPU at all: preempting pods cannot help on this node.
        return UNRESOLVABLE, ledger.device_problem or result.reason
    # kube-scheduler may preempt lower-priority pods on a node filter failed: say when that cannot help.
    never = allocator.never_fits(ask.memory, ledger.gpus(), policy, ledger.unit)
    return (FAIL, result.reason) if never is None else (UNRESOLVABLE, never)


def _nominee(ask: PodAsk, state: NodeState, name: str, default: Policy) -> tuple[str, Allocation] | None:
    """Where bind would place the pod on the one node best fit left (the extender counts it there at
    once, so the next pod's filter does not race its bind)."""
    ledger = state.ledger(name)
    if ledger is None:
        return None
    policy = modes.chosen_policy(ask.policy, state.placements.get(name), default)
    placed = allocator.fit(ask.memory, ledger.gpus(), policy, ledger.unit)
    return (name, placed.allocation) if isinstance(placed, allocator.Fit) else None


def scores(ask: PodAsk, state: NodeState, names: Sequence[str], default: Policy) -> dict[str, int]:
    """Prioritize: 0..10 per node from the same keys filter ranks by (core.placement.ranking.scores: the best
    node of each policy 10); 0 for nodes where the pod does not fit or that are not known."""
    if ask.asks_cards:
        # Every empty GPU is alike to a whole card: no preference among the nodes that passed, the
        # ranking is kube-scheduler's own.
        return dict.fromkeys(names, allocator.MIN_SCORE)
    ranked: dict[str, tuple[Policy, ranking.Rank]] = {}
    for name in names:
        ledger = state.ledger(name)
        # The pod's annotation, else the node's ack.node.gpu.placement label, else --policy.
        policy = modes.chosen_policy(ask.policy, state.placements.get(name), default)
        value = None if ledger is None else ranking.rank(ask.memory, ledger.gpus(), policy)
        if value is not None:
            ranked[name] = (policy, value)
    found = ranking.scores(ranked)
    return {name: found.get(name, allocator.MIN_SCORE) for name in names}
