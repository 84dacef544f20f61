"""Settings of the scheduler extender, grouped and immutable; the CLI builds them from flags and env."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from webhook.core.placement import allocator
from webhook.core.wire import resources

URL_PREFIX = "/gpushare-scheduler"
DEFAULT_PORT = 39999


@dataclass(frozen=True, slots=True)
class LeaderSettings:
    """Leader election through a coordination.k8s.io/v1 Lease. Only the leader binds."""

    enabled: bool = False
    lease_name: str = "gpushare-extender"
    lease_namespace: str = "kube-system"
    identity: str = ""  # POD_NAME in the cluster; the hostname otherwise
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


@dataclass(frozen=True, slots=True)
class ExtenderSettings:
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # CA bundle verifying callers' client certificates: filter, prioritize, bind and inspect then refuse
    # callers without one (kube-scheduler presents it through its extender tlsConfig). Needs tls_cert.
    client_ca: Path | None = None
    # With client_ca: the common names (CN) a caller's certificate may carry; empty accepts any the CA
    # signed. A CA that also signs others' certificates (a shared issuer) needs this.
    client_names: tuple[str, ...] = ()
    # HTTP/2 beside HTTP/1.1 (serving.h2server): kube-scheduler then sends every call over one connection
    # instead of a new TLS handshake for each call in flight beyond two. The client certificate is then
    # required at the handshake and checked against client_ca alone (no client_names).
    http2: bool = False
    # Plain HTTP /healthz, /readyz and /metrics on this port (0: none); the kubelet's probes need it when
    # the main port requires client certificates (http2 with client_ca).
    health_port: int = 0
    kubeconfig: str | None = None
    api_server: str | None = None  # explicit API URL (tests, kubectl proxy); else kubeconfig/in-cluster
    memory_unit: str = "GiB"
    default_policy: allocator.Policy = allocator.Policy.BINPACK
    # Filter keeps only the best-fitting nodes (core.placement.ranking), so the GPU choice decides placement.
    best_fit_filter: bool = True
    names: resources.GpuResourceNames = field(default_factory=resources.GpuResourceNames)
    url_prefix: str = URL_PREFIX
    # kube-scheduler sends whole Node objects when nodeCacheCapable is false: thousands of nodes are MBs.
    max_body_bytes: int = 64 * 1024 * 1024
    bind_attempts: int = 3
    bind_workers: int = 32  # threads for binds that cannot run on the event loop (duplicates, a proxy)
    # Filter waits (filter_wait_s at most) while more binds than this are pending (bind/backlog.py):
    # kube-scheduler then schedules at the pace binds complete instead of queueing binds past its timeout.
    bind_backlog: int = 64
    filter_wait_s: float = 1.0
    bind_backoff_s: float = 0.05
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    # Where the other replicas reach this one (published on the Lease while leading); "" publishes none.
    advertise_url: str = ""
    forward_ca: Path | None = None  # CA bundle for HTTPS binds forwarded to the leader; None: system store
    forward_server_name: str = ""  # name the leader's certificate must carry; "": the host of its URL
    # Client certificate a follower presents to the leader (which asks for one when it has client_ca).
    forward_cert: Path | None = None
    forward_key: Path | None = None
    # Below kube-scheduler's default httpTimeout (5 s), so a follower answers before the scheduler gives up.
    forward_timeout_s: float = 3.0
    log_level: str = "info"
    log_format: str = "json"


def default_advertise_url(pod_ip: str, port: int, tls: bool) -> str:
    """`http(s)://<pod_ip>:<port>` (IPv6 in brackets), or "" without a pod IP."""
    if not pod_ip:
        return ""
    return advertise_url(f"{'https' if tls else 'http'}://{pod_ip}:{port}")


def advertise_url(value: str) -> str:
    """A replica's base URL, `http(s)://host:port`, checked; a bare IPv6 host (as `http://$(POD_IP):port`
    expands to in an IPv6 cluster) is put in brackets. ValueError says what is wrong."""
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"{value!r} is not a URL")
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    host, colon, port = rest.rpartition(":")
    if colon and ":" in host and not host.startswith("["):
        with_brackets = f"[{host}]"
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            with_brackets = host
        rest = f"{with_brackets}:{port}"
    parts = urlsplit(f"{scheme}://{rest}")
    try:
        port_number = parts.port
    except ValueError:
        raise ValueError(f"{value!r} has a bad port") from None
    if not parts.hostname or port_number is None:
        raise ValueError(f"{value!r} needs a host and a port")
    if parts.path.strip("/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"{value!r} must be only scheme, host and port")
    return f"{scheme}://{rest}".rstrip("/")
