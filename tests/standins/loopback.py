"""Loopback ports for servers that tests and benches start: one that nothing listens on right now, and
the status a server there answers."""

from __future__ import annotations

import socket
import urllib.request


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (closed again, so a server can bind it next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_status(url: str) -> int:
    """The status of a GET on `url`, 0 while nothing answers there (a server still starting)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return int(reply.status)
    except OSError:
        return 0
