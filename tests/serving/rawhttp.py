"""A small Starlette app served plainly (no TLS) with short deadlines, and raw-socket helpers, for the
tests of the HTTP guards (`webhook.serving.protocol`)."""

from __future__ import annotations

import socket
import time

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from webhook.serving import probes, protocol, server, tls

FAST = protocol.Limits(header_timeout_s=0.3, body_timeout_s=0.3, max_connections=50)


def make_app() -> Starlette:
    async def echo(request: Request) -> PlainTextResponse:
        return PlainTextResponse(str(len(await request.body())))

    async def refuse(request: Request) -> PlainTextResponse:
        return PlainTextResponse("too large", status_code=413)  # answered before the body is in

    readiness = probes.Readiness()
    return Starlette(
        routes=[
            Route("/", echo, methods=["POST"]),
            Route("/early", refuse, methods=["POST"]),
            *probes.probe_routes(readiness, CollectorRegistry()),
        ]
    )


def serve(limits: protocol.Limits = FAST, files: tls.TlsFiles | None = None, **kw: float) -> server.AppServer:
    options = server.ServeOptions(host="127.0.0.1", port=0, tls=files, limits=limits, **kw)  # type: ignore[arg-type]
    return server.AppServer(make_app(), options)


def connect(srv: server.AppServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.port), timeout=5)


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (the socket timeout fails the test if it never does)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def timed_read(sock: socket.socket) -> tuple[bytes, float]:
    start = time.monotonic()
    data = read_all(sock)
    return data, time.monotonic() - start
