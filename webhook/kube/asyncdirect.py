"""`direct`'s JSON requests on the event loop: keep-alive HTTPS connections to the API server with an
`ApiClient`'s host, TLS and credentials, replies parsed by httptools (uvicorn's HTTP parser).

For the call made once per pod from the extender's event loop (the Binding): on a thread, each call costs
two hand-overs between the loop and the worker (the GIL and a wake-up each way), more CPU than the
request itself (docs/extender.md, "Speed").

    client = AsyncDirectClient.of(api)   # None when the configuration needs what only urllib3 does
    reply = await client.request("POST", path, body)

Raises only `errors.ApiError`, as `direct` does: non-2xx as the matching error, no answer as a retryable
one (status errors.TRANSPORT). A connection is reused only after a whole reply that allows it; one the
server closed while idle is seen closed (its transport reported the EOF) and never reused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ssl
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast
from urllib.parse import urlencode, urlsplit

import httptools
import kubernetes.client
import orjson

from webhook.kube import direct, errors, rest

T = TypeVar("T")

# Idle connections kept for the next requests; more than this many at once close after their reply.
MAX_IDLE = 64


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; one request at a time (`exchange`)."""

    def __init__(self, on_data: Callable[[bytes], None] | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._reply: asyncio.Future[tuple[int, bytes, str, bool]] | None = None
        self._body: list[bytes] = []
        self._reason = ""
        # A stream's body goes to `on_data` as it comes (dechunked), once the status is 2xx.
        self._on_data = on_data
        self._streaming = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._reply is None or self._reply.done():  # bytes nobody asked for: unusable now
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"the API server's reply is not HTTP/1.1: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(exc or ConnectionResetError("the API server closed the connection"))

    # httptools callbacks
    def on_status(self, status: bytes) -> None:
        self._reason += status.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._streaming = self._on_data is not None and 200 <= self._parser.get_status_code() < 300

    def on_body(self, body: bytes) -> None:
        if not self._streaming:
            self._body.append(body)
            return
        if self._reply is None or self._reply.done():
            return  # the stream failed: httptools still parses the rest of this read, which must not apply
        assert self._on_data is not None
        try:
            self._on_data(body)
        except BaseException as exc:  # the consumer's refusal ends the stream, raised to the caller
            self._fail(exc)

    def on_message_complete(self) -> None:
        if self._reply is not None and not self._reply.done():
            status, keep = self._parser.get_status_code(), self._parser.should_keep_alive()
            self._reply.set_result((status, b"".join(self._body), self._reason, keep))

    def _fail(self, exc: BaseException) -> None:
        if self._reply is not None and not self._reply.done():
            self._reply.set_exception(exc)
        self.close()

    def close(self) -> None:
        # abort, not close: nothing of ours is in flight on it, and TLS's goodbye would need the loop to
        # run on (at shutdown it does not, and the loop's close then finds the transport busy).
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    async def exchange(self, request: bytes, timeout_s: float) -> tuple[int, bytes, str, bool]:
        """Send `request`; (status, body, reason, whether the connection may be reused)."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[tuple[int, bytes, str, bool]] = loop.create_future()
        self._reply = reply
        self._body, self._reason = [], ""
        self.transport.write(request)
        # A timer, not asyncio.timeout(): the same deadline for a third of the CPU.
        timer = loop.call_later(timeout_s, self._fail, TimeoutError("no answer within the timeout"))
        try:
            return await reply
        except BaseException:  # timed out or cancelled mid-reply: the rest would arrive on a reused one
            self.close()
            raise
        finally:
            timer.cancel()


class AsyncDirectClient:
    """Requests to the API server `api` is configured for, from one event loop."""

    def __init__(
        self, api: kubernetes.client.ApiClient, timeout: rest.Timeout = rest.DEFAULT_TIMEOUT
    ) -> None:
        config = api.configuration
        parts = urlsplit(config.host)
        self.api = api
        self.connect_s, self.read_s = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        self.context: ssl.SSLContext | None = direct.tls_context(config) if parts.scheme == "https" else None
        self.server_name = direct.server_name(config)
        self.host = parts.hostname or ""
        try:
            self.port = parts.port or direct.DEFAULT_PORT[parts.scheme]
        except ValueError as exc:  # as urllib3's LocationParseError: an ApiError when used, not a crash
            raise errors.ApiError(errors.TRANSPORT, "InvalidURL", f"{config.host}: {exc}") from exc
        self.base = parts.path.rstrip("/")
        # The Host header http.client writes: the port only when it is not the scheme's default.
        default = self.port == direct.DEFAULT_PORT[parts.scheme]
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = host if default else f"{host}:{self.port}"
        self.headers = direct.Headers(api)
        self._idle: list[_Connection] = []
        self._blocks: dict[bool, tuple[dict[str, str], bytes]] = {}  # with a body or not: the newest read
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the idle connections belong to

    @classmethod
    def of(cls, api: kubernetes.client.ApiClient) -> AsyncDirectClient | None:
        """An AsyncDirectClient for `api`; None where `direct.DirectClient.of` gives none, or the host's
        port is not a number."""
        if not direct.reachable_directly(api.configuration):
            return None
        try:
            return cls(api)
        except errors.ApiError:
            return None

    def close(self) -> None:
        """Close the idle connections; call it on their loop (the app's shutdown). A request still in
        flight closes its connection when it is answered instead of keeping it: nobody would close it
        before the loop does, which then finds a transport open."""
        idle, self._idle = self._idle, []
        self._loop = None
        for conn in idle:
            conn.close()

    async def _connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (a server started again): the old one's are not usable
            self._loop, self._idle = loop, []
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return await self._open(_Connection)

    async def _open(self, protocol: Callable[[], _Connection]) -> _Connection:
        """A new connection to the API server (TLS as configured), within the connect timeout."""
        loop = asyncio.get_running_loop()
        tls: dict[str, Any] = {}
        if self.context is not None:
            tls = {"ssl": self.context, "server_hostname": self.server_name or self.host}
        try:
            async with asyncio.timeout(self.connect_s):
                _, conn = await loop.create_connection(protocol, self.host, self.port, **tls)
        except TimeoutError:
            raise TimeoutError("no connection within the timeout") from None
        return conn

    def _request_bytes(self, method: str, path: str, payload: bytes | None) -> bytes:
        head = f"{method} {self.base}{path} HTTP/1.1\r\n".encode("latin-1", "replace")
        block = self._header_block(self.headers.get(payload), payload is not None)
        if payload is None:
            return head + block + b"\r\n"
        return b"%s%sContent-Length: %d\r\n\r\n%s" % (head, block, len(payload), payload)

    def _header_block(self, headers: dict[str, str], has_body: bool) -> bytes:
        """Host and `headers` as lines, encoded once per headers read (`direct.Headers` keeps a read a
        second; the block is the same for every request meanwhile)."""
        kept = self._blocks.get(has_body)
        if kept is not None and kept[0] is headers:
            return kept[1]
        lines = [f"Host: {self.authority}"]
        for name, value in headers.items():
            if "\r" in value or "\n" in value:  # as http.client refuses it: a header cannot hold a newline
                raise errors.ApiError(errors.TRANSPORT, "InvalidHeader", f"header {name} holds a line break")
            lines.append(f"{name}: {value}")
        block = "".join(f"{line}\r\n" for line in lines).encode("latin-1", "replace")
        self._blocks[has_body] = (headers, block)
        return block

    async def stream(self, path: str, on_data: Callable[[bytes], None], timeout_s: float) -> None:
        """GET `path` (with its query) on a connection of its own and hand its body to `on_data` as it
        arrives, until the server ends it, `on_data` raises (raised here), or `timeout_s` passes (then it
        just ends). A non-2xx answer raises its ApiError, as `request` does."""
        request = self._request_bytes("GET", path, None)
        with errors.translated():
            conn = await self._open(lambda: _Connection(on_data))
            try:
                status, data, reason, _ = await conn.exchange(request, timeout_s)
            except TimeoutError:
                return  # the stream's time is up: the caller resumes it
            finally:
                conn.close()
        rest.reply(status, data, reason)

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; the decoded JSON reply (None when empty). Non-2xx raises the matching
        ApiError; no answer raises a retryable one (status errors.TRANSPORT)."""
        payload = orjson.dumps(body) if body is not None else None
        request = self._request_bytes(method, path, payload)
        with errors.translated():
            conn = await self._connection()
            status, data, reason, keep = await conn.exchange(request, self.read_s)
        if keep and self._loop is asyncio.get_running_loop() and len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.close()
        return rest.reply(status, data, reason)


class LoopStreamer:
    """`watch.Streamer` on the event loop of a running app (`attach`ed by its lifespan): the watches'
    events are then decoded and handled on that loop, where the cache they feed is read, instead of on
    a thread that takes the GIL from the loop for every read (docs/extender.md, "Speed").

    Calls in the first `wait_s` seconds (from the first call) wait for the app to start; while no loop
    is attached the watches stream on their own threads, and a stream cut by the loop's end resumes
    there. A loop attached later calls back each watch (`when_attached`), which moves its stream over."""

    def __init__(self, client: AsyncDirectClient, wait_s: float = 5.0) -> None:
        self.client = client
        self.wait_s = wait_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._attached = threading.Event()
        self._deadline: float | None = None
        self._callbacks: list[Callable[[], None]] = []

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._attached.set()
        for callback in list(self._callbacks):
            callback()

    def when_attached(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def detach(self) -> None:
        self._loop = None

    def open(
        self, resource_path: str, query: rest.Query, on_data: Callable[[bytes], None], timeout_s: float
    ) -> concurrent.futures.Future[None] | None:
        return self._run(self.client.stream(_target(resource_path, query), on_data, timeout_s))

    def get(self, resource_path: str, query: rest.Query) -> concurrent.futures.Future[Any] | None:
        return self._run(self.client.request("GET", _target(resource_path, query)))

    def _run(self, call: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T] | None:
        # One window for every caller: a watch that asks second must not skip the wait the first took.
        if self._deadline is None:
            self._deadline = time.monotonic() + self.wait_s
        self._attached.wait(max(0.0, self._deadline - time.monotonic()))
        loop = self._loop
        if loop is None or loop.is_closed():
            call.close()
            return None
        try:
            return asyncio.run_coroutine_threadsafe(call, loop)
        except RuntimeError:  # the loop closed meanwhile
            call.close()
            return None


def _target(path: str, query: rest.Query) -> str:
    """`path` with `query` as the client library writes it (booleans in lower case)."""
    text = urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()})
    return f"{path}?{text}" if text else path
