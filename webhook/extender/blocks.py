"""Nodes that take no gpu-mem share and no whole card of ours, with the reason filter and bind give: their
mode label takes no shares (`ack.node.gpu.schedule`), or they run whole-card pods that NVIDIA's plugin
placed while the node did not share GPUs (bound with no placement of ours: which GPUs they hold is unknown
here, so a share or a card of ours could land on one). Not thread-safe: the cache calls it under its lock.
"""

from __future__ import annotations


class NodeBlocks:
    __slots__ = ("_foreign", "_modes", "reasons")

    def __init__(self) -> None:
        self._modes: dict[str, str] = {}  # node -> why its mode label takes no shares
        self._foreign: dict[str, dict[str, None]] = {}  # node -> keys of its unplaced whole-card pods
        self.reasons: dict[str, str] = {}  # node -> why it is blocked: what filter and bind read

    def set_mode(self, node: str, problem: str | None) -> None:
        """The node's mode label takes no shares (`problem`), or does (None), or the node is gone (None)."""
        if problem is None:
            self._modes.pop(node, None)
        else:
            self._modes[node] = problem
        self._update(node)

    def add_card_pod(self, node: str, key: str) -> None:
        self._foreign.setdefault(node, {})[key] = None
        self._update(node)

    def drop_card_pod(self, node: str, key: str) -> None:
        pods = self._foreign.get(node)
        if pods is None or key not in pods:
            return
        del pods[key]
        if not pods:
            del self._foreign[node]
        self._update(node)

    def _update(self, node: str) -> None:
        reason = self._modes.get(node)
        pods = self._foreign.get(node)
        if reason is None and pods:
            reason = (
                f"the node runs {len(pods)} whole-GPU pod(s) (first: {next(iter(pods))}) that NVIDIA's "
                "plugin placed while it did not share GPUs; which GPUs they hold is unknown, so nothing more "
                "is placed here until they end"
            )
        if reason is None:
            self.reasons.pop(node, None)
        else:
            self.reasons[node] = reason
