"""GPU resource rules for one pod spec: each problem becomes a `Violation` naming field, container and fix.

Rules are values, not exceptions, so one denial message lists every problem of an object. The checks
mirror `validateResourceRequirements` (pkg/apis/core/validation) for GPU names, and say how to fix them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.node import mps
from webhook.core.placement import demand, wholecards
from webhook.core.specs import gpumem, podspec, specview, templates
from webhook.core.wire import quantity, resources

_VALUE_LIMIT = 60
_NAME_LIMIT = 63


@dataclass(frozen=True, slots=True)
class Violation:
    path: str  # field path, e.g. "spec.template.spec.containers[1].resources.limits[nvidia.com/gpu]"
    container: str | None  # None for pod-level problems such as the gpu-count label
    value: str | None  # the offending value as the user wrote it
    problem: str  # what is wrong, in words a data scientist understands
    fix: str  # what to write instead

    def __str__(self) -> str:
        return gpumem.describe(self.path, self.container, self.value, self.problem, self.fix)


# A value as the user wrote it, on one line and short (shared with the extender's demand messages).
show = gpumem.show


def wrong_type(path: str, container: str | None, value: object, expected: str) -> Violation:
    """The violation for a field whose JSON type is wrong (the API server would not decode it)."""
    found = gpumem.wrong_type(value, expected)
    shown = None if isinstance(value, Mapping | list) else show(value)
    return Violation(path, container, shown, found.problem, found.fix)


def _value_problem(
    container: podspec.Container,
    section: str,
    raw: object,
    parsed: quantity.Quantity | str,
    *,
    name: str,
    names: resources.GpuResourceNames,
    unit: str,
) -> Violation | None:
    """What is wrong with one GPU value (`parsed` as gpumem.parse gave it); None when it is fine. The
    field path and container name are built only for a violation: most values are fine."""
    if name == names.memory:
        found = gpumem.memory_problem(raw, parsed, name, unit)
        if found is None:
            return None
        return Violation(_field(container, section, name), container.name, show(raw), *found)
    if isinstance(parsed, str):
        problem, fix = f"is not a valid quantity: {parsed}", 'write a whole number such as "1"'
    elif parsed.is_negative():
        problem = f"{templates.printable(name, _VALUE_LIMIT)} cannot be negative"
        fix = 'use 0 or more, e.g. "1"'
    elif parsed.is_integer():
        return None
    elif names.is_whole_device(name):
        shown = templates.printable(name, _VALUE_LIMIT)
        share = f"{names.memory} (in {gpumem.unit_plural(unit)})"
        problem = f"only whole GPUs are possible with {shown}; a share of one GPU is asked with {share}"
        fix = f'use a whole number of GPUs such as "1", or {names.memory}: "<{unit}>" for a share of one GPU'
    else:
        problem = f"{templates.printable(name, _VALUE_LIMIT)} must be a whole number"
        fix = 'use a whole number such as "1"'
    return Violation(_field(container, section, name), container.name, show(raw), problem, fix)


def _resources_path(container: podspec.Container) -> str:
    return f"{container.path}.resources"


def _field(container: podspec.Container, section: str, name: str) -> str:
    return f"{container.path}.resources.{section}[{templates.printable(name, _VALUE_LIMIT)}]"


def _same(limit: quantity.Quantity | str, request: quantity.Quantity | str) -> bool:
    if limit is request:
        return not isinstance(limit, str)  # one parse of two equal spellings (most pods)
    if not isinstance(limit, quantity.Quantity) or not isinstance(request, quantity.Quantity):
        return False
    return limit.milli_value() == request.milli_value()


def _check_resource(
    container: podspec.Container, name: str, names: resources.GpuResourceNames, unit: str
) -> list[Violation]:
    limits, requests = container.limits, container.requests
    if name == names.count:
        # Not a container's resource at all: one violation, at the limit when there is one.
        section = "limits" if name in limits else "requests"
        found = gpumem.count_resource(names.count)
        raw = limits[name] if name in limits else requests[name]
        return [Violation(_field(container, section, name), container.name, show(raw), *found)]
    out: list[Violation] = []
    limit: quantity.Quantity | str | None = None
    if name in limits:
        amount = container.amount(name)
        assert amount is not None
        limit = amount.parsed
        problem = _value_problem(container, "limits", amount.raw, limit, name=name, names=names, unit=unit)
        if problem is not None:
            out.append(problem)
    if name not in requests:
        return out
    request = container.request(name)
    # After defaulting a Pod's request is a copy of its limit: report a bad value once, at the limit.
    # Compared as the API server does (validateResourceRequirements), after defaulting rounded both up to
    # milli.
    if limit is not None and _same(limit, request):
        return out
    raw = requests[name]
    problem = _value_problem(container, "requests", raw, request, name=name, names=names, unit=unit)
    if problem is not None:
        out.append(problem)
    shown = templates.printable(name, _VALUE_LIMIT)
    if limit is None:
        out.append(
            Violation(
                _field(container, "limits", name),
                container.name,
                None,
                f"requests[{shown}] is {show(raw)} but there is no limit; "
                "GPU resources cannot be overcommitted",
                f"set limits[{shown}] equal to the request",
            )
        )
    elif isinstance(limit, quantity.Quantity) and isinstance(request, quantity.Quantity):
        out.append(
            Violation(
                _field(container, "requests", name),
                container.name,
                show(raw),
                f"must equal limits[{shown}] ({show(limits[name])}); GPU resources cannot be overcommitted",
                f"set requests[{shown}] equal to the limit, or leave it out (it defaults to the limit)",
            )
        )
    return out


def _wrong_types(res: object, res_path: str, name: str | None) -> list[Violation]:
    """`resources`, or its limits or requests, when present but no object."""
    if res is None:
        return []
    if not isinstance(res, templates.OBJECT):
        return [wrong_type(res_path, name, res, "an object")]
    out: list[Violation] = []
    for section in ("limits", "requests"):
        values = res.get(section)
        if values is not None and not isinstance(values, templates.OBJECT):
            out.append(wrong_type(templates.join(res_path, section), name, values, "an object"))
    return out


def _check_container(
    container: podspec.Container, names: resources.GpuResourceNames, unit: str
) -> list[Violation]:
    gpu_names = container.gpu_names
    # Sections that hold a name are objects: only an empty one may be of the wrong type.
    shaped = bool(container.limits and container.requests)
    if shaped or container.body.get("resources") is None:
        if not gpu_names:
            return []  # most containers: nothing to report, no name or path to build
        out: list[Violation] = []
    else:
        out = _wrong_types(container.body.get("resources"), _resources_path(container), container.name)
    for resource in gpu_names:
        found = _check_resource(container, resource, names, unit)
        if found:
            out += found
    # Whole GPUs and a share in one container; with gpu-mem alone (most) there is no whole-GPU name.
    if len(gpu_names) > 1 and names.memory in gpu_names and container.asks(names.memory):
        whole = [n for n in gpu_names if names.is_whole_device(n) and container.asks(n)]
        if whole:
            section = "limits" if names.memory in container.limits else "requests"
            both = gpumem.whole_and_memory(whole[0], names.memory, unit)
            path = f"{_resources_path(container)}.{section}"
            out.append(Violation(path, container.name, None, both.problem, both.fix))
    return out


def _check_gpu_count(view: specview.SpecView, unit: str) -> list[Violation]:
    """The multi-GPU label: a positive whole number that divides the pod's total gpu-mem."""
    labels, names = view.labels, view.names
    if labels is None:
        return []
    prefix = view.path
    if not isinstance(labels, templates.OBJECT):
        return [wrong_type(templates.join(prefix, "metadata.labels"), None, labels, "an object")]
    if names.count not in labels:
        return []
    raw = labels[names.count]
    path = templates.key_path(templates.join(prefix, "metadata.labels"), names.count)
    app = [c for c in view.items if c.key == "containers"]
    total: int | None = None  # unknown: a misshapen list or bad value, reported where it is
    if all(isinstance(c, podspec.Container) for c in app):
        try:
            total = sum(demand.units(c, names.memory, unit) for c in app if isinstance(c, podspec.Container))
        except ValueError:  # DemandError, or a value too large
            total = None
    found = demand.count_label_problem(labels, names, total, unit)
    return [] if found is None else [Violation(path, None, show(raw), *found)]


def _check_init_memory(view: specview.SpecView, unit: str) -> list[Violation]:
    """Init containers asking gpu-mem must fit inside what the app containers hold (demand.init_problem).
    Judged only when every amount reads: a bad value is reported where it is."""
    names = view.names
    init = [c for c in view.containers if c.init and c.asks(names.memory)]
    if not init or view.misshapen:
        return []
    try:
        app_total = sum(demand.units(c, names.memory, unit) for c in view.containers if not c.init)
        labels = view.labels if isinstance(view.labels, templates.OBJECT) else {}
        count = demand.gpu_count(labels, names.count)
        asked = [(c, demand.units(c, names.memory, unit)) for c in init]
    except ValueError:  # DemandError, or a value too large: reported by the other rules
        return []
    out = []
    for container, units in asked:
        found = demand.init_problem(
            units, app_total, count, names, unit, sidecar=demand.is_sidecar(container)
        )
        if found is not None:
            out.append(Violation(demand.memory_path(container, names), container.name, str(units), *found))
    return out


def check(view: specview.SpecView, unit: str = gpumem.DEFAULT_UNIT) -> list[Violation]:
    """Every GPU resource problem of one pod template (its view), in a stable order.

    `unit` is the configured gpu-mem unit, named in messages. Order: containers, then init containers
    (ephemeral containers cannot have resources), each by resource name; then the pod-level gpu-count
    label, the mixed-pod rule, init containers' memory and the MPS compute share.
    """
    out: list[Violation] = []
    names = view.names
    for item in view.items:
        if isinstance(item, podspec.WrongShape):
            out.append(wrong_type(item.path, None, item.value, item.expected))
        else:
            out += _check_container(item, names, unit)
    if view.labels is not None:
        out += _check_gpu_count(view, unit)
    card = names.whole_card  # the mixed-pod rule has nothing to say where no container names cards
    if any(card in c.limits or card in c.requests for c in view.containers):
        mixed = wholecards.mixed(view.spec, names, view.path, walked=view.items)
        if mixed is not None:
            out.append(Violation(mixed.path, mixed.container, None, *mixed.problem))
    if not out:  # judged on amounts that are right otherwise: a wrong one is to be fixed first
        out += _check_init_memory(view, unit)
    if view.annotations is not None:
        out += _check_compute_percent(view)
    return out


def check_pod_spec(
    metadata: Mapping[str, Any],
    spec: Mapping[str, Any],
    prefix: str,
    names: resources.GpuResourceNames,
    unit: str = gpumem.DEFAULT_UNIT,
) -> list[Violation]:
    """`check` of the template at `prefix` ("" for a Pod, "spec.template" for a Deployment)."""
    return check(specview.read(templates.PodTemplate(prefix, metadata, spec), names), unit)


def _check_compute_percent(view: specview.SpecView) -> list[Violation]:
    """The MPS compute share annotation: a whole percent 1..100 (core/node/mps.py reads it at Allocate)."""
    notes = view.annotations
    if not isinstance(notes, templates.OBJECT) or mps.COMPUTE_PERCENT_ANNOTATION not in notes:
        return []  # a misshapen annotations object is the API server's to refuse
    raw = notes[mps.COMPUTE_PERCENT_ANNOTATION]
    try:
        mps.compute_percent(raw)
    except mps.MpsError:
        path = templates.key_path(
            templates.join(view.path, "metadata.annotations"), mps.COMPUTE_PERCENT_ANNOTATION
        )
        problem = "must be a whole percent of the GPU's compute between 1 and 100 (MPS nodes only)"
        return [Violation(path, None, show(raw), problem, 'write e.g. "30", or remove the annotation')]
    return []
