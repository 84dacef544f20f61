"""One finding about a pod spec: the field, the container, the value, what is wrong and the fix, on one line.

The webhook and `gpushare check` list findings (a denial names every one); the extender, the device plugin
and the ledger raise the first finding that leaves a pod's demand unreadable. One type for both, so every
part words the same mistake the same way. Here too is how a field's place is written (`join`, `key_path`:
`spec.x[0].y`, map keys with dots in brackets) and a value shown (`show`, `printable`, `json_type`), so
every message, and the scan for pod templates, spells them the same way.

    str(Finding("spec.containers[0].resources.limits[aliyun.com/gpu-mem]", "c", "3Gi", "is read as ...",
                "write 3; the unit is GiB"))
    -> 'spec.containers[0].resources.limits[aliyun.com/gpu-mem] (container "c"): "3Gi": is read as ...;
        fix: write 3; the unit is GiB'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

_VALUE_LIMIT = 60
_KEY_LIMIT = 64
# Python refuses to print ints of more than 4300 digits; no quantity needs more than a few.
MAX_INT_BITS = 3000


class Problem(NamedTuple):
    problem: str  # what is wrong, in words a data scientist understands
    fix: str  # what to write instead


class Finding(ValueError):
    """A problem at one field (`path`; "" for the object itself), in words a data scientist understands.

    A value, listed by the rules; an exception, raised where one finding ends the reading of a demand.
    `said` is the whole line where a pod-level finding has no field of its own (the gpu-count label).
    """

    path: str  # field path, e.g. "spec.template.spec.containers[1].resources.limits[nvidia.com/gpu]"
    container: str | None  # None for pod-level problems such as the gpu-count label
    value: str | None  # the offending value as the user wrote it
    problem: str  # what is wrong
    fix: str  # what to write instead
    said: str | None

    def __init__(
        self,
        path: str,
        container: str | None,
        value: str | None,
        problem: str,
        fix: str,
        *,
        said: str | None = None,
    ) -> None:
        super().__init__()
        self.path, self.container, self.value = path, container, value
        self.problem, self.fix, self.said = problem, fix, said

    @classmethod
    def of_text(cls, said: str) -> Finding:
        """A finding that is one line as it is (a pod-level message, or one kept as text)."""
        return cls("", None, None, said, "", said=said)

    def _key(self) -> tuple[object, ...]:
        return (self.path, self.container, self.value, self.problem, self.fix, self.said)

    def __str__(self) -> str:
        if self.said is not None:
            return self.said
        return describe(self.path, self.container, self.value, self.problem, self.fix)

    def __repr__(self) -> str:
        return f"Finding({self.path!r}, {self.container!r}, {self.value!r}, {self.problem!r}, {self.fix!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Finding) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def at(path: str, container: str | None, value: object, found: Problem) -> Finding:
    """The finding of `found` at `path`, the value shown as written (None: no value shown)."""
    return Finding(path, container, None if value is None else show(value), found.problem, found.fix)


def wrong_type(path: str, container: str | None, value: object, expected: str) -> Finding:
    """A field whose JSON type is wrong (the API server would not decode it): a scalar is shown, an
    object or list is not."""
    found = type_problem(value, expected)
    shown = None if isinstance(value, Mapping | list) else show(value)
    return Finding(path, container, shown, found.problem, found.fix)


def showing(path: str, container: str | None, value: object, problem: str, fix: str) -> Finding:
    """The finding with `value` shown as written, whatever it is (a null as "null")."""
    return Finding(path, container, show(value), problem, fix)


def describe(path: str, container: str | None, value: str | None, problem: str, fix: str) -> str:
    """A finding on one line: `path (container "c"): "value": problem; fix: fix` (a Finding's text)."""
    where = path or "(object)"
    if container is not None:
        where += f' (container "{container}")'
    shown = "" if value is None else f' "{value}":'
    return printable(f"{where}:{shown} {problem}; fix: {fix}")


def type_problem(value: object, expected: str) -> Problem:
    """A field whose JSON type is wrong (the API server would not decode it)."""
    return Problem(
        f"has the wrong type: expected {expected}, got {json_type(value)}",
        f"write this field as {expected}",
    )


def show(value: object) -> str:
    """A value as the user wrote it, on one line and short: strings as they are, scalars as JSON."""
    if isinstance(value, str):
        text = value
    elif value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value) if value.bit_length() <= MAX_INT_BITS else "<a very large number>"
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = f"<{json_type(value)}>"
    return printable(text, _VALUE_LIMIT)


# Where and what: a field's path and a value, written on one line as every message writes them.


def printable(text: str, limit: int = 0) -> str:
    """`text` on one line: control, format and separator characters escaped; clipped to `limit` runes."""
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else _escape(ch) for ch in text)
    if limit and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def join(path: str, sub: str) -> str:
    """Append a sub-path: `join("spec.template", "spec")`, `join("x", "[0]")`; "" is the root."""
    if not path:
        return sub
    if not sub:
        return path
    return f"{path}{sub}" if sub.startswith("[") else f"{path}.{sub}"


def key_path(path: str, key: object) -> str:
    """The path of a map key or list index: `.name`, `[0]`, and `[my.key]` for keys that are not plain."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    if not isinstance(key, str):
        return f"{path}[{_json_scalar(key)}]"
    # Spelled out, not any(c in key for c in ".[] "): a generator costs ~0.5 us per key in long walks.
    if key and key.isprintable() and "." not in key and "[" not in key and "]" not in key and " " not in key:
        return join(path, key)
    return f"{path}[{printable(key, _KEY_LIMIT)}]"


def _json_scalar(value: object) -> str:
    # YAML keys may be numbers, booleans or null; name them as JSON would.
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return printable(repr(value), _KEY_LIMIT)


def json_type(value: object) -> str:
    """The JSON type of a decoded value, in words: "an object", "a list", "a string", ..."""
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"
