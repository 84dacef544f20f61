"""Settings of the scheduler extender, grouped and immutable; the CLI builds them from flags and env."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from webhook.core import allocator, resources

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
    kubeconfig: str | None = None
    api_server: str | None = None  # explicit API URL (tests, kubectl proxy); else kubeconfig/in-cluster
    memory_unit: str = "GiB"
    default_policy: allocator.Policy = allocator.Policy.BINPACK
    names: resources.GpuResourceNames = field(default_factory=resources.GpuResourceNames)
    url_prefix: str = URL_PREFIX
    # kube-scheduler sends whole Node objects when nodeCacheCapable is false: thousands of nodes are MBs.
    max_body_bytes: int = 64 * 1024 * 1024
    bind_attempts: int = 3
    bind_workers: int = 32  # threads for binds in flight (each waits on the API server)
    bind_backoff_s: float = 0.05
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    log_level: str = "info"
    log_format: str = "json"
