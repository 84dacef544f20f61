"""Whole GPUs beside shares: what a pod asks of the whole-card resource (`nvidia.com/gpu` by default),
where its cards go on a node our device plugin serves, and the rule that one pod takes whole cards or
shares of GPU memory, not both.

A whole card is placed with the same annotations as a share, holding the card's whole memory on each chosen
GPU. So the ledger (core.placement.accounting), `gpushare inspect`, the original tools and the invariant
checker all see a full GPU: no share can land on it, and a card only goes to a GPU nothing holds.

    fit(CardDemand((2,)), gpus)  -> Fit({0: {1: 16, 2: 16}})  # the two lowest-index empty healthy GPUs
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core.placement.accounting import Gpu
from webhook.core.placement.allocator import Fit, NoFit
from webhook.core.placement.annotations import Allocation
from webhook.core.placement.demand import DemandError
from webhook.core.specs import gpumem, podspec, specview, templates
from webhook.core.wire import resources

_NAME_LIMIT = 63
# An extended resource name (pkg/apis/core/validation: IsExtendedResourceName): a DNS-1123 subdomain
# prefix, a "/", and a qualified name; the kubelet refuses to register anything else.
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def resource_name(text: str) -> str:
    """`text` when it can name the whole-card resource; ValueError saying why not. Usable as argparse type."""
    domain, slash, name = text.partition("/")
    if not slash or not _QUALIFIED.match(name) or len(domain) > 253 or not _DNS_SUBDOMAIN.match(domain):
        raise ValueError(f"{text!r} is not an extended resource name (<domain>/<name>, e.g. nvidia.com/gpu)")
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        raise ValueError(f"{text!r} is in the kubernetes.io domain, which device plugins cannot serve")
    if text in (resources.GPU_MEMORY, resources.GPU_COUNT):
        raise ValueError(f"{text!r} is the GPU memory protocol's own resource, not whole cards")
    return text


@dataclass(frozen=True, slots=True)
class CardDemand:
    """Whole cards per container (spec.containers order, 0 when none) and per init container."""

    containers: tuple[int, ...] = ()
    init_containers: tuple[int, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.containers)

    @property
    def effective(self) -> int:
        """What the kubelet holds for the pod: init containers' devices are reused by the app containers."""
        return podspec.held_at_once(self.containers, self.init_containers)

    def asks(self) -> bool:
        return self.effective > 0


NO_CARDS = CardDemand()


@dataclass(frozen=True, slots=True)
class Mixed:
    """A pod whose containers ask whole cards and shares: where, and the words of the denial."""

    path: str  # the whole-card container's resources field
    container: str | None
    problem: gpumem.Problem


def _name(body: Mapping[str, Any]) -> str | None:
    name = body.get("name")
    return templates.printable(name, _NAME_LIMIT) if isinstance(name, str) else None


def _values(body: Mapping[str, Any], section: str) -> Mapping[str, Any]:
    res = body.get("resources")
    values = res.get(section) if isinstance(res, templates.OBJECT) else None
    return values if isinstance(values, templates.OBJECT) else {}


def _raw(body: Mapping[str, Any], name: str) -> tuple[str, object] | None:
    """(section, value) of `name`: the limit, else the request (defaulting copies limits to requests)."""
    for section in ("limits", "requests"):
        values = _values(body, section)
        if name in values:
            return section, values[name]
    return None


def container_cards(body: Mapping[str, Any], name: str, path: str = "") -> int:
    """A container's whole cards of resource `name`; 0 when absent. DemandError for a value that is no
    whole, non-negative number (the webhook denies those first, in the same words)."""
    found = _raw(body, name)
    if found is None:
        return 0
    section, raw = found
    at = f"{templates.join(path, 'resources')}.{section}[{templates.printable(name, 60)}]"
    parsed = gpumem.parse(raw)
    if isinstance(parsed, str):
        problem = gpumem.Problem(f"is not a valid quantity: {parsed}", 'write a whole number such as "1"')
    elif parsed.is_negative():
        problem = gpumem.Problem(f"{name} cannot be negative", 'use 0 or more, e.g. "1"')
    elif not parsed.is_integer():
        problem = gpumem.Problem(
            f"only whole GPUs are possible with {name}", 'write a whole number such as "1"'
        )
    else:
        return parsed.to_int()
    raise DemandError(gpumem.describe(at, _name(body), gpumem.show(raw), *problem))


def mixed(
    spec: Mapping[str, Any],
    names: resources.GpuResourceNames,
    prefix: str = "",
    walked: list[podspec.Container | podspec.WrongShape] | None = None,
) -> Mixed | None:
    """Whole cards in one container and a share of GPU memory in another: denied.

    Both come from our device plugin on a shared node, placed by two different rules (a card holds a whole
    GPU, a share part of one); the placement annotations give one pod one kind. One container asking
    both is `gpumem.whole_and_memory`, reported at that container instead.
    """
    # This runs on every review and most pods ask no cards: look for cards first, shares only then. A
    # container asking both is not one here (gpumem.whole_and_memory reports it).
    items = podspec.objects(spec, prefix, walked)
    carding = [b.asks(names.whole_card) for b in items]
    if not any(carding):
        return None
    asks = [(b, b.asks(names.memory), card) for b, card in zip(items, carding, strict=True)]
    cards = [b for b, memory, card in asks if card and not memory]
    shares = [b for b, memory, card in asks if memory and not card]
    if not cards or not shares:
        return None
    card, share = cards[0], shares[0]
    section = (_raw(card.body, names.whole_card) or ("limits", None))[0]
    other = _name(share.body) or share.path
    problem = gpumem.Problem(
        f'asks for whole GPUs ({names.whole_card}) while container "{other}" asks for a share of GPU '
        f"memory ({names.memory}); one pod takes whole GPUs or shares, not both",
        f"put them in two pods, or ask {names.memory} in every container",
    )
    path = f"{templates.join(card.path, 'resources')}.{section}[{names.whole_card}]"
    return Mixed(path, _name(card.body), problem)


def asks_cards(spec: Mapping[str, Any], names: resources.GpuResourceNames) -> bool:
    """Any container of the pod spec asks for whole cards (an unreadable count counts as asking)."""
    return any(c.asks(names.whole_card) for c in podspec.objects(spec))


def pod_cards(pod: Mapping[str, Any], names: resources.GpuResourceNames | None = None) -> CardDemand:
    """A pod's (or pod template's) whole cards. DemandError for bad values and for mixed pods."""
    names = names or resources.GpuResourceNames()
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return CardDemand()
    return of_view(specview.read(templates.PodTemplate("", {}, spec), names))


def of_view(view: specview.SpecView) -> CardDemand:
    """`pod_cards` from a view already read (`demand.of_view` has raised for its misshapen items), so a
    pod's whole cards and GPU memory come from one walk of its containers."""
    names = view.names
    app: list[int] = []
    init: list[int] = []
    for item in view.containers:
        (init if item.init else app).append(container_cards(item.body, names.whole_card, item.path))
    if any(app) or any(init):
        found = mixed(view.spec, names, view.path, view.items)
        if found is not None:
            raise DemandError(gpumem.describe(found.path, found.container, None, *found.problem))
    return CardDemand(tuple(app), tuple(init))


def fit(cards: CardDemand, gpus: Sequence[Gpu]) -> Fit | NoFit:
    """The GPUs for a whole-card pod on a shared node: healthy ones that nothing holds, lowest index first
    (all empty GPUs are alike; low indexes keep the choice stable). Each container gets its own cards,
    each card counted with its whole memory. Init containers reuse the pod's cards, so one may not ask
    more than the app containers hold together."""
    if not cards.asks():
        return Fit(Allocation({}), 0)
    if not gpus:
        return NoFit("node has no GPUs for whole cards")
    healthy = [g for g in gpus if g.healthy]
    if not healthy:
        return NoFit(f"all {len(gpus)} GPUs of the node are unhealthy")
    if cards.effective > cards.total:
        return NoFit(
            f"an init container asks for {_whole(cards.effective)}, more than the pod's containers hold "
            f"({cards.total}); on a gpushare node init containers use the pod's own cards"
        )
    need = cards.total
    if len(healthy) < need:
        return NoFit(f"pod asks for {_whole(need)}, node has {len(healthy)} healthy")
    empty = sorted((g for g in healthy if g.used == 0), key=lambda g: g.index)
    if len(empty) < need:
        return NoFit(
            f"pod asks for {_whole(need)}, {len(empty)} of the node's {len(healthy)} healthy GPUs "
            "hold nothing (a whole GPU never shares with gpu-mem pods)"
        )
    chosen = iter(empty[:need])
    containers: dict[int, dict[int, int]] = {}
    for i, count in enumerate(cards.containers):
        for _ in range(count):
            gpu = next(chosen)
            containers.setdefault(i, {})[gpu.index] = gpu.memory
    return Fit(Allocation(containers), empty[0].memory)


def _whole(count: int) -> str:
    return f"{count} whole GPU" if count == 1 else f"{count} whole GPUs"


def unresolvable(gpus: Sequence[Gpu], cards: CardDemand) -> bool:
    """True when evicting pods cannot make room: too few healthy GPUs, or an init container's excess."""
    healthy = sum(1 for g in gpus if g.healthy)
    return healthy < cards.total or cards.effective > cards.total
