"""resource.k8s.io/v1 calls of the DRA driver: its node's ResourceSlice (get, create, replace) and the
ResourceClaims it prepares (get). Plain dicts, `errors.ApiError` on failure, as in pods.py.
"""

from __future__ import annotations

import contextlib
from typing import Any

import kubernetes.client

from webhook.kube import errors, rest

Obj = dict[str, Any]
GROUP = "resource.k8s.io"
VERSION = "v1"


def slices_path(name: str = "") -> str:
    return rest.path("resourceslices", name, group=GROUP, version=VERSION)


def get_slice(api: kubernetes.client.ApiClient, name: str) -> Obj:
    """The ResourceSlice `name`; NotFoundError when there is none."""
    found: Obj = rest.request(api, "GET", slices_path(name))
    return found


def create_slice(api: kubernetes.client.ApiClient, body: Obj) -> Obj:
    """Create a ResourceSlice; ConflictError when one of that name exists."""
    created: Obj = rest.request(api, "POST", slices_path(), body=body)
    return created


def replace_slice(api: kubernetes.client.ApiClient, body: Obj, resource_version: str) -> Obj:
    """Replace the ResourceSlice `body` names, only if it is still at `resource_version` (ConflictError
    otherwise)."""
    name = str(body["metadata"]["name"])
    sent = {**body, "metadata": {**body["metadata"], "resourceVersion": resource_version}}
    replaced: Obj = rest.request(api, "PUT", slices_path(name), body=sent)
    return replaced


def list_slices(api: kubernetes.client.ApiClient, field_selector: str) -> list[Obj]:
    return list(rest.list_all(api, slices_path(), query={"fieldSelector": field_selector}))


def delete_slice(api: kubernetes.client.ApiClient, name: str) -> None:
    """Delete the ResourceSlice `name`; gone already is fine."""
    with contextlib.suppress(errors.NotFoundError):
        rest.request(api, "DELETE", slices_path(name))


def get_claim(api: kubernetes.client.ApiClient, namespace: str, name: str) -> Obj:
    claim: Obj = rest.request(
        api, "GET", rest.path("resourceclaims", name, namespace, group=GROUP, version=VERSION)
    )
    return claim
