"""How a node agent (the device plugin, the DRA driver) is told to stop: SIGTERM from the kubelet or a
container runtime, SIGINT from a terminal."""

from __future__ import annotations

import signal
import threading
from types import FrameType


def event() -> threading.Event:
    """An event that SIGTERM and SIGINT set, from now on; the agent waits on it, then stops itself."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
