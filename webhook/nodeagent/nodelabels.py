"""This node's Node object, watched: its labels (the node's mode, the CGPU_DISABLE switch) and its UID.

Listeners hear every read of the Node, changed or not, and decide themselves what changed: the mode
reads the labels, the DRA driver's slice is owned by the UID.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import kubernetes.client

from webhook.core.wire import resources
from webhook.kube import watch


class NodeLabels:
    def __init__(self, api: kubernetes.client.ApiClient, node_name: str) -> None:
        self.labels: Mapping[str, str] = {}
        self.uid = ""
        self._listeners: list[Callable[[Mapping[str, str]], None]] = []
        self.watch = watch.one_node(api, node_name, self._on_event)

    def on_change(self, listener: Callable[[Mapping[str, str]], None]) -> None:
        self._listeners.append(listener)

    def apply(self, node: Mapping[str, Any]) -> None:
        meta = node.get("metadata") or {}
        self.uid = str(meta.get("uid") or "")
        self.labels = labels = dict(meta.get("labels") or {})
        for listener in self._listeners:
            listener(labels)

    def isolation_disabled(self) -> bool:
        """The CGPU_DISABLE switch, read at each Allocate, so a label change applies to the next container
        without a restart."""
        return str(self.labels.get(resources.ISOLATION_KEY, "")).strip().lower() == "true"

    def _on_event(self, event: watch.WatchEvent) -> None:
        found = event.objects[:1] if event.type == watch.RESYNC else (event.object,)
        for node in found:
            if node is not None and event.type != watch.DELETED:
                self.apply(node)
