"""The HTTP/2 server (granian) over real sockets on loopback: certificate rotation respawns its workers
on our one listening socket, which must keep accepting and not leak; the app's lifespan runs once."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from webhook.core.pki import certificates
from webhook.serving import h2server, tls
from webhook.serving.server import ServeOptions

NOW = datetime.now(UTC)


class Pki:
    """A CA, the server's pair (rewritable) and a client pair it signed, in `folder`."""

    def __init__(self, folder: Path) -> None:
        self.ca_pair = certificates.generate_ca("h2-ca", NOW)
        self.ca = folder / "ca.crt"
        self.ca.write_bytes(self.ca_pair.cert_pem)
        self.trust = folder / "trust.crt"  # the client's copy: a test may spoil the server's
        self.trust.write_bytes(self.ca_pair.cert_pem)
        self.cert, self.key = folder / "tls.crt", folder / "tls.key"
        self.client_cert, self.client_key = folder / "client.crt", folder / "client.key"
        client = certificates.generate_client(self.ca_pair, "scheduler", [], NOW)
        self.client_cert.write_bytes(client.cert_pem)
        self.client_key.write_bytes(client.key_pem)
        self.serial = self.rotate(self.cert, self.key)

    def rotate(self, cert: Path, key: Path) -> int:
        """A new serving pair into `cert` and `key`; its serial number."""
        fresh = certificates.generate_serving(self.ca_pair, ["localhost"], ["127.0.0.1"], NOW)
        key.write_bytes(fresh.key_pem)
        cert.write_bytes(fresh.cert_pem)
        return x509.load_pem_x509_certificate(fresh.cert_pem).serial_number

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.trust))
        context.load_cert_chain(self.client_cert, self.client_key)
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def _app(lifespans: list[str]) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        lifespans.append("startup")
        try:
            yield
        finally:
            lifespans.append("shutdown")

    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/", hello)], lifespan=lifespan)


@contextlib.contextmanager
def _serving(pki: Pki, cert: Path, key: Path, lifespans: list[str]) -> Iterator[h2server.H2Server]:
    files = tls.TlsFiles(cert, key, client_ca=pki.ca)
    options = ServeOptions(host="127.0.0.1", port=0, tls=files, cert_reload_interval_s=0.1)
    server = h2server.H2Server(_app(lifespans), options)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _served_serial(server: h2server.H2Server, pki: Pki) -> int:
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
        pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _wait_served(server: h2server.H2Server, pki: Pki, serial: int) -> None:
    deadline = time.monotonic() + 10
    while _served_serial(server, pki) != serial:
        assert time.monotonic() < deadline, "the new certificate was not served within 10 s"
        time.sleep(0.1)


def _open(prefix: str) -> int:
    """How many of this process's descriptors lead to a name starting with `prefix`."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own, closed since
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(prefix)
    return count


def test_the_socket_keeps_accepting_after_rotations_and_nothing_leaks(pki: Pki) -> None:
    lifespans: list[str] = []
    with _serving(pki, pki.cert, pki.key, lifespans) as server:
        with httpx.Client(base_url=server.url, verify=pki.client_context()) as caller:
            assert caller.get("/").text == "hello"
        listener = os.readlink(f"/proc/self/fd/{server._socket.fileno()}")
        for _ in range(3):
            _wait_served(server, pki, pki.rotate(pki.cert, pki.key))
            # The old workers stop after granian's respawn delay; the socket must outlive them.
            time.sleep(h2server.RESPAWN_DELAY_S + 0.5)
            with httpx.Client(base_url=server.url, verify=pki.client_context()) as caller:
                assert caller.get("/").text == "hello"
            # Ours and the one worker's copy; the files the last two generations of workers read.
            assert _open(listener) == 2
            assert _open("/memfd:") == 2 * len(("cert", "key", "ca"))
        assert server._thread is not None and server._thread.is_alive()
    assert server._thread_error is None
    # One server, one app: a respawn does not run its startup and shutdown again.
    assert lifespans == ["startup", "shutdown"]


def _secret_volume(folder: Path, pki: Pki, generation: int) -> int:
    """The kubelet's layout of a Secret volume (AtomicWriter): the files live in a timestamped folder that
    `..data` links to, the names link through `..data`; an update writes a new folder, swaps the link
    and deletes the old folder. The serving pair's serial number."""
    fresh = folder / f"..gen_{generation}"
    fresh.mkdir()
    serial = pki.rotate(fresh / "tls.crt", fresh / "tls.key")
    (folder / "..data_tmp").symlink_to(fresh.name)
    (folder / "..data_tmp").rename(folder / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (folder / name).is_symlink():
            (folder / name).symlink_to(f"..data/{name}")
    if generation:
        old = folder / f"..gen_{generation - 1}"
        for file in old.iterdir():
            file.unlink()
        old.rmdir()
    return serial


def test_a_secret_volume_update_is_served_and_the_server_survives_it(pki: Pki, tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    _secret_volume(volume, pki, 0)
    with _serving(pki, volume / "tls.crt", volume / "tls.key", []) as server:
        for generation in (1, 2):
            _wait_served(server, pki, _secret_volume(volume, pki, generation))
        time.sleep(h2server.RESPAWN_DELAY_S + 0.5)
        with httpx.Client(base_url=server.url, verify=pki.client_context()) as caller:
            assert caller.get("/").text == "hello"
        assert server._thread is not None and server._thread.is_alive()


@pytest.mark.parametrize("bad", ["garbage CA", "key of another pair", "half a certificate"])
def test_bad_new_files_leave_the_old_certificate_served(pki: Pki, tmp_path: Path, bad: str) -> None:
    with _serving(pki, pki.cert, pki.key, []) as server:
        good_ca, good_cert = pki.ca.read_bytes(), pki.cert.read_bytes()
        if bad == "garbage CA":
            pki.ca.write_bytes(b"-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
        elif bad == "key of another pair":
            pki.rotate(tmp_path / "other.crt", pki.key)
        else:
            pki.cert.write_bytes(good_cert[: len(good_cert) // 2])
        time.sleep(h2server.RESPAWN_DELAY_S + 0.5)  # polls every 0.1 s: time to take them, were they good
        assert _served_serial(server, pki) == pki.serial
        with httpx.Client(base_url=server.url, verify=pki.client_context()) as caller:
            assert caller.get("/").text == "hello"
        pki.ca.write_bytes(good_ca)
        _wait_served(server, pki, pki.rotate(pki.cert, pki.key))  # a good pair after a bad one is taken
        assert server._thread is not None and server._thread.is_alive()
