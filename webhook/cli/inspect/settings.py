"""What `gpushare inspect` shows and where from (`InspectSettings`), and its error (`InspectError`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from webhook.core.wire import resources
from webhook.kube import client as kube_client

DEFAULT_TIMEOUT_S = 30.0
# The device plugin's pods, by the chart's labels (gpushare.labels / selectorLabels), in any namespace.
AGENT_SELECTOR = "app.kubernetes.io/part-of=gpushare,app.kubernetes.io/component=device-plugin"


class InspectError(Exception):
    """The cluster or the extender could not be read; the message says which and why."""


@dataclass(frozen=True, slots=True)
class InspectSettings:
    """What to show and where from; `nodes` keeps each name once, in the order given."""

    nodes: tuple[str, ...] = ()  # only these nodes; all GPU nodes when empty
    details: bool = False
    output: str = "text"
    unit: str = "GiB"
    extender: str = ""  # the extender's URL prefix, e.g. https://127.0.0.1:39999/gpushare-scheduler
    # An HTTPS extender: the CA that verifies it, and the client certificate it asks for (its Secret's).
    extender_ca: str = ""
    extender_cert: str = ""
    extender_key: str = ""
    extender_server_name: str = ""  # the name its certificate holds, when dialled by IP or port-forward
    client: kube_client.ClientSettings = field(default_factory=kube_client.ClientSettings)
    timeout_s: float = DEFAULT_TIMEOUT_S
    names: resources.GpuResourceNames = field(default_factory=resources.GpuResourceNames)
    # --usage: what each GPU and pod really uses, from each node's device plugin (cli/inspect/usage.py).
    usage: bool = False
    agent_namespace: str = ""  # where the device plugin runs; "" = any namespace
    agent_selector: str = AGENT_SELECTOR
    # --namespaces: memory per namespace beside its ResourceQuotas instead of the node table.
    namespaces: bool = False

    def __post_init__(self) -> None:
        # A node named twice would be listed twice and its memory counted twice in the cluster total.
        object.__setattr__(self, "nodes", tuple(dict.fromkeys(self.nodes)))
