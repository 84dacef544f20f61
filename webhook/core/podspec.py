"""The containers of a pod spec as every rule reads them: each object with its field path, and each list
or item of the wrong JSON type, in spec order.

The rules, the isolation decision, the look-alike warnings and the demand (extender, device plugin) all
walk containers through `containers`, so none of them can meet `containers: 3` unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core import gpumem, templates

# App containers, then init containers: the order of every message. Ephemeral containers cannot have
# resources (pkg/apis/core/validation: validateEphemeralContainers), so no rule reads them.
KEYS = ("containers", "initContainers")


# Not frozen: a frozen dataclass costs ~0.2 us more to build, once per container per review.
@dataclass(slots=True)
class Container:
    """One container object: `path` is its field path, e.g. "spec.template.spec.containers[1]"."""

    path: str
    key: str  # "containers" or "initContainers"
    index: int  # in that list
    body: Mapping[str, Any]
    # Every rule reads these: `resources.limits` and `resources.requests`, {} when absent or no object.
    limits: Mapping[Any, Any] = field(init=False, repr=False, compare=False)
    requests: Mapping[Any, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        res = self.body.get("resources")
        if isinstance(res, templates.OBJECT):
            limits, requests = res.get("limits"), res.get("requests")
            self.limits = limits if isinstance(limits, templates.OBJECT) else {}
            self.requests = requests if isinstance(requests, templates.OBJECT) else {}
        else:
            self.limits = self.requests = {}

    def asks(self, name: str) -> bool:
        """More than zero of resource `name` (the limit, else the request); an unreadable value counts as
        asking, so a rule that needs to know never lets a bad value pass unseen."""
        if name in self.limits:
            raw = self.limits[name]
        elif name in self.requests:
            raw = self.requests[name]
        else:
            return False  # most containers: a fast answer, no parsing
        parsed = gpumem.parse(raw)
        return isinstance(parsed, str) or parsed > 0

    @property
    def init(self) -> bool:
        return self.key == "initContainers"


@dataclass(frozen=True, slots=True)
class WrongShape:
    """A container list, or an item of one, whose JSON type is wrong; `expected` in words."""

    path: str
    key: str  # the list it is or is in: "containers" or "initContainers"
    value: object
    expected: str


def containers(spec: Mapping[str, Any], prefix: str = "") -> list[Container | WrongShape]:
    """Every container of `spec` (app, then init) and every misshapen list or item, in spec order.

    `prefix` is the pod template's path ("" for a Pod, "spec.template" for a Deployment). An absent or
    null list is empty; any other non-list is one `WrongShape`, and so is each item that is no object.
    """
    out: list[Container | WrongShape] = []
    for key in KEYS:
        items = spec.get(key)
        if items is None:
            continue
        list_path = templates.join(prefix, f"spec.{key}")
        if not isinstance(items, list):
            out.append(WrongShape(list_path, key, items, "a list of containers"))
            continue
        for i, item in enumerate(items):
            path = f"{list_path}[{i}]"
            if isinstance(item, templates.OBJECT):
                out.append(Container(path, key, i, item))
            else:
                out.append(WrongShape(path, key, item, "an object (a container)"))
    return out


def objects(
    spec: Mapping[str, Any], prefix: str = "", walked: list[Container | WrongShape] | None = None
) -> list[Container]:
    """Only the container objects of `spec`; the misshapen ones are the rules' to report. `walked` is
    `containers(spec, prefix)` when the caller has it: a review walks each template once, not per rule."""
    items = containers(spec, prefix) if walked is None else walked
    return [c for c in items if isinstance(c, Container)]
