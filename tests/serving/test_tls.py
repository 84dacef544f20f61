"""Server TLS contexts, certificate reloading from disk and the development certificate directory."""

from __future__ import annotations

import asyncio
import ssl
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.serving import handshakes
from webhook.core.pki import certificates
from webhook.serving import tls

NOW = datetime.now(UTC)


@pytest.fixture
def cert_dir(tmp_path: Path) -> tls.CertDir:
    return tls.write_cert_dir(tmp_path / "certs", NOW)


def served_cert(reloading: tls.ReloadingContext, ca_cert: Path) -> bytes:
    """The certificate a new handshake against the context is given."""
    _, pem = handshakes.memory_handshake(ssl.create_default_context(cafile=str(ca_cert)), reloading.context)
    assert pem is not None
    return pem


def same_cert(a: bytes, b: bytes) -> bool:
    return certificates.load_certificate(a) == certificates.load_certificate(b)


def test_server_context_requires_tls_1_2_and_offers_http_1_1(cert_dir):
    ctx = tls.server_context(cert_dir.serving)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


@pytest.mark.parametrize("broken", ["cert", "key"], ids=["missing-cert", "missing-key"])
def test_missing_files_raise_tls_error_naming_them(cert_dir, broken):
    getattr(cert_dir.serving, broken).unlink()
    with pytest.raises(tls.TlsError, match=r"tls\.(crt|key)"):
        tls.ReloadingContext(cert_dir.serving)


def test_a_key_of_another_certificate_is_refused(cert_dir, tmp_path):
    other = tls.write_cert_dir(tmp_path / "other", NOW)
    with pytest.raises(tls.TlsError, match="cannot load"):
        tls.server_context(tls.TlsFiles(cert=cert_dir.serving.cert, key=other.serving.key))


def test_unchanged_files_are_not_reloaded(cert_dir):
    reloading = tls.ReloadingContext(cert_dir.serving)
    assert reloading.reload_if_changed() is False
    assert reloading.reloads == 0


def test_new_files_are_served_to_the_next_handshake(cert_dir, tmp_path):
    reloading = tls.ReloadingContext(cert_dir.serving)
    first = cert_dir.serving.cert.read_bytes()
    assert same_cert(served_cert(reloading, cert_dir.ca_cert), first)
    tls.write_cert_dir(cert_dir.path, NOW, dns_names=["localhost", "x.svc"], ca=cert_dir.read_ca())
    assert reloading.reload_if_changed() is True
    second = served_cert(reloading, cert_dir.ca_cert)
    assert same_cert(second, cert_dir.serving.cert.read_bytes())
    assert not same_cert(second, first)


def test_a_half_written_pair_keeps_the_old_certificate_until_the_key_arrives(cert_dir, tmp_path):
    reloading = tls.ReloadingContext(cert_dir.serving)
    old = cert_dir.serving.cert.read_bytes()
    fresh = certificates.generate_serving(cert_dir.read_ca(), ["localhost"], [], NOW)
    cert_dir.serving.cert.write_bytes(fresh.cert_pem)  # the key still belongs to the old certificate
    assert reloading.reload_if_changed() is False
    assert same_cert(served_cert(reloading, cert_dir.ca_cert), old)
    cert_dir.serving.key.write_bytes(fresh.key_pem)
    assert reloading.reload_if_changed() is True
    assert same_cert(served_cert(reloading, cert_dir.ca_cert), fresh.cert_pem)


def test_files_replaced_while_loading_are_taken_once_they_settle(cert_dir, monkeypatch):
    """A Secret update renames the files one by one; a pair read before the load and another loaded
    must not be recorded as seen, or the same certificate would be loaded twice."""
    reloading = tls.ReloadingContext(cert_dir.serving)
    ca = cert_dir.read_ca()
    first = certificates.generate_serving(ca, ["localhost"], [], NOW)
    second = certificates.generate_serving(ca, ["localhost"], [], NOW)
    cert_dir.serving.cert.write_bytes(first.cert_pem)
    cert_dir.serving.key.write_bytes(first.key_pem)
    load = tls.server_context

    def load_while_replaced(files):
        context = load(files)
        cert_dir.serving.cert.write_bytes(second.cert_pem)  # lands between the read and the check
        cert_dir.serving.key.write_bytes(second.key_pem)
        return context

    monkeypatch.setattr(tls, "server_context", load_while_replaced)
    assert reloading.reload_if_changed() is False
    monkeypatch.setattr(tls, "server_context", load)
    assert reloading.reload_if_changed() is True
    assert reloading.reload_if_changed() is False
    assert reloading.reloads == 1
    assert same_cert(served_cert(reloading, cert_dir.ca_cert), second.cert_pem)


def test_a_vanished_file_keeps_the_old_certificate(cert_dir):
    reloading = tls.ReloadingContext(cert_dir.serving)
    cert_dir.serving.key.unlink()
    assert reloading.reload_if_changed() is False
    assert same_cert(served_cert(reloading, cert_dir.ca_cert), cert_dir.serving.cert.read_bytes())


def test_watch_picks_up_new_files_until_cancelled(cert_dir):
    reloading = tls.ReloadingContext(cert_dir.serving)

    async def scenario() -> None:
        task = asyncio.create_task(reloading.watch(0.01))
        tls.write_cert_dir(cert_dir.path, NOW, ca=cert_dir.read_ca())
        for _ in range(500):
            if reloading.reloads:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert reloading.reloads == 1


def test_cert_dir_files_have_private_keys_readable_by_the_owner_only(cert_dir):
    for path, mode in [
        (cert_dir.serving.key, 0o600),
        (cert_dir.ca_key, 0o600),
        (cert_dir.serving.cert, 0o644),
        (cert_dir.ca_cert, 0o644),
    ]:
        assert stat.S_IMODE(path.stat().st_mode) == mode, path
    assert sorted(p.name for p in cert_dir.path.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]


def test_cert_dir_serving_certificate_covers_localhost_and_loopback(cert_dir):
    cert = cert_dir.serving.cert.read_bytes()
    assert certificates.dns_sans(cert) == ["localhost"]
    assert certificates.is_signed_by(cert, cert_dir.ca_cert.read_bytes())


def test_read_ca_is_none_for_a_mismatched_or_missing_ca(cert_dir, tmp_path):
    assert cert_dir.read_ca() is not None
    other = tls.write_cert_dir(tmp_path / "other", NOW)
    cert_dir.ca_key.write_bytes(other.ca_key.read_bytes())
    assert cert_dir.read_ca() is None
    assert tls.CertDir(tmp_path / "nowhere").read_ca() is None


def test_an_unwritable_cert_dir_raises_tls_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(tls.TlsError, match="cannot create"):
        tls.write_cert_dir(blocker / "certs", NOW)
