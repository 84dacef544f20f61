"""An official-client `ApiClient` from an explicit host URL, in-cluster config, or a kubeconfig file.

`connect(ClientSettings(...))` picks the source in that order (a host wins; in-cluster when the pod's
service-account environment is present; else kubeconfig/`KUBECONFIG`/~/.kube/config). Close the client.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import kubernetes.client
import kubernetes.config
from kubernetes.config.config_exception import ConfigException

from webhook.kube import errors

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"


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
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=settings.kubeconfig or None,
                context=settings.context or None,
                client_configuration=config,
                persist_config=False,
            )
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"cannot configure the Kubernetes client: {exc}") from exc
    if settings.ca_file:
        config.ssl_ca_cert = settings.ca_file
    if not settings.verify_tls:
        config.verify_ssl = False
    return config


def connect(settings: ClientSettings) -> kubernetes.client.ApiClient:
    """A ready ApiClient (the caller closes it); raises ConfigError."""
    api = kubernetes.client.ApiClient(configuration(settings))
    api.user_agent = settings.user_agent
    return api
