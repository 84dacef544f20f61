"""The node parts' probe port: `GET /healthz` (200 once `ready()` says so, 503 before) and `GET /metrics`,
on a small threaded HTTP server beside their gRPC (no ASGI stack in a DaemonSet pod); a part may add GET
routes of its own or answer one of these itself (the device plugin's `/usage`, and its `/metrics` with
usage series rendered once per poll).

    httpd = serve(9400, plugin.ready, registry)  ...  httpd.shutdown(); httpd.server_close()
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import prometheus_client

from webhook.serving import server as http_server

# An extra route's answer: (status, Content-Type, body).
Reply = tuple[int, str, bytes]


def serve(
    port: int,
    ready: Callable[[], bool],
    registry: prometheus_client.CollectorRegistry,
    routes: Mapping[str, Callable[[], Reply]] | None = None,
) -> ThreadingHTTPServer:
    """Listen on `port` of every address (IPv6 and IPv4) and serve from a thread; ServeError when the
    port cannot be had. `routes` adds GET paths, or replaces /healthz or /metrics (the query string is
    ignored)."""
    extra = dict(routes or {})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.partition("?")[0]
            kind = "text/plain"
            if path in extra:
                code, kind, body = extra[path]()
            elif path == "/healthz":
                ok = ready()
                body, code = (b"ok\n" if ok else b"not registered\n"), (200 if ok else 503)
            elif path == "/metrics":
                body, code = prometheus_client.generate_latest(registry), 200
            else:
                body, code = b"not found\n", 404
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    # The kubelet probes the pod's IP, IPv6 in IPv6-only clusters: listen on both families.
    httpd = ThreadingHTTPServer(("", port), Handler, bind_and_activate=False)
    httpd.socket.close()
    httpd.socket = http_server.bind_socket(http_server.ANY_ADDRESS, port, backlog=16)
    httpd.server_address = httpd.socket.getsockname()[:2]
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name="probes", daemon=True).start()
    return httpd
