"""Run a Starlette (any ASGI) app under uvicorn (uvloop, httptools), over HTTPS with hot-reloaded
certificates or plain HTTP, with read deadlines and a connection cap (`protocol`).

    server = AppServer(app, ServeOptions(host="0.0.0.0", port=8443, tls=TlsFiles.in_dir(Path("certs"))))
    server.run()                   # blocking; SIGINT/SIGTERM stop it gracefully
    with AppServer(app, ServeOptions(host="127.0.0.1", port=0)) as server:   # tests: a thread
        httpx.get(server.url + "/healthz")

The socket is bound and the certificates loaded in the constructor, so bad options fail before serving
(`ServeError`, `TlsError`) and `port` is known even for port 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType, TracebackType
from typing import Any, Self

import uvicorn
import uvloop
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp

from webhook import __version__
from webhook.serving import probes, protocol, tls

log = logging.getLogger(__name__)

ANY_ADDRESS = "::"  # every IPv6 and IPv4 address of the host (IPv4 alone where the kernel has no IPv6)


class ServeError(Exception):
    """The server cannot start (address in use, bad host); the message says which address and why."""


@dataclass(frozen=True, slots=True)
class ServeOptions:
    host: str = "0.0.0.0"
    port: int = 8443  # 0: an ephemeral port, see AppServer.port
    tls: tls.TlsFiles | None = None  # None serves plain HTTP
    cert_reload_interval_s: float = 1.0
    graceful_shutdown_s: float = 10.0  # for requests already read; half-received ones are closed at once
    # Longer than any of our clients keeps an idle connection: kube-apiserver's webhook client and
    # kube-scheduler's extender client (Go transports) keep one 90 s. Were the server to close first, the
    # client would race a request onto a connection being closed, and pay a new TLS handshake.
    keep_alive_s: int = 120
    backlog: int = 2048
    limits: protocol.Limits = field(default_factory=protocol.Limits)
    # asyncio's defaults (60 s, 30 s) let a client that never finishes the handshake, or never reads our
    # close_notify, hold its TLS buffers that long.
    tls_handshake_timeout_s: float = 5.0
    tls_shutdown_timeout_s: float = 2.0


class BackgroundServer:
    """What our servers share: `url` on loopback for their bound socket, `start()` serving from a daemon
    thread (returning once `_serving` is set), and use as a context manager around that. Subclasses bind
    `_socket`, set `options`, `port` and `scheme`, and define `run()` and `stop()`."""

    thread_name = "server"
    options: ServeOptions
    port: int
    readiness: probes.Readiness
    _socket: socket.socket

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._thread_error: BaseException | None = None
        self._serving = threading.Event()  # set once listening and marked ready

    @property
    def scheme(self) -> str:
        raise NotImplementedError

    @property
    def url(self) -> str:
        """Base URL on loopback (or the bound host when it is specific), e.g. https://127.0.0.1:8443."""
        host = self.options.host
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == ANY_ADDRESS:  # loopback of the family the socket has (IPv4 where IPv6 is missing)
            host = "::1" if self._socket.family == socket.AF_INET6 else "127.0.0.1"
        return f"{self.scheme}://{_address(host, self.port)}"

    def _announce_serving(self, **extra: str) -> None:
        """Ready, the "serving" log line (with `extra` fields), then `start()` may return."""
        self.readiness.set_serving(True)
        # The webhook's and the extender's one startup line: where, and which release.
        fields = {"url": f"{self.scheme}://{_address(self.options.host, self.port)}", "version": __version__}
        fields.update(extra)
        if self.options.tls is not None:
            # Which files are served (absolute: the working folder is not in the log), never what is in them.
            fields["cert"] = str(self.options.tls.cert.absolute())
            fields["key"] = str(self.options.tls.key.absolute())
        log.info("serving", extra={"fields": fields})
        self._serving.set()  # after the line: start() returns with it written (a test reads it at once)

    def run(self) -> None:
        raise NotImplementedError

    def stop(self, timeout_s: float = 15.0) -> None:
        raise NotImplementedError

    def start(self, timeout_s: float = 10.0) -> None:
        """Serve in a daemon thread; return once it accepts connections (ServeError on failure)."""
        self._thread = threading.Thread(target=self._run_in_thread, name=self.thread_name, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._serving.is_set():
            if not self._thread.is_alive():
                raise ServeError(f"server thread ended before serving: {self._thread_error!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise ServeError(f"server did not start within {timeout_s} s")
            time.sleep(0.005)

    def _run_in_thread(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # reported by start(); a thread has nowhere else to put it
            self._thread_error = exc

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class AppServer(BackgroundServer):
    """One uvicorn server for one app, runnable in the main thread (`run`) or a background thread."""

    thread_name = "appserver"

    def __init__(
        self,
        app: ASGIApp,
        options: ServeOptions,
        readiness: probes.Readiness | None = None,
        metrics: tuple[CollectorRegistry, str] | None = None,
    ) -> None:
        """`metrics`: (registry, namespace) that gets `<namespace>_connections_opened_total`."""
        super().__init__()
        self.options = options
        self.readiness = readiness or probes.Readiness()
        self.tls = tls.ReloadingContext(options.tls) if options.tls is not None else None
        self._socket = bind_socket(options.host, options.port, options.backlog)
        self.port: int = self._socket.getsockname()[1]
        self._protocol = protocol.protocol_class(options.limits)
        if metrics is not None:
            metrics[0].register(_Connections(metrics[1], self._protocol))
        config = uvicorn.Config(
            app,
            http=self._protocol,
            lifespan="auto",
            log_config=None,
            access_log=False,
            server_header=False,
            timeout_keep_alive=options.keep_alive_s,
            timeout_graceful_shutdown=int(options.graceful_shutdown_s),
            backlog=options.backlog,
            ssl_context_factory=self._ssl_context if self.tls is not None else None,
        )
        self._server = uvicorn.Server(config)

    @property
    def connections_opened(self) -> int:
        """Connections accepted so far (over HTTPS each one a TLS handshake)."""
        return self._protocol.opened

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    def _ssl_context(self, config: uvicorn.Config, default: Any) -> ssl.SSLContext:
        assert self.tls is not None
        return self.tls.context

    async def serve(self) -> None:
        """Serve until `stop()` or a signal; watches the certificate files meanwhile."""
        watch = None
        if self.tls is not None:
            watch = asyncio.create_task(self.tls.watch(self.options.cert_reload_interval_s))
        ready = asyncio.create_task(self._mark_ready())
        try:
            await self._server.serve(sockets=[self._socket])
        finally:
            self.readiness.set_serving(False)
            for task in (watch, ready):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            self._socket.close()

    async def _mark_ready(self) -> None:
        while not self._server.started:
            if self._server.should_exit:
                return
            await asyncio.sleep(0.01)
        self._announce_serving()

    def run(self) -> None:
        """Serve in this thread until SIGINT/SIGTERM (uvicorn handles the signals in the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            self._run_loop()
            return
        # uvicorn re-raises the stopping signal after its graceful shutdown, under the handler it found;
        # with the defaults that kills the process (SIGTERM) or raises KeyboardInterrupt (SIGINT). Having
        # stopped cleanly, we want to return and exit 0 instead.
        previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._run_loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run_loop(self) -> None:
        loop = _Loop()
        loop.tls_timeouts = (self.options.tls_handshake_timeout_s, self.options.tls_shutdown_timeout_s)
        with asyncio.Runner(loop_factory=lambda: loop) as runner:
            runner.run(self.serve())

    def stop(self, timeout_s: float = 15.0) -> None:
        """Ask the server to finish its requests and stop; wait for the thread when there is one."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self._server.force_exit = True
                self._thread.join(timeout_s)
        else:
            self._socket.close()


class _Loop(uvloop.Loop):
    """uvloop, with TLS handshake and shutdown timeouts on the servers it creates: uvicorn calls
    `create_server` without them and offers no setting."""

    tls_timeouts: tuple[float, float] = (5.0, 2.0)

    async def create_server(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ssl") is not None:
            kwargs.setdefault("ssl_handshake_timeout", self.tls_timeouts[0])
            kwargs.setdefault("ssl_shutdown_timeout", self.tls_timeouts[1])
        return await super().create_server(*args, **kwargs)


def _ignore(signum: int, frame: FrameType | None) -> None:
    pass


def _address(host: str, port: int) -> str:
    """`host:port`, an IPv6 host in brackets as URLs write it (RFC 3986): `[::]:8443`, not `:::8443`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A listening TCP socket on `host:port` (`ANY_ADDRESS`: IPv6 and IPv4); ServeError saying why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted sockets only then, and without it every
    # response whose headers and body go out in two writes waits ~40 ms for a delayed ACK.
    try:
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    except OSError as exc:
        if host != ANY_ADDRESS:
            raise ServeError(f"cannot listen on {_address(host, port)}: {exc.strerror or exc}") from exc
        # A kernel without IPv6 (booted with ipv6.disable=1): every address is every IPv4 address.
        log.info("no IPv6 on this host: listening on IPv4 only", extra={"fields": {"host": "0.0.0.0"}})
        return bind_socket("0.0.0.0", port, backlog)
    try:
        if host == ANY_ADDRESS:
            # IPv6 and IPv4 on one socket (IPv4 as mapped addresses), whatever net.ipv6.bindv6only says:
            # the pod's IP may be either family (IPv6-only and dual-stack clusters).
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {_address(host, port)}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


def serve(app: ASGIApp, options: ServeOptions, readiness: probes.Readiness | None = None) -> None:
    """Build an AppServer and run it in this thread until a signal stops it."""
    AppServer(app, options, readiness).run()


class _Connections(Collector):
    """`<namespace>_connections_opened_total`, read from the server's protocol class at each scrape. A
    client that does not keep its connections (kube-scheduler keeps 2 idle per host) shows here, and
    every one costs a TLS handshake."""

    def __init__(self, namespace: str, counted: type[protocol.GuardedProtocol]) -> None:
        self.name = f"{namespace}_connections_opened"
        self.counted = counted

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, "Connections accepted (over HTTPS, each a TLS handshake).")
        family.add_metric([], self.counted.opened)
        yield family
