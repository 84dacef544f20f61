"""JSON requests over one keep-alive HTTPS connection per thread, with an `ApiClient`'s own host, TLS and
credentials: for the calls made once per pod (the extender's Bindings).

`rest.request` builds each request through the client library (parameter serialization, its REST layer)
and urllib3's pool; for a Binding that is ~0.3 ms of CPU more than the request itself (bench/placement.py,
docs/extender.md). `DirectClient.request` sends the same request and reads the reply as `rest.request`
does (`rest.reply`), raising only `errors.ApiError`.

    direct = DirectClient.of(api)          # None when the configuration needs what only urllib3 does
    reply = direct.request("POST", path, body) if direct else rest.request(api, "POST", path, body=body)

A connection the server closed while idle is noticed before it is reused (as urllib3 does); any failure
drops the thread's connection, and the next request opens a new one.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import kubernetes.client
import orjson

from webhook.kube import errors, rest

DEFAULT_PORT = {"https": 443, "http": 80}


class DirectClient:
    """Requests to the API server `api` is configured for, over a connection per calling thread."""

    def __init__(
        self, api: kubernetes.client.ApiClient, timeout: rest.Timeout = rest.DEFAULT_TIMEOUT
    ) -> None:
        config = api.configuration
        self.api = api
        self.connect_s, self.read_s = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        self.context = tls_context(config) if urlsplit(config.host).scheme == "https" else None
        self.server_name = server_name(config)
        self.headers = Headers(api)
        self._local = threading.local()
        self._opened: dict[int, http.client.HTTPConnection] = {}  # each thread's, for close()
        self._guard = threading.Lock()

    def close(self) -> None:
        """Close every thread's connection (a later request opens a new one)."""
        with self._guard:
            opened, self._opened = self._opened, {}
        for conn in opened.values():
            conn.close()

    @classmethod
    def of(cls, api: kubernetes.client.ApiClient) -> DirectClient | None:
        """A DirectClient for `api`, or None when its configuration goes through a proxy (urllib3's job)
        or is not plain http(s)."""
        return cls(api) if reachable_directly(api.configuration) else None

    def _drop(self) -> None:
        """Close this thread's connection; the next request opens a new one."""
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def _connection(self) -> tuple[http.client.HTTPConnection, str]:
        """This thread's connection to the configured host (a new one when the host changed), and the path
        prefix of the host URL."""
        host = self.api.configuration.host
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "host", None) != host:
            conn.close()
            conn = None
        if conn is not None and conn.sock is not None and _closed_by_peer(conn.sock):
            conn.close()  # a request on it would fail unsent; http.client reconnects a closed one
        if conn is None:
            parts = urlsplit(host)
            try:
                port = parts.port or DEFAULT_PORT[parts.scheme]
            except ValueError as exc:  # as urllib3's LocationParseError: an ApiError, not a 500
                raise http.client.InvalidURL(f"{host}: {exc}") from exc
            if parts.scheme == "https" and self.context is not None:
                tls = _HTTPSConnection(
                    parts.hostname or "", port, timeout=self.connect_s, context=self.context
                )
                tls.server_name = self.server_name
                conn = tls
            else:
                conn = http.client.HTTPConnection(parts.hostname or "", port, timeout=self.connect_s)
            self._local.conn, self._local.host = conn, host
            self._local.base = parts.path.rstrip("/")
            with self._guard:
                self._opened[threading.get_ident()] = conn
        return conn, str(self._local.base)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; the decoded JSON reply (None when empty). Non-2xx raises the matching
        ApiError; no answer raises a retryable one (status errors.TRANSPORT)."""
        payload = orjson.dumps(body) if body is not None else None
        try:
            with errors.translated():
                conn, base = self._connection()
                conn.request(method, base + path, body=payload, headers=self.headers.get(payload))
                if conn.sock is not None:
                    conn.sock.settimeout(self.read_s)
                response = conn.getresponse()
                data = response.read()
                status, reason = response.status, response.reason
                if response.will_close:
                    conn.close()
        except BaseException:
            # Not only ApiErrors: http.client refuses a header it cannot send (ValueError) after it began
            # the request, and the next request on that connection would fail unsent (CannotSendRequest).
            self._drop()
            raise
        return rest.reply(status, data, str(reason or ""))


class _HTTPSConnection(http.client.HTTPSConnection):
    """HTTPSConnection checking the certificate (and sending SNI) for `server_name` when set: a
    kubeconfig's tls-server-name."""

    server_name: str | None = None

    def connect(self) -> None:
        if not self.server_name:
            super().connect()
            return
        http.client.HTTPConnection.connect(self)
        assert self._context is not None  # type: ignore[attr-defined]
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self.server_name)  # type: ignore[attr-defined]


def reachable_directly(config: kubernetes.client.Configuration) -> bool:
    """Whether requests can go straight to `config`'s host: plain http(s), no proxy (urllib3's job)."""
    return not config.proxy and urlsplit(config.host).scheme in DEFAULT_PORT


def request_headers(api: kubernetes.client.ApiClient, body: bytes | None) -> dict[str, str]:
    """The headers of a JSON request with `api`'s user agent and credentials."""
    headers = {"Accept": rest.JSON, "User-Agent": str(api.user_agent)}
    if body is not None:
        headers["Content-Type"] = rest.JSON
    # The client's own auth settings: a bearer token (refreshed by its hook, e.g. in-cluster) or none.
    token = api.configuration.auth_settings().get("BearerToken")
    if token and token.get("value"):
        headers["Authorization"] = str(token["value"])
    return headers


class Headers:
    """`request_headers` of one ApiClient, read again at most every `ttl_s`: the client library's token
    hook re-applies the whole kubeconfig to the configuration on each read (its host setter scans the
    environment for proxies), a third of a Binding's CPU. A rotated token is seen within `ttl_s`."""

    def __init__(self, api: kubernetes.client.ApiClient, ttl_s: float = 1.0) -> None:
        self.api, self.ttl_s = api, ttl_s
        self._read: dict[tuple[bool, Any], tuple[float, dict[str, str]]] = {}

    def get(self, body: bytes | None) -> dict[str, str]:
        now = time.monotonic()
        key = (body is not None, self.api.user_agent)  # a user agent set anew is a header anew
        kept = self._read.get(key)
        if kept is None or now - kept[0] >= self.ttl_s:
            kept = self._read[key] = (now, request_headers(self.api, body))
        return kept[1]


def server_name(config: kubernetes.client.Configuration) -> str | None:
    """The name the API server's certificate is checked for when not the URL's host (tls-server-name)."""
    return config.tls_server_name or (
        config.assert_hostname if isinstance(config.assert_hostname, str) else None
    )


def tls_context(config: kubernetes.client.Configuration) -> ssl.SSLContext:
    """The TLS the client library would use for `config`: its CA (or the system's), client certificate,
    and verification (off only when the kubeconfig says insecure-skip-tls-verify)."""
    context = ssl.create_default_context(
        cafile=config.ssl_ca_cert or None, cadata=config.ca_cert_data or None
    )
    if config.cert_file:
        context.load_cert_chain(config.cert_file, config.key_file or None)
    if not config.verify_ssl or config.assert_hostname is False:
        context.check_hostname = False
    if not config.verify_ssl:
        context.verify_mode = ssl.CERT_NONE
    return context


def _closed_by_peer(sock: Any) -> bool:
    """Whether an idle connection is readable: EOF (the server closed it) or stray bytes, unusable both.
    poll, as urllib3 does: select refuses a descriptor over 1023, which would make every one look dead."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True
