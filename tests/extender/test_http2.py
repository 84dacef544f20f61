"""The extender served over HTTP/2 (`--http2`, the chart's default with its own CA): kube-scheduler's Go
transport negotiates h2 by ALPN and multiplexes every call on one connection. The client certificate is
then required at the handshake, the probes answer on a plain port, new certificate files are served
without dropping the socket, and bad input still gets a JSON answer, never an HTTP 500."""

from __future__ import annotations

import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from starlette.types import Receive, Scope, Send

from tests.extender.test_client_auth import (
    BIND,
    FORWARDED,
    NOW,
    PREFIX,
    Pki,
    _write,
    client,
    make_pki,
    seen_pod,
)
from webhook.cli.serve import extender as serve_extender
from webhook.core.pki import certificates
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.extender.bind import forward
from webhook.extender.service import Extender
from webhook.extender.settings import ExtenderSettings
from webhook.serving import h2server, protocol, tls
from webhook.serving.server import ServeError, ServeOptions

SERVER_NAME = "gs-gpushare-extender.gpu-system.svc"


def _settings(pki: Pki, **extra: object) -> ExtenderSettings:
    return ExtenderSettings(
        host="127.0.0.1",
        port=0,
        tls_cert=pki.cert,
        tls_key=pki.key,
        client_ca=pki.ca,
        http2=True,
        bind_backoff_s=0.01,
        **extra,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def extender(cluster: ApiServer, pki: Pki) -> Iterator[Extender]:
    ext = Extender(_settings(pki), cluster.new_client()).start(health_port=0)
    assert ext.wait_synced(10)
    yield ext
    ext.stop()


def _handshake(ext: Extender, pki: Pki, cert: tuple[Path, Path] | None) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.set_alpn_protocols(["h2", "http/1.1"])  # what Go's transport offers
    if cert is not None:
        context.load_cert_chain(*cert)
    raw = socket.create_connection(("127.0.0.1", ext.server.port), timeout=5)
    conn = context.wrap_socket(raw, server_hostname="127.0.0.1")
    conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # a TLS 1.3 server refuses a certificate here
    return conn


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_alpn_offers_http2_to_the_schedulers_certificate(extender, pki):
    with _handshake(extender, pki, (pki.client_cert, pki.client_key)) as conn:
        assert conn.selected_alpn_protocol() == "h2"
        assert conn.version() in ("TLSv1.2", "TLSv1.3")


@pytest.mark.parametrize("who", ["anonymous", "stranger"])
def test_without_a_certificate_of_the_client_ca_nothing_gets_past_the_handshake(extender, pki, who):
    cert = None if who == "anonymous" else (pki.stranger_cert, pki.stranger_key)
    with client(extender, pki, cert) as caller:
        for method, path in (("POST", f"{PREFIX}/bind"), ("GET", f"{PREFIX}/inspect"), ("GET", "/healthz")):
            with pytest.raises(httpx.TransportError):
                caller.request(method, path, json=BIND)


def test_the_schedulers_certificate_binds_and_calls_are_counted_by_http_version(cluster, extender, pki):
    seen_pod(cluster, extender)
    with client(extender, pki, (pki.client_cert, pki.client_key)) as scheduler:
        assert scheduler.post(f"{PREFIX}/bind", json=BIND).json() == {"Error": ""}
    assert cluster.get("pods", "a", "default")["spec"]["nodeName"] == "n2"
    status, text = _get(f"http://127.0.0.1:{extender.health_port}/metrics")
    assert status == 200
    assert 'gpushare_extender_scheduler_calls_total{http_version="1.1"} 1.0' in text


def test_a_follower_forwards_bind_to_an_http2_leader_with_its_certificate(cluster, extender, pki):
    seen_pod(cluster, extender)
    without = forward.Forwarder(PREFIX, ca_file=pki.ca, server_name=SERVER_NAME)
    assert without.bind(extender.url, FORWARDED).outcome != forward.BOUND  # refused at the handshake
    assert cluster.get("pods", "a", "default")["spec"].get("nodeName") is None
    with_cert = forward.Forwarder(
        PREFIX, ca_file=pki.ca, server_name=SERVER_NAME, cert_file=pki.client_cert, key_file=pki.client_key
    )
    assert with_cert.bind(extender.url, FORWARDED) == forward.Forwarded(forward.BOUND, "")


@pytest.mark.parametrize(
    ("path", "status", "text"),
    [
        ("/healthz", 200, '{"status": "ok"}'),
        ("/readyz", 200, '{"status": "ready"}'),
        ("/metrics", 200, "gpushare_extender_requests_total"),
        (f"{PREFIX}/inspect", 404, "not found"),  # no scheduler verb on the plain port
    ],
)
def test_the_probe_port_answers_the_kubelet_without_a_certificate(extender, path, status, text):
    got, body = _get(f"http://127.0.0.1:{extender.health_port}{path}")
    assert got == status and text in body


def test_bad_bodies_get_the_extenders_json_answer_not_a_500(extender, pki):
    with client(extender, pki, (pki.client_cert, pki.client_key)) as scheduler:
        for path in ("filter", "prioritize", "bind"):
            for body in (b"{", b"[]", b'{"Pod": 3}', b"\xff" * 10):
                reply = scheduler.post(f"{PREFIX}/{path}", content=body)
                # filter and bind carry the failure in Error; prioritize has no such field: a 400.
                assert reply.status_code == (400 if path == "prioritize" else 200), (path, body, reply.text)
                assert reply.json()["Error"]


def test_new_serving_files_are_served_on_the_same_socket(cluster, tmp_path):
    ca = certificates.generate_ca("rotating-ca", NOW)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    cert, key = _write(tmp_path, "tls", certificates.generate_serving(ca, [SERVER_NAME], ["127.0.0.1"], NOW))
    client_pair = _write(tmp_path, "client", certificates.generate_client(ca, "gpushare-scheduler", [], NOW))
    own = Pki(tmp_path / "ca.crt", cert, key, *client_pair, *client_pair)
    ext = Extender(_settings(own), cluster.new_client()).start()
    try:
        fresh = certificates.generate_serving(ca, [SERVER_NAME], ["127.0.0.1"], NOW)
        key.write_bytes(fresh.key_pem)
        cert.write_bytes(fresh.cert_pem)
        wanted = x509.load_pem_x509_certificate(fresh.cert_pem).serial_number
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with _handshake(ext, own, client_pair) as conn:
                der = conn.getpeercert(binary_form=True)
            assert der is not None
            if x509.load_der_x509_certificate(der).serial_number == wanted:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the new certificate was not served within 10 s")
        # Once the old workers have stopped, the socket still accepts and the app still binds.
        time.sleep(h2server.RESPAWN_DELAY_S + 0.5)
        seen_pod(cluster, ext)
        with client(ext, own, client_pair) as scheduler:
            assert scheduler.get(f"{PREFIX}/inspect").status_code == 200
            assert scheduler.post(f"{PREFIX}/bind", json=BIND).json() == {"Error": ""}
    finally:
        ext.stop()


def test_stop_returns_promptly_and_frees_the_port(cluster, pki):
    ext = Extender(_settings(pki), cluster.new_client()).start(health_port=0)
    port = ext.server.port
    started = time.monotonic()
    ext.stop()
    assert time.monotonic() - started < 5
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_taken_port_and_bad_files_fail_before_serving(pki, tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        files = tls.TlsFiles(pki.cert, pki.key, client_ca=pki.ca)
        with pytest.raises(ServeError, match="cannot listen"):
            h2server.H2Server(_app, ServeOptions(host="127.0.0.1", port=taken.getsockname()[1], tls=files))
    finally:
        taken.close()
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate")
    with pytest.raises(tls.TlsError, match=r"garbage\.crt"):
        h2server.H2Server(_app, ServeOptions(host="127.0.0.1", port=0, tls=tls.TlsFiles(garbage, pki.key)))
    with pytest.raises(ServeError, match="needs a certificate"):
        h2server.H2Server(_app, ServeOptions(host="127.0.0.1", port=0))


def test_a_server_whose_app_cannot_start_ends_with_an_error_not_exit_0(pki):
    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "the app cannot start"})

    files = tls.TlsFiles(pki.cert, pki.key, client_ca=pki.ca)
    server = h2server.H2Server(failing, ServeOptions(host="127.0.0.1", port=0, tls=files))
    thread = threading.Thread(target=server._run_in_thread, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    assert isinstance(server._thread_error, ServeError)
    assert "the HTTP/2 server stopped: ASGI lifespan startup" in str(server._thread_error)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--http2"], "--http2 needs --tls-cert and --tls-key"),
        (
            ["--http2", "--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca", "--client-name", "s"],
            "--client-name cannot be checked with --http2",
        ),
        (["--health-port", "39999"], "--health-port must differ from --port"),
        (["--health-port", "70000"], "is not a port"),
    ],
    ids=["http2-without-tls", "http2-with-client-name", "health-port-is-port", "health-port-range"],
)
def test_http2_flags_that_cannot_work_together_exit_2_with_the_reason(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        serve_extender.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


async def _app(scope: object, receive: object, send: object) -> None:  # never called
    raise AssertionError("not served")


def test_a_half_sent_body_is_answered_at_the_body_deadline(extender, pki):
    # granian sets no deadline on a body: a client that sends half of one and stalls held its stream
    # (and a graceful stop) forever. The verbs keep AppServer's body deadline themselves.
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(pki.client_cert, pki.client_key)
    context.set_alpn_protocols(["http/1.1"])
    raw = socket.create_connection(("127.0.0.1", extender.server.port), timeout=5)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        head = f"POST {PREFIX}/bind HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n"
        conn.sendall(head.encode() + b'{"PodName": "a"')
        started = time.monotonic()
        conn.settimeout(protocol.Limits().body_timeout_s + 5)
        answer = conn.recv(65536)
    assert time.monotonic() - started < protocol.Limits().body_timeout_s + 2
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"the client did not send the whole request body within 10 s" in answer
