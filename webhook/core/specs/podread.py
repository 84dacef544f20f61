"""One pod (or pod template) read once into everything the GPU parts judge it by, as kube-scheduler's
CycleState: the view of its containers (core.specs.specview: each GPU value parsed in one walk), and from
it, each asked once, the findings of the GPU resource rules and what the pod asks per container of GPU
memory and of whole cards (one `Demand` type for both), its GPU count and init containers.

The admission rules, the extender's ask and watch records, the ledger and the node views read a pod only
through here, never the walk or a quantity themselves.

    read = podread.of_pod(pod, names, "GiB")
    read.findings()  # [] for a fine pod: what the webhook would deny, as `Finding`s
    read.small_shares(1024)  # warnings for shares under 1 GiB, which the webhook admits
    read.demands()   # (Demand((4,), (), 1), Demand((0,))): raises the first Finding of an unreadable one
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from webhook.core.specs import demand, gpumem, resourcerules, specview, templates
from webhook.core.specs.demand import Demand
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources

DEFAULT_UNIT = gpumem.DEFAULT_UNIT
SMALL_SHARE_MIB = gpumem.SMALL_SHARE_MIB  # the least share that holds a CUDA context


# A NamedTuple, as the view: one per pod template per review, cheap to build. Nothing is computed until
# asked: the webhook asks for findings, the extender and the node agents for demands.
class PodRead(NamedTuple):
    view: specview.SpecView
    unit: str  # the gpu-mem unit counted in and named in messages

    @property
    def path(self) -> str:
        return self.view.template.path

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.view.template.spec

    @property
    def names(self) -> resources.GpuResourceNames:
        return self.view.names

    @property
    def labels(self) -> object:
        return self.view.labels

    @property
    def annotations(self) -> object:
        return self.view.annotations

    def findings(self) -> list[Finding]:
        """Every GPU resource problem of the template, in a stable order (core.specs.resourcerules)."""
        return resourcerules.check(self.view, self.unit)

    def small_shares(self, least_mib: int) -> list[str]:
        """A warning per container whose (allowed) gpu-mem share is under `least_mib` MiB."""
        return resourcerules.small_shares(self.view, self.unit, least_mib)

    def memory(self) -> Demand:
        """What the containers ask of GPU memory, and the GPU count; the first Finding when unreadable."""
        return demand.of_view(self.view, self.unit)

    def cards(self) -> Demand:
        """What the containers ask of whole cards; the first Finding when unreadable."""
        return demand.cards_of_view(self.view)

    def demands(self) -> tuple[Demand, Demand]:
        """GPU memory, then whole cards, from the one walk; the first Finding when either is unreadable."""
        return demand.of_view(self.view, self.unit), demand.cards_of_view(self.view)

    def asks_memory(self) -> bool:
        """Some container asks for more than zero GPU memory, read as a number."""
        return self.view.asks_memory()

    def asks_cards(self) -> bool:
        """Some container asks for whole cards (an unreadable count counts as asking)."""
        return self.view.asks_cards()


def read(
    template: templates.PodTemplate, names: resources.GpuResourceNames, unit: str = DEFAULT_UNIT
) -> PodRead:
    """The read of one pod template: its containers walked once (specview.read)."""
    return PodRead(specview.read(template, names), unit)


def of_pod(
    pod: Mapping[str, Any], names: resources.GpuResourceNames | None = None, unit: str = DEFAULT_UNIT
) -> PodRead:
    """The read of a pod (or pod template: metadata + spec); Finding for a spec or metadata of no object."""
    return read(demand.template_of(pod), names or resources.GpuResourceNames(), unit)


def of_spec(spec: Mapping[str, Any], names: resources.GpuResourceNames) -> PodRead:
    """The read of a bare pod spec (no metadata)."""
    return read(templates.PodTemplate("", {}, spec), names)
