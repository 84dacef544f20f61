"""Reading a request body under a size limit, shared by the webhook and the extender.

A declared Content-Length over the limit is refused before reading; a chunked body is counted as it
streams, so an oversize request never sits in memory whole.
"""

from __future__ import annotations

from starlette.requests import Request


class BodyTooLarge(Exception):
    """The request body passed the configured limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds {limit} bytes")
        self.limit = limit


async def read_limited(request: Request, limit: int) -> bytes:
    """The whole body, or BodyTooLarge as soon as it is known to pass `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)
