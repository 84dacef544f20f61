"""Serve an ASGI app over HTTP/2 and HTTP/1.1 with granian (hyper and rustls, in Rust), for a caller that
multiplexes: kube-scheduler calls an extender through a Go transport that keeps 2 idle connections per
host, so over HTTP/1.1 every call in flight beyond two opens a new TLS connection and closes it after
its answer (0.5 handshakes per pod at 185 pods/s). Offered HTTP/2 by ALPN, the same transport sends every
call as a stream of one connection.

    server = H2Server(app, ServeOptions(host="::", port=12345, tls=TlsFiles(cert, key, client_ca=ca)))
    server.run()                   # blocking; SIGINT/SIGTERM stop it gracefully
    with H2Server(app, options) as server: ...     # tests: a thread

It keeps `AppServer`'s contract where granian allows: our own socket (bound in the constructor, so
`port` is known for port 0 and a bad address is a ServeError), certificate files checked before serving
(TlsError) and followed on disk (workers respawned on the same socket once a new pair loads cleanly),
TLS >= 1.2, a "serving" log line and readiness. What it cannot keep: granian does not show the client
certificate to the app, so a client CA makes the certificate *required* at the handshake and callers
are told apart by that CA alone (no names); probes then need a port without client certificates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from pathlib import Path
from typing import Any, cast

import uvloop
from granian._granian import SocketHolder
from granian.constants import HTTPModes, Interfaces, SSLProtocols
from granian.errors import ConfigurationError, FatalError
from granian.http import HTTP1Settings, HTTP2Settings
from granian.log import LogLevels
from granian.server.embed import Server
from starlette.types import ASGIApp

from webhook.serving import probes, tls
from webhook.serving.server import BackgroundServer, ServeError, ServeOptions, _address, bind_socket

log = logging.getLogger(__name__)

# granian configures its loggers with dictConfig; incremental, it only sets levels, and our handlers
# (JSON lines) stay. Its access log stays off: requests are counted in metrics.
_LOGGING = {
    "version": 1,
    "incremental": True,
    "formatters": {},
    "handlers": {},
    "loggers": {"_granian": {"propagate": True}, "granian.access": {"propagate": False}},
}


class _Quiet(logging.Filter):
    """Drops granian's per-start notices that say nothing to an operator of ours."""

    NOISE = ("Embedded server is experimental", "Spawning worker", "Started worker", "Stopping worker")

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.NOISE)


logging.getLogger("_granian").addFilter(_Quiet())


class _Embedded(Server):
    """granian's embedded server on a socket we bound: its own would be one per worker (SO_REUSEPORT),
    and port 0 would then mean a different port each."""

    def __init__(self, sock: socket.socket, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._ours = sock

    def _init_shared_socket(self) -> None:
        # What granian pickles a SocketHolder as: (fd, is a unix socket, backlog); its stub lists no args.
        untyped: Any = self
        untyped._shd = cast(Any, SocketHolder)(self._ours.fileno(), False, self.backlog)
        untyped._sfd = self._ours.fileno()
        untyped._ssp = None

    def startup(self, spawn_target: Any, target_loader: Any) -> None:
        # granian's own also builds its socket and logs "Listening at"; ours is bound, and says "serving".
        untyped: Any = self
        self._init_shared_socket()
        untyped._spawn_workers(spawn_target, target_loader)
        untyped._call_hooks(self.hooks_startup)

    def interrupt(self) -> None:
        self.interrupt_signal = True
        self.main_loop_interrupt.set()

    def respawn(self) -> None:
        """New workers (which read the certificate files again) on the same socket, then the old ones stop."""
        self.reload_signal = True
        self.main_loop_interrupt.set()


class H2Server(BackgroundServer):
    """One granian server for one ASGI app, runnable in the main thread (`run`) or a background thread.
    HTTPS only: kube-scheduler negotiates HTTP/2 by ALPN, which needs TLS."""

    thread_name = "h2server"

    def __init__(
        self, app: ASGIApp, options: ServeOptions, readiness: probes.Readiness | None = None
    ) -> None:
        if options.tls is None:
            raise ServeError("HTTP/2 serving needs a certificate and key (--tls-cert, --tls-key)")
        super().__init__()
        self.options = options
        self.app = app
        self.readiness = readiness or probes.Readiness()
        # Loads and checks the files now (TlsError), and tells when new ones load cleanly.
        self.tls = tls.ReloadingContext(options.tls)
        self._socket = bind_socket(options.host, options.port, options.backlog)
        # Accepted sockets inherit it (Linux), and hyper does not set it: without it an answer written as
        # a HEADERS and a DATA frame waits for the peer's delayed ACK (kube-scheduler: 72 pods/s, not 250).
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port: int = self._socket.getsockname()[1]
        self._server: _Embedded | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    @property
    def scheme(self) -> str:
        return "https"

    def _embedded(self) -> _Embedded:
        files = self.options.tls
        assert files is not None
        limits = self.options.limits
        return _Embedded(
            self._socket,
            target=self.app,
            address=self.options.host,
            port=self.port,
            interface=Interfaces.ASGI,  # with the lifespan protocol, as uvicorn runs it
            http=HTTPModes.auto,  # HTTP/2 by ALPN, HTTP/1.1 for the rest (probes, curl)
            websockets=False,
            backlog=self.options.backlog,
            backpressure=limits.max_connections,
            http1_settings=HTTP1Settings(
                header_read_timeout=int(limits.header_timeout_s * 1000),
                max_buffer_size=limits.max_header_bytes + 4096 * 100,
            ),
            # Pings find a peer that vanished without a FIN; 200 streams: more calls than kube-scheduler
            # has in flight, few enough that one connection cannot queue unbounded work.
            http2_settings=HTTP2Settings(
                keep_alive_interval=30_000,
                keep_alive_timeout=20,
                max_concurrent_streams=200,
                max_headers_size=limits.max_header_bytes,
            ),
            log_dictconfig=_LOGGING,
            log_level=LogLevels.warning,
            ssl_cert=Path(files.cert).absolute(),
            ssl_key=Path(files.key).absolute(),
            ssl_protocol_min=SSLProtocols.tls12,
            ssl_ca=Path(files.client_ca).absolute() if files.client_ca is not None else None,
            ssl_client_verify=files.client_ca is not None,
        )

    async def serve(self) -> None:
        """Serve until `stop()` or a signal; follows the certificate files meanwhile."""
        self._loop = asyncio.get_running_loop()
        server = self._server = self._embedded()
        server.workers_kill_timeout = int(self.options.graceful_shutdown_s) or 1
        if self._stopping:
            server.interrupt()
        server.on_startup(self._mark_ready)
        watch = asyncio.create_task(self._watch_files(server))
        try:
            try:
                await server.serve()
            except (ConfigurationError, FatalError) as exc:  # e.g. the app's lifespan startup failed
                raise ServeError(f"the HTTP/2 server stopped: {exc}") from exc
            # granian ends its loop when a worker dies: say so, do not exit 0.
            if not self._stopping:
                raise ServeError(
                    "the HTTP/2 server's worker stopped unexpectedly (its reason is logged above)"
                )
        finally:
            self.readiness.set_serving(False)
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            self._socket.close()

    def _mark_ready(self) -> None:
        self.readiness.set_serving(True)
        fields = {"url": f"https://{_address(self.options.host, self.port)}", "protocols": "h2, http/1.1"}
        assert self.options.tls is not None
        fields["cert"] = str(self.options.tls.cert.absolute())
        fields["key"] = str(self.options.tls.key.absolute())
        log.info("serving", extra={"fields": fields})
        self._serving.set()

    async def _watch_files(self, server: _Embedded) -> None:
        while True:
            await asyncio.sleep(self.options.cert_reload_interval_s)
            try:
                if self.tls.reload_if_changed():  # checked and settled: granian reads the same files
                    server.respawn()
            except Exception:  # never let a bad file end the watch; the old certificate keeps serving
                log.exception("certificate reload failed")

    def run(self) -> None:
        """Serve in this thread until SIGINT/SIGTERM, then finish the requests in flight and return."""
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            if threading.current_thread() is threading.main_thread():
                loop = runner.get_loop()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, self._interrupt)
            runner.run(self.serve())

    def _interrupt(self) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.interrupt()

    def stop(self, timeout_s: float = 15.0) -> None:
        """Ask the server to finish its requests and stop; wait for the thread when there is one."""
        self._stopping = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._interrupt)
        if self._thread is not None:
            self._thread.join(timeout_s)
        elif loop is None:
            self._socket.close()
