"""Errors of the Kubernetes API layer: library exceptions (kubernetes, urllib3, sockets) stop here.

Every public function of `webhook.kube` raises only `ApiError` or a subclass, built from the v1 Status the
server sent when there is one, so callers branch on `ConflictError`/`GoneError`/`NotFoundError` or on
`retryable` without knowing the HTTP library.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException, OpenApiException

TRANSPORT = 0  # `status` of an error that never got an HTTP answer


class ApiError(Exception):
    """An API call failed: HTTP `status` (0 for transport errors), Status `reason` and `message`."""

    def __init__(self, status: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details or {}

    @property
    def retryable(self) -> bool:
        """Worth retrying unchanged: no answer, throttled, or a server-side failure."""
        return self.status in (TRANSPORT, 429) or self.status >= 500

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status else "transport"
        return f"{where} {self.reason}: {self.message}" if self.reason else f"{where}: {self.message}"


class NotFoundError(ApiError):
    """404: the object does not exist."""


class ConflictError(ApiError):
    """409: stale resourceVersion, failed precondition, already exists, or a refused binding."""


class GoneError(ApiError):
    """410: the resourceVersion is too old (compacted); list again."""


_BY_STATUS: dict[int, type[ApiError]] = {404: NotFoundError, 409: ConflictError, 410: GoneError}


def from_status(status: int, body: Any, fallback_reason: str = "") -> ApiError:
    """Build the error for HTTP `status` from a v1 Status body (dict, JSON text/bytes, or anything)."""
    if isinstance(body, bytes | bytearray):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str):
        try:
            body = json.loads(body) if body.strip() else {}
        except ValueError:
            body = {"message": body.strip()[:500]}
    if not isinstance(body, dict):
        body = {}
    code = body.get("code") if isinstance(body.get("code"), int) and body.get("code") else status
    reason = str(body.get("reason") or fallback_reason)
    message = str(body.get("message") or reason or f"HTTP {code}")
    details = body.get("details") if isinstance(body.get("details"), dict) else None
    return _BY_STATUS.get(code, ApiError)(code, reason, message, details)


def from_exception(exc: BaseException) -> ApiError:
    """Translate a client/transport exception into an `ApiError` (an `ApiError` is returned as is)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ApiException):
        return from_status(int(exc.status or 0), exc.body, str(exc.reason or ""))
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return ApiError(TRANSPORT, type(exc).__name__, str(exc) or type(exc).__name__)
    if isinstance(exc, OpenApiException):
        return ApiError(TRANSPORT, "ClientError", str(exc))
    return ApiError(TRANSPORT, type(exc).__name__, str(exc))


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Re-raise any client, urllib3 or socket exception raised inside as an `ApiError`."""
    try:
        yield
    except ApiError:
        raise
    except (ApiException, OpenApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise from_exception(exc) from exc
