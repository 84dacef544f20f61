"""The walk of one pod template, which its read (core.specs.podread) holds: built before the first rule,
then read by all of them (the resource rules, isolation, look-alikes, the mixed-pod rule, and the demand
that the extender, the device plugin and `gpushare check` count with).

One walk builds it: each container's name, path, misshapen sections and GPU values (limit and request as
written and parsed, or the reason they do not parse; podspec.GpuValue), and the pod-level facts the rules
ask for first. The rules read the view only, never the raw pod.

    view = specview.read(templates.PodTemplate("", metadata, spec), names)
    view.containers[0].gpu["aliyun.com/gpu-mem"].limit  # Amount("limits", "4", Quantity('4'), True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from webhook.core.specs import finding, podspec, templates
from webhook.core.wire import resources


# A NamedTuple, not a frozen dataclass: one per pod template per review, ~0.5 us cheaper to build.
class SpecView(NamedTuple):
    """A pod template with its containers walked (each with its GPU reads) and its metadata looked up.

    `labels` and `annotations` are as written (maybe no object: each rule says what it makes of that).
    """

    template: templates.PodTemplate
    names: resources.GpuResourceNames
    items: list[podspec.Container | podspec.WrongShape]  # spec order: app, then init containers
    containers: list[podspec.Container]  # the items that are container objects
    labels: object
    annotations: object
    spec_path: str  # the template's "spec" field path, for messages
    # The containers holding more than zero GPU memory, in spec order (what isolation decides for).
    memory_holders: list[podspec.Container]

    @property
    def path(self) -> str:
        return self.template.path

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.template.spec

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.template.metadata

    @property
    def misshapen(self) -> bool:
        """Some container list or item has the wrong type (the rules name it)."""
        return len(self.containers) != len(self.items)

    def asks_memory(self) -> bool:
        """Some container asks for more than zero GPU memory, read as a number."""
        return bool(self.memory_holders)

    def asks_cards(self) -> bool:
        """Some container asks for whole cards (an unreadable count counts as asking)."""
        card = self.names.whole_card
        return any(c.asks(card) for c in self.containers)


def read(template: templates.PodTemplate, names: resources.GpuResourceNames) -> SpecView:
    """The view of `template`: every container walked once (podspec.containers), its metadata read."""
    path = template.path
    items = podspec.containers(template.spec, path, podspec.matcher(names))
    objects = [c for c in items if isinstance(c, podspec.Container)]
    memory = names.memory
    # Container.holds, read from the walk's values (a GPU name's holds was computed there)
    holders = [c for c in objects if memory in c.gpu and c.gpu[memory].holds]
    metadata = template.metadata
    spec_path = finding.join(path, "spec")
    labels, annotations = metadata.get("labels"), metadata.get("annotations")
    return SpecView(template, names, items, objects, labels, annotations, spec_path, holders)
