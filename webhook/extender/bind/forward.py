"""A follower's bind, forwarded to the leader: the exact body, one hop, the leader's answer passed back.

The leader publishes its URL on the Lease (`LEADER_URL_ANNOTATION`). Blocking stdlib `http.client`, run
on the bind threads; one connection per bind (binds are rare next to filters, and a kept connection
would need care when leadership moves). Every failure becomes a readable `Error` for kube-scheduler.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

LEADER_URL_ANNOTATION = "gpushare.aliyun.com/extender-url"
# Set on a forwarded bind: a non-leader that receives one refuses it instead of forwarding again.
FORWARDED_HEADER = "X-Gpushare-Forwarded"
MAX_REPLY_BYTES = 64 * 1024  # an ExtenderBindingResult is one short message

# Outcomes, the `outcome` label of gpushare_extender_forwarded_binds_total.
BOUND = "ok"  # the leader bound the pod
REFUSED = "refused"  # the leader answered with an Error (passed back verbatim)
NO_LEADER_URL = "no_leader_url"  # no leader, or it published no (usable) URL
UNREACHABLE = "unreachable"  # connection refused, reset, timed out, TLS failure
BAD_REPLY = "bad_reply"  # not HTTP 200 with an ExtenderBindingResult
OUTCOMES = (BOUND, REFUSED, NO_LEADER_URL, UNREACHABLE, BAD_REPLY)


@dataclass(frozen=True, slots=True)
class Forwarded:
    outcome: str
    error: str  # the ExtenderBindingResult.Error to answer with ("" when bound)


class _HTTPSConnection(http.client.HTTPSConnection):
    """HTTPS whose certificate check (and SNI) uses `server_name` rather than the URL's host: a leader
    reached by pod IP usually holds a certificate for its Service name, not for the IP."""

    def __init__(
        self, host: str, port: int | None, *, timeout: float, context: ssl.SSLContext, server_name: str
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls_context = context
        self._server_name = server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls_context.wrap_socket(self.sock, server_hostname=self._server_name or self.host)


class Forwarder:
    """Sends bind bodies to the leader. `ca_file` verifies an HTTPS leader (None: the system store);
    `cert_file`/`key_file`, when given, are the client certificate the leader asks for."""

    def __init__(
        self,
        url_prefix: str,
        timeout_s: float = 3.0,
        ca_file: Path | None = None,
        server_name: str = "",
        *,
        cert_file: Path | None = None,
        key_file: Path | None = None,
    ) -> None:
        self.path = url_prefix.rstrip("/") + "/bind"
        self.timeout_s = timeout_s
        self.ca_file = ca_file
        self.server_name = server_name
        self.cert_file = cert_file
        self.key_file = key_file
        self._context: ssl.SSLContext | None = None
        self._built_from: tuple[tuple[int, int], ...] = ()
        self._context_lock = threading.Lock()

    def _stamp(self) -> tuple[tuple[int, int], ...]:
        """Size and mtime of the files the context is built from: a rotated Secret changes them."""
        out = []
        for path in (self.ca_file, self.cert_file, self.key_file):
            if path is not None:
                try:
                    st = path.stat()
                except OSError:
                    out.append((-1, -1))
                else:
                    out.append((st.st_size, st.st_mtime_ns))
        return tuple(out)

    def _tls(self) -> ssl.SSLContext:
        # Built on first use (loading the system store takes tens of ms, and HTTP-only setups never need
        # it) and again when the files change, so a renewed client certificate is presented.
        with self._context_lock:
            stamp = self._stamp()
            if self._context is None or stamp != self._built_from:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the host name
                context.minimum_version = ssl.TLSVersion.TLSv1_2
                if self.ca_file is not None:
                    context.load_verify_locations(cafile=self.ca_file)
                else:
                    context.load_default_certs()
                if self.cert_file is not None and self.key_file is not None:
                    context.load_cert_chain(self.cert_file, self.key_file)
                self._context, self._built_from = context, stamp
            return self._context

    def bind(self, leader_url: str, body: bytes) -> Forwarded:
        """POST `body` to `<leader_url><prefix>/bind`; never raises for network or reply trouble."""
        parts = urlsplit(leader_url)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
            return Forwarded(NO_LEADER_URL, f"the leader's URL {leader_url!r} on the Lease is not usable")
        target = f"{leader_url.rstrip('/')}{self.path}"
        deadline = time.monotonic() + self.timeout_s
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            try:
                context = self._tls()
            except (OSError, ssl.SSLError) as err:
                files = [f"CA {self.ca_file}"] if self.ca_file else []
                if self.cert_file:
                    files.append(f"client certificate {self.cert_file} with key {self.key_file}")
                where = ", ".join(files) or "the system trust store"
                return Forwarded(UNREACHABLE, f"forwarding the bind to {target}: {where}: {err}")
            conn = _HTTPSConnection(
                parts.hostname, port, timeout=self.timeout_s, context=context, server_name=self.server_name
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname, port, timeout=self.timeout_s)
        try:
            conn.connect()
            # One deadline for the whole exchange, not a fresh timeout per socket operation.
            conn.sock.settimeout(max(0.01, deadline - time.monotonic()))
            conn.request(
                "POST",
                self.path,
                body=body,
                headers={"Content-Type": "application/json", FORWARDED_HEADER: "1"},
            )
            reply = conn.getresponse()
            status, data = reply.status, reply.read(MAX_REPLY_BYTES + 1)
        except TimeoutError:
            return Forwarded(
                UNREACHABLE, f"forwarding the bind to {target}: no answer within {self.timeout_s:g} s"
            )
        except (OSError, http.client.HTTPException) as err:
            return Forwarded(UNREACHABLE, f"forwarding the bind to {target}: {_describe(err)}")
        finally:
            conn.close()
        return _result(target, status, data)


def _describe(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text if isinstance(err, ssl.SSLError | socket.gaierror) else f"{type(err).__name__}: {text}"


def _result(target: str, status: int, data: bytes) -> Forwarded:
    snippet = data[:200].decode("utf-8", "replace")
    if status != 200:
        return Forwarded(
            BAD_REPLY, f"forwarding the bind to {target}: the leader answered HTTP {status}: {snippet}"
        )
    reply: Any = None
    if len(data) <= MAX_REPLY_BYTES:
        try:
            reply = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            reply = None
    error = reply.get("Error") if isinstance(reply, dict) else None
    if not isinstance(error, str):
        return Forwarded(
            BAD_REPLY,
            f"forwarding the bind to {target}: the leader's reply is not an ExtenderBindingResult: {snippet}",
        )
    return Forwarded(REFUSED if error else BOUND, error)
