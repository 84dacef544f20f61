"""Server TLS (>= 1.2) from certificate files that may be replaced while we serve (a rotated Secret).

`ReloadingContext.context` goes to the server once. Its SNI callback, which OpenSSL runs on every
ClientHello, hands each new handshake the newest context, so established connections keep theirs and no
request in flight fails. Also writes the development certificate directory (`tls.crt`, `tls.key`,
`ca.crt`, `ca.key`: the Kubernetes TLS Secret layout, so a mounted Secret works as the directory).
With `client_ca` the server also asks each client for a certificate (optional at the TLS layer, so a
kubelet probe without one still connects; one that fails verification ends the handshake) and the app
reads the verified name from the scope (`serving.clientauth`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from webhook.core.pki import certificates

log = logging.getLogger(__name__)

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_CERT_FILE = "ca.crt"
CA_KEY_FILE = "ca.key"

DEFAULT_DNS_NAMES: tuple[str, ...] = ("localhost",)
DEFAULT_IP_ADDRESSES: tuple[str, ...] = ("127.0.0.1",)


class TlsError(Exception):
    """Certificate or key files that cannot be served; the message names the files and the reason."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the serving certificate chain and its private key are read from."""

    cert: Path
    key: Path
    client_ca: Path | None = None  # CA bundle (PEM) that verifies client certificates; None: none asked

    @classmethod
    def in_dir(cls, cert_dir: Path) -> TlsFiles:
        return cls(cert=cert_dir / CERT_FILE, key=cert_dir / KEY_FILE)

    def exist(self) -> bool:
        return self.cert.is_file() and self.key.is_file()

    @property
    def paths(self) -> tuple[Path, ...]:
        return (self.cert, self.key) if self.client_ca is None else (self.cert, self.key, self.client_ca)


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2 minimum, HTTP/1.1 ALPN) holding the files' certificate and key,
    and asking for client certificates signed by `files.client_ca` when it is set."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # The API server forces HTTP/1.1 for service references (k8s.io/apiserver pkg/util/webhook); uvicorn
    # speaks only that.
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"cannot load certificate {files.cert} with key {files.key}: {exc}") from exc
    if files.client_ca is not None:
        # OPTIONAL, not REQUIRED: probes and Prometheus connect without one; the app refuses the
        # scheduler's routes to them. A certificate that does not verify still ends the handshake.
        # Every reloaded context keeps this mode: OpenSSL keeps the first context's verify mode on a
        # connection whose context the SNI callback swaps (the CA store does follow the new context).
        ctx.verify_mode = ssl.CERT_OPTIONAL
        try:
            ctx.load_verify_locations(cafile=files.client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise TlsError(f"cannot load client CA {files.client_ca}: {exc}") from exc
    return ctx


class NamedClientContext(ssl.SSLContext):
    """A client context that checks the server's certificate (and sends SNI) for `server_name` instead of
    the host dialled: reaching a Service's pod by IP or through `kubectl port-forward` to 127.0.0.1, the
    certificate names the Service, not the address."""

    server_name = ""

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> Any:
        if self.server_name:
            kwargs["server_hostname"] = self.server_name
        return super().wrap_socket(sock, *args, **kwargs)


def client_context(
    ca_file: str = "", cert_file: str = "", key_file: str = "", server_name: str = ""
) -> ssl.SSLContext:
    """TLS >= 1.2 client context verifying against `ca_file` (the system store when empty), presenting
    `cert_file`/`key_file` when given. OSError or ssl.SSLError when a file cannot be loaded."""
    context = NamedClientContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.server_name = server_name
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    else:
        context.load_default_certs()
    if cert_file:
        context.load_cert_chain(cert_file, key_file or None)
    return context


class ReloadingContext:
    """A server SSLContext whose certificate follows `files` on disk; call `reload_if_changed`
    (or run `watch`) to pick up new files. A half-written or mismatched pair is not taken: the old
    certificate stays in use until a good pair appears."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._seen = self._read()
        self._current = server_context(files)
        self._failed: tuple[bytes, ...] | None = None
        self.reloads = 0
        self.context = self._current
        self.context.sni_callback = self._pick

    def _pick(
        self, conn: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, ctx: ssl.SSLContext
    ) -> None:
        current = self._current
        if current is not ctx:
            conn.context = current

    def _read(self) -> tuple[bytes, ...]:
        try:
            return tuple(path.read_bytes() for path in self.files.paths)
        except OSError as exc:
            names = " / ".join(str(p) for p in self.files.paths)
            raise TlsError(f"cannot read {names}: {exc}") from exc

    def reload_if_changed(self) -> bool:
        """Swap in the files' certificate when their contents changed and load cleanly; True if swapped."""
        try:
            seen = self._read()
        except TlsError as exc:
            # A Secret update swaps a symlink; a missing file is usually a moment in between.
            log.debug("certificate files unreadable, keeping the current ones: %s", exc)
            return False
        if seen == self._seen:
            return False
        try:
            fresh = server_context(self.files)
        except TlsError as exc:
            if seen != self._failed:
                log.warning("new certificate files not taken, keeping the current ones: %s", exc)
                self._failed = seen
            return False
        try:
            settled = self._read() == seen
        except TlsError:
            settled = False
        if not settled:
            # The files changed while they were loaded (a Secret update renames them one by one): what
            # was loaded may not be what `seen` holds. Take nothing now; the next poll sees them settled.
            return False
        fresh.sni_callback = self._pick
        self._current = fresh
        self._seen = seen
        self._failed = None
        self.reloads += 1
        log.info("serving certificate reloaded", extra={"fields": {"cert": str(self.files.cert)}})
        return True

    async def watch(self, interval_s: float) -> None:
        """Poll the files every `interval_s` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.reload_if_changed()
            except Exception:  # never let a bad file end the watch; the old certificate keeps serving
                log.exception("certificate reload failed")


@dataclass(frozen=True, slots=True)
class CertDir:
    """The files of a development certificate directory."""

    path: Path

    @property
    def serving(self) -> TlsFiles:
        return TlsFiles.in_dir(self.path)

    @property
    def ca_cert(self) -> Path:
        return self.path / CA_CERT_FILE

    @property
    def ca_key(self) -> Path:
        return self.path / CA_KEY_FILE

    def read_ca(self) -> certificates.KeyPair | None:
        """The directory's CA when both ca.crt and ca.key are there and belong together, else None."""
        try:
            pair = certificates.KeyPair(self.ca_cert.read_bytes(), self.ca_key.read_bytes())
        except OSError:
            return None
        return pair if certificates.key_matches(pair) else None


def write_cert_dir(
    cert_dir: Path,
    now: datetime,
    *,
    dns_names: Sequence[str] = DEFAULT_DNS_NAMES,
    ip_addresses: Sequence[str] = DEFAULT_IP_ADDRESSES,
    ca: certificates.KeyPair | None = None,
    ca_common_name: str = "gpushare-webhook development CA",
    serving_days: int = 365,
    ca_days: int = 3650,
) -> CertDir:
    """Write a serving certificate for the names, signed by `ca` (a new CA when None), into `cert_dir`:
    tls.crt, tls.key, ca.crt, ca.key (keys 0600).

    Each file is written to a temporary name and renamed, so a server watching the directory never reads
    half a file; the key is renamed before the certificate, so a watcher taking the new certificate finds
    its key already there."""
    try:
        cert_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TlsError(f"cannot create certificate directory {cert_dir}: {exc}") from exc
    if ca is None:
        ca = certificates.generate_ca(ca_common_name, now, valid_days=ca_days)
    serving = certificates.generate_serving(ca, dns_names, ip_addresses, now, valid_days=serving_days)
    out = CertDir(cert_dir)
    write_file(out.ca_key, ca.key_pem, private=True)
    write_file(out.ca_cert, ca.cert_pem)
    write_file(out.serving.key, serving.key_pem, private=True)
    write_file(out.serving.cert, serving.cert_pem)
    return out


def write_file(path: Path, data: bytes, private: bool = False) -> None:
    """Write `data` atomically (temp file + rename); mode 0600 when `private`, else 0644."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o600 if private else 0o644)  # the umask or an older file may have other bits
        os.replace(tmp, path)
    except OSError as exc:
        raise TlsError(f"cannot write {path}: {exc}") from exc
