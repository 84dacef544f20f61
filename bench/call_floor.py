"""What one HTTP call costs a Python server on this machine before any work: the floor under the
extender's CPU per pod (docs/extender.md, "Speed").

Each of our two servers (uvicorn through `serving.server.AppServer`, granian through
`serving.h2server.H2Server`, both with TLS and their production settings) answers a trivial ASGI app in a
process of its own, and this process calls it over one keep-alive HTTPS connection, one call at a time,
paced at each of `--rates` calls per second (kube-scheduler calls the extender twice per pod, ~460
times a second at 230 pods/s, with gaps between them). The server's CPU per call comes from /proc: two
calls are the least the extender can spend per pod, whatever it does with them.

`bare` is the reference: no server framework at all, an asyncio protocol on uvloop that parses requests
with httptools and runs the same app in a task per request, with no limits, timers or keep-alive
bookkeeping; what any Python server pays here at the least. `--plain` drops TLS (not granian's: its
HTTP/2 needs it) to show TLS's share.

    .venv/bin/python bench/call_floor.py [--calls 3000] [--rates 100,460] [--servers uvicorn,granian,bare]
                                         [--plain]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission import cpu_seconds
from starlette.types import Message, Receive, Scope, Send

from webhook.devcluster.controlplane import free_port
from webhook.serving import tls

SERVERS = ("uvicorn", "granian", "bare")
BODY = b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":["node-1"]}'


async def trivial_app(scope: Scope, receive: Receive, send: Send) -> None:
    """An extender verb with no work: read the body, answer a fixed filter result."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": f"{message['type']}.complete"})
            if message["type"] == "lifespan.shutdown":
                return
    while (await receive()).get("more_body"):
        pass
    answer = b'{"NodeNames":["node-1"],"FailedNodes":{},"Error":""}'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


class BareProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive with nothing but httptools' parser: each whole request runs `trivial_app`
    in a task of its own (as a server must, for an app that may wait) and its answer is written at once."""

    def __init__(self) -> None:
        import httptools  # noqa: PLC0415  (the server process only)

        self.parser = httptools.HttpRequestParser(self)
        self.url, self.headers, self.body = b"", list[tuple[bytes, bytes]](), list[bytes]()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TLS transport is not a subclass

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method, path = self.parser.get_method().decode(), self.url.decode()
        scope: Scope = {"type": "http", "http_version": "1.1", "method": method, "path": path}
        scope.update(headers=self.headers, query_string=b"")
        body = b"".join(self.body)
        self.url, self.headers, self.body = b"", [], []
        asyncio.get_running_loop().create_task(self.answer(scope, body))

    async def answer(self, scope: Scope, body: bytes) -> None:
        parts: list[bytes] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                parts.append(b"HTTP/1.1 %d OK\r\n" % message["status"])
                parts.extend(b"%s: %s\r\n" % header for header in message["headers"])
                parts.append(b"\r\n")
            elif self.transport is not None:
                self.transport.write(b"".join([*parts, message["body"]]))

        await trivial_app(scope, receive, send)


def serve_bare(port: int, cert_dir: Path | None) -> None:
    import uvloop  # noqa: PLC0415  (the server process only)

    async def run() -> None:
        context = None
        if cert_dir is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
        server = await asyncio.get_running_loop().create_server(BareProtocol, "127.0.0.1", port, ssl=context)
        await server.serve_forever()

    uvloop.run(run())


def serve(kind: str, port: int, cert_dir: Path, plain: bool) -> None:
    """Run in the server's own process: `kind` on 127.0.0.1:`port` until killed."""
    from webhook.serving.h2server import H2Server  # noqa: PLC0415  (the server process only)
    from webhook.serving.server import AppServer, ServeOptions  # noqa: PLC0415

    if kind == "bare":
        serve_bare(port, None if plain else cert_dir)
        return
    options = ServeOptions(host="127.0.0.1", port=port, tls=None if plain else tls.TlsFiles.in_dir(cert_dir))
    (H2Server(trivial_app, options) if kind == "granian" else AppServer(trivial_app, options)).run()


def write_pair(cert_dir: Path) -> ssl.SSLContext:
    """The development pair for 127.0.0.1 in `cert_dir` (as `gpushare webhook` writes one); a client
    context that trusts its CA."""
    files = tls.write_cert_dir(cert_dir, datetime.now(UTC))
    return ssl.create_default_context(cafile=str(files.ca_cert))


@contextmanager
def server(
    kind: str, cert_dir: Path, context: ssl.SSLContext | None
) -> Iterator[tuple[int, http.client.HTTPConnection]]:
    """The server's pid and a connection to it, once it answers (plain HTTP when `context` is None)."""
    port = free_port()
    command = [sys.executable, __file__, "--serve", kind, "--port", str(port), "--cert-dir", str(cert_dir)]
    command += ["--plain"] if context is None else []
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            connection = (
                http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                if context is None
                else http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
            )
            try:
                call(connection)
                break
            except OSError:
                connection.close()
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the {kind} server did not start") from None
                time.sleep(0.2)
        yield process.pid, connection
        connection.close()
    finally:
        process.kill()
        process.wait()


def call(connection: http.client.HTTPConnection) -> None:
    connection.request("POST", "/filter", BODY, {"Content-Type": "application/json"})
    reply = connection.getresponse()
    reply.read()
    if reply.status != 200:
        raise SystemExit(f"the server answered {reply.status}")


def per_call_us(pid: int, connection: http.client.HTTPConnection, calls: int, rate: float) -> float:
    """The server's CPU per call in µs, `calls` one at a time, `rate` a second."""
    for _ in range(50):  # connection and code warm
        call(connection)
    gap = 1.0 / rate
    before = cpu_seconds(pid)
    due = time.monotonic()
    for _ in range(calls):
        call(connection)
        due += gap
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    return (cpu_seconds(pid) - before) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rates", default="100,460", help="calls per second, comma-separated")
    parser.add_argument("--servers", default=",".join(SERVERS), help="of: " + ", ".join(SERVERS))
    parser.add_argument("--plain", action="store_true", help="plain HTTP (uvicorn and bare only)")
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cert-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port, args.cert_dir, args.plain)
        return 0
    kinds = [k for k in args.servers.split(",") if k]
    try:
        rates = [float(r) for r in args.rates.split(",") if r]
    except ValueError:
        rates = []
    if set(kinds) - set(SERVERS) or not kinds or args.calls < 1 or not rates or min(rates) <= 0:
        parser.error(f"--servers takes {', '.join(SERVERS)}; --calls and --rates must be positive")
    if args.plain and "granian" in kinds:
        parser.error("granian serves HTTP/2 only over TLS: --plain takes --servers uvicorn,bare")
    over = "HTTP" if args.plain else "HTTPS"
    print(f"a trivial ASGI app over {over}, one call at a time, {args.calls} calls; server CPU per call:")
    with tempfile.TemporaryDirectory() as scratch:
        context = write_pair(Path(scratch))
        for kind in kinds:
            with server(kind, Path(scratch), None if args.plain else context) as (pid, connection):
                costs = [per_call_us(pid, connection, args.calls, rate) for rate in rates]
            shown = ";  ".join(f"{rate:g}/s {cost:4.0f} µs" for rate, cost in zip(rates, costs, strict=True))
            print(f"  {kind:8s} {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
