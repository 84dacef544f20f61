"""What the plugin serves in its Node's current mode (`ack.node.gpu.schedule`, core/placement/modes.py),
re-decided on every label change without a restart.

share / cgpu / mps (and an unlabelled node): gpu-mem devices are advertised; mps (or `--mps`) adds the
MPS env and mounts to every Allocate. default / topology / dra / dra-mps / an unknown value, or mps on GPUs
older than Volta: ListAndWatch sends an empty list, so the kubelet's capacity drops to 0. Containers running
keep their GPUs (the kubelet never revokes devices) and the allocation book is kept for a switch back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from webhook.core.node import devices, mps, nodeserving
from webhook.core.node.nodeserving import Serving
from webhook.deviceplugin.state import DeviceState

log = logging.getLogger(__name__)


def decide(labels: Mapping[str, object], gpus: Sequence[devices.Gpu], force_mps: bool) -> Serving:
    """The shared rule (core/node/nodeserving.py) with the plugin's modes and words."""
    return nodeserving.decide(nodeserving.DEVICE_PLUGIN, labels, gpus, force_mps)


class NodeMode:
    """Applies `decide` to the DeviceState on every label change; Allocate reads `mps_dirs()`."""

    def __init__(self, state: DeviceState, force_mps: bool = False, dirs: mps.MpsDirs | None = None) -> None:
        self.state = state
        self.force_mps = force_mps
        self.dirs = dirs or mps.MpsDirs()
        self._lock = threading.Lock()
        self.serving = self._apply({}, None)

    def labels_changed(self, labels: Mapping[str, object]) -> None:
        with self._lock:
            self.serving = self._apply(labels, self.serving)

    def _apply(self, labels: Mapping[str, object], before: Serving | None) -> Serving:
        now = decide(labels, self.state.gpus, self.force_mps)
        if now == before:
            return now
        self.state.set_advertised(now.serves)
        if now.serves:
            log.info("node mode %s: advertising GPU memory%s", now.mode, " with MPS" if now.mps else "")
        else:
            log.warning("node mode %s: %s", now.mode, now.reason)
        return now

    def mps_dirs(self) -> mps.MpsDirs | None:
        """The MPS directories when Allocate must add MPS env and mounts; None otherwise."""
        return self.dirs if self.serving.mps and self.serving.serves else None
