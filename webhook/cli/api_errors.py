"""A failed Kubernetes API call as one line for a person, and the exit code it earns.

`webhook.kube` already turned the client library's exceptions into `ApiError`s; this only words them for
a terminal: no "transport"/class-name prefixes, never more than one line.
"""

from __future__ import annotations

from webhook.cli import exitcodes
from webhook.kube import client as kube_client
from webhook.kube import errors as kube_errors


def describe(err: kube_errors.ApiError) -> str:
    """e.g. `cannot reach the API server at https://10.0.0.1:6443: connection refused`,
    `nodes "n9" not found (HTTP 404)`, `pods is forbidden: User "u" cannot list ... (HTTP 403)`."""
    if isinstance(err, kube_client.ConfigError) or err.status == kube_errors.TRANSPORT:
        text = err.message
    elif isinstance(err, kube_errors.UnauthorizedError):
        text = (
            "the API server did not accept the credentials (HTTP 401): check the kubeconfig's user, "
            "token or client certificate"
        )
    else:
        text = f"{err.message} (HTTP {err.status})"
    return " ".join(text.split())


def exit_code(err: kube_errors.ApiError) -> int:
    """USAGE for a configuration to fix before anything can be asked; FAILURE when the cluster answered no."""
    return exitcodes.USAGE if isinstance(err, kube_client.ConfigError) else exitcodes.FAILURE
