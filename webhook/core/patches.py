"""JSON Patch operations the mutating webhook returns for a Pod; keys escaped (`~` -> `~0`, `/` -> `~1`).

Only additions: the webhook never overrides a choice the user made.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jsonpatch


@functools.lru_cache(maxsize=256)  # the same few pointers for every pod
def pointer(*parts: str) -> str:
    """An RFC 6901 JSON pointer: `pointer("spec", "nodeSelector", "a/b")` -> "/spec/nodeSelector/a~1b"."""
    path: str = jsonpatch.JsonPointer.from_parts(parts).path
    return path


def node_selector_ops(spec: Mapping[str, Any], key: str, value: str) -> list[dict[str, Any]]:
    """Add `key: value` to spec.nodeSelector: the whole map when it is absent, else the one key."""
    selector = spec.get("nodeSelector")
    if not isinstance(selector, Mapping):
        return [{"op": "add", "path": pointer("spec", "nodeSelector"), "value": {key: value}}]
    if key in selector:
        return []
    return [{"op": "add", "path": pointer("spec", "nodeSelector", key), "value": value}]


def scheduler_name_ops(spec: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """Set spec.schedulerName when it is absent, empty or the default scheduler (never another choice)."""
    if spec.get("schedulerName") in (None, "", "default-scheduler"):
        return [{"op": "add", "path": pointer("spec", "schedulerName"), "value": name}]
    return []


def checked(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operations, after jsonpatch has parsed them (a malformed operation raises here, not in the API)."""
    jsonpatch.JsonPatch(ops)
    return ops
