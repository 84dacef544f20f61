"""What a pod asks of shared GPU memory: per-container `aliyun.com/gpu-mem` and the GPU-count split.

The webhook's rules, the extender's filter and the device plugin's Allocate all read a pod's demand
from its view (core/specs/specview.py: each quantity parsed once) through `pod_demand` or `of_view`, so they
agree on the numbers (HAMi's lesson: one device model for all parts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.specs import gpumem, podspec, specview, templates
from webhook.core.wire import resources


class DemandError(ValueError):
    """A pod whose GPU-memory request cannot be read; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class GpuMemoryDemand:
    """gpu-mem units per container (spec.containers order, 0 when none) and GPUs to spread over."""

    containers: tuple[int, ...]
    init_containers: tuple[int, ...] = ()
    gpu_count: int = 1

    @property
    def total(self) -> int:
        """The pod's total: the sum over app containers (ALIYUN_COM_GPU_MEM_POD)."""
        return sum(self.containers)

    @property
    def effective(self) -> int:
        """What the pod holds at once: init containers run one by one, before the app containers."""
        return podspec.held_at_once(self.containers, self.init_containers)

    @property
    def per_gpu(self) -> int:
        """Units on each of the `gpu_count` GPUs when the pod is split over several GPUs."""
        return self.total // self.gpu_count

    def asks(self) -> bool:
        return self.effective > 0


def _error(path: str, container: str | None, value: object, found: gpumem.Problem) -> DemandError:
    # Worded as the webhook's Violation, so the extender and `gpushare check` say the same.
    shown = None if value is None else gpumem.show(value)
    return DemandError(gpumem.describe(path, container, shown, found.problem, found.fix))


def _wrong_type(path: str, container: str | None, value: object, expected: str) -> DemandError:
    # As rules.wrong_type: a scalar is shown, an object or list is not.
    shown = None if isinstance(value, Mapping | list) else value
    return _error(path, container, shown, gpumem.wrong_type(value, expected))


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
    res_path = templates.join(container.path, "resources")
    if not isinstance(res, Mapping):
        raise _wrong_type(res_path, container.name, res, "an object")
    for section in ("limits", "requests"):
        values = res.get(section)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise _wrong_type(templates.join(res_path, section), container.name, values, "an object")
        if name in values:
            return


def _asks(container: podspec.Container, name: str) -> bool:
    found = container.amount(name)
    return found is not None and not isinstance(found.parsed, str) and found.parsed > 0


def _check_shape(container: podspec.Container, names: resources.GpuResourceNames, unit: str) -> None:
    """The rules' container-level denials that the extender must repeat: gpu-count as a resource, and
    whole GPUs with gpu-mem in one container (see gpumem.count_resource, gpumem.whole_and_memory)."""
    limits, requests = container.limits, container.requests
    res_path = templates.join(container.path, "resources")
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
        raise DemandError("metadata.labels must be an object")
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
        raise DemandError(f'label {key}={shown} must be a positive whole number of GPUs, e.g. "2"')
    return int(text)


def count_label_problem(
    labels: Mapping[str, Any], names: resources.GpuResourceNames, total: int | None, unit: str
) -> gpumem.Problem | None:
    """What is wrong with the pod's gpu-count label, in words (the rules and the extender say the same);
    None when it is fine. `total` is the pod's gpu-mem units; None skips the split check."""
    try:
        count = gpu_count(labels, names.count)
    except DemandError as err:
        fix = 'set the label to the number of GPUs to spread the pod over, e.g. "2"'
        return gpumem.Problem(templates.printable(str(err), 200), fix)
    if total is None:
        return None
    try:
        check_split(total, count, names.count, unit)
    except DemandError as err:
        fix = f"make the pod's total {names.memory} a multiple of {count} {unit}, or change the label"
        return gpumem.Problem(str(err), fix)
    return None


def init_problem(
    init_units: int,
    app_total: int,
    count: int,
    names: resources.GpuResourceNames,
    unit: str,
    *,
    sidecar: bool = False,
) -> gpumem.Problem | None:
    """What is wrong with an init container asking `init_units` of gpu-mem beside app containers asking
    `app_total` over `count` GPUs; None when it is fine (the rules and the extender say the same).

    The extender reserves the app containers' memory and the device plugin runs an init container inside
    it, on the GPU(s) the pod holds (split like the pod when it divides evenly, else on one of them): an
    init container asking more would use memory nobody counted, and one beside app containers asking
    none would have no GPU at all."""
    if init_units <= 0:
        return None
    if sidecar:  # restartPolicy: Always runs beside the app containers, outside what they hold
        return gpumem.Problem(
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
    return gpumem.Problem(
        f"an init container asks {init_units} {plural} of {names.memory}, more than the pod's app "
        f"containers hold{where} ({room}): init containers run inside the app containers' GPU memory",
        f"{fix}, or this init container at most {room}" if room else f"{fix} (the GPU it shares with them)",
    )


def check_split(
    total: int, count: int, key: str = resources.GPU_COUNT_LABEL, unit: str = gpumem.DEFAULT_UNIT
) -> None:
    """Several GPUs for one pod: the pod's total must split evenly (N/M whole units per GPU)."""
    if count > 1 and total % count:
        raise DemandError(
            f"label {key}={count} asks to split the pod's {total} {unit} of GPU memory over {count} GPUs, "
            f"which is not a whole number of {gpumem.unit_plural(unit)} per GPU; "
            f"use a total that is a multiple of {count} {unit}"
        )


def pod_demand(
    pod: Mapping[str, Any],
    names: resources.GpuResourceNames | None = None,
    unit: str = gpumem.DEFAULT_UNIT,
) -> GpuMemoryDemand:
    """Read a pod (or pod template: metadata + spec) into its GPU-memory demand.

    Any JSON shape is read: a wrong type raises DemandError naming the field, never another error.
    """
    names = names or resources.GpuResourceNames()
    return of_view(specview.read(template_of(pod), names), unit)


def template_of(pod: Mapping[str, Any]) -> templates.PodTemplate:
    """The pod (or pod template) as the view reads it; DemandError for a spec or metadata of no object."""
    parts = []
    for key in ("spec", "metadata"):
        value = pod.get(key)
        if value is not None and not isinstance(value, Mapping):
            # As templates.scan reports it for the webhook: no value shown.
            raise _error(key, None, None, gpumem.wrong_type(value, "an object"))
        parts.append(value or {})
    spec, metadata = parts
    return templates.PodTemplate("", metadata, spec)


def of_view(view: specview.SpecView, unit: str = gpumem.DEFAULT_UNIT) -> GpuMemoryDemand:
    """The demand of a pod whose view is read (`pod_demand` reads it); DemandError as there."""
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
    labels_path = templates.join(view.path, "metadata.labels")
    if labels is not None and not isinstance(labels, Mapping):
        raise _wrong_type(labels_path, None, labels, "an object")
    labels = labels or {}
    if names.count in labels:
        found = count_label_problem(labels, names, sum(app), unit)
        if found is not None:
            raise _error(templates.key_path(labels_path, names.count), None, labels[names.count], found)
    count = gpu_count(labels, names.count)
    for item, asked in zip(init_items, init, strict=True):
        found = init_problem(asked, sum(app), count, names, unit, sidecar=item.sidecar)
        if found is not None:
            raise _error(memory_path(item, names), item.name, asked, found)
    return GpuMemoryDemand(containers=tuple(app), init_containers=tuple(init), gpu_count=count)


def memory_path(item: podspec.Container, names: resources.GpuResourceNames) -> str:
    """Where a container asks for gpu-mem: its limit when it has one, else its request."""
    section = "limits" if names.memory in item.limits else "requests"
    return podspec.value_path(item, section, names.memory)
