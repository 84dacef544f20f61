"""Fixtures: the real webhook server over HTTPS on 127.0.0.1 (ephemeral port) with generated certificates."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from webhook.admission import app, settings
from webhook.serving import probes, server, tls


@dataclass
class Webhook:
    server: server.AppServer
    cert_dir: tls.CertDir
    client: httpx.Client  # verifies the server with the generated CA

    @property
    def url(self) -> str:
        return self.server.url

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert_dir.ca_cert))


def start_webhook(tmp_path: Path, **overrides: object) -> tuple[server.AppServer, tls.CertDir]:
    cfg = settings.build(
        overrides={"host": "127.0.0.1", "port": 0, "cert_dir": tmp_path / "certs", **overrides}
    )
    files = app.prepare_certs(cfg, datetime.now(UTC))
    readiness = probes.Readiness()
    options = server.ServeOptions(
        host=cfg.host, port=cfg.port, tls=files, cert_reload_interval_s=0.05, graceful_shutdown_s=2
    )
    srv = app.app_server(cfg, options, readiness)
    srv.start()
    return srv, tls.CertDir(cfg.cert_dir)


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """One server per test module (starting and stopping costs ~0.3 s); tests must not rely on counters."""
    yield from _serve(tmp_path_factory.mktemp("webhook"))


@pytest.fixture
def fresh_webhook(tmp_path: Path) -> Iterator[Webhook]:
    """A server of this test's own (fresh metrics, own certificate directory)."""
    yield from _serve(tmp_path)


def _serve(tmp_path: Path) -> Iterator[Webhook]:
    srv, cert_dir = start_webhook(tmp_path)
    ctx = ssl.create_default_context(cafile=str(cert_dir.ca_cert))
    try:
        with httpx.Client(base_url=srv.url, verify=ctx, timeout=10) as client:
            yield Webhook(srv, cert_dir, client)
    finally:
        srv.stop()
