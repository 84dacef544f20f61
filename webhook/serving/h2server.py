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
are told apart by that CA alone (no names); probes then need a port without client certificates. Nor
does granian time a body or an idle connection: the extender's verbs keep the body deadline themselves
(`serving.body.receive_body`), while a connection that sends nothing holds its place until the client
goes, and past `max_connections` granian stops accepting rather than answering 503. Hence the client
CA (the chart's default) in front of it: only kube-scheduler's certificate opens a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any, cast

import uvloop
from granian._granian import SocketHolder
from granian.asgi import LifespanProtocol
from granian.constants import HTTPModes, Interfaces, SSLProtocols
from granian.errors import ConfigurationError, FatalError
from granian.http import HTTP1Settings, HTTP2Settings
from granian.log import LogLevels
from granian.server.embed import Server
from starlette.types import ASGIApp

from webhook.serving import probes, tls
from webhook.serving.server import BackgroundServer, ServeError, ServeOptions, bind_socket

log = logging.getLogger(__name__)

# How long old and new workers both serve at a respawn (granian's default 3.5 s); ours start in ms.
RESPAWN_DELAY_S = 1.0

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
        untyped: Any = self
        untyped._sfd = self._ours.fileno()
        untyped._ssp = None

    def _spawn_worker(self, *args: Any, **kwargs: Any) -> Any:
        # A worker closes the listener it was given when it stops (in Rust, a TcpListener made from the
        # fd): each gets its own duplicate, or the old worker stopping at a respawn would close the socket
        # the new one accepts on (and ours, whose number could by then be another file's).
        # A SocketHolder is (fd, is a unix socket, backlog); its stub lists no args.
        untyped: Any = self
        untyped._shd = cast(Any, SocketHolder)(os.dup(self._ours.fileno()), False, self.backlog)
        parent: Any = super()
        return parent._spawn_worker(*args, **kwargs)

    def startup(self, spawn_target: Any, target_loader: Any) -> None:
        # granian's own also builds its socket and logs "Listening at"; ours is bound, and says "serving".
        untyped: Any = self
        self._init_shared_socket()
        untyped._spawn_workers(spawn_target, target_loader)
        untyped._call_hooks(self.hooks_startup)

    def interrupt(self) -> None:
        self.interrupt_signal = True
        self.main_loop_interrupt.set()

    def use_files(self, files: tls.TlsFiles) -> None:
        """Workers started from now on read these files (granian's own resolved the paths once)."""
        # granian's TLS settings: (on, cert, key, key password, minimum version, CA, CRLs, verify clients)
        untyped: Any = self
        settings = list(untyped.ssl_ctx)
        settings[1], settings[2] = str(files.cert), str(files.key)
        settings[5] = str(files.client_ca) if files.client_ca is not None else None
        untyped.ssl_ctx = tuple(settings)

    def respawn(self, files: tls.TlsFiles) -> None:
        """New workers reading `files` on the same socket, then the old ones stop."""
        self.use_files(files)
        self.reload_signal = True
        self.main_loop_interrupt.set()


class _Pinned:
    """Certificate files copied into memory files (memfd) and checked there, for granian to read by
    /proc/self/fd path. Every new worker reads its files again, and panics, aborting the process, on
    one it cannot open or parse: a Secret volume's update deletes the folder the old paths led to, and
    a file rewritten between our check and that read could be half-written. Nobody changes these."""

    def __init__(self, files: tls.TlsFiles) -> None:
        self._fds: list[int] = []
        try:
            pinned = [self._copy(path) for path in files.paths]
            ca = pinned[2] if files.client_ca is not None else None
            self.files = tls.TlsFiles(pinned[0], pinned[1], client_ca=ca)
            tls.server_context(self.files)  # TlsError unless they load (and the key fits)
        except BaseException:
            self.close()
            raise

    def _copy(self, path: Path) -> Path:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise tls.TlsError(f"cannot read {path}: {exc.strerror or exc}") from exc
        fd = os.memfd_create(path.name, os.MFD_CLOEXEC)
        self._fds.append(fd)
        with open(fd, "wb", closefd=False) as copy:
            copy.write(data)
        return Path(f"/proc/self/fd/{fd}")

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


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
        self._pinned: list[_Pinned] = []  # the files the newest workers read, and the ones before
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
            interface=Interfaces.ASGINL,  # the lifespan protocol runs in serve(), once
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
        # The app's lifespan runs here, once: granian's would run it in every worker, so a respawn would
        # start the app again and the old workers' exit shut down what the new ones use.
        lifespan: Any = cast(Any, LifespanProtocol)(self.app)
        watch: asyncio.Task[None] | None = None
        try:
            server = self._server = self._embedded()
            assert self.options.tls is not None
            self._pinned.append(_Pinned(self.options.tls))
            server.use_files(self._pinned[-1].files)
            server.workers_kill_timeout = int(self.options.graceful_shutdown_s) or 1
            server.respawn_interval = RESPAWN_DELAY_S
            if self._stopping:
                server.interrupt()
            server.on_startup(self._mark_ready)
            watch = asyncio.create_task(self._watch_files(server))
            await lifespan.startup()
            if lifespan.interrupt:
                cause = f": {lifespan.exc!r}" if lifespan.exc is not None else ""
                raise ServeError(f"the HTTP/2 server stopped: ASGI lifespan startup failed{cause}")
            try:
                await server.serve()
            except (ConfigurationError, FatalError) as exc:
                raise ServeError(f"the HTTP/2 server stopped: {exc}") from exc
            # granian ends its loop when a worker dies: say so, do not exit 0.
            if not self._stopping:
                raise ServeError(
                    "the HTTP/2 server's worker stopped unexpectedly (its reason is logged above)"
                )
        finally:
            self.readiness.set_serving(False)
            if watch is not None:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch
            self._socket.close()
            for pinned in self._pinned:
                pinned.close()
            if lifespan.event_startup.is_set() and not lifespan.interrupt:  # started, and fine
                await lifespan.shutdown()

    def _mark_ready(self) -> None:
        self._announce_serving(protocols="h2, http/1.1")

    async def _watch_files(self, server: _Embedded) -> None:
        due = False  # new files loaded cleanly, and no workers serve them yet
        while True:
            await asyncio.sleep(self.options.cert_reload_interval_s)
            try:
                due = self.tls.reload_if_changed() or due
                if due:
                    pinned = _Pinned(self.tls.files)
                    server.respawn(pinned.files)
                    due = False
                    # Workers read their files as they start: those before the last are read by now.
                    for old in self._pinned[:-1]:
                        old.close()
                    self._pinned = [*self._pinned[-1:], pinned]
            except tls.TlsError as exc:  # changed again since the check: the next poll takes them
                log.warning("new certificate files not taken yet: %s", exc)
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
