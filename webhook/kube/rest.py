"""Raw JSON requests through an official-client `ApiClient`: plain dicts in and out, `ApiError` on failure.

Working on dicts skips the generated models (their per-object validation costs more than the request
and chokes on replies such as the pods/binding 201 Status); the ApiClient still supplies host, TLS, auth
and the connection pool.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import kubernetes.client
import orjson
import urllib3

from webhook.kube import errors

Obj = dict[str, Any]
Timeout = float | tuple[float, float]
Query = Mapping[str, str | int | bool]  # a request's query parameters

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
DEFAULT_TIMEOUT: Timeout = (5.0, 30.0)  # (connect, read) seconds
_PLAIN = re.compile(r"[a-z0-9.-]+")  # what quote(..., safe="") leaves alone, DNS names included


def path(plural: str, name: str = "", namespace: str = "", group: str = "", version: str = "v1") -> str:
    """The URL path of a collection or object: `path("pods", "p", "default")`."""
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespace:
        base += f"/namespaces/{_segment(namespace)}"
    base += f"/{plural}"
    return base + f"/{_segment(name)}" if name else base


def _segment(text: str) -> str:
    """`text` as one path segment: a valid object name needs no quoting (a Binding's path per pod)."""
    return text if _PLAIN.fullmatch(text) else quote(text, safe="")


def _prepare(
    api: kubernetes.client.ApiClient,
    *,
    method: str,
    resource_path: str,
    query: Query | None,
    body: Any,
    content_type: str,
) -> tuple[str, str, dict[str, str], Any]:
    params = [(k, str(v).lower() if isinstance(v, bool) else v) for k, v in (query or {}).items()]
    headers = {"Accept": JSON}
    if body is not None:
        headers["Content-Type"] = content_type
    method, url, headers, body, _ = api.param_serialize(
        method=method,
        resource_path=resource_path,
        query_params=params,
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    return method, url, headers, body


def request(
    api: kubernetes.client.ApiClient,
    method: str,
    resource_path: str,
    *,
    query: Query | None = None,
    body: Any = None,
    content_type: str = JSON,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> Any:
    """Send one request; the decoded JSON reply (None when empty). Non-2xx raises the matching ApiError."""
    with errors.translated():
        method, url, headers, body = _prepare(
            api, method=method, resource_path=resource_path, query=query, body=body, content_type=content_type
        )
        response = api.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout)
        raw: urllib3.BaseHTTPResponse = response.response
        data = raw.data  # reads to the end, which hands the connection back to the pool
    return reply(raw.status, data, str(raw.reason or ""))


def reply(status: int, data: bytes, reason: str) -> Any:
    """A whole reply read: its decoded JSON (None when empty); a non-2xx status raises the ApiError."""
    if not 200 <= status < 300:
        raise errors.from_status(status, data, reason)
    if not data:
        return None
    try:
        return orjson.loads(data)
    except ValueError as exc:
        raise errors.ApiError(status, "BadResponse", f"reply is not JSON: {exc}") from exc


def open_stream(
    api: kubernetes.client.ApiClient,
    resource_path: str,
    *,
    query: Query | None = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> urllib3.BaseHTTPResponse:
    """GET a streaming reply (a watch); the caller reads and releases it. Non-2xx raises ApiError."""
    with errors.translated():
        method, url, headers, _ = _prepare(
            api, method="GET", resource_path=resource_path, query=query, body=None, content_type=JSON
        )
        response = api.call_api(method, url, header_params=headers, _request_timeout=timeout)
    raw: urllib3.BaseHTTPResponse = response.response
    if not 200 <= raw.status < 300:
        with errors.translated():
            data = raw.read()
            raw.release_conn()
        raise errors.from_status(raw.status, data, str(raw.reason or ""))
    return raw


def list_all(
    api: kubernetes.client.ApiClient,
    resource_path: str,
    *,
    query: Query | None = None,
    page_size: int = 500,
    timeout: Timeout = DEFAULT_TIMEOUT,
) -> Iterator[Obj]:
    """Every item of a collection, page by page (`limit`/`continue`), as raw dicts."""
    token = ""
    while True:
        page_query: dict[str, str | int | bool] = {**(query or {}), "limit": page_size}
        if token:
            page_query["continue"] = token
        page = request(api, "GET", resource_path, query=page_query, timeout=timeout)
        items = page.get("items") if isinstance(page, dict) else None
        if not isinstance(items, list):
            raise errors.ApiError(200, "BadResponse", f"list of {resource_path} has no items")
        yield from (item for item in items if isinstance(item, dict))
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return
