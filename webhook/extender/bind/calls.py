"""The API calls a bind makes, as values: the binder's steps (a generator) yield them and get each reply
back, or its `ApiError` raised at the yield. One copy of the bind logic then runs on a thread (`run`, with
a blocking `BindingApi`) or on the event loop (`run_async`, with an `AsyncBindingApi`), where a bind costs
no hand-over to a thread and back.

    def steps() -> Steps:
        pod = yield GetPod("default", "a")      # the pod, or None when it is not found
        return "" if pod else "pod default/a not found"
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from webhook.kube import errors


@dataclass(frozen=True, slots=True)
class CreateBinding:
    """POST the pod's Binding (with `annotations`, and `uid` as a precondition when set); replies None."""

    namespace: str
    name: str
    uid: str
    node: str
    annotations: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class GetPod:
    """GET the pod; replies it, or None when it is not found."""

    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait `seconds` (a retry's backoff); replies None."""

    seconds: float


Call = CreateBinding | GetPod | Pause
Steps = Generator[Call, Any, str]


class BindingApi(Protocol):
    """The two API calls, blocking, raising `webhook.kube.errors.ApiError`."""

    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None: ...

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...


class AsyncBindingApi(Protocol):
    """The same calls on the event loop."""

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None: ...

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def close(self) -> None:
        """Close idle connections; called on the event loop when the app stops."""


def _next(steps: Steps, reply: Any, failure: errors.ApiError | None) -> tuple[Call | None, str]:
    """The steps' next call (given the last one's reply or failure), or None and what they returned."""
    try:
        return (steps.send(reply) if failure is None else steps.throw(failure)), ""
    except StopIteration as done:
        return None, str(done.value)


def _make(call: Call, api: BindingApi | AsyncBindingApi, sleep: Callable[[float], Any]) -> Any:
    """The API method (or sleep) `call` names, called: its reply on a thread, an awaitable of it on the
    loop. Bind and sleep reply None."""
    if isinstance(call, CreateBinding):
        return api.bind(call.namespace, call.name, call.uid, call.node, call.annotations)
    if isinstance(call, GetPod):
        return api.get_pod(call.namespace, call.name)
    return sleep(call.seconds)


async def _drive(steps: Steps, make: Callable[[Call], Awaitable[Any]]) -> str:
    """The one loop of both drivers: each call `make`s its reply, sent back into `steps` (an `ApiError`
    thrown in instead), until they return."""
    reply: Any = None
    failure: errors.ApiError | None = None
    with contextlib.closing(steps):
        while True:
            call, result = _next(steps, reply, failure)
            reply, failure = None, None
            try:
                if call is None:
                    return result
                reply = await make(call)
            except errors.ApiError as err:
                failure = err


def run(steps: Steps, api: BindingApi, sleep: Callable[[float], None]) -> str:
    """Drive `steps` on this thread; what they return."""

    async def make(call: Call) -> Any:
        return _make(call, api, sleep)

    # `make` never suspends, so the loop runs to its end within the coroutine's first step, on this thread.
    try:
        _drive(steps, make).send(None)
    except StopIteration as done:
        return str(done.value)
    raise RuntimeError("a blocking bind suspended")


async def run_async(steps: Steps, api: AsyncBindingApi) -> str:
    """Drive `steps` on the event loop; what they return."""

    async def make(call: Call) -> Any:
        return await _make(call, api, asyncio.sleep)

    return await _drive(steps, make)
