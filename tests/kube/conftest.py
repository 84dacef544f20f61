"""An HTTPS server with the TLS settings the client library is configured with (CA, client
certificate, server name), for the direct clients' tests."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import kubernetes.client
import pytest

from webhook.core.pki import certificates
from webhook.serving import tls

C = TypeVar("C")


def instances(monkeypatch: pytest.MonkeyPatch, cls: type[C]) -> list[C]:
    """Every `cls` made from now on, in order (for a fixture to close the clients a test made)."""
    made: list[C] = []
    real_init = cls.__init__

    def init(self: C, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(cls, "__init__", init)
    return made


def configured(
    server: tuple[str, Path, Path, Path], *, ca: Path | None = None, server_name: str = "", token: str = ""
) -> kubernetes.client.Configuration:
    """A client library configuration for `https_server`'s (url, ca, client cert, client key): its CA
    (or `ca`), its client certificate, and the tls-server-name and bearer token when given."""
    url, server_ca, cert, key = server
    config = kubernetes.client.Configuration(host=url)
    config.ssl_ca_cert, config.cert_file, config.key_file = str(ca or server_ca), str(cert), str(key)
    if server_name:
        config.tls_server_name = server_name
    if token:
        config.api_key = {"BearerToken": token}
        config.api_key_prefix = {"BearerToken": "Bearer"}
    return config


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        seen = {
            "body": json.loads(self.rfile.read(length)),
            "authorization": self.headers.get("Authorization"),
            "client": certificates.common_names(
                certificates.load_certificate(
                    ssl.DER_cert_to_PEM_cert(self.connection.getpeercert(binary_form=True)).encode()
                )
            ),
        }
        reply = json.dumps({"kind": "Status", "status": "Success", "code": 201, "seen": seen}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def https_server(tmp_path: Path) -> Iterator[tuple[str, Path, Path, Path]]:
    """An HTTPS server on 127.0.0.1 whose certificate names only apiserver.internal, asking for a client
    certificate signed by its CA; (url, ca, client cert, client key)."""
    now = datetime.now(UTC)
    cert_dir = tls.write_cert_dir(tmp_path / "server", now, dns_names=["apiserver.internal"], ip_addresses=[])
    ca = certificates.KeyPair(cert_dir.ca_cert.read_bytes(), (cert_dir.path / "ca.key").read_bytes())
    client = certificates.generate_client(ca, "system:kube-scheduler", [], now)
    (tmp_path / "client.crt").write_bytes(client.cert_pem)
    (tmp_path / "client.key").write_bytes(client.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_dir.serving.cert, cert_dir.serving.key)
    context.load_verify_locations(cafile=str(cert_dir.ca_cert))
    context.verify_mode = ssl.CERT_REQUIRED
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}"
        yield url, cert_dir.ca_cert, tmp_path / "client.crt", tmp_path / "client.key"
    finally:
        server.shutdown()
        server.server_close()
