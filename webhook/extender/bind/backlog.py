"""Backpressure from bind to filter.

kube-scheduler starts the bind of each pod it has placed without waiting for the earlier ones. When
kube-apiserver binds more slowly than kube-scheduler filters (always, on a busy control plane), binds pile
up in the extender; over HTTP/2, where no connection setup slows kube-scheduler down, a 4,000-pod run
queued them for 1.8 s on average, and a bind kube-scheduler waits on longer than its `httpTimeout` (5 s
in the chart) fails and is tried again. So filter, which kube-scheduler calls one pod at a time, waits
(up to `max_wait_s`, well below that timeout) while more than `limit` binds are pending: the scheduling
loop then runs at the pace binds complete, and a bind waits for the API server rather than for a queue.

All calls come from the event loop's thread.
"""

from __future__ import annotations

import asyncio
import time


class BindBacklog:
    """Binds accepted and not yet answered, and a wait for them to drop to `limit`."""

    def __init__(self, limit: int, max_wait_s: float) -> None:
        self.limit = limit
        self.max_wait_s = max_wait_s
        self.pending = 0
        self._drained: asyncio.Event | None = None

    def started(self) -> None:
        self.pending += 1

    def finished(self) -> None:
        self.pending -= 1
        if self._drained is not None and self.pending <= self.limit:
            self._drained.set()

    async def wait(self) -> float:
        """Wait while more than `limit` binds are pending, `max_wait_s` at most; the seconds waited."""
        if self.pending <= self.limit:
            return 0.0
        started = time.monotonic()
        deadline = started + self.max_wait_s
        while self.pending > self.limit:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if self._drained is None:
                self._drained = asyncio.Event()
            self._drained.clear()
            try:
                await asyncio.wait_for(self._drained.wait(), remaining)
            except TimeoutError:
                break
        return time.monotonic() - started
