"""What the plugin publishes on its Node.

Publishes `aliyun.com/gpu-count` in status capacity/allocatable (the kubelet keeps extended resources it
does not own; 0 while the node's mode advertises no shares), each GPU's memory and health as JSON in the
`NODE_DEVICES_ANNOTATION`, the format the extender reads (fault 2: GPUs of different sizes stay apart),
and the GPU type labels (core/node/gpulabels.py). Re-publishes on every health or mode change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import kubernetes.client

from webhook.core.node import gpulabels
from webhook.core.wire import resources
from webhook.deviceplugin.state import DeviceState
from webhook.kube import errors, pods, rounds

log = logging.getLogger(__name__)


class NodePublisher:
    """Patches the node now, on every device-state change, and every `refresh_s`; retries failures."""

    def __init__(
        self,
        api: kubernetes.client.ApiClient,
        node_name: str,
        state: DeviceState,
        *,
        refresh_s: float = 300.0,
        retry_s: float = 2.0,
        device_list: Callable[[], str] = lambda: "",
    ) -> None:
        self.api = api
        self.device_list = device_list  # how GPUs reach containers; "" not published
        self.node_name = node_name
        self.state = state
        self.refresh_s = refresh_s
        self.retry_s = retry_s
        self.published = 0
        self._rounds = rounds.Rounds("node-publisher", self._round, period_s=refresh_s)
        state.on_change(self.poke)

    def poke(self) -> None:
        """Publish again soon (what the node hands out changed)."""
        self._rounds.poke()

    def start(self) -> NodePublisher:
        self.poke()
        self._rounds.start()
        return self

    def stop(self) -> None:
        self._rounds.stop()

    def publish(self) -> None:
        """One round: status, then annotation. Raises errors.ApiError."""
        gpus = self.state.gpus
        healthy = len(gpus) - len(self.state.unhealthy)
        if not self.state.advertised:  # a mode that does not share: no GPUs to count shares on
            gpus, healthy = (), 0
        pods.patch_node_status(
            self.api,
            self.node_name,
            {
                "capacity": {resources.GPU_COUNT: str(len(gpus))},
                "allocatable": {resources.GPU_COUNT: str(healthy)},
            },
        )
        # One PATCH for all: the devices annotation and the GPU type labels change together.
        notes = {resources.NODE_DEVICES_ANNOTATION: self.state.node_devices().to_json()}
        device_list = self.device_list()
        if device_list:
            notes[resources.NODE_DEVICE_LIST_ANNOTATION] = device_list
        pods.patch_node_metadata(
            self.api, self.node_name, annotations=notes, labels=gpulabels.node_labels(self.state.gpus)
        )
        self.published += 1

    def _round(self) -> None:
        # Also every `refresh_s` unpoked: the Node object may have been recreated.
        try:
            self.publish()
            log.info("published %d GPUs on node %s", len(self.state.gpus), self.node_name)
        except errors.ApiError as err:
            log.warning("publishing GPUs on node %s failed: %s; retrying", self.node_name, err)
            self._rounds.again(self.retry_s)


def forget_gpus(api: kubernetes.client.ApiClient, node_name: str) -> None:
    """Remove the GPU type labels of a node whose GPUs are gone (the plugin then exits); best effort."""
    try:
        pods.patch_node_metadata(api, node_name, labels=gpulabels.node_labels(()))
    except errors.ApiError as err:
        log.warning("removing the GPU labels of node %s failed: %s", node_name, err)
