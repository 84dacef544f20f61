"""Work done in rounds on a thread of its own until stopped: a round when poked, and one every `period_s`
without a poke; the loop behind the leader election, the node agents' publishers, pollers and socket
watches, written once.

`poke()` before `start()` runs the first round at once. A round that must run again sooner calls
`again(after_s)` (a failed publish, a kubelet that refused a registration).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Rounds:
    def __init__(
        self,
        name: str,
        work: Callable[[], object],  # what it returns is not read
        *,
        period_s: float,
        quiet_s: float = 0.0,
        quiet_max_s: float = 5.0,
    ) -> None:
        """`quiet_s`: after a poke, wait until no poke came for this long (at most `quiet_max_s`), so a
        burst of pokes costs one round, after it."""
        self.work = work
        self.period_s = period_s
        self.quiet_s = quiet_s
        self.quiet_max_s = quiet_max_s
        self.stopped = threading.Event()
        self._poked = threading.Event()
        self._last_poke = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def poke(self) -> None:
        """Run a round soon. Only the first poke of a burst sets the event: a wake-up per poke would take
        the GIL from the callers."""
        self._last_poke = time.monotonic()
        if not self._poked.is_set():
            self._poked.set()

    def again(self, after_s: float = 0.0) -> None:
        """From a round: run another one, after `after_s` (unless stopped first)."""
        self._poked.set()
        if after_s:
            self.stopped.wait(after_s)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopped.set()
        self._poked.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self.stopped.is_set():
            self._poked.wait(self.period_s)
            if self.quiet_s:
                self._settle()
            self._poked.clear()
            if self.stopped.is_set():
                return
            self.work()

    def _settle(self) -> None:
        give_up = time.monotonic() + self.quiet_max_s
        while not self.stopped.is_set() and time.monotonic() < give_up:
            quiet = time.monotonic() - self._last_poke
            if quiet >= self.quiet_s:
                return
            self.stopped.wait(self.quiet_s - quiet)
