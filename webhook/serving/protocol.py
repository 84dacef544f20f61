"""uvicorn's httptools protocol with the guards uvicorn lacks: read deadlines, a connection cap, a cap on
what a request holds beside its body, and refusals of what it would misread.

uvicorn only times out a connection that is idle *after* a response. A client that connects (TLS done)
and sends nothing, or half a request, would hold its ~50-250 KB forever, and a stopping server would
wait its whole grace period for a body that never comes. httptools buffers a header or trailer line
whole however long it grows. A request with `Connection: upgrade` (or CONNECT) loses its body, whose
bytes then parse as a next request. Parsing stays uvicorn's and httptools'.

    Limits(header_timeout_s=5, body_timeout_s=10, max_connections=4096, max_header_bytes=65536)
    uvicorn.Config(app, http=protocol_class(limits), ...)
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from webhook.serving import clientauth

log = logging.getLogger(__name__)


def _closing_answer(status: bytes, error: bytes) -> bytes:
    body = b'{"error":"' + error + b'"}'
    head = b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\nconnection: close\r\n"
    return head + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body


_BUSY = _closing_answer(b"503 Service Unavailable", b"too many connections; retry")
_TIMEOUT = _closing_answer(b"408 Request Timeout", b"the request did not arrive in time")
_INVALID = _closing_answer(b"400 Bad Request", b"invalid HTTP request")
_UPGRADE = _closing_answer(b"400 Bad Request", b"protocol upgrades and CONNECT are not supported")
_CODING = _closing_answer(
    b"501 Not Implemented", b"the only transfer coding supported is chunked; send the body as it is"
)
_HEADERS_TOO_LARGE = _closing_answer(b"431 Request Header Fields Too Large", b"request headers too large")
_FRAMING_TOO_LARGE = _closing_answer(b"400 Bad Request", b"too many bytes of chunk lines and trailers")


@dataclass(frozen=True, slots=True)
class Limits:
    header_timeout_s: float = 5.0  # connect (or a request's first byte) -> end of its headers
    body_timeout_s: float = 10.0  # end of headers -> end of body; the API server waits 10 s by default
    max_connections: int = 4096  # past this a new connection gets a 503 and is closed at once
    # Request line and headers; trailers and chunk lines may take as much again plus twice the body
    # (Go's net/http allows chunk overhead in that proportion too). Past it: 431 or 400, and a close.
    max_header_bytes: int = 64 * 1024


class GuardedProtocol(HttpToolsProtocol):
    """One deadline per connection, re-armed by phase: headers, then body; none while the app answers
    (its own time) nor between requests (uvicorn's keep-alive timer covers that). Apart, while the
    client reads none of the answers written, the body deadline again.

    A request that must be refused (bad bytes, a deadline, a cap) is answered after the answers still
    owed to earlier whole requests on the connection (pipelining), then the connection is closed."""

    limits = Limits()
    opened = 0  # connections accepted so far, per server (each subclass of `protocol_class` counts its own)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._reading = False  # bytes of the next request arrived: a header timeout answers 408
        self._in_body = False  # the deadline running is the body's
        self._tls: dict[object, object] | None = None  # the ASGI TLS extension of this connection
        self._framing = 0  # bytes of the request being read that are not its body
        self._body = 0  # bytes of its body
        self._begun = self._ended = False  # a request began / ended in the read being parsed
        self._head_count = 0  # headers of the request being read when its head ended (trailers follow)
        self._answering: RequestResponseCycle | None = None  # the request whose app runs
        self._refusal: bytes | None = None  # the closing answer owed once earlier answers are out
        self._reason = _INVALID  # what a refusal from httptools' parser answers
        self._unread: asyncio.TimerHandle | None = None  # runs while the client reads none of our answers

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        type(self).opened += 1  # only the event loop's thread runs this
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
        if self._unread is not None:
            self._unread.cancel()
            self._unread = None
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        # The client reads none of what we send and the transport's buffer is full. uvicorn has no write
        # timeout: its send would wait to drain for good, holding the connection and a place under
        # max_connections (a client that pipelines requests and never reads). Past the body deadline it
        # is dropped.
        super().pause_writing()
        if self._unread is None:
            self._unread = self.loop.call_later(self.limits.body_timeout_s, self._drop_unread)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._unread is not None:
            self._unread.cancel()
            self._unread = None

    def _drop_unread(self) -> None:
        self._unread = None
        log.debug("closing a connection whose client does not read its answers")
        self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing() or self._refusal is not None:  # what still arrives is not read
            return
        if self._deadline is None and (self.cycle is None or self.cycle.response_complete):
            self._arm(self.limits.header_timeout_s)  # first byte of the next request on a kept-alive one
        self._reading = True
        body, self._begun, self._ended = self._body, False, False
        super().data_received(data)
        if self._reading and self._refusal is None and not (self._begun and self._ended):
            # A request is still arriving: count what it holds. A read that also ended an earlier one
            # goes uncounted: what of it is whose is not known (a read is at most 256 KiB).
            self._framing += len(data) - (self._body - (0 if self._begun else body))
            limit = self.limits.max_header_bytes
            if not self._in_body and self._framing > limit:
                self._refuse(_HEADERS_TOO_LARGE)
            elif self._framing > 2 * limit + 2 * self._body:
                self._refuse(_FRAMING_TOO_LARGE)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # A request's first byte starts its header deadline where none runs: data_received started one
        # for this read unless an earlier request's deadline ran then, which that request's end stopped
        # (pipelining: a whole request and half the next in one read).
        if self._deadline is None:
            self._arm(self.limits.header_timeout_s)
        self._reading = self._begun = True
        self._framing = self._body = 0
        if self._tls is not None:
            self.scope["extensions"] = {clientauth.TLS_EXTENSION: self._tls}

    def on_headers_complete(self) -> None:
        # Weighed whole (~0.4 us): reads that also end or begin another request are not counted as they
        # stream (data_received), so a head may arrive partly uncounted.
        if _head_bytes(self.url, self.headers) > self.limits.max_header_bytes:
            self._reason = _HEADERS_TOO_LARGE
            raise _Refused
        self._head_count = len(self.headers)
        if self.parser.should_upgrade():  # Connection: upgrade, or CONNECT
            self._reason = _UPGRADE
            raise _Refused  # httptools turns this into a parse error: send_400_response answers
        if _codings(self.headers) - {b"chunked"}:
            self._reason = _CODING
            raise _Refused
        super().on_headers_complete()
        self._arm(self.limits.body_timeout_s)
        self._in_body = True

    def on_body(self, body: bytes) -> None:
        self._body += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        trailers = len(self.headers) > self._head_count  # httptools adds them to the headers
        if (
            trailers
            and _head_bytes(self.url, self.headers) > 2 * self.limits.max_header_bytes + 2 * self._body
        ):
            # Raised, not refused here: the parser must stop, or requests pipelined after this one run.
            self._reason = _FRAMING_TOO_LARGE
            raise _Refused
        self._reading = self._in_body = False
        self._ended = True
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        # httptools refused the bytes: answer in JSON like every other error of ours (uvicorn's is text).
        self._refuse(self._reason)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        self._answering = cycle
        super()._start_asgi_task(cycle, app)

    def on_response_complete(self) -> None:
        if self._refusal is not None and not self.pipeline:
            self._close_refused()  # the earlier answers are out: now the refusal
            return
        super().on_response_complete()

    def _refuse(self, answer: bytes) -> None:
        """Answer `answer` and close, once the answers owed to earlier whole requests are out. The
        request being read, if its app already runs, sees a disconnect instead of the rest."""
        self._disarm()
        self._reading = self._in_body = False
        self._refusal = answer
        self.flow.pause_reading()
        cycle = self.cycle
        broken = cycle is not None and cycle.more_body  # refused mid-body (its headers are in)
        if cycle is not None and broken:
            if not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()
                self.pipeline = deque(item for item in self.pipeline if item[0] is not cycle)
            if cycle.response_started:  # its app answered early (e.g. 413): no second status line
                self._refusal = b""
        answering = self._answering
        if answering is None or answering.response_complete or (broken and answering is cycle):
            self._close_refused()

    def _close_refused(self) -> None:
        if self._refusal and not self.transport.is_closing():
            self.transport.write(self._refusal)
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
        # A 408 only where bytes of a request arrived (`_refuse` drops it where the app began an answer,
        # e.g. a 413 before the body is in: a second status line would read as the next one's answer).
        self._refuse(_TIMEOUT if self._reading or self._in_body else b"")


class _Refused(Exception):
    """Raised in a parser callback to refuse the request: httptools reports it as a parse error."""


def _head_bytes(url: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    """About the bytes of a request line and headers as sent (spaces around values not counted)."""
    return len(url) + len("CONNECT  HTTP/1.1\r\n\r\n") + sum(len(n) + len(v) + 4 for n, v in headers)


def _codings(headers: list[tuple[bytes, bytes]]) -> set[bytes]:
    """The transfer codings a request names (lowercased), e.g. {b"gzip", b"chunked"}."""
    return {
        coding.strip().lower()
        for name, value in headers
        if name == b"transfer-encoding"
        for coding in value.split(b",")
        if coding.strip()
    }


def protocol_class(limits: Limits) -> type[GuardedProtocol]:
    """A GuardedProtocol subclass bound to `limits`, counting its own connections (uvicorn builds
    protocols from a class)."""
    return type("GuardedProtocol", (GuardedProtocol,), {"limits": limits, "opened": 0})
