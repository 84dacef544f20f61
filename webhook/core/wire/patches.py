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
    if selector is None or not isinstance(selector, Mapping):
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
    """The operations, after jsonpatch has parsed them (a malformed operation raises here, not in the API).

    Parsed once per shape: jsonpatch reads an operation's op, path and from, and whether it has a value
    (never what the value is), and the webhook writes the same few shapes for every pod.
    """
    try:
        _parse_shape(tuple([(op.get("op"), op.get("path"), op.get("from"), "value" in op) for op in ops]))
    except TypeError:  # a field that cannot be a cache key (no string): jsonpatch says what is wrong
        jsonpatch.JsonPatch(ops)
    return ops


@functools.lru_cache(maxsize=256)
def _parse_shape(shape: tuple[tuple[Any, Any, Any, bool], ...]) -> None:
    ops = []
    for op, path, source, valued in shape:
        fields = {"op": op, "path": path, "from": source} if source is not None else {"op": op, "path": path}
        ops.append({**fields, "value": None} if valued else fields)
    jsonpatch.JsonPatch(ops)
