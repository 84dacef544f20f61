"""A client that pipelines requests and never reads the answers is dropped at the body deadline once the
answers fill the transport's buffer: it held its connection, and a place under `max_connections`, for
good (uvicorn has no write timeout, and its keep-alive timer starts only after an answer is written), and
with a cap of one the next client, a probe, got 503."""

from __future__ import annotations

import socket
import ssl
import time
from datetime import UTC, datetime

from webhook.admission import app, settings
from webhook.serving import probes, protocol, server

LIMITS = protocol.Limits(header_timeout_s=1.0, body_timeout_s=1.0, max_connections=1)
GET_METRICS = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"


def test_a_client_that_never_reads_its_answers_is_dropped_after_the_deadlines(tmp_path):
    cfg = settings.build(overrides={"host": "127.0.0.1", "port": 0, "cert_dir": tmp_path / "certs"})
    files = app.prepare_certs(cfg, datetime.now(UTC))
    readiness = probes.Readiness()
    options = server.ServeOptions(
        host="127.0.0.1", port=0, tls=files, keep_alive_s=2, limits=LIMITS, graceful_shutdown_s=1
    )
    ctx = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
    with app.app_server(cfg, options, readiness) as srv:
        size = len(srv_metrics_answer(srv, ctx))
        time.sleep(0.2)  # that connection gone: the cap of 1 is free again
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, never read
        raw.connect(("127.0.0.1", srv.port))
        reader = ctx.wrap_socket(raw, server_hostname="localhost")
        reader.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 5
        while (
            time.monotonic() < deadline and sent < 16384
        ):  # pipelined requests until the server stops reading them
            try:
                reader.send(GET_METRICS * 64)
                sent += 64
            except (ssl.SSLWantWriteError, BlockingIOError):
                time.sleep(0.05)
                if time.monotonic() > deadline - 4:
                    break
        assert sent > 0
        assert sent * size > 8 * 1024 * 1024, (sent, size)  # more than every buffer on the way holds
        # Past every deadline: header 1 s, body 1 s, keep-alive 2 s.
        time.sleep(5)
        probe = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        with ctx.wrap_socket(probe, server_hostname="localhost") as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            answer = conn.recv(200)
        reader.close()
    assert answer.startswith(b"HTTP/1.1 200"), (sent, answer)


def srv_metrics_answer(srv: server.AppServer, ctx: ssl.SSLContext) -> bytes:
    """One whole /metrics answer, on a connection of its own."""
    with ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", srv.port), timeout=5), server_hostname="localhost"
    ) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)
