"""Shared pieces of the DRA driver's tests: short socket folders, allocated claims as the API holds them,
and a claim reader that counts its calls."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webhook.kube import errors

DRIVER = "gpushare.aliyun.com"
NODE = "node-1"


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A folder with a short path: a unix socket path holds at most 107 bytes."""
    root = Path(tempfile.mkdtemp(prefix="dra", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def result(device: str, memory: str | None = "3Gi", request: str = "gpu", share: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"request": request, "driver": DRIVER, "pool": NODE, "device": device}
    if memory is not None:
        out["consumedCapacity"] = {"memory": memory}
    if share:
        out["shareID"] = share
    return out


def claim(uid: str, name: str, *results: dict[str, Any], namespace: str = "ns") -> dict[str, Any]:
    """A ResourceClaim allocated with `results` (none: not allocated)."""
    status: dict[str, Any] = {"allocation": {"devices": {"results": list(results)}}} if results else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpushare"}}]}},
        "status": status,
    }


class Claims:
    """A ClaimReader over dicts, counting GETs; `failing` makes every GET fail with that error."""

    def __init__(self, *found: dict[str, Any]) -> None:
        self.found = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in found}
        self.gets = 0
        self.failing: errors.ApiError | None = None

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        self.gets += 1
        if self.failing is not None:
            raise self.failing
        try:
            return self.found[(namespace, name)]
        except KeyError:
            raise errors.NotFoundError(404, "NotFound", f"{name} not found") from None
