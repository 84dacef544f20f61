"""What one HTTP call costs a Python server on this machine before any work: the floor under the
extender's CPU per pod (docs/extender.md, "Speed").

Each of our two servers (uvicorn through `serving.server.AppServer`, granian through
`serving.h2server.H2Server`, both with TLS and their production settings) answers a trivial ASGI app in a
process of its own, and this process calls it over one keep-alive HTTPS connection, one call at a time,
paced at each of `--rates` calls per second (kube-scheduler calls the extender twice per pod, ~460
times a second at 230 pods/s, with gaps between them). The server's CPU per call comes from /proc: two
calls are the least the extender can spend per pod, whatever it does with them.

    .venv/bin/python bench/call_floor.py [--calls 3000] [--rates 100,460] [--servers uvicorn,granian]
"""

from __future__ import annotations

import argparse
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from admission import cpu_seconds
from starlette.types import Receive, Scope, Send

from webhook.devcluster.controlplane import free_port
from webhook.serving import tls

SERVERS = ("uvicorn", "granian")
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


def serve(kind: str, port: int, cert_dir: Path) -> None:
    """Run in the server's own process: `kind` on 127.0.0.1:`port` until killed."""
    from webhook.serving.h2server import H2Server  # noqa: PLC0415  (the server process only)
    from webhook.serving.server import AppServer, ServeOptions  # noqa: PLC0415

    options = ServeOptions(host="127.0.0.1", port=port, tls=tls.TlsFiles.in_dir(cert_dir))
    (H2Server(trivial_app, options) if kind == "granian" else AppServer(trivial_app, options)).run()


def write_pair(cert_dir: Path) -> ssl.SSLContext:
    """The development pair for 127.0.0.1 in `cert_dir` (as `gpushare webhook` writes one); a client
    context that trusts its CA."""
    files = tls.write_cert_dir(cert_dir, datetime.now(UTC))
    return ssl.create_default_context(cafile=str(files.ca_cert))


@contextmanager
def server(
    kind: str, cert_dir: Path, context: ssl.SSLContext
) -> Iterator[tuple[int, http.client.HTTPSConnection]]:
    """The server's pid and a connection to it, once it answers."""
    port = free_port()
    command = [sys.executable, __file__, "--serve", kind, "--port", str(port), "--cert-dir", str(cert_dir)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
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


def call(connection: http.client.HTTPSConnection) -> None:
    connection.request("POST", "/filter", BODY, {"Content-Type": "application/json"})
    reply = connection.getresponse()
    reply.read()
    if reply.status != 200:
        raise SystemExit(f"the server answered {reply.status}")


def per_call_us(pid: int, connection: http.client.HTTPSConnection, calls: int, rate: float) -> float:
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
    parser.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cert-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.port, args.cert_dir)
        return 0
    kinds = [k for k in args.servers.split(",") if k]
    try:
        rates = [float(r) for r in args.rates.split(",") if r]
    except ValueError:
        rates = []
    if set(kinds) - set(SERVERS) or not kinds or args.calls < 1 or not rates or min(rates) <= 0:
        parser.error(f"--servers takes {', '.join(SERVERS)}; --calls and --rates must be positive")
    print(f"a trivial ASGI app over HTTPS, one call at a time, {args.calls} calls; server CPU per call:")
    with tempfile.TemporaryDirectory() as scratch:
        context = write_pair(Path(scratch))
        for kind in kinds:
            with server(kind, Path(scratch), context) as (pid, connection):
                costs = [per_call_us(pid, connection, args.calls, rate) for rate in rates]
            shown = ";  ".join(f"{rate:g}/s {cost:4.0f} µs" for rate, cost in zip(rates, costs, strict=True))
            print(f"  {kind:8s} {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
