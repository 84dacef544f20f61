"""Never pinned: read deadlines, connection cap, TLS handshake deadline, a quick stop; over real sockets."""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.serving.rawhttp import connect, serve, timed_read
from webhook.serving import protocol, server, tls


@pytest.fixture
def plain() -> Iterator[server.AppServer]:
    with serve() as srv:
        yield srv


def test_a_connection_that_sends_nothing_is_closed_at_the_header_deadline(plain):
    with connect(plain) as sock:
        data, waited = timed_read(sock)
    assert data == b""  # nothing was asked, so nothing is answered
    assert 0.2 < waited < 2


@pytest.mark.parametrize(
    "sent",
    [b"POST / HTTP/1.1\r\nHost: x\r\n", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"],
    ids=["half-headers", "half-body"],
)
def test_half_a_request_gets_a_408_and_is_closed(plain, sent):
    with connect(plain) as sock:
        sock.sendall(sent)
        data, waited = timed_read(sock)
    assert data.startswith(b"HTTP/1.1 408 ")
    assert b'"error":"the request did not arrive in time"' in data
    assert waited < 2


def test_an_answer_given_before_the_body_is_in_is_not_followed_by_a_408(plain):
    with connect(plain) as sock:
        sock.sendall(b"POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        data, waited = timed_read(sock)
    assert data.startswith(b"HTTP/1.1 413 ")
    assert data.count(b"HTTP/1.1 ") == 1
    assert waited < 2


def test_bytes_that_are_not_http_get_a_json_400_and_a_close(plain):
    with connect(plain) as sock:
        sock.sendall(b"\x16\x03\x01 not http\r\n\r\n")
        data, _ = timed_read(sock)
    assert data.startswith(b"HTTP/1.1 400 ")
    assert data.endswith(b'{"error":"invalid HTTP request"}')


def test_a_kept_alive_connection_gets_the_header_deadline_again_for_its_next_request(plain):
    with connect(plain) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"POST / HTT")
        data, waited = timed_read(sock)
    assert data.startswith(b"HTTP/1.1 408 ")
    assert waited < 2


def test_a_kept_alive_connection_left_idle_is_closed_at_the_keep_alive_deadline():
    with serve(keep_alive_s=1) as srv, connect(srv) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        data, waited = timed_read(sock)
    assert data == b""
    assert 0.5 < waited < 3


def test_a_request_sent_in_time_is_answered_whatever_the_deadlines(plain):
    with httpx.Client(base_url=plain.url) as client:
        for _ in range(3):
            assert client.post("/", content=b"x" * 100_000).text == "100000"
            time.sleep(0.4)  # longer than the header deadline: idle keep-alive is not a stalled request


def test_past_the_connection_cap_a_new_connection_gets_a_503_at_once():
    with serve(protocol.Limits(header_timeout_s=30, body_timeout_s=30, max_connections=3)) as srv:
        held = [connect(srv) for _ in range(3)]
        try:
            time.sleep(0.2)  # the server has made them all
            with connect(srv) as extra:
                data, waited = timed_read(extra)
            assert data.startswith(b"HTTP/1.1 503 ")
            assert waited < 1
        finally:
            for sock in held:
                sock.close()
        time.sleep(0.2)
        assert httpx.get(srv.url + "/healthz").status_code == 200  # the slots came back


def test_stop_closes_stalled_and_half_sent_connections_instead_of_waiting_for_them():
    srv = serve(protocol.Limits(header_timeout_s=60, body_timeout_s=60), graceful_shutdown_s=10)
    srv.start()
    socks = [connect(srv) for _ in range(20)]
    for i, sock in enumerate(socks):
        if i % 2:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    time.sleep(0.2)
    start = time.monotonic()
    srv.stop()
    assert time.monotonic() - start < 2
    for sock in socks:
        sock.close()


@pytest.fixture
def cert_dir(tmp_path: Path) -> tls.CertDir:
    return tls.write_cert_dir(tmp_path / "certs", datetime.now(UTC))


def test_a_client_that_never_starts_the_tls_handshake_is_dropped(cert_dir):
    with (
        serve(files=cert_dir.serving, tls_handshake_timeout_s=0.3) as srv,
        connect(srv) as sock,
    ):
        data, waited = timed_read(sock)
    assert data == b""
    assert waited < 2


def test_healthz_answers_promptly_with_many_stalled_tls_connections_open(cert_dir):
    limits = protocol.Limits(header_timeout_s=30, body_timeout_s=30)
    with serve(limits, files=cert_dir.serving) as srv:
        ctx = ssl.create_default_context(cafile=str(cert_dir.ca_cert))
        stalled = []
        try:
            for i in range(200):
                conn = ctx.wrap_socket(connect(srv), server_hostname="localhost")
                if i % 2:
                    conn.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Le")
                stalled.append(conn)
            with httpx.Client(verify=ctx, timeout=5) as client:
                start = time.monotonic()
                assert client.get(srv.url + "/healthz").status_code == 200
                assert time.monotonic() - start < 1
        finally:
            for conn in stalled:
                conn.close()
