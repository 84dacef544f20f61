"""GPU resource rules for one pod spec: each problem becomes a `Violation` naming field, container and fix.

Rules are values, not exceptions, so one denial message lists every problem of an object. The checks
mirror `validateResourceRequirements` (pkg/apis/core/validation) for GPU names, and say how to fix them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core import demand, gpumem, mps, podspec, quantity, resources, templates, wholecards

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


_parse = gpumem.parse


def _value_problem(
    path: str,
    container: str | None,
    raw: object,
    name: str,
    names: resources.GpuResourceNames,
    *,
    unit: str,
) -> tuple[quantity.Quantity | None, Violation | None]:
    parsed = _parse(raw)
    if name == names.memory:
        found = gpumem.memory_problem(raw, parsed, name, unit)
        value = None if isinstance(parsed, str) else parsed
        return value, None if found is None else Violation(path, container, show(raw), *found)
    whole_gpus = names.is_whole_device(name)
    name = templates.printable(name, _VALUE_LIMIT)
    if isinstance(parsed, str):
        fix = 'write a whole number such as "1"'
        return None, Violation(path, container, show(raw), f"is not a valid quantity: {parsed}", fix)
    if parsed.is_negative():
        problem, fix = f"{name} cannot be negative", 'use 0 or more, e.g. "1"'
        return parsed, Violation(path, container, show(raw), problem, fix)
    if parsed.is_integer():
        return parsed, None
    if whole_gpus:
        share = f"{names.memory} (in {gpumem.unit_plural(unit)})"
        problem = f"only whole GPUs are possible with {name}; a share of one GPU is asked with {share}"
        fix = f'use a whole number of GPUs such as "1", or {names.memory}: "<{unit}>" for a share of one GPU'
    else:
        problem = f"{name} must be a whole number"
        fix = 'use a whole number such as "1"'
    return parsed, Violation(path, container, show(raw), problem, fix)


def _same(limit: quantity.Quantity | None, request: quantity.Quantity | str | None) -> bool:
    if not isinstance(limit, quantity.Quantity) or not isinstance(request, quantity.Quantity):
        return False
    return limit.milli_value() == request.milli_value()


def _check_resource(
    resources_path: str,
    container: str | None,
    name: str,
    *,
    limits: Mapping[Any, Any],
    requests: Mapping[Any, Any],
    names: resources.GpuResourceNames,
    unit: str,
) -> list[Violation]:
    out: list[Violation] = []
    shown = templates.printable(name, _VALUE_LIMIT)
    limit_path = f"{resources_path}.limits[{shown}]"
    request_path = f"{resources_path}.requests[{shown}]"
    if name == names.count:
        # Not a container's resource at all: one violation, at the limit when there is one.
        path, raw = (limit_path, limits[name]) if name in limits else (request_path, requests[name])
        found = gpumem.count_resource(names.count)
        return [Violation(path, container, show(raw), found.problem, found.fix)]
    limit = request = None
    if name in limits:
        limit, problem = _value_problem(limit_path, container, limits[name], name, names, unit=unit)
        out += [problem] if problem else []
    if name in requests:
        parsed = _parse(requests[name])
        # After defaulting a Pod's request is a copy of its limit: report a bad value once, at the limit.
        # Compared as the API server does (validateResourceRequirements), after defaulting rounded both
        # up to milli.
        same = _same(limit, parsed)
        if not same:
            request, problem = _value_problem(request_path, container, requests[name], name, names, unit=unit)
            out += [problem] if problem else []
        if name not in limits:
            out.append(
                Violation(
                    limit_path,
                    container,
                    None,
                    f"requests[{shown}] is {show(requests[name])} but there is no limit; "
                    "GPU resources cannot be overcommitted",
                    f"set limits[{shown}] equal to the request",
                )
            )
        elif limit is not None and request is not None and not _same(limit, request):
            out.append(
                Violation(
                    request_path,
                    container,
                    show(requests[name]),
                    f"must equal limits[{shown}] ({show(limits[name])}); "
                    "GPU resources cannot be overcommitted",
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
    body, limits, requests = container.body, container.limits, container.requests
    # Limits and requests mostly share their keys: ask is_gpu once per distinct name.
    gpu_names = names.gpu_names({*limits, *requests})
    # Sections that hold a name are objects: only an empty one may be of the wrong type.
    shaped = bool(limits and requests)
    if not gpu_names and (shaped or body.get("resources") is None):
        return []  # most containers: nothing to report, no name or path to build
    raw_name = body.get("name")
    name = templates.printable(raw_name, _NAME_LIMIT) if isinstance(raw_name, str) else None
    res_path = templates.join(container.path, "resources")
    out = [] if shaped else _wrong_types(body.get("resources"), res_path, name)
    for resource in gpu_names:
        out += _check_resource(
            res_path, name, resource, limits=limits, requests=requests, names=names, unit=unit
        )
    whole = [n for n in gpu_names if names.is_whole_device(n) and container.asks(n)]
    if whole and names.memory in gpu_names and container.asks(names.memory):
        section = "limits" if names.memory in limits else "requests"
        found = gpumem.whole_and_memory(whole[0], names.memory, unit)
        out.append(Violation(f"{res_path}.{section}", name, None, found.problem, found.fix))
    return out


def _check_gpu_count(
    metadata: Mapping[str, Any],
    containers: list[podspec.Container | podspec.WrongShape],
    prefix: str,
    names: resources.GpuResourceNames,
    unit: str,
) -> list[Violation]:
    """The multi-GPU label: a positive whole number that divides the pod's total gpu-mem."""
    labels = metadata.get("labels")
    if labels is None:
        return []
    if not isinstance(labels, templates.OBJECT):
        return [wrong_type(templates.join(prefix, "metadata.labels"), None, labels, "an object")]
    if names.count not in labels:
        return []
    raw = labels[names.count]
    path = templates.key_path(templates.join(prefix, "metadata.labels"), names.count)
    app = [c for c in containers if c.key == "containers"]
    bodies = [c.body for c in app if isinstance(c, podspec.Container)]
    total: int | None = None  # unknown: a misshapen list or bad value, reported where it is
    if len(bodies) == len(app):
        try:
            total = sum(demand.container_units(b, names.memory, unit) for b in bodies)
        except ValueError:  # DemandError, or a value too large
            total = None
    found = demand.count_label_problem(labels, names, total, unit)
    return [] if found is None else [Violation(path, None, show(raw), *found)]


def _check_init_memory(
    metadata: Mapping[str, Any],
    containers: list[podspec.Container | podspec.WrongShape],
    names: resources.GpuResourceNames,
    unit: str,
) -> list[Violation]:
    """Init containers asking gpu-mem must fit inside what the app containers hold (demand.init_problem).
    Judged only when every amount reads: a bad value is reported where it is."""
    init = [c for c in containers if isinstance(c, podspec.Container) and c.init and c.asks(names.memory)]
    if not init or any(isinstance(c, podspec.WrongShape) for c in containers):
        return []
    try:
        app_total = sum(
            demand.container_units(c.body, names.memory, unit)
            for c in containers
            if isinstance(c, podspec.Container) and not c.init
        )
        count = demand.gpu_count(metadata.get("labels") or {}, names.count)
        asked = [(c, demand.container_units(c.body, names.memory, unit)) for c in init]
    except ValueError:  # DemandError, or a value too large: reported by the other rules
        return []
    out = []
    for container, units in asked:
        found = demand.init_problem(
            units, app_total, count, names, unit, sidecar=demand.is_sidecar(container)
        )
        if found is not None:
            raw_name = container.body.get("name")
            name = templates.printable(raw_name, _NAME_LIMIT) if isinstance(raw_name, str) else None
            out.append(Violation(demand.memory_path(container, names), name, str(units), *found))
    return out


def check_pod_spec(
    metadata: Mapping[str, Any],
    spec: Mapping[str, Any],
    prefix: str,
    names: resources.GpuResourceNames,
    unit: str = gpumem.DEFAULT_UNIT,
    *,
    walked: list[podspec.Container | podspec.WrongShape] | None = None,
) -> list[Violation]:
    """Every GPU resource problem of one pod template, in a stable order.

    `prefix` is the template's path ("" for a Pod, "spec.template" for a Deployment); `unit` is the
    configured gpu-mem unit, named in messages. Order: containers, then init containers (ephemeral
    containers cannot have resources), each by resource name; then the pod-level gpu-count label.
    `walked` is `podspec.containers(spec, prefix)` when the caller already has it.
    """
    out: list[Violation] = []
    items = podspec.containers(spec, prefix) if walked is None else walked
    for item in items:
        if isinstance(item, podspec.WrongShape):
            out.append(wrong_type(item.path, None, item.value, item.expected))
        else:
            out += _check_container(item, names, unit)
    out += _check_gpu_count(metadata, items, prefix, names, unit)
    mixed = wholecards.mixed(spec, names, prefix, walked=items)
    if mixed is not None:
        out.append(Violation(mixed.path, mixed.container, None, *mixed.problem))
    if not out:  # judged on amounts that are right otherwise: a wrong one is to be fixed first
        out += _check_init_memory(metadata, items, names, unit)
    out += _check_compute_percent(metadata, prefix)
    return out


def _check_compute_percent(metadata: Mapping[str, Any], prefix: str) -> list[Violation]:
    """The MPS compute share annotation: a whole percent 1..100 (core/mps.py reads it at Allocate)."""
    notes = metadata.get("annotations")
    if not isinstance(notes, templates.OBJECT) or mps.COMPUTE_PERCENT_ANNOTATION not in notes:
        return []  # a misshapen annotations object is the API server's to refuse
    raw = notes[mps.COMPUTE_PERCENT_ANNOTATION]
    try:
        mps.compute_percent(raw)
    except mps.MpsError:
        path = templates.key_path(
            templates.join(prefix, "metadata.annotations"), mps.COMPUTE_PERCENT_ANNOTATION
        )
        problem = "must be a whole percent of the GPU's compute between 1 and 100 (MPS nodes only)"
        return [Violation(path, None, show(raw), problem, 'write e.g. "30", or remove the annotation')]
    return []
