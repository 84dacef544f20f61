"""The containers of a pod spec as every rule reads them: each object with its field path, and each list
or item of the wrong JSON type, in spec order; each container's resource names sorted once into GPU
names and look-alike candidates, its name as messages show it, its misshapen resource sections, and each
GPU value read once, in the walk (`GpuValue`: limit and request as written and parsed, and whether any
rule has something to say of them), so the rules read the walk's results and never the raw pod again.

The rules, the isolation decision, the look-alike warnings and the demand (extender, device plugin) all
walk containers through `containers` (within `specview.read`, the view of one pod template), so none of
them can meet `containers: 3` unchecked, and none parses a quantity another has parsed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from webhook.core.specs import finding, gpumem, templates
from webhook.core.wire import quantity, resources

# App containers, then init containers: the order of every message. Ephemeral containers cannot have
# resources (pkg/apis/core/validation: validateEphemeralContainers), so no rule reads them.
KEYS = ("containers", "initContainers")
_NAME_LIMIT = 63
_VALUE_LIMIT = 60  # a resource name in a field path
_EMPTY: Mapping[Any, Any] = {}
_NONE: tuple[Any, ...] = ()


class Amount(NamedTuple):
    """One resource value of a container: the section it is read from, as written, and as parsed."""

    section: str  # "limits" or "requests"
    raw: object
    parsed: quantity.Quantity | str  # gpumem.parse(raw): the quantity, or apimachinery's reason
    plain: bool = False  # a whole number >= 0 without a suffix: no value rule has anything to say of it


class GpuValue(NamedTuple):
    """One GPU resource of a container, read in the walk: what the rules judge, without the raw pod."""

    name: str
    shown: str  # the name as messages show it (one line, clipped): the key in field paths
    limit: Amount | None
    request: Amount | None  # parsed on its own, as the API server compares it with the limit
    amount: Amount  # the limit, else the request (defaulting copies limits to requests)
    # Nothing for the value rules to say: no gpu-count name, a plain limit, and a request that is the
    # limit's own spelling or absent (most pods). The rules look closer only at the rest.
    settled: bool
    asks: bool  # more than zero, or unreadable (Container.asks)
    holds: bool  # more than zero, read as a number (Container.holds)


# A container's resource names sorted: its GPU names (sorted), and the domain-qualified names that are no
# GPU name with the section each is first in (look-alike candidates).
Sorted = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]


class Matcher(NamedTuple):
    """Which resource names are GPU names (`resources.GpuResourceNames.is_gpu`), as a set and prefixes,
    and the names of the containers seen so far, sorted (pods repeat the same few: cpu, memory, gpu-mem)."""

    exact: frozenset[str]
    prefixes: tuple[str, ...]
    seen: dict[tuple[tuple[Any, ...], tuple[Any, ...]], Sorted]
    count_name: str = resources.GPU_COUNT  # the gpu-count name: never a container's resource (never settled)

    def sort(self, limits: Mapping[Any, Any], requests: Mapping[Any, Any]) -> Sorted:
        """The names of a container's limits and requests sorted (see `Sorted`), each name once."""
        key = (tuple(limits), tuple(requests))
        found = self.seen.get(key)
        if found is None:
            found = self._sort(limits, requests)
            try:  # kept only for short names, and so many sets (a pod can hold any names)
                short = sum(map(len, key[0])) + sum(map(len, key[1])) <= _SEEN_CHARS
            except TypeError:  # a name that is no string (YAML): not kept
                short = False
            if short and len(self.seen) < _SEEN_SETS:
                self.seen[key] = found
        return found

    def _sort(self, limits: Mapping[Any, Any], requests: Mapping[Any, Any]) -> Sorted:
        exact, prefixes = self.exact, self.prefixes
        found: list[str] = []
        others: list[tuple[str, str]] = []
        # Each name once, from the first section that has it.
        unread = [name for name in requests if name not in limits]
        for section, names in (("limits", limits), ("requests", unread)):
            for name in names:
                if name in exact:
                    found.append(name)
                # cpu, memory, hugepages-2Mi have no domain; a YAML key such as 5 is no name.
                elif isinstance(name, str) and (name.startswith(prefixes) or "/" in name):
                    if name.startswith(prefixes):
                        found.append(name)
                    else:
                        others.append((section, name))
        return tuple(sorted(found)), tuple(others)


# The memo of sorted names: at most this many sets of names, of at most this many characters each.
_SEEN_SETS = 1024
_SEEN_CHARS = 1024


def matcher(names: resources.GpuResourceNames) -> Matcher:
    """The matcher of `names`: one per configuration (equal names share one), looked up by identity
    first, as a view is read per pod template and comparing two configurations costs more."""
    known = _MATCHERS.get(id(names))
    if known is not None and known[0] is names:
        return known[1]
    found = _matcher(names)
    if len(_MATCHERS) < _MATCHERS_KEPT:
        _MATCHERS[id(names)] = (names, found)  # holding `names` keeps its id from being reused
    return found


_MATCHERS: dict[int, tuple[resources.GpuResourceNames, Matcher]] = {}
_MATCHERS_KEPT = 64


@functools.lru_cache(maxsize=16)
def _matcher(names: resources.GpuResourceNames) -> Matcher:
    exact = frozenset((*names.whole_device, names.memory, names.count))
    return Matcher(exact, names.whole_device_prefixes, {}, names.count)


DEFAULT_MATCHER = matcher(resources.GpuResourceNames())


# A slots dataclass with its own __init__: built once per container per review, in one call (a frozen
# dataclass, or __post_init__, costs more).
@dataclass(slots=True, init=False)
class Container:
    """One container object: `path` is its field path, e.g. "spec.template.spec.containers[1]"."""

    path: str
    key: str  # "containers" or "initContainers"
    index: int  # in that list
    body: Mapping[str, Any]
    init: bool = field(repr=False, compare=False)  # an init container (key "initContainers")
    # A restartable init container (restartPolicy: Always, a native sidecar): it keeps running.
    sidecar: bool = field(repr=False, compare=False)
    # The container's name as messages show it (one line, clipped); None when it has none.
    name: str | None = field(repr=False, compare=False)
    # Every rule reads these: `resources.limits` and `resources.requests`, {} when absent or no object.
    limits: Mapping[Any, Any] = field(repr=False, compare=False)
    requests: Mapping[Any, Any] = field(repr=False, compare=False)
    # The GPU resource names among both sections' keys, sorted (the rules' order).
    gpu_names: tuple[str, ...] = field(repr=False, compare=False)
    # Each GPU name's values, read in the walk, in gpu_names order.
    gpu: Mapping[str, GpuValue] = field(repr=False, compare=False)
    # Every GPU value settled (GpuValue.settled): the value rules have nothing to say of this container.
    settled: bool = field(repr=False, compare=False)
    # `resources`, or its limits or requests, present but no object, in that order (the rules name them).
    wrong: tuple[WrongShape, ...] = field(repr=False, compare=False)
    # (section, name) of each domain-qualified name that is no GPU name, first section only: what the
    # look-alike warnings compare with the GPU names.
    other_names: tuple[tuple[str, str], ...] = field(repr=False, compare=False)
    # What amount() and request() have parsed of names that are no GPU names, by name and by
    # ("requests", name).
    _memo: dict[object, Any] = field(repr=False, compare=False)

    def __init__(
        self, path: str, key: str, index: int, body: Mapping[str, Any], gpu: Matcher = DEFAULT_MATCHER
    ) -> None:
        self.path, self.key, self.index, self.body = path, key, index, body
        self.init = init = key == "initContainers"
        self.sidecar = init and body.get("restartPolicy") == "Always"
        self._memo = {}
        raw = body.get("name")
        # finding.printable, spelled out for the common name that is already one short line
        if not isinstance(raw, str):
            self.name = None
        elif len(raw) <= _NAME_LIMIT and raw.isprintable():
            self.name = raw
        else:
            self.name = finding.printable(raw, _NAME_LIMIT)
        self.gpu, self.settled, self.wrong = _NO_VALUES, True, _NONE
        res = body.get("resources")
        # `x is not None` first: a failed isinstance against Mapping (an ABC) costs several times more.
        if res is None or not isinstance(res, templates.OBJECT):
            self.limits = self.requests = _EMPTY
            self.gpu_names = self.other_names = _NONE
            if res is not None:
                self.wrong = (WrongShape(f"{path}.resources", key, res, "an object"),)
            return
        limits, requests = res.get("limits"), res.get("requests")
        if limits is None or not isinstance(limits, templates.OBJECT):
            if limits is not None:
                self.wrong = (WrongShape(f"{path}.resources.limits", key, limits, "an object"),)
            limits = _EMPTY
        if requests is None or not isinstance(requests, templates.OBJECT):
            if requests is not None:
                found = WrongShape(f"{path}.resources.requests", key, requests, "an object")
                self.wrong = (*self.wrong, found)
            requests = _EMPTY
        self.limits, self.requests = limits, requests
        if not limits and not requests:
            self.gpu_names = self.other_names = _NONE
            return
        self.gpu_names, self.other_names = gpu.sort(limits, requests)
        if self.gpu_names:
            self.gpu, self.settled = _read_values(self.gpu_names, limits, requests, gpu.count_name)

    def amount(self, name: str) -> Amount | None:
        """What the container asks of resource `name`: its limit, else its request (defaulting copies
        limits to requests); None when it names neither. GPU names were read in the walk; any other
        name is parsed on the first read, then kept."""
        value = self.gpu.get(name)
        if value is not None:
            return value.amount
        memo = self._memo
        if name in memo:
            found: Amount | None = memo[name]
            return found
        if name in self.limits:
            raw = self.limits[name]
            found = Amount("limits", raw, gpumem.parse(raw))
        elif name in self.requests:
            raw = self.requests[name]
            found = Amount("requests", raw, gpumem.parse(raw))
        else:
            found = None
        memo[name] = found
        return found

    def request(self, name: str) -> quantity.Quantity | str:
        """`requests[name]` parsed (it must be there)."""
        value = self.gpu.get(name)
        if value is not None and value.request is not None:
            return value.request.parsed
        key = ("requests", name)
        memo = self._memo
        if key in memo:
            parsed: quantity.Quantity | str = memo[key]
            return parsed
        if name in self.limits:
            parsed = gpumem.parse(self.requests[name])
        else:  # the request is the container's amount: parsed there
            amount = self.amount(name)
            assert amount is not None
            parsed = amount.parsed
        memo[key] = parsed
        return parsed

    def asks(self, name: str) -> bool:
        """More than zero of resource `name` (the limit, else the request); an unreadable value counts as
        asking, so a rule that needs to know never lets a bad value pass unseen."""
        if name not in self.limits and name not in self.requests:
            return False  # most containers: a fast answer, no parsing
        value = self.gpu.get(name)
        if value is not None:
            return value.asks
        found = self.amount(name)
        assert found is not None
        return _asks(found.parsed)

    def holds(self, name: str) -> bool:
        """More than zero of resource `name`, read as a number: an unreadable value does not count (the
        rules deny it), a number too large to parse counts by its sign."""
        if name not in self.limits and name not in self.requests:
            return False
        value = self.gpu.get(name)
        if value is not None:
            return value.holds
        found = self.amount(name)
        assert found is not None
        return _holds(found.raw, found.parsed)


_NO_VALUES: Mapping[str, GpuValue] = {}


def value_path(container: Container, section: str, name: str) -> str:
    """Where resource `name` is written in `container`: `<path>.resources.<section>[<name>]`, the name as
    messages show it (one line, clipped)."""
    return f"{container.path}.resources.{section}[{finding.printable(name, _VALUE_LIMIT)}]"


def _asks(parsed: quantity.Quantity | str) -> bool:
    return isinstance(parsed, str) or parsed.mantissa > 0


def _holds(raw: object, parsed: quantity.Quantity | str) -> bool:
    if isinstance(parsed, str):
        return isinstance(raw, int) and not isinstance(raw, bool) and raw > 0
    return parsed.mantissa > 0


def _read_values(
    gpu_names: tuple[str, ...], limits: Mapping[Any, Any], requests: Mapping[Any, Any], count: str
) -> tuple[dict[str, GpuValue], bool]:
    """Each GPU name's limit and request, parsed (gpumem.read: a spelling is read once per process), and
    whether all are settled. Spelled out in one loop: most containers hold one GPU name."""
    values: dict[str, GpuValue] = {}
    settled = True
    # gpumem.read, its remembered half called directly: most values are a short spelling read before
    read_text, cached = gpumem.read_text, gpumem.CACHED_LENGTH
    for name in gpu_names:
        limit = request = None
        if name in limits:
            raw = limits[name]
            parsed, plain = read_text(raw) if type(raw) is str and len(raw) <= cached else gpumem.read(raw)
            limit = Amount("limits", raw, parsed, plain)
        if name in requests:
            raw = requests[name]
            parsed, plain = read_text(raw) if type(raw) is str and len(raw) <= cached else gpumem.read(raw)
            request = Amount("requests", raw, parsed, plain)
        amount = limit if limit is not None else request
        assert amount is not None  # a GPU name is a key of one section or both
        raw, parsed = amount.raw, amount.parsed
        # Container.asks and Container.holds, spelled out (_asks, _holds): one call less per value
        if isinstance(parsed, str):
            asks, holds = True, isinstance(raw, int) and not isinstance(raw, bool) and raw > 0
        else:
            asks = holds = parsed.mantissa > 0
        fine = (
            limit is not None
            and limit.plain
            and (request is None or request.parsed is limit.parsed)  # one spelling, parsed once
            and name != count
        )
        settled = settled and fine
        short = len(name) <= _VALUE_LIMIT and name.isprintable()  # finding.printable, spelled out
        shown = name if short else finding.printable(name, _VALUE_LIMIT)
        values[name] = GpuValue(name, shown, limit, request, amount, fine, asks, holds)
    return values, settled


@dataclass(frozen=True, slots=True)
class WrongShape:
    """A container list, or an item of one, whose JSON type is wrong; `expected` in words."""

    path: str
    key: str  # the list it is or is in: "containers" or "initContainers"
    value: object
    expected: str


def containers(
    spec: Mapping[str, Any], prefix: str = "", gpu: Matcher = DEFAULT_MATCHER
) -> list[Container | WrongShape]:
    """Every container of `spec` (app, then init) and every misshapen list or item, in spec order.

    `prefix` is the pod template's path ("" for a Pod, "spec.template" for a Deployment). An absent or
    null list is empty; any other non-list is one `WrongShape`, and so is each item that is no object.
    `gpu` says which resource names are GPU names (`matcher(names)`).
    """
    out: list[Container | WrongShape] = []
    for key in KEYS:
        items = spec.get(key)
        if items is None:
            continue
        list_path = f"{prefix}.spec.{key}" if prefix else f"spec.{key}"
        if not isinstance(items, list):
            out.append(WrongShape(list_path, key, items, "a list of containers"))
            continue
        for i, item in enumerate(items):
            if isinstance(item, templates.OBJECT):
                out.append(Container(f"{list_path}[{i}]", key, i, item, gpu))
            else:
                out.append(WrongShape(f"{list_path}[{i}]", key, item, "an object (a container)"))
    return out


def objects(
    spec: Mapping[str, Any],
    prefix: str = "",
    walked: list[Container | WrongShape] | None = None,
    gpu: Matcher = DEFAULT_MATCHER,
) -> list[Container]:
    """Only the container objects of `spec`; the misshapen ones are the rules' to report. `walked` is
    `containers(spec, prefix, gpu)` when the caller has it (a review walks each template once)."""
    items = containers(spec, prefix, gpu) if walked is None else walked
    return [c for c in items if isinstance(c, Container)]


def held_at_once(containers: Sequence[int], init_containers: Sequence[int]) -> int:
    """What a pod holds at once of a resource counted per container: init containers run one by one
    before the app containers, so the larger of the app containers' sum and the largest init container
    (the kubelet's and kube-scheduler's effective request)."""
    return max(sum(containers), max(init_containers, default=0))
