"""What the driver serves in its Node's current mode (`ack.node.gpu.schedule`, core/placement/modes.py),
re-decided on every label change without a restart.

dra: the GPUs are published. dra-mps (or `--mps`): published, and every prepared claim's CDI spec
carries the MPS env and mounts; GPUs older than Volta then publish nothing. Any other mode, an unknown
value or no label: nothing is published (the device plugin or NVIDIA's serves that node; two must never
serve one GPU). Claims already prepared keep their specs; a claim allocated before a switch still prepares.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from webhook.core.node import devices, mps, nodeserving
from webhook.core.node.nodeserving import Serving

log = logging.getLogger(__name__)


def decide(labels: Mapping[str, object], gpus: Sequence[devices.Gpu], force_mps: bool) -> Serving:
    """The shared rule (core/node/nodeserving.py) with the driver's modes and words."""
    return nodeserving.decide(nodeserving.DRA_DRIVER, labels, gpus, force_mps)


class NodeMode:
    """Applies `decide` on every label change; `changed` listeners hear of a new decision."""

    def __init__(self, gpus: Sequence[devices.Gpu], force_mps: bool, dirs: mps.MpsDirs) -> None:
        self.gpus = tuple(gpus)
        self.force_mps = force_mps
        self.dirs = dirs
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self.known = threading.Event()  # set once the node's labels were read
        self.serving = decide({}, self.gpus, force_mps)

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def labels_changed(self, labels: Mapping[str, object]) -> None:
        with self._lock:
            now = decide(labels, self.gpus, self.force_mps)
            changed, self.serving = now != self.serving, now
        if changed or not self.known.is_set():
            if now.serves:
                log.info("node mode %s: publishing GPUs%s", now.mode, " with MPS" if now.mps else "")
            else:
                log.warning("node mode %s: %s", now.mode, now.reason)
        self.known.set()
        if changed:
            for listener in self._listeners:
                listener()

    def mps_dirs(self) -> mps.MpsDirs | None:
        """The MPS folders when prepared claims get MPS env and mounts; None otherwise."""
        serving = self.serving
        return self.dirs if serving.mps and serving.serves else None
