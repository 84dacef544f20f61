"""The uvicorn runner over real sockets on loopback: HTTP and HTTPS, TLS versions, probes, start errors."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import warnings
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.serving import handshakes
from webhook import __version__
from webhook.serving import metrics, probes, server, tls


def make_app(readiness: probes.Readiness, registry: CollectorRegistry) -> Starlette:
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/", hello), *probes.probe_routes(readiness, registry)])


@pytest.fixture
def cert_dir(tmp_path: Path) -> tls.CertDir:
    return tls.write_cert_dir(tmp_path / "certs", datetime.now(UTC))


def options(files: tls.TlsFiles | None = None) -> server.ServeOptions:
    return server.ServeOptions(host="127.0.0.1", port=0, tls=files, graceful_shutdown_s=1)


def client_context(cert_dir: tls.CertDir, version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cert_dir.ca_cert))
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    return ctx


def test_plain_http_serves_the_app_and_probes():
    readiness, registry = probes.Readiness(), CollectorRegistry()
    with server.AppServer(make_app(readiness, registry), options(), readiness) as srv:
        assert srv.url.startswith("http://127.0.0.1:")
        assert httpx.get(srv.url + "/").text == "hello"
        assert httpx.get(srv.url + "/healthz").json() == {"status": "ok"}
        assert httpx.get(srv.url + "/readyz").status_code == 200
    assert readiness.failing() == ["serving"]


def test_readyz_is_503_until_serving_and_names_failing_checks():
    readiness, registry = probes.Readiness(), CollectorRegistry()
    app = make_app(readiness, registry)
    transport = httpx.ASGITransport(app=app)

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get("/readyz")

    response = asyncio.run(get())
    assert response.status_code == 503
    assert response.json()["failing"] == ["serving"]
    readiness.set_serving(True)
    readiness.add_check("cache", lambda: False)
    readiness.add_check("broken", lambda: 1 / 0 == 0)
    assert asyncio.run(get()).json()["failing"] == ["cache", "broken"]


def test_metrics_route_exposes_the_app_registry_only():
    readiness, registry = probes.Readiness(), CollectorRegistry()
    stats = metrics.RequestMetrics(registry, "unit")
    stats.observe("filter", "ok", 0.002)
    with server.AppServer(make_app(readiness, registry), options(), readiness) as srv:
        text = httpx.get(srv.url + "/metrics").text
    assert 'unit_requests_total{endpoint="filter",outcome="ok"} 1.0' in text
    assert 'unit_request_duration_seconds_bucket{endpoint="filter",le="0.0025"} 1.0' in text
    assert "python_gc" not in text  # not the global registry


def test_connections_are_counted_per_server_not_per_request(cert_dir):
    readiness, registry = probes.Readiness(), CollectorRegistry()
    other = CollectorRegistry()
    app = make_app(readiness, registry)
    with (
        server.AppServer(app, options(cert_dir.serving), readiness, metrics=(registry, "unit")) as srv,
        server.AppServer(make_app(probes.Readiness(), other), options(), metrics=(other, "other")) as plain,
    ):
        with httpx.Client(verify=client_context(cert_dir)) as kept:  # one connection, three requests
            for _ in range(3):
                assert kept.get(srv.url + "/").text == "hello"
        for _ in range(2):  # a new connection (and TLS handshake) each
            with httpx.Client(verify=client_context(cert_dir)) as once:
                once.get(srv.url + "/")
        assert srv.connections_opened == 3
        with httpx.Client(verify=client_context(cert_dir)) as scraper:
            text = scraper.get(srv.url + "/metrics").text
        assert plain.connections_opened == 0  # its own count
    assert "unit_connections_opened_total 4.0" in text  # the scrape's own connection included
    assert "other_" not in text


def test_https_serves_with_the_generated_certificate(cert_dir):
    readiness, registry = probes.Readiness(), CollectorRegistry()
    with server.AppServer(make_app(readiness, registry), options(cert_dir.serving), readiness) as srv:
        assert srv.url.startswith("https://")
        with httpx.Client(verify=client_context(cert_dir)) as client:
            assert client.get(srv.url + "/").text == "hello"
            assert client.get(f"https://localhost:{srv.port}/readyz").status_code == 200


def serving_fields(caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    [record] = [r for r in caplog.records if r.getMessage() == "serving"]
    return dict(record.fields)  # type: ignore[attr-defined]


def test_the_serving_line_names_the_release_and_the_absolute_certificate_and_key_not_their_contents(
    cert_dir, tmp_path, monkeypatch, caplog
):
    monkeypatch.chdir(tmp_path)  # certificates already there, named relative to the working folder
    files = tls.TlsFiles(cert=Path("certs/tls.crt"), key=Path("certs/tls.key"))
    caplog.set_level(logging.INFO, logger="webhook.serving.server")
    readiness, registry = probes.Readiness(), CollectorRegistry()
    with server.AppServer(make_app(readiness, registry), options(files), readiness) as srv:
        fields = serving_fields(caplog)
    assert fields == {
        "url": f"https://127.0.0.1:{srv.port}",
        "version": __version__,
        "cert": str(cert_dir.serving.cert),
        "key": str(cert_dir.serving.key),
    }
    assert Path(fields["cert"]).is_absolute() and "BEGIN" not in caplog.text


def test_an_ipv6_host_is_bracketed_in_the_serving_url(caplog):
    caplog.set_level(logging.INFO, logger="webhook.serving.server")
    readiness, registry = probes.Readiness(), CollectorRegistry()
    ipv6 = server.ServeOptions(host="::", port=0, graceful_shutdown_s=1)
    with server.AppServer(make_app(readiness, registry), ipv6, readiness) as srv:
        assert serving_fields(caplog) == {"url": f"http://[::]:{srv.port}", "version": __version__}
        assert srv.url == f"http://[::1]:{srv.port}"
        assert httpx.get(srv.url + "/").text == "hello"


def test_every_address_serves_ipv6_and_ipv4_on_one_socket_whatever_bindv6only_says(monkeypatch):
    # IPv6-only and dual-stack clusters give pods IPv6 addresses; IPv4 clusters IPv4 ones: "::" takes both,
    # even where net.ipv6.bindv6only=1 would make an IPv6 socket IPv6-only.
    real_socket = socket.socket

    def v6only_by_default(*args, **kwargs):
        sock = real_socket(*args, **kwargs)
        if sock.family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        return sock

    monkeypatch.setattr(socket, "socket", v6only_by_default)
    readiness, registry = probes.Readiness(), CollectorRegistry()
    every = server.ServeOptions(host=server.ANY_ADDRESS, port=0, graceful_shutdown_s=1)
    with server.AppServer(make_app(readiness, registry), every, readiness) as srv:
        assert httpx.get(f"http://127.0.0.1:{srv.port}/").text == "hello"
        assert httpx.get(f"http://[::1]:{srv.port}/").text == "hello"


def test_without_ipv6_in_the_kernel_every_address_is_every_ipv4_address(monkeypatch, caplog):
    real_socket = socket.socket

    def no_ipv6(family=socket.AF_INET, *args, **kwargs):
        if family == socket.AF_INET6:
            raise OSError(97, "Address family not supported by protocol")
        return real_socket(family, *args, **kwargs)

    monkeypatch.setattr(socket, "socket", no_ipv6)
    caplog.set_level(logging.INFO, logger="webhook.serving.server")
    readiness, registry = probes.Readiness(), CollectorRegistry()
    every = server.ServeOptions(host=server.ANY_ADDRESS, port=0, graceful_shutdown_s=1)
    with server.AppServer(make_app(readiness, registry), every, readiness) as srv:
        assert srv.url == f"http://127.0.0.1:{srv.port}"
        assert httpx.get(srv.url + "/").text == "hello"
    assert "no IPv6 on this host: listening on IPv4 only" in caplog.text
    with pytest.raises(server.ServeError, match=r"cannot listen on \[::1\]:0: Address family not supported"):
        server.AppServer(make_app(readiness, registry), server.ServeOptions(host="::1", port=0))


@pytest.mark.parametrize(
    "version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["tls1.2", "tls1.3"]
)
def test_tls_1_2_and_1_3_are_accepted(cert_dir, version):
    readiness, registry = probes.Readiness(), CollectorRegistry()
    with server.AppServer(make_app(readiness, registry), options(cert_dir.serving), readiness) as srv:
        ctx = client_context(cert_dir, version)
        with (
            socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname="localhost") as conn,
        ):
            assert (
                conn.version()
                == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
            )
            assert conn.selected_alpn_protocol() in (None, "http/1.1")


def old_tls_client(cert_dir: tls.CertDir, version: ssl.TLSVersion) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cert_dir.ca_cert))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ctx.maximum_version = version
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer the old version at all
    return ctx


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1], ids=["tls1.0", "tls1.1"])
def test_tls_below_1_2_is_refused(cert_dir, version):
    # Control: this client really speaks the old version with a server that allows it.
    permissive = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        permissive.minimum_version = ssl.TLSVersion.TLSv1
    permissive.set_ciphers("DEFAULT:@SECLEVEL=0")
    permissive.load_cert_chain(cert_dir.serving.cert, cert_dir.serving.key)
    expected = {ssl.TLSVersion.TLSv1: "TLSv1", ssl.TLSVersion.TLSv1_1: "TLSv1.1"}[version]
    assert handshakes.memory_handshake(old_tls_client(cert_dir, version), permissive)[0] == expected

    readiness, registry = probes.Readiness(), CollectorRegistry()
    with server.AppServer(make_app(readiness, registry), options(cert_dir.serving), readiness) as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as raw:
            ctx = old_tls_client(cert_dir, version)
            with pytest.raises(ssl.SSLError), ctx.wrap_socket(raw, server_hostname="localhost"):
                pass
        # The server is unharmed and still answers a modern client.
        with httpx.Client(verify=client_context(cert_dir)) as client:
            assert client.get(srv.url + "/").text == "hello"


def test_a_port_in_use_is_a_serve_error_naming_the_address():
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(server.ServeError, match=f"127.0.0.1:{port}"):
            server.AppServer(
                make_app(probes.Readiness(), CollectorRegistry()), server.ServeOptions("127.0.0.1", port)
            )


def test_a_busy_ipv6_address_is_named_in_brackets():
    with socket.create_server(("::1", 0), family=socket.AF_INET6) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(server.ServeError, match=rf"cannot listen on \[::1\]:{port}:"):
            server.AppServer(
                make_app(probes.Readiness(), CollectorRegistry()), server.ServeOptions("::1", port)
            )


def test_missing_certificates_fail_before_binding(tmp_path):
    files = tls.TlsFiles.in_dir(tmp_path)
    with pytest.raises(tls.TlsError):
        server.AppServer(make_app(probes.Readiness(), CollectorRegistry()), options(files))


def test_an_app_server_that_never_ran_releases_its_socket_on_stop():
    srv = server.AppServer(make_app(probes.Readiness(), CollectorRegistry()), options())
    port = srv.port
    srv.stop()
    with socket.create_server(("127.0.0.1", port)):
        pass


def test_idle_connections_are_kept_longer_than_kube_apiserver_and_kube_scheduler_keep_them():
    # Both call us through Go transports that drop an idle connection after 90 s; the webhook and the
    # extender serve with this default.
    assert server.ServeOptions().keep_alive_s > 90
