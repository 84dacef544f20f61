"""Places in a YAML document's node tree, for `gpushare check`'s line numbers: the line of a field path,
a child node, and the first key written twice in a mapping."""

from __future__ import annotations

import re
from typing import Any

import yaml

from webhook.core.specs import finding


def repeated_key(root: Any) -> tuple[str, int] | None:
    """The first key written twice in one mapping of a YAML document, with its second line; None when
    there is none. Walked without recursion, each node once (aliases share nodes)."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in keys:
                        return finding.printable(key.value, 60), key.start_mark.line + 1
                    keys.add(key.value)
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return None


# Field paths as the core writes them: `a.b[0].c[some.key/with-dots]`.
_PATH_PART = re.compile(r"([^.\[\]]+)|\[([^\]]*)\]")


def line_of(node: Any, path: str) -> int:
    """The line of field `path` (e.g. `spec.containers[0].resources`) under `node`: the deepest part found."""
    line: int = node.start_mark.line + 1
    for m in _PATH_PART.finditer(path):
        key: str | int = m.group(1) if m.group(1) is not None else m.group(2)
        if isinstance(node, yaml.SequenceNode) and isinstance(key, str) and key.isdigit():
            key = int(key)
        found = _entry(node, key)
        if found is None:
            break
        at, node = found
        line = at.start_mark.line + 1
    return line


def child(node: Any, key: str | int) -> Any:
    """The value node under `key` of a mapping node, or item `key` of a sequence node; else None."""
    found = _entry(node, key)
    return found[1] if found is not None else None


def _entry(node: Any, key: str | int) -> tuple[Any, Any] | None:
    """(node to point at, value node): a mapping's key node, so a finding points at the key's line."""
    if isinstance(node, yaml.MappingNode) and isinstance(key, str):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return k, v
    elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
        return node.value[key], node.value[key]
    return None
