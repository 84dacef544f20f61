"""What a pod asks of GPUs, per container: shares of GPU memory (`aliyun.com/gpu-mem`, with the GPU-count
split) and whole cards (`nvidia.com/gpu` by default), both as one `Demand`, and the rule that one pod takes
whole cards or shares, not both.

The webhook's rules, the extender's filter and the device plugin's Allocate all read a pod's demand from
its read (core/specs/podread.py: each quantity parsed once, in one walk), so they agree on the numbers
(HAMi's lesson: one device model for all parts). A demand that cannot be read raises the `Finding` the
webhook's rules list for the same mistake.

    pod_demand(pod)  -> Demand(containers=(4, 0), init_containers=(), gpu_count=1)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.specs import finding, gpumem, podspec, specview, templates
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources

_NAME_LIMIT = 63


@dataclass(frozen=True, slots=True)
class Demand:
    """Per container (spec.containers order, 0 when none) and per init container what the pod asks of one
    resource: gpu-mem units, or whole cards; and the GPUs a share is spread over (1 for whole cards)."""

    containers: tuple[int, ...]
    init_containers: tuple[int, ...] = ()
    gpu_count: int = 1

    @property
    def total(self) -> int:
        """The pod's total: the sum over app containers (ALIYUN_COM_GPU_MEM_POD)."""
        return sum(self.containers)

    @property
    def effective(self) -> int:
        """What the pod holds at once: init containers run one by one before the app containers, so the
        larger of the app containers' sum and the largest init container (the kubelet's and
        kube-scheduler's effective request; for cards, the app containers reuse the init containers')."""
        return max(sum(self.containers), max(self.init_containers, default=0))

    @property
    def per_gpu(self) -> int:
        """Units on each of the `gpu_count` GPUs when the pod is split over several GPUs."""
        return self.total // self.gpu_count

    def asks(self) -> bool:
        return self.effective > 0


NO_DEMAND = Demand(())

_error = finding.at


def _wrong_type(path: str, container: str | None, value: object, expected: str) -> Finding:
    # As finding.wrong_type, but a null is not shown: the extender has always said it so.
    shown = None if isinstance(value, Mapping | list) else value
    return _error(path, container, shown, finding.type_problem(value, expected))


def container_units(
    container: Mapping[str, Any],
    name: str = resources.GPU_MEMORY,
    unit: str = gpumem.DEFAULT_UNIT,
    path: str = "",
) -> int:
    """A container's whole-unit limit (or, failing that, request) of resource `name`; 0 when absent.

    `path` is the container's field path ("spec.containers[0]"), for messages; `unit` is named in them.
    """
    return units(podspec.Container(path, "containers", 0, container), name, unit)


def units(container: podspec.Container, name: str, unit: str = gpumem.DEFAULT_UNIT) -> int:
    """`container_units` of a container the view has read: its amount of `name` as parsed there."""
    if name not in container.limits and name not in container.requests:
        _check_sections(container, name)  # a misshapen section that might have held it
        return 0
    if not container.limits and name in container.requests:
        _check_sections(container, name)  # a misshapen limits, read before the requests
    amount = container.amount(name)
    assert amount is not None
    raw, parsed = amount.raw, amount.parsed
    found = gpumem.memory_problem(raw, parsed, name, unit)
    if found is not None:
        raise _error(podspec.value_path(container, amount.section, name), container.name, raw, found)
    assert not isinstance(parsed, str)  # memory_problem reports every unparsed value
    return parsed.to_int()


def _check_sections(container: podspec.Container, name: str) -> None:
    """The wrong types on the way to `name`, in the order they are read: `resources`, then limits, then
    requests (a section that holds `name` ends the reading)."""
    res = container.body.get("resources")
    if res is None or (container.limits and container.requests):
        return  # both sections are objects: nothing misshapen
    res_path = finding.join(container.path, "resources")
    if not isinstance(res, Mapping):
        raise _wrong_type(res_path, container.name, res, "an object")
    for section in ("limits", "requests"):
        values = res.get(section)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise _wrong_type(finding.join(res_path, section), container.name, values, "an object")
        if name in values:
            return


def _asks(container: podspec.Container, name: str) -> bool:
    found = container.amount(name)
    return found is not None and not isinstance(found.parsed, str) and found.parsed > 0


def _check_shape(container: podspec.Container, names: resources.GpuResourceNames, unit: str) -> None:
    """The rules' container-level denials that the extender must repeat: gpu-count as a resource, and
    whole GPUs with gpu-mem in one container (see gpumem.count_resource, gpumem.whole_and_memory)."""
    limits, requests = container.limits, container.requests
    res_path = finding.join(container.path, "resources")
    for section, values in (("limits", limits), ("requests", requests)):
        if names.count in values:
            at = f"{res_path}.{section}[{names.count}]"
            raise _error(at, container.name, values[names.count], gpumem.count_resource(names.count))
    for key in container.gpu_names:
        if names.is_whole_device(key) and _asks(container, key):
            section = "limits" if names.memory in limits else "requests"
            found = gpumem.whole_and_memory(key, names.memory, unit)
            raise _error(f"{res_path}.{section}", container.name, None, found)


def gpu_count(labels: Mapping[str, Any] | None, key: str = resources.GPU_COUNT_LABEL) -> int:
    """The number of GPUs the pod label asks to spread over (1 when unset)."""
    if labels is not None and not isinstance(labels, Mapping):
        raise Finding.of_text("metadata.labels must be an object")
    raw = (labels or {}).get(key)
    if raw is None:
        return 1
    # Python refuses to convert ints of more than 4300 digits to or from text: check the size first.
    if isinstance(raw, str):
        text, shown = raw.strip(), repr(raw[:40])
    elif isinstance(raw, int) and raw.bit_length() < 64:
        text = shown = str(raw)
    else:
        text, shown = "", f"<{type(raw).__name__}>"
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or int(text) < 1:
        raise Finding.of_text(f'label {key}={shown} must be a positive whole number of GPUs, e.g. "2"')
    return int(text)


def count_label_problem(
    labels: Mapping[str, Any], names: resources.GpuResourceNames, total: int | None, unit: str
) -> finding.Problem | None:
    """What is wrong with the pod's gpu-count label, in words (the rules and the extender say the same);
    None when it is fine. `total` is the pod's gpu-mem units; None skips the split check."""
    try:
        count = gpu_count(labels, names.count)
    except Finding as err:
        fix = 'set the label to the number of GPUs to spread the pod over, e.g. "2"'
        return finding.Problem(finding.printable(str(err), 200), fix)
    if total is None:
        return None
    try:
        check_split(total, count, names.count, unit)
    except Finding as err:
        fix = f"make the pod's total {names.memory} a multiple of {count} {unit}, or change the label"
        return finding.Problem(str(err), fix)
    return None


def init_problem(
    init_units: int,
    app_total: int,
    count: int,
    names: resources.GpuResourceNames,
    unit: str,
    *,
    sidecar: bool = False,
) -> finding.Problem | None:
    """What is wrong with an init container asking `init_units` of gpu-mem beside app containers asking
    `app_total` over `count` GPUs; None when it is fine (the rules and the extender say the same).

    The extender reserves the app containers' memory and the device plugin runs an init container inside
    it, on the GPU(s) the pod holds (split like the pod when it divides evenly, else on one of them): an
    init container asking more would use memory nobody counted, and one beside app containers asking
    none would have no GPU at all."""
    if init_units <= 0:
        return None
    if sidecar:  # restartPolicy: Always runs beside the app containers, outside what they hold
        return finding.Problem(
            f"a sidecar (an init container with restartPolicy: Always) asks {names.memory}: it runs beside "
            "the app containers for the pod's whole life, and gpushare reserves only theirs",
            f"ask for {names.memory} in an app container (spec.containers) instead",
        )
    split = count > 1 and init_units % count == 0
    room = app_total if count <= 1 or split else app_total // count
    if init_units <= room:
        return None
    plural = gpumem.unit_plural(unit)
    where = "" if count <= 1 or split else " on one GPU"
    fix = f"give the app containers at least {init_units} {unit} of {names.memory} in all"
    return finding.Problem(
        f"an init container asks {init_units} {plural} of {names.memory}, more than the pod's app "
        f"containers hold{where} ({room}): init containers run inside the app containers' GPU memory",
        f"{fix}, or this init container at most {room}" if room else f"{fix} (the GPU it shares with them)",
    )


def check_split(
    total: int, count: int, key: str = resources.GPU_COUNT_LABEL, unit: str = gpumem.DEFAULT_UNIT
) -> None:
    """Several GPUs for one pod: the pod's total must split evenly (N/M whole units per GPU)."""
    if count > 1 and total % count:
        raise Finding.of_text(
            f"label {key}={count} asks to split the pod's {total} {unit} of GPU memory over {count} GPUs, "
            f"which is not a whole number of {gpumem.unit_plural(unit)} per GPU; "
            f"use a total that is a multiple of {count} {unit}"
        )


def pod_demand(
    pod: Mapping[str, Any],
    names: resources.GpuResourceNames | None = None,
    unit: str = gpumem.DEFAULT_UNIT,
) -> Demand:
    """Read a pod (or pod template: metadata + spec) into its GPU-memory demand.

    Any JSON shape is read: a wrong type raises Finding naming the field, never another error.
    """
    names = names or resources.GpuResourceNames()
    return of_view(specview.read(template_of(pod), names), unit)


def template_of(pod: Mapping[str, Any]) -> templates.PodTemplate:
    """The pod (or pod template) as the view reads it; Finding for a spec or metadata of no object."""
    parts = []
    for key in ("spec", "metadata"):
        value = pod.get(key)
        if value is not None and not isinstance(value, Mapping):
            # As templates.scan reports it for the webhook: no value shown.
            raise _error(key, None, None, finding.type_problem(value, "an object"))
        parts.append(value or {})
    spec, metadata = parts
    return templates.PodTemplate("", metadata, spec)


def of_view(view: specview.SpecView, unit: str = gpumem.DEFAULT_UNIT) -> Demand:
    """The demand of a pod whose view is read (`pod_demand` reads it); Finding as there."""
    names = view.names
    app: list[int] = []
    init: list[int] = []
    init_items: list[podspec.Container] = []
    for item in view.items:
        if isinstance(item, podspec.WrongShape):
            raise _wrong_type(item.path, None, item.value, item.expected)
        asked = units(item, names.memory, unit)
        if asked:
            _check_shape(item, names, unit)
        (init if item.init else app).append(asked)
        if item.init:
            init_items.append(item)
    labels = view.labels
    labels_path = finding.join(view.path, "metadata.labels")
    if labels is not None and not isinstance(labels, Mapping):
        raise _wrong_type(labels_path, None, labels, "an object")
    labels = labels or {}
    if names.count in labels:
        found = count_label_problem(labels, names, sum(app), unit)
        if found is not None:
            raise _error(finding.key_path(labels_path, names.count), None, labels[names.count], found)
    count = gpu_count(labels, names.count)
    for item, asked in zip(init_items, init, strict=True):
        found = init_problem(asked, sum(app), count, names, unit, sidecar=item.sidecar)
        if found is not None:
            raise _error(memory_path(item, names), item.name, asked, found)
    return Demand(containers=tuple(app), init_containers=tuple(init), gpu_count=count)


def cards_of_view(view: specview.SpecView) -> Demand:
    """The whole cards of a pod whose view is read, from the same walk as its memory (`of_view` has
    raised for its misshapen items). Finding for a count that is no whole number, and for a pod that
    asks whole cards in one container and shares in another (`mixed`)."""
    names = view.names
    app: list[int] = []
    init: list[int] = []
    for item in view.containers:
        (init if item.init else app).append(container_cards(item.body, names.whole_card, item.path))
    if any(app) or any(init):
        found = mixed(view.spec, names, view.path, view.items)
        if found is not None:
            raise found
    return Demand(tuple(app), tuple(init))


def pod_cards(pod: Mapping[str, Any], names: resources.GpuResourceNames | None = None) -> Demand:
    """A pod's (or pod template's) whole cards. Finding for bad values and for mixed pods."""
    names = names or resources.GpuResourceNames()
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return NO_DEMAND
    return cards_of_view(specview.read(templates.PodTemplate("", {}, spec), names))


def _name(body: Mapping[str, Any]) -> str | None:
    name = body.get("name")
    return finding.printable(name, _NAME_LIMIT) if isinstance(name, str) else None


def _raw(body: Mapping[str, Any], name: str) -> tuple[str, object] | None:
    """(section, value) of `name`: the limit, else the request (defaulting copies limits to requests)."""
    res = body.get("resources")
    for section in ("limits", "requests"):
        values = res.get(section) if isinstance(res, templates.OBJECT) else None
        if isinstance(values, templates.OBJECT) and name in values:
            return section, values[name]
    return None


def container_cards(body: Mapping[str, Any], name: str, path: str = "") -> int:
    """A container's whole cards of resource `name`; 0 when absent. Finding for a value that is no
    whole, non-negative number (the webhook denies those first, in the same words)."""
    found = _raw(body, name)
    if found is None:
        return 0
    section, raw = found
    at = f"{finding.join(path, 'resources')}.{section}[{finding.printable(name, 60)}]"
    parsed = gpumem.parse(raw)
    if isinstance(parsed, str):
        problem = finding.Problem(f"is not a valid quantity: {parsed}", 'write a whole number such as "1"')
    elif parsed.is_negative():
        problem = finding.Problem(f"{name} cannot be negative", 'use 0 or more, e.g. "1"')
    elif not parsed.is_integer():
        problem = finding.Problem(
            f"only whole GPUs are possible with {name}", 'write a whole number such as "1"'
        )
    else:
        return parsed.to_int()
    raise _error(at, _name(body), raw, problem)


def mixed(
    spec: Mapping[str, Any],
    names: resources.GpuResourceNames,
    prefix: str = "",
    walked: list[podspec.Container | podspec.WrongShape] | None = None,
) -> Finding | None:
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
    path = f"{finding.join(card.path, 'resources')}.{section}[{names.whole_card}]"
    return Finding(
        path,
        _name(card.body),
        None,
        f'asks for whole GPUs ({names.whole_card}) while container "{other}" asks for a share of GPU '
        f"memory ({names.memory}); one pod takes whole GPUs or shares, not both",
        f"put them in two pods, or ask {names.memory} in every container",
    )


def memory_path(item: podspec.Container, names: resources.GpuResourceNames) -> str:
    """Where a container asks for gpu-mem: its limit when it has one, else its request."""
    section = "limits" if names.memory in item.limits else "requests"
    return podspec.value_path(item, section, names.memory)
