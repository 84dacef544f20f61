"""One bind per pod at a time: a duplicate (a scheduler retry, a copy forwarded by a follower) waits for
the bind in progress and then sees its outcome, instead of reserving a second time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Turns:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._turns: dict[str, tuple[threading.Lock, list[int]]] = {}  # lock, [callers using it]

    @contextmanager
    def turn(self, key: str, timeout_s: float) -> Iterator[bool]:
        """Whether the pod's turn came within `timeout_s` (0: only if free now); held inside."""
        with self._guard:
            lock, users = self._turns.setdefault(key, (threading.Lock(), [0]))
            users[0] += 1
        got = lock.acquire(timeout=timeout_s) if timeout_s > 0 else lock.acquire(blocking=False)
        try:
            yield got
        finally:
            if got:
                lock.release()
            with self._guard:
                users[0] -= 1
                if not users[0]:
                    del self._turns[key]
