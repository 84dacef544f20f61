"""Strict Kubernetes JSON-schema validation of rendered objects, per Kubernetes version.

Uses the schemas packaged in kubernetes-validate (the same files its `validate(..., strict=True)` reads),
with validators cached per (version, kind): its own API re-reads the large definitions file on every call.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema  # type: ignore[import-untyped]
from kubernetes_validate import utils
from referencing import Registry, Resource

# Kubernetes minor versions the chart supports (Chart.yaml kubeVersion >= 1.30), all packaged here.
VERSIONS = tuple(f"1.{minor}" for minor in range(30, 38))


class NoSchema(Exception):
    """kubernetes-validate has no schema for this kind (a CRD such as cert-manager's)."""


def supported_versions() -> list[str]:
    return [utils.major_minor(v) for v in utils.all_versions()]


@functools.cache
def _definitions(version: str) -> Resource[Any]:
    return Resource.from_contents(
        utils.schema_contents(f"kubernetes-json-schema/v{version}.0-local-strict/_definitions.json", version)
    )


@functools.cache
def _validator(version: str, kind: str, api_version: str) -> Any:
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = utils.schema_contents(
            f"kubernetes-json-schema/v{version}.0-local-strict/{kind.lower()}-{group_version}.json", version
        )
    except FileNotFoundError:
        raise NoSchema(f"{kind} {api_version}") from None
    registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
    registry = _definitions(version) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def errors(obj: dict[str, Any], version: str) -> list[str]:
    """Every strict-schema error of `obj` for Kubernetes `version` ("1.28"); NoSchema for unknown kinds."""
    validator = _validator(version, obj["kind"], obj["apiVersion"])
    return [
        f"{obj['kind']}/{obj['metadata']['name']} @ {'.'.join(map(str, e.path))}: {e.message}"
        for e in validator.iter_errors(obj)
    ]
