"""Faults injected between the extender's binder and any API server (the stand-in or a real one).

`FaultyBindingApi` wraps the binder's `BindingApi` seam (and `FaultyAsyncBindingApi` the event loop's
`AsyncBindingApi`, drawing from the same `Injector`), so the same faults work against a real API server,
where nothing can be injected server-side: latency before a Binding reaches the API and before
its reply comes back, 409 and 500 that never reached it, 500 for a Binding that did land (a lost reply),
500 on the GET the binder makes after a failure. `kill()` models the process dying: nothing more is
sent, while calls already on the wire finish.
"""

from __future__ import annotations

import asyncio
import collections
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.extender.bind.calls import AsyncBindingApi, BindingApi
from webhook.kube import errors

# Counter keys of `FaultyBindingApi.injected`.
SLOW, CONFLICT, ERROR, LOST_REPLY, GET_ERROR, DEAD = "slow", "409", "500", "lost-reply", "get-500", "dead"


@dataclass(frozen=True, slots=True)
class Faults:
    """Shares of calls that get each fault (0..1); latency is uniform in [0, latency_s]."""

    latency_s: float = 0.3
    slow: float = 0.3  # calls delayed (a Binding before it reaches the API and again before its reply)
    conflict: float = 0.04  # Bindings answered 409 without reaching the API
    error: float = 0.04  # Bindings answered 500 without reaching the API
    lost_reply: float = 0.04  # Bindings that land but answer 500
    get_error: float = 0.1  # GETs answered 500
    # Each fault with a share above 0 comes once first (each Binding fault, then the GET one), then the draws
    # decide: a short run meets every kind whatever the threads' order does to the draws.
    each_first: bool = False

    @classmethod
    def none(cls) -> Faults:
        return cls(latency_s=0.0, slow=0.0, conflict=0.0, error=0.0, lost_reply=0.0, get_error=0.0)


class Injector:
    """The faults of `faults`, drawn from one seeded generator; counts what it injected. Thread-safe."""

    def __init__(self, faults: Faults, seed: int = 0) -> None:
        self.faults = faults
        self.injected: collections.Counter[str] = collections.Counter()
        self.sent = 0  # Bindings that reached the API
        self._rng = random.Random(seed)
        f = faults
        # What a fault drawn at this value gives (`refused`, `lost_reply`, `get_refused` compare with these).
        at = {CONFLICT: 0.0, ERROR: f.conflict, LOST_REPLY: f.conflict + f.error, GET_ERROR: 0.0}
        shares = {CONFLICT: f.conflict, ERROR: f.error, LOST_REPLY: f.lost_reply, GET_ERROR: f.get_error}
        owed = [kind for kind, share in shares.items() if share > 0] if f.each_first else []
        self._owed_bindings = [at[kind] for kind in owed if kind != GET_ERROR]
        self._owed_gets = [at[kind] for kind in owed if kind == GET_ERROR]
        self._lock = threading.Lock()
        self._dead = False
        self._in_flight = 0
        self._idle = threading.Condition(self._lock)

    def draw(self, get: bool = False) -> tuple[float, float, float]:
        """(fault, slow, delay) for one Binding (or, with `get`, one GET): a fault still owed once first."""
        with self._lock:
            fault, slow, delay = (
                self._rng.random(),
                self._rng.random(),
                self._rng.uniform(0, self.faults.latency_s),
            )
            owed = self._owed_gets if get else self._owed_bindings
            return (owed.pop(0) if owed else fault), slow, delay

    def count(self, what: str) -> None:
        with self._lock:
            self.injected[what] += 1

    def enter(self) -> None:
        with self._lock:
            if self._dead:
                self.injected[DEAD] += 1
                raise errors.ApiError(errors.TRANSPORT, "ConnectionError", "the extender process is gone")
            self._in_flight += 1

    def leave(self, sent: bool = False) -> None:
        with self._lock:
            self._in_flight -= 1
            self.sent += sent
            self._idle.notify_all()

    def kill(self, timeout_s: float = 30.0) -> None:
        """Send nothing more; wait for the calls already on the wire (a dying process's last requests)."""
        with self._lock:
            self._dead = True
            self._idle.wait_for(lambda: self._in_flight == 0, timeout_s)

    def refused(self, name: str, fault: float) -> errors.ApiError | None:
        """The error a Binding gets without reaching the API, if `fault` draws one."""
        f = self.faults
        if fault < f.conflict:
            self.count(CONFLICT)
            return errors.ConflictError(409, "Conflict", f"injected conflict binding pod {name}")
        if fault < f.conflict + f.error:
            self.count(ERROR)
            return errors.ApiError(500, "InternalError", f"injected error binding pod {name}")
        return None

    def lost_reply(self, name: str, fault: float) -> errors.ApiError | None:
        f = self.faults
        if fault < f.conflict + f.error + f.lost_reply:
            self.count(LOST_REPLY)
            return errors.ApiError(500, "InternalError", f"injected lost reply binding pod {name}")
        return None

    def get_refused(self, name: str, fault: float) -> errors.ApiError | None:
        if fault < self.faults.get_error:
            self.count(GET_ERROR)
            return errors.ApiError(500, "InternalError", f"injected error reading pod {name}")
        return None


class FaultyBindingApi:
    """A BindingApi that passes calls to `inner` with the faults `injector` draws."""

    def __init__(self, inner: BindingApi, faults: Faults | Injector, seed: int = 0) -> None:
        self.inner = inner
        self.injector = faults if isinstance(faults, Injector) else Injector(faults, seed)

    @property
    def injected(self) -> collections.Counter[str]:
        return self.injector.injected

    @property
    def sent(self) -> int:
        return self.injector.sent

    def kill(self, timeout_s: float = 30.0) -> None:
        self.injector.kill(timeout_s)

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        inj = self.injector
        fault, slow, delay = inj.draw()
        if slow < inj.faults.slow:
            inj.count(SLOW)
            time.sleep(delay)
        refused = inj.refused(name, fault)
        if refused is not None:
            raise refused
        inj.enter()
        sent = False
        try:
            self.inner.bind(namespace, name, uid, node, annotations)
            sent = True
        finally:
            inj.leave(sent)
        if slow < inj.faults.slow:
            time.sleep(delay)  # the reply is slow too: the watch may show the pod bound first
        lost = inj.lost_reply(name, fault)
        if lost is not None:
            raise lost

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        inj = self.injector
        fault, slow, delay = inj.draw(get=True)
        if slow < inj.faults.slow:
            time.sleep(delay)  # not counted: `slow` counts delayed Bindings
        refused = inj.get_refused(name, fault)
        if refused is not None:
            raise refused
        inj.enter()
        try:
            return self.inner.get_pod(namespace, name)
        finally:
            inj.leave()


class FaultyAsyncBindingApi:
    """FaultyBindingApi on the event loop: the same faults, awaited delays."""

    def __init__(self, inner: AsyncBindingApi, injector: Injector) -> None:
        self.inner = inner
        self.injector = injector

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        inj = self.injector
        fault, slow, delay = inj.draw()
        if slow < inj.faults.slow:
            inj.count(SLOW)
            await asyncio.sleep(delay)
        refused = inj.refused(name, fault)
        if refused is not None:
            raise refused
        inj.enter()
        sent = False
        try:
            await self.inner.bind(namespace, name, uid, node, annotations)
            sent = True
        finally:
            inj.leave(sent)
        if slow < inj.faults.slow:
            await asyncio.sleep(delay)
        lost = inj.lost_reply(name, fault)
        if lost is not None:
            raise lost

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        inj = self.injector
        fault, slow, delay = inj.draw(get=True)
        if slow < inj.faults.slow:
            await asyncio.sleep(delay)
        refused = inj.get_refused(name, fault)
        if refused is not None:
            raise refused
        inj.enter()
        try:
            return await self.inner.get_pod(namespace, name)
        finally:
            inj.leave()

    def close(self) -> None:
        self.inner.close()
