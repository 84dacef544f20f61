"""The size-limited body reader: declared and streamed bodies, at and past the limit."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from webhook.serving import body


def _app(limit: int) -> Starlette:
    async def echo(request: Request) -> PlainTextResponse:
        try:
            data = await body.read_limited(request, limit)
        except body.BodyTooLarge as exc:
            return PlainTextResponse(str(exc), status_code=413)
        return PlainTextResponse(str(len(data)))

    return Starlette(routes=[Route("/", echo, methods=["POST"])])


def _post(limit: int, **kwargs: object) -> httpx.Response:
    async def post() -> httpx.Response:
        transport = httpx.ASGITransport(app=_app(limit))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/", **kwargs)  # type: ignore[arg-type]

    return asyncio.run(post())


@pytest.mark.parametrize(
    ("size", "status"), [(0, 200), (10, 200), (11, 413)], ids=["empty", "at-limit", "over"]
)
def test_a_declared_length_is_checked_against_the_limit(size: int, status: int) -> None:
    reply = _post(10, content=b"x" * size)
    assert reply.status_code == status
    if status == 413:
        assert reply.text == "request body exceeds 10 bytes"
    else:
        assert reply.text == str(size)


def test_a_streamed_body_without_length_is_cut_off_when_it_passes_the_limit() -> None:
    async def chunks():  # no Content-Length: chunked transfer
        for _ in range(5):
            yield b"x" * 4

    reply = _post(10, content=chunks())
    assert reply.status_code == 413


def test_a_streamed_body_within_the_limit_is_read_whole() -> None:
    async def chunks():
        yield b"abc"
        yield b"def"

    reply = _post(10, content=chunks())
    assert reply.text == "6"
