"""GPU resource rules for one pod spec: each problem becomes a `Violation` naming field, container and fix.

Rules are values, not exceptions, so one denial message lists every problem of an object. The checks
mirror `validateResourceRequirements` (pkg/apis/core/validation) for GPU names, and say how to fix them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core import demand, quantity, resources, templates

_VALUE_LIMIT = 60
_NAME_LIMIT = 63
# Python refuses to print ints of more than 4300 digits; no quantity needs more than a few.
_MAX_INT_BITS = 3000
# What a quantity may arrive as; a tuple, as `str | int | ...` in isinstance builds a union per call.
_JSON_SCALARS = (str, int, float, type(None))


@dataclass(frozen=True, slots=True)
class Violation:
    path: str  # field path, e.g. "spec.template.spec.containers[1].resources.limits[nvidia.com/gpu]"
    container: str | None  # None for pod-level problems such as the gpu-count label
    value: str | None  # the offending value as the user wrote it
    problem: str  # what is wrong, in words a data scientist understands
    fix: str  # what to write instead

    def __str__(self) -> str:
        where = self.path or "(object)"
        if self.container is not None:
            where += f' (container "{self.container}")'
        shown = "" if self.value is None else f' "{self.value}":'
        return templates.printable(f"{where}:{shown} {self.problem}; fix: {self.fix}")


def show(value: object) -> str:
    """A value as the user wrote it, on one line and short: strings as they are, scalars as JSON."""
    if isinstance(value, str):
        text = value
    elif value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value) if value.bit_length() <= _MAX_INT_BITS else "<a very large number>"
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = f"<{templates.json_type(value)}>"
    return templates.printable(text, _VALUE_LIMIT)


def wrong_type(path: str, container: str | None, value: object, expected: str) -> Violation:
    """The violation for a field whose JSON type is wrong (the API server would not decode it)."""
    return Violation(
        path=path,
        container=container,
        value=None if isinstance(value, Mapping | list) else show(value),
        problem=f"has the wrong type: expected {expected}, got {templates.json_type(value)}",
        fix=f"write this field as {expected}",
    )


def _parse(raw: object) -> quantity.Quantity | str:
    """The quantity, or apimachinery's reason for refusing it."""
    if isinstance(raw, int) and raw.bit_length() > _MAX_INT_BITS:
        return quantity.TOO_LARGE_ERROR
    if not isinstance(raw, _JSON_SCALARS):
        # from_json would repr() the value, which fails for lists holding huge ints.
        return quantity.FORMAT_ERROR
    try:
        return quantity.from_json(raw)
    except quantity.QuantityError as err:
        return err.reason


def _value_problem(
    path: str, container: str | None, raw: object, name: str, names: resources.GpuResourceNames
) -> tuple[quantity.Quantity | None, Violation | None]:
    parsed = _parse(raw)
    whole_gpus = names.is_whole_device(name)
    name = templates.printable(name, _VALUE_LIMIT)
    example = '"1"' if name != names.memory else '"4"'
    if isinstance(parsed, str):
        fix = f"write a whole number such as {example}"
        return None, Violation(path, container, show(raw), f"is not a valid quantity: {parsed}", fix)
    if parsed.is_negative():
        return parsed, Violation(
            path, container, show(raw), f"{name} cannot be negative", f"use 0 or more, e.g. {example}"
        )
    if parsed.is_integer():
        return parsed, None
    if whole_gpus:
        problem = (
            f"only whole GPUs are possible with {name}; a share of one GPU is asked with "
            f"{names.memory} (in GiB)"
        )
        fix = f'use a whole number of GPUs such as "1", or {names.memory}: "<GiB>" for a share of one GPU'
    elif name == names.memory:
        problem = f"{name} counts whole units of GPU memory (GiB); a fraction of a unit is not possible"
        fix = f'use a whole number of GiB such as "{-(-parsed.milli_value() // 1000)}"'
    else:
        problem = f"{name} must be a whole number"
        fix = f"use a whole number such as {example}"
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
) -> list[Violation]:
    out: list[Violation] = []
    shown = templates.printable(name, _VALUE_LIMIT)
    limit_path = f"{resources_path}.limits[{shown}]"
    request_path = f"{resources_path}.requests[{shown}]"
    limit = request = None
    if name in limits:
        limit, problem = _value_problem(limit_path, container, limits[name], name, names)
        out += [problem] if problem else []
    if name in requests:
        parsed = _parse(requests[name])
        # After defaulting a Pod's request is a copy of its limit: report a bad value once, at the limit.
        # Compared as the API server does, after defaulting rounded both up to milli (contracts §3.2).
        same = _same(limit, parsed)
        if not same:
            request, problem = _value_problem(request_path, container, requests[name], name, names)
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


def _check_container(
    container: Mapping[str, Any], path: str, names: resources.GpuResourceNames
) -> list[Violation]:
    raw_name = container.get("name")
    name = templates.printable(raw_name, _NAME_LIMIT) if isinstance(raw_name, str) else None
    res = container.get("resources")
    if res is None:
        return []
    res_path = templates.join(path, "resources")
    if not isinstance(res, templates.OBJECT):
        return [wrong_type(res_path, name, res, "an object")]
    out: list[Violation] = []
    sections: list[Mapping[Any, Any]] = []
    for section in ("limits", "requests"):
        values = res.get(section)
        if values is not None and not isinstance(values, templates.OBJECT):
            out.append(wrong_type(templates.join(res_path, section), name, values, "an object"))
        sections.append(values if isinstance(values, templates.OBJECT) else {})
    limits, requests = sections
    # Limits and requests mostly share their keys: ask is_gpu once per distinct name.
    gpu_names = sorted(k for k in {*limits, *requests} if isinstance(k, str) and names.is_gpu(k))
    for resource in gpu_names:
        out += _check_resource(res_path, name, resource, limits=limits, requests=requests, names=names)
    return out


def _check_gpu_count(
    metadata: Mapping[str, Any], containers: object, prefix: str, names: resources.GpuResourceNames
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
    try:
        count = demand.gpu_count(labels, names.count)
    except demand.DemandError as err:
        fix = 'set the label to the number of GPUs to spread the pod over, e.g. "2"'
        return [Violation(path, None, show(raw), templates.printable(str(err), 200), fix)]
    if not isinstance(containers, list) or not all(isinstance(c, templates.OBJECT) for c in containers):
        return []
    try:
        total = sum(demand.container_units(c, names.memory) for c in containers)
    except ValueError:
        return []  # a bad gpu-mem value (DemandError or too large), already reported at its container
    try:
        demand.check_split(total, count, names.count)
    except demand.DemandError as err:
        fix = f"make the pod's total {names.memory} a multiple of {count}, or change the label"
        return [Violation(path, None, show(raw), str(err), fix)]
    return []


def check_pod_spec(
    metadata: Mapping[str, Any], spec: Mapping[str, Any], prefix: str, names: resources.GpuResourceNames
) -> list[Violation]:
    """Every GPU resource problem of one pod template, in a stable order.

    `prefix` is the template's path ("" for a Pod, "spec.template" for a Deployment). Order: containers,
    then init containers (ephemeral containers cannot have resources), each by resource name; then the
    pod-level gpu-count label.
    """
    out: list[Violation] = []
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        list_path = templates.join(prefix, f"spec.{key}")
        if items is None:
            continue
        if not isinstance(items, list):
            out.append(wrong_type(list_path, None, items, "a list of containers"))
            continue
        for i, container in enumerate(items):
            path = f"{list_path}[{i}]"
            if not isinstance(container, templates.OBJECT):
                out.append(wrong_type(path, None, container, "an object (a container)"))
                continue
            out += _check_container(container, path, names)
    out += _check_gpu_count(metadata, spec.get("containers"), prefix, names)
    return out
