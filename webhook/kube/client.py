"""An official-client `ApiClient` from an explicit host URL, in-cluster config, or a kubeconfig file.

`connect(ClientSettings(...))` picks the source in that order (a host wins; in-cluster when the pod's
service-account environment is present; else kubeconfig/`KUBECONFIG`/~/.kube/config). Close the client.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import kubernetes.config
import urllib3
import yaml
from kubernetes.config.config_exception import ConfigException

from webhook.kube import errors

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
KUBECONFIG_ENV = "KUBECONFIG"
DEFAULT_KUBECONFIG = "~/.kube/config"
TRANSPORT_LOGGER = "urllib3"  # logs every retry as a warning


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """Where the API is. `host` (e.g. "http://127.0.0.1:8080") wins over everything else."""

    host: str = ""
    kubeconfig: str = ""  # a path; "" means $KUBECONFIG or ~/.kube/config
    context: str = ""
    in_cluster: bool | None = None  # None: detect from KUBERNETES_SERVICE_HOST
    token: str = ""  # with `host`: a bearer token
    verify_tls: bool = True
    ca_file: str = ""
    user_agent: str = "gpushare"
    # urllib3 retries of a failed connection; None keeps its default (3). One-shot commands use 0 so an
    # unreachable server fails after one timeout, not four.
    retries: int | None = None
    # Connections kept to the API server; 0 keeps the client's default (5 per CPU). A caller with more
    # requests in flight than that (the extender's bind workers) would open and TLS-handshake a new
    # connection for each request over it.
    pool_size: int = 0


class ConfigError(errors.ApiError):
    """No usable client configuration (bad kubeconfig, missing service-account files)."""

    def __init__(self, message: str) -> None:
        super().__init__(errors.TRANSPORT, "ConfigError", message)


def configuration(settings: ClientSettings) -> kubernetes.client.Configuration:
    """The client Configuration for `settings`; raises ConfigError."""
    config = kubernetes.client.Configuration()
    try:
        if settings.host:
            config.host = settings.host.rstrip("/")
            if settings.token:
                config.api_key = {"BearerToken": settings.token}
                config.api_key_prefix = {"BearerToken": "Bearer"}
        elif settings.in_cluster or (settings.in_cluster is None and os.environ.get(IN_CLUSTER_ENV)):
            kubernetes.config.load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
        else:
            _check_kubeconfig(settings.kubeconfig)
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=settings.kubeconfig or None,
                context=settings.context or None,
                client_configuration=config,
                persist_config=False,
            )
    except (ConfigException, OSError, ValueError, TypeError, KeyError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot configure the Kubernetes client: {exc}") from exc
    if settings.ca_file:
        config.ssl_ca_cert = settings.ca_file
    if not settings.verify_tls:
        config.verify_ssl = False
    if settings.retries is not None:
        config.retries = settings.retries
    if settings.pool_size:
        config.connection_pool_maxsize = settings.pool_size
    return config


def _check_kubeconfig(kubeconfig: str) -> None:
    """Name the paths looked at and what is wrong with a file: the client library only says "Invalid
    kube-config file" when none exists, lets YAML errors escape as tracebacks, and fails on a YAML list or
    string with a TypeError that names neither the file nor the problem."""
    if kubeconfig:
        paths, source = [kubeconfig], ""
    elif os.environ.get(KUBECONFIG_ENV):
        paths, source = os.environ[KUBECONFIG_ENV].split(os.pathsep), f" (${KUBECONFIG_ENV})"
    else:
        paths, source = [DEFAULT_KUBECONFIG], ""
    found = [p for p in paths if p and Path(p).expanduser().is_file()]
    if not found:
        raise ConfigError(
            f"cannot configure the Kubernetes client: no kubeconfig at {os.pathsep.join(paths)}{source}"
        )
    for path in found:
        _check_kubeconfig_file(path)


def _check_kubeconfig_file(path: str) -> None:
    """Parse `path` as the client library will; raise ConfigError naming it when it is not a YAML mapping."""
    prefix = f"cannot configure the Kubernetes client: {path}"
    try:
        text = Path(path).expanduser().read_bytes().decode("utf-8")
        loaded = yaml.safe_load(text)
    except OSError as exc:
        raise ConfigError(f"{prefix}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{prefix}: not UTF-8 text (byte {exc.start})") from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = ": ".join(p for p in (exc.context, exc.problem) if p) or "cannot parse"
        raise ConfigError(f"{prefix}: invalid YAML{where}: {problem}") from exc
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"{prefix}: invalid YAML: {exc}") from exc
    # None (an empty file) is left to the library, which says "file is empty".
    if loaded is not None and not isinstance(loaded, dict):
        kind = {list: "list", str: "string", bool: "boolean"}.get(type(loaded), "number")
        raise ConfigError(f"{prefix}: not a kubeconfig: the YAML is a {kind}, not a mapping")


def quiet_transport_logs() -> None:
    """Keep the HTTP library's noise out of a command's output: a warning per retry (the final failure is
    reported once, as an ApiError) and, for a kubeconfig with insecure-skip-tls-verify, a warning per
    request (the user chose it; kubectl says nothing either). Call from a command's entry point: it sets
    process-wide logging and warning filters."""
    logging.getLogger(TRANSPORT_LOGGER).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)


def connect(settings: ClientSettings) -> kubernetes.client.ApiClient:
    """A ready ApiClient (the caller closes it); raises ConfigError."""
    api = kubernetes.client.ApiClient(configuration(settings))
    api.user_agent = settings.user_agent
    return api
