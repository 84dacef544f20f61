"""uvicorn's httptools protocol with the guards uvicorn lacks: read deadlines and a connection cap.

uvicorn only times out a connection that is idle *after* a response. A client that connects (TLS done)
and sends nothing, or half a request, would hold its ~50-250 KB forever, and a stopping server would
wait its whole grace period for a body that never comes. Parsing stays uvicorn's and httptools'.

    Limits(header_timeout_s=5, body_timeout_s=10, max_connections=4096)
    uvicorn.Config(app, http=protocol_class(limits), ...)
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from webhook.serving import clientauth

log = logging.getLogger(__name__)


def _closing_answer(status: bytes, error: bytes) -> bytes:
    body = b'{"error":"' + error + b'"}'
    head = b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\nconnection: close\r\n"
    return head + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body


_BUSY = _closing_answer(b"503 Service Unavailable", b"too many connections; retry")
_TIMEOUT = _closing_answer(b"408 Request Timeout", b"the request did not arrive in time")
_INVALID = _closing_answer(b"400 Bad Request", b"invalid HTTP request")


@dataclass(frozen=True, slots=True)
class Limits:
    header_timeout_s: float = 5.0  # connect (or a request's first byte) -> end of its headers
    body_timeout_s: float = 10.0  # end of headers -> end of body; the API server waits 10 s by default
    max_connections: int = 4096  # past this a new connection gets a 503 and is closed at once


class GuardedProtocol(HttpToolsProtocol):
    """One deadline per connection, re-armed by phase: headers, then body; none while the app answers
    (its own time) nor between requests (uvicorn's keep-alive timer covers that)."""

    limits = Limits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._reading = False  # bytes of the next request arrived: a header timeout answers 408
        self._in_body = False  # the deadline running is the body's
        self._tls: dict[object, object] | None = None  # the ASGI TLS extension of this connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # The handshake is done before connection_made: the client's certificate is known now.
        self._tls = clientauth.tls_extension(transport.get_extra_info("ssl_object"))
        if len(self.connections) > self.limits.max_connections:
            # Refused before reading anything: cheaper than queueing and clearer than a reset.
            transport.write(_BUSY)
            transport.close()
            return
        self._arm(self.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():  # refused or timed out: what still arrives is not read
            return
        if self._deadline is None and (self.cycle is None or self.cycle.response_complete):
            self._arm(self.limits.header_timeout_s)  # first byte of the next request on a kept-alive one
        self._reading = True
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._tls is not None:
            self.scope["extensions"] = {clientauth.TLS_EXTENSION: self._tls}

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(self.limits.body_timeout_s)
        self._in_body = True

    def on_message_complete(self) -> None:
        self._disarm()
        self._reading = self._in_body = False
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        # httptools refused the bytes: answer in JSON like every other error of ours (uvicorn's is text).
        self._disarm()
        self.transport.write(_INVALID)
        self.transport.close()

    def shutdown(self) -> None:
        # Idle, or a request still arriving (it could not be answered in the grace period anyway): drop
        # it now, so a stop waits for no client. abort, not close: a TLS close waits for each client's
        # close_notify (up to tls_shutdown_timeout_s), thousands of them one stop's worth of CPU.
        if self.cycle is None or self.cycle.response_complete or self.cycle.more_body:
            self.transport.abort()
            return
        super().shutdown()  # a request being answered: finish it, then close

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        log.debug("closing a connection whose request did not arrive in time")
        # A 408 only where no answer to this request has begun (an app may answer, e.g. 413, before
        # the body is in; a second status line would then read as the answer to a next request).
        if self._in_body:
            unanswered = self.cycle is not None and not self.cycle.response_started
        else:
            unanswered = self._reading
        if unanswered:
            self.transport.write(_TIMEOUT)
        self.transport.close()


def protocol_class(limits: Limits) -> type[GuardedProtocol]:
    """A GuardedProtocol subclass bound to `limits` (uvicorn builds protocols from a class)."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits})
