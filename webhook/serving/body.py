"""Reading a request body under a size limit, shared by the webhook and the extender.

A declared Content-Length over the limit is refused before reading; a chunked body is counted as it
streams, so an oversize request never sits in memory whole. Read at the ASGI level (`receive_body`) so the
webhook's bare endpoints need no Starlette Request; `read_limited` is the same for one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive

__all__ = ["BodyTimeout", "BodyTooLarge", "ClientDisconnect", "read_limited", "receive_body"]


class BodyTooLarge(Exception):
    """The request body passed the configured limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds {limit} bytes")
        self.limit = limit


class BodyTimeout(ClientDisconnect):
    """The client did not send the whole body in time: handled as a disconnect, with its own words."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the client did not send the whole request body within {seconds:g} s")


async def receive_body(
    headers: Iterable[tuple[bytes, bytes]], receive: Receive, limit: int, timeout_s: float | None = None
) -> bytes:
    """The whole body from `receive`, or BodyTooLarge as soon as it is known to pass `limit` bytes.

    `headers` are the scope's raw (name, value) pairs. ClientDisconnect when the client goes away
    before the last `http.request` message; BodyTimeout after `timeout_s`, for a server that enforces no
    body deadline of its own (granian: serving/h2server.py)."""
    if timeout_s is None:
        return await _receive(headers, receive, limit)
    try:
        async with asyncio.timeout(timeout_s):
            return await _receive(headers, receive, limit)
    except TimeoutError:
        raise BodyTimeout(timeout_s) from None


async def _receive(headers: Iterable[tuple[bytes, bytes]], receive: Receive, limit: int) -> bytes:
    for name, value in headers:
        if name == b"content-length":  # the first one, as Starlette's Headers.get reads it
            if value.isdigit() and int(value) > limit:
                raise BodyTooLarge(limit)
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(limit)
                chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)  # one chunk comes back as is, not copied
        elif kind == "http.disconnect":
            raise ClientDisconnect
        # Anything else is not ours to interpret; Starlette's Request.stream() skips it too.


async def read_limited(request: Request, limit: int) -> bytes:
    """`receive_body` for a Starlette request whose body nothing has read yet (it reads `receive`)."""
    return await receive_body(request.headers.raw, request.receive, limit)
