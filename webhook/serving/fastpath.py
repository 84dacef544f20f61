"""Starlette with a fast path: a POST to exactly one of the given paths goes straight to its bare ASGI
endpoint, skipping Starlette's middleware stack, router and Request/Response objects (their cost was a
third of a call's: issue 12 for the webhook, issue 20 for the extender). Everything else (probes,
/metrics, JSON 404/405, redirects, lifespan) is plain Starlette, which routes those paths to the same
endpoints too when the fast path does not apply (e.g. under a root_path).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

JSON_HEADERS = (b"content-type", b"application/json")


async def send_json(send: Send, status: int, content: bytes) -> None:
    """An encoded JSON answer, with the headers (and their order) Starlette's JSONResponse sends."""
    headers = [(b"content-length", b"%d" % len(content)), JSON_HEADERS]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


class FastPathApp(Starlette):
    """`endpoints`: path -> bare ASGI app answering POST there; `routes`: the rest."""

    def __init__(
        self,
        endpoints: Mapping[str, ASGIApp],
        routes: Sequence[BaseRoute],
        *,
        lifespan: Callable[[Any], AbstractAsyncContextManager[None]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            routes=[*(Route(path, ep, methods=["POST"]) for path, ep in endpoints.items()), *routes],
            lifespan=lifespan,
            **kwargs,
        )
        self.endpoints = dict(endpoints)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.endpoints.get(scope["path"])
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await super().__call__(scope, receive, send)
