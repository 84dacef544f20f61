"""The verified client certificate's name reaches the app through the ASGI TLS extension."""

from __future__ import annotations

import contextlib
import ssl
from datetime import UTC, datetime
from pathlib import Path

import pytest

from webhook.core.pki import certificates
from webhook.serving import clientauth, tls

NOW = datetime.now(UTC)


def _server_side(tmp_path: Path, client_pair: certificates.KeyPair | None, ask: bool) -> ssl.SSLObject:
    ca = certificates.generate_ca("ca", NOW)
    serving = certificates.generate_serving(ca, ["localhost"], [], NOW)
    for name, data in (("ca.crt", ca.cert_pem), ("tls.crt", serving.cert_pem), ("tls.key", serving.key_pem)):
        (tmp_path / name).write_bytes(data)
    files = tls.TlsFiles(tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt" if ask else None)
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    if client_pair is not None:
        (tmp_path / "c.crt").write_bytes(client_pair.cert_pem)
        (tmp_path / "c.key").write_bytes(client_pair.key_pem)
        client_ctx.load_cert_chain(tmp_path / "c.crt", tmp_path / "c.key")
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = tls.server_context(files).wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    # TLS 1.3 sends the client's certificate after the client finished: one more read on the server.
    with contextlib.suppress(ssl.SSLWantReadError):
        server.read(1)
    return server


def test_a_verified_client_certificate_gives_its_rfc4514_name(tmp_path, monkeypatch):
    ca = certificates.generate_ca("ca", NOW)
    pair = certificates.generate_client(ca, "gpushare-scheduler", ["a,b"], NOW)
    monkeypatch.setattr(certificates, "generate_ca", lambda *a, **k: ca)
    extension = clientauth.tls_extension(_server_side(tmp_path, pair, ask=True))
    assert clientauth.client_name({"extensions": {"tls": extension}}) == "CN=gpushare-scheduler,O=a\\,b"
    assert clientauth.common_names({"extensions": {"tls": extension}}) == ("gpushare-scheduler",)


@pytest.mark.parametrize("ask", [True, False], ids=["no-certificate", "no-client-ca"])
def test_no_name_without_a_verified_certificate(tmp_path, ask):
    other = certificates.generate_ca("other", NOW)
    pair = None if ask else certificates.generate_client(other, "x", [], NOW)
    extension = clientauth.tls_extension(_server_side(tmp_path, pair, ask=ask))
    assert extension is not None
    assert clientauth.client_name({"extensions": {"tls": extension}}) is None


def test_plain_http_has_no_tls_extension():
    assert clientauth.tls_extension(None) is None
    assert clientauth.client_name({"type": "http"}) is None


class _Peer:
    """An SSLObject's getpeercert, as the server sees a verified client."""

    def __init__(self, subject: object) -> None:
        self.subject = subject

    def getpeercert(self) -> dict[str, object]:
        return {"subject": self.subject}


@pytest.mark.parametrize(
    ("subject", "common_names"),
    [
        (((("commonName", "gpushare-scheduler"),), (("organizationName", "a,b"),)), ("gpushare-scheduler",)),
        (((("organizationName", "x"),), (("commonName", "a,b+c=d"),)), ("a,b+c=d",)),
        (((("commonName", "one"), ("commonName", "two")), (("organizationName", "x"),)), ("one", "two")),
        (((("organizationName", "CN=fake"),), (("organizationalUnitName", "x"),)), ()),
        (((("organizationName", "x,CN=fake"),),), ()),
        ((), ()),
    ],
)
def test_common_names_are_read_from_the_verified_subject(subject, common_names):
    extension = clientauth.tls_extension(_Peer(subject))  # type: ignore[arg-type]
    assert clientauth.common_names({"extensions": {"tls": extension}}) == common_names


def test_no_common_names_without_a_verified_certificate():
    assert clientauth.common_names({"type": "http"}) == ()
    extension = clientauth.tls_extension(_Peer(()))  # type: ignore[arg-type]
    assert clientauth.client_name({"extensions": {"tls": extension}}) is None
