"""Call the webhook's ASGI app directly (no HTTP, no httpx): fast enough for fuzzing by the thousand."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from starlette.applications import Starlette

from webhook.admission import app, settings


def webhook_app() -> Starlette:
    return app.create_app(settings.build())


def post_scope(path: str, body: bytes) -> dict[str, Any]:
    """The ASGI scope of a POST of `body` to `path`, as uvicorn hands it to the app."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"timeout=10s",
        "root_path": "",
        "headers": [
            (b"host", b"localhost"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "server": ("127.0.0.1", 8443),
        "client": ("127.0.0.1", 1),
    }


async def post(asgi: Starlette, path: str, body: bytes, *, disconnect: bool = False) -> tuple[int, bytes]:
    """(status, body) of one POST; `disconnect`: the client goes away after half the body."""
    scope = post_scope(path, body)
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": body[: len(body) // 2], "more_body": True},
        {"type": "http.disconnect"},
    ]
    if not disconnect:
        messages = [{"type": "http.request", "body": body, "more_body": False}]
    status, out = 0, []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            out.append(message.get("body", b""))

    await asgi(scope, receive, send)
    return status, b"".join(out)


class Tracebacks(logging.Handler):
    """Collects records that carry a traceback, from every logger."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)
