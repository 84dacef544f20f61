"""Errors of the Kubernetes API layer: library exceptions (kubernetes, urllib3, sockets) stop here.

Every public function of `webhook.kube` raises only `ApiError` or a subclass, built from the v1 Status the
server sent when there is one, so callers branch on `ConflictError`/`GoneError`/`NotFoundError` or on
`retryable` without knowing the HTTP library. A request that got no answer is an `UnreachableError` whose
message says where and why in a few words ("connection refused"), not urllib3's MaxRetryError text.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
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


class UnreachableError(ApiError):
    """No HTTP answer: refused, timed out, name not resolved, TLS failed, connection broken."""


class UnauthorizedError(ApiError):
    """401: the credentials were not accepted (expired token, wrong client certificate)."""


class ForbiddenError(ApiError):
    """403: authenticated, but RBAC does not allow the call; the message names user, verb and resource."""


class NotFoundError(ApiError):
    """404: the object does not exist."""


class ConflictError(ApiError):
    """409: stale resourceVersion, failed precondition, already exists, or a refused binding."""


class GoneError(ApiError):
    """410: the resourceVersion is too old (compacted); list again."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
}


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


# What the transports (urllib3 for the client library, http.client for `direct`) raise when no answer came.
_NO_ANSWER = (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)


def from_exception(exc: BaseException) -> ApiError:
    """Translate a client/transport exception into an `ApiError` (an `ApiError` is returned as is)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ApiException):
        return from_status(int(exc.status or 0), exc.body, str(exc.reason or ""))
    if isinstance(exc, _NO_ANSWER):
        return unreachable(exc)
    if isinstance(exc, OpenApiException):
        return ApiError(TRANSPORT, "ClientError", str(exc))
    return ApiError(TRANSPORT, type(exc).__name__, str(exc))


def unreachable(exc: BaseException) -> UnreachableError:
    """`cannot reach the API server at https://h:6443: connection refused` from a urllib3/socket error."""
    where = ""
    pool = getattr(exc, "pool", None)  # urllib3's MaxRetryError and ReadTimeoutError carry the pool
    if pool is not None and getattr(pool, "host", None):
        host = f"[{pool.host}]" if ":" in pool.host else pool.host  # urllib3 keeps IPv6 hosts unbracketed
        where = f" at {pool.scheme}://{host}:{pool.port}"
    cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason else exc
    return UnreachableError(
        TRANSPORT, type(cause).__name__, f"cannot reach the API server{where}: {_why(cause)}"
    )


_ERRNO_TEXT = re.compile(r"\[Errno -?\d+\] ([^)'\"]+)")


def _why(exc: BaseException) -> str:
    """A few words for a transport failure; checked most specific first (NewConnectionError is a timeout)."""
    if isinstance(exc, urllib3.exceptions.NameResolutionError | socket.gaierror):
        return f"host name not resolved ({_os_text(exc) or exc})"
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        return _os_text(exc) or str(exc)
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
        return "no connection within the timeout"
    if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        return "no answer within the timeout"
    if isinstance(exc, urllib3.exceptions.SSLError):
        return f"TLS failed: {exc.args[0] if exc.args else exc}"
    if isinstance(exc, urllib3.exceptions.ProtocolError):  # args: ("Connection aborted.", the cause)
        inner = next((str(a) for a in exc.args if isinstance(a, BaseException) and str(a)), "")
        return f"connection broken: {_os_text(exc) or _lower_first(inner) or exc}"
    return _os_text(exc) or str(exc) or type(exc).__name__


def _os_text(exc: BaseException) -> str:
    """The OS's words for the socket error behind `exc` ("connection refused"), lower-cased; "" if none."""
    seen: BaseException | None = exc
    for _ in range(8):  # the cause chain is short; the bound guards against cycles
        if seen is None:
            break
        for candidate in (seen, *(a for a in seen.args if isinstance(a, BaseException))):
            if isinstance(candidate, OSError) and candidate.strerror:
                return _lower_first(candidate.strerror)
        seen = seen.__cause__ or seen.__context__
    found = _ERRNO_TEXT.search(str(exc))
    return _lower_first(found.group(1).strip()) if found else ""


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Re-raise any client, urllib3 or socket exception raised inside as an `ApiError`."""
    try:
        yield
    except ApiError:
        raise
    except (ApiException, OpenApiException, *_NO_ANSWER) as exc:
        raise from_exception(exc) from exc
