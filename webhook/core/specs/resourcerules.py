"""GPU resource rules for one pod template's view: each problem becomes a `Finding` naming field,
container and fix (core.specs.podread lists them in the pod's read, the webhook and `gpushare check` deny
by them).

Findings are values, so one denial message lists every problem of an object. The checks mirror
`validateResourceRequirements` (pkg/apis/core/validation) for GPU names, and say how to fix them. A share
the rules allow but too small for a CUDA context gets a warning instead (`small_shares`).
"""

from __future__ import annotations

from webhook.core.specs import demand, gpumem, podspec, specview, templates
from webhook.core.specs.finding import Finding, join, key_path, show, showing, wrong_type
from webhook.core.wire import quantity, resources
from webhook.core.wire.units import unit_mib


def _value_problem(
    container: podspec.Container,
    value: podspec.GpuValue,
    amount: podspec.Amount,
    names: resources.GpuResourceNames,
    unit: str,
) -> Finding | None:
    """What is wrong with one GPU value (`amount`, the limit or request of `value` as the walk read it);
    None when it is fine. The field path and container name are built only for a violation."""
    name, raw, parsed = value.name, amount.raw, amount.parsed
    if name == names.memory:
        found = gpumem.memory_problem(raw, parsed, name, unit)
        if found is None:
            return None
        return Finding(_field(container, amount.section, value), container.name, show(raw), *found)
    if isinstance(parsed, str):
        problem, fix = f"is not a valid quantity: {parsed}", 'write a whole number such as "1"'
    elif parsed.is_negative():
        problem = f"{value.shown} cannot be negative"
        fix = 'use 0 or more, e.g. "1"'
    elif parsed.is_integer():
        return None
    elif names.is_whole_device(name):
        share = f"{names.memory} (in {gpumem.unit_plural(unit)})"
        problem = f"only whole GPUs are possible with {value.shown}; a share of one GPU is asked with {share}"
        fix = f'use a whole number of GPUs such as "1", or {names.memory}: "<{unit}>" for a share of one GPU'
    else:
        problem = f"{value.shown} must be a whole number"
        fix = 'use a whole number such as "1"'
    return Finding(_field(container, amount.section, value), container.name, show(raw), problem, fix)


def _field(container: podspec.Container, section: str, value: podspec.GpuValue) -> str:
    return podspec.value_path(container, section, value.name)


def _same(limit: quantity.Quantity | str, request: quantity.Quantity | str) -> bool:
    if limit is request:
        return not isinstance(limit, str)  # one parse of two equal spellings (most pods)
    if not isinstance(limit, quantity.Quantity) or not isinstance(request, quantity.Quantity):
        return False
    return limit.milli_value() == request.milli_value()


def _check_resource(
    container: podspec.Container, value: podspec.GpuValue, names: resources.GpuResourceNames, unit: str
) -> list[Finding]:
    """One GPU value that is not settled (podspec.GpuValue.settled)."""
    limit_read, request_read = value.limit, value.request
    if value.name == names.count:
        # Not a container's resource at all: one violation, at the limit when there is one.
        found = gpumem.count_resource(names.count)
        amount = value.amount
        return [Finding(_field(container, amount.section, value), container.name, show(amount.raw), *found)]
    out: list[Finding] = []
    limit: quantity.Quantity | str | None = None
    if limit_read is not None:
        limit = limit_read.parsed
        problem = _value_problem(container, value, limit_read, names, unit)
        if problem is not None:
            out.append(problem)
    if request_read is None:
        return out
    request = request_read.parsed
    # After defaulting a Pod's request is a copy of its limit: report a bad value once, at the limit.
    # Compared as the API server does (validateResourceRequirements), after defaulting rounded both up to
    # milli.
    if limit is not None and _same(limit, request):
        return out
    raw = request_read.raw
    problem = _value_problem(container, value, request_read, names, unit)
    if problem is not None:
        out.append(problem)
    shown = value.shown
    if limit_read is None:
        out.append(
            Finding(
                _field(container, "limits", value),
                container.name,
                None,
                f"requests[{shown}] is {show(raw)} but there is no limit; "
                "GPU resources cannot be overcommitted",
                f"set limits[{shown}] equal to the request",
            )
        )
    elif isinstance(limit, quantity.Quantity) and isinstance(request, quantity.Quantity):
        out.append(
            Finding(
                _field(container, "requests", value),
                container.name,
                show(raw),
                f"must equal limits[{shown}] ({show(limit_read.raw)}); GPU resources cannot be overcommitted",
                f"set requests[{shown}] equal to the limit, or leave it out (it defaults to the limit)",
            )
        )
    return out


def _check_container(
    container: podspec.Container, names: resources.GpuResourceNames, unit: str
) -> list[Finding]:
    """A container the walk found something to look at in: a misshapen section, a value not settled, or
    several GPU names."""
    out = [wrong_type(w.path, container.name, w.value, w.expected) for w in container.wrong]
    values = container.gpu
    if not container.settled:
        for value in values.values():
            if not value.settled:
                out += _check_resource(container, value, names, unit)
    # Whole GPUs and a share in one container; with gpu-mem alone (most) there is no whole-GPU name.
    memory = values.get(names.memory)
    if len(values) > 1 and memory is not None and memory.asks:
        whole = [v.name for v in values.values() if v.asks and names.is_whole_device(v.name)]
        if whole:
            section = "limits" if memory.limit is not None else "requests"
            both = gpumem.whole_and_memory(whole[0], names.memory, unit)
            path = f"{container.path}.resources.{section}"
            out.append(Finding(path, container.name, None, both.problem, both.fix))
    return out


def _memory_units(container: podspec.Container, names: resources.GpuResourceNames, unit: str) -> int | None:
    """The container's whole gpu-mem units as the extender counts them (demand.units: one count for
    both); None where that count fails, a bad value or a misshapen section the other rules report.
    Reached only for the gpu-count label and init containers that ask memory."""
    try:
        return demand.units(container, names.memory, unit)
    except Finding:
        return None


def _app_units(view: specview.SpecView, unit: str) -> int | None:
    """The app containers' gpu-mem units in all; None when one is unknown or a list is misshapen."""
    total = 0
    for item in view.items:
        if item.key != "containers":
            continue
        if isinstance(item, podspec.WrongShape):
            return None
        units = _memory_units(item, view.names, unit)
        if units is None:
            return None
        total += units
    return total


def _check_gpu_count(view: specview.SpecView, unit: str) -> list[Finding]:
    """The multi-GPU label: a positive whole number that divides the pod's total gpu-mem."""
    labels, names = view.labels, view.names
    if labels is None:
        return []
    prefix = view.path
    if not isinstance(labels, templates.OBJECT):
        return [wrong_type(join(prefix, "metadata.labels"), None, labels, "an object")]
    if names.count not in labels:
        return []
    raw = labels[names.count]
    path = key_path(join(prefix, "metadata.labels"), names.count)
    # unknown (None): a misshapen list or bad value, reported where it is
    found = demand.count_label_problem(labels, names, _app_units(view, unit), unit)
    return [] if found is None else [Finding(path, None, show(raw), *found)]


def _check_init_memory(view: specview.SpecView, unit: str) -> list[Finding]:
    """Init containers asking gpu-mem must fit inside what the app containers hold (demand.init_problem).
    Judged only when every amount reads: a bad value is reported where it is."""
    names = view.names
    memory = names.memory
    init = [c for c in view.containers if c.init and memory in c.gpu and c.gpu[memory].asks]
    if not init or view.misshapen:
        return []
    app_total = _app_units(view, unit)
    asked = [(c, _memory_units(c, names, unit)) for c in init]
    if app_total is None or any(units is None for _, units in asked):
        return []  # reported by the other rules
    try:
        labels = view.labels if isinstance(view.labels, templates.OBJECT) else {}
        count = demand.gpu_count(labels, names.count)
    except Finding:  # reported by the gpu-count rule
        return []
    out = []
    for container, units in asked:
        assert units is not None
        found = demand.init_problem(units, app_total, count, names, unit, sidecar=container.sidecar)
        if found is not None:
            path = _field(container, container.gpu[memory].amount.section, container.gpu[memory])
            out.append(Finding(path, container.name, str(units), *found))
    return out


def check(view: specview.SpecView, unit: str = gpumem.DEFAULT_UNIT) -> list[Finding]:
    """Every GPU resource problem of one pod template (its view), in a stable order.

    `unit` is the configured gpu-mem unit, named in messages. Order: containers, then init containers
    (ephemeral containers cannot have resources), each by resource name; then the pod-level gpu-count
    label, the mixed-pod rule, init containers' memory and the MPS compute share annotation.

    Each rule reads the view only. A rule is entered only when the view shows it has something to judge
    (most pods: one GPU value, settled in the walk), so a fine pod costs this one call.
    """
    out: list[Finding] = []
    names = view.names
    for item in view.items:
        if isinstance(item, podspec.WrongShape):
            out.append(wrong_type(item.path, None, item.value, item.expected))
        elif item.wrong or not item.settled or len(item.gpu) > 1:
            out += _check_container(item, names, unit)
    labels = view.labels
    if labels is not None and (not isinstance(labels, templates.OBJECT) or names.count in labels):
        out += _check_gpu_count(view, unit)
    card = names.whole_card  # the mixed-pod rule has nothing to say where no container names cards
    if any(card in c.limits or card in c.requests for c in view.containers):
        mixed = demand.mixed(view.spec, names, view.path, walked=view.items)
        if mixed is not None:
            out.append(mixed)
    memory = names.memory
    # judged on amounts that are right otherwise: a wrong one is to be fixed first
    if not out and any(c.init and memory in c.gpu for c in view.containers):
        out += _check_init_memory(view, unit)
    notes = view.annotations
    if isinstance(notes, templates.OBJECT) and resources.COMPUTE_PERCENT_ANNOTATION in notes:
        out += _check_compute_percent(view.path, notes[resources.COMPUTE_PERCENT_ANNOTATION])
    return out


def _check_compute_percent(prefix: str, raw: object) -> list[Finding]:
    """The MPS compute share annotation: a whole percent 1..100 (core/node/mps.py hands it out)."""
    try:
        resources.compute_percent(raw)
    except ValueError:
        name = resources.COMPUTE_PERCENT_ANNOTATION
        at = key_path(join(prefix, "metadata.annotations"), name)
        problem = "must be a whole percent of the GPU's compute between 1 and 100 (MPS nodes only)"
        return [showing(at, None, raw, problem, 'write e.g. "30", or remove the annotation')]
    return []


def small_shares(view: specview.SpecView, unit: str, least_mib: int) -> list[str]:
    """A warning per container whose gpu-mem share (a value the rules allow) is under `least_mib`: it may
    not hold the CUDA context of the process. Warnings, not findings: such a share is admitted."""
    memory, mib_per_unit = view.names.memory, unit_mib(unit)
    found = []
    for container in view.containers:
        value = container.gpu.get(memory)
        if value is None:
            continue  # none asked
        amount = value.amount
        if not amount.plain and gpumem.memory_problem(amount.raw, amount.parsed, memory, unit) is not None:
            continue  # denied by the rules with a fix of their own
        assert not isinstance(amount.parsed, str)
        mib = amount.parsed.to_int() * mib_per_unit
        if gpumem.under_least(mib, least_mib):
            who = f'container "{container.name or "?"}"'
            found.append(gpumem.small_share(who, mib, gpumem.least_units(least_mib, unit)))
    return found
