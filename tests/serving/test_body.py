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


def _read(headers: list[tuple[bytes, bytes]], messages: list[dict[str, object]], limit: int = 10):
    """(body or the exception raised, how many messages were read) of `receive_body` over `messages`."""
    pending = list(messages)

    async def receive() -> dict[str, object]:
        return pending.pop(0)

    async def read() -> bytes | Exception:
        try:
            return await body.receive_body(headers, receive, limit)
        except (body.BodyTooLarge, body.ClientDisconnect) as exc:
            return exc

    result = asyncio.run(read())
    return result, len(messages) - len(pending)


def _msg(data: bytes, more: bool = False) -> dict[str, object]:
    return {"type": "http.request", "body": data, "more_body": more}


def test_receive_body_joins_a_body_split_over_messages_and_skips_empty_ones():
    messages: list[dict[str, object]] = [
        _msg(b"", True),
        _msg(b"ab", True),
        {"type": "http.other"},
        _msg(b"cd", True),
        _msg(b""),
    ]
    assert _read([], messages) == (b"abcd", 5)


def test_receive_body_of_one_message_without_more_body_or_body():
    assert _read([], [{"type": "http.request"}]) == (b"", 1)


def test_receive_body_raises_client_disconnect_on_a_disconnect_before_the_last_message():
    result, read = _read([], [_msg(b"ab", True), {"type": "http.disconnect"}, _msg(b"never")])
    assert isinstance(result, body.ClientDisconnect)
    assert read == 2


def test_receive_body_refuses_a_declared_length_over_the_limit_without_reading():
    headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
    result, read = _read(headers, [_msg(b"x" * 11)])
    assert isinstance(result, body.BodyTooLarge)
    assert str(result) == "request body exceeds 10 bytes"
    assert read == 0


@pytest.mark.parametrize("declared", [b"10", b"5", b"abc", b"-1", b""])
def test_receive_body_counts_what_arrives_whatever_length_is_declared(declared):
    result, read = _read(
        [(b"content-length", declared)], [_msg(b"x" * 6, True), _msg(b"x" * 6, True), _msg(b"x")]
    )
    assert isinstance(result, body.BodyTooLarge)
    assert read == 2  # stops at the message that passes the limit


def test_read_limited_reads_through_a_starlette_request():
    messages = [_msg(b"ab", True), _msg(b"cd")]

    async def receive() -> dict[str, object]:
        return messages.pop(0)

    scope = {"type": "http", "method": "POST", "headers": [(b"content-length", b"4")]}
    request = Request(scope, receive)
    assert asyncio.run(body.read_limited(request, 10)) == b"abcd"
