"""Read Kubernetes manifests for `gpushare check`: files, directories, stdin; YAML streams, JSON, Lists.

Every object comes back with its file and the line where it starts, so a finding points at the right
document of a `helm template` stream; unreadable input becomes a `ReadError` value and reading goes on.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import sys
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, NoReturn

import yaml

from webhook.admission import settings as admission_settings
from webhook.cli import yamlnodes
from webhook.core.wire import jsonnumbers

STDIN = "-"
STDIN_NAME = "<stdin>"
EXTENSIONS = (".yaml", ".yml", ".json")
# `helm template` writes one such comment above every document; it names the template it came from.
# Document markers (`---`, `...`) are matched too: a comment names only the document it is in.
_HELM_SOURCE = re.compile(r"^(?:# Source: (.+?)\s*|(?:---|\.\.\.)(?:[ \t].*)?\r?)$", re.MULTILINE)
# PyYAML's C loader (libyaml) is several times faster; fall back to the pure-Python one without it.
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc]  # PyYAML's loaders are untyped
    """The safe loader, reading an integer of more than 4,300 digits as the webhook does (infinity)."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int | float:
        try:
            value: int | float = super().construct_yaml_int(node)
        except ValueError:  # Python's limit on decimal digits: only a decimal literal gets here
            return jsonnumbers.read_int(str(node.value).replace("_", ""))
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


@dataclass(frozen=True, slots=True)
class Document:
    """One Kubernetes object read from `source`, starting at 1-based `line`."""

    source: str
    line: int
    obj: Mapping[str, Any]
    origin: str | None = None  # the Helm template (`# Source:` comment) the document came from
    node: Any = None  # the YAML node (or a `_JsonNode` for JSON), to find the line of a field

    def field_line(self, path: str) -> int:
        """The line of the deepest part of field `path` ("spec.containers[0].resources") found here."""
        if isinstance(self.node, _JsonNode):
            node, offset = self.node.resolve(), self.node.offset
        else:
            node, offset = self.node, 0
        return yamlnodes.line_of(node, path) + offset if node is not None else self.line


class _JsonNode:
    """A JSON document's YAML node, composed only when a finding needs a line: json.loads is much
    faster than YAML for the many objects that have nothing to report."""

    __slots__ = ("_node", "_resolved", "offset", "parent", "span", "steps")

    def __init__(
        self,
        span: tuple[str, int, int] | None,
        offset: int,
        parent: _JsonNode | None = None,
        steps: tuple[str | int, ...] = (),
    ) -> None:
        self.span, self.offset, self.parent, self.steps = span, offset, parent, steps
        self._node: Any = None
        self._resolved = False

    def resolve(self) -> Any:
        if not self._resolved:
            self._resolved = True
            if self.parent is not None:
                node = self.parent.resolve()
                for step in self.steps:
                    node = yamlnodes.child(node, step) if node is not None else None
                self._node = node
            elif self.span is not None:
                text, start, end = self.span
                try:
                    self._node = yaml.compose(text[start:end], Loader=_Loader)
                except (yaml.YAMLError, RecursionError):
                    self._node = None  # valid JSON that YAML 1.1 refuses: fall back to the document line
        return self._node


@dataclass(frozen=True, slots=True)
class ReadError:
    """Input that could not be read; `line` is 1-based, None when the whole source failed."""

    source: str
    line: int | None
    problem: str

    def __str__(self) -> str:
        return located(self.source, self.line, self.problem)


def located(source: str, line: int | None, problem: str) -> str:
    """`source:line: problem`, or `source: problem` where no line is known."""
    return f"{source}: {problem}" if line is None else f"{source}:{line}: {problem}"


@dataclass(frozen=True, slots=True)
class Skipped:
    """A document that is not a Kubernetes object (no `kind`): values files, empty documents aside."""

    source: str
    line: int
    reason: str


Item = Document | ReadError | Skipped


def expand(paths: Sequence[str]) -> Iterator[str | ReadError]:
    """Files to read, in order: named files as given, directories walked recursively (sorted).

    A directory yields only files ending in .yaml, .yml or .json and skips hidden entries (.git);
    a named file is read whatever its extension, and "-" stands for stdin. Symbolic links to directories
    are followed, each directory walked once (no loops); one that cannot be listed is a ReadError, never
    skipped in silence: a gate that checks less than it was given would pass what it never saw.
    """
    for path in paths:
        if path == STDIN:
            yield STDIN
        elif os.path.isdir(path):
            found = False
            for item in _walk(path):
                found = True
                yield item
            if not found:
                yield ReadError(path, None, "directory holds no .yaml, .yml or .json files")
        elif os.path.exists(path):
            yield path
        else:
            yield ReadError(path, None, "no such file or directory")


def _walk(path: str) -> Iterator[str | ReadError]:
    unreadable: list[OSError] = []
    seen: set[tuple[int, int]] = set()
    for root, dirs, files in os.walk(path, onerror=unreadable.append, followlinks=True):
        for err in unreadable:
            yield ReadError(err.filename or root, None, f"cannot list: {err.strerror or err}")
        unreadable.clear()
        try:
            info = os.stat(root)
        except OSError as exc:  # not `err`: the loops above and below bind that name
            yield ReadError(root, None, f"cannot list: {exc.strerror or exc}")
            dirs[:] = []
            continue
        if (info.st_dev, info.st_ino) in seen:  # a second link to a directory already walked
            dirs[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.endswith(EXTENSIONS) and not name.startswith("."):
                file = os.path.join(root, name)
                try:
                    key = os.stat(file)
                except OSError:  # a broken link: reading it says why
                    yield file
                    continue
                if (key.st_dev, key.st_ino) not in seen:  # a link to a file already read: its objects once
                    seen.add((key.st_dev, key.st_ino))
                    yield file
    for err in unreadable:  # the last directory listed may fail after the walk's final step
        yield ReadError(err.filename or path, None, f"cannot list: {err.strerror or err}")


def read_paths(
    paths: Sequence[str], stdin: BinaryIO | None = None, opened: Callable[[str], None] | None = None
) -> Iterator[Item]:
    """Every document of every path, then errors in place; never raises for bad input. `opened` gets the
    source of each file read, also of one that holds no documents (empty, comments only)."""
    for path in expand(paths):
        if isinstance(path, ReadError):
            yield path
            continue
        try:
            if path == STDIN:
                data = (stdin or sys.stdin.buffer).read()
                source = STDIN_NAME
            else:
                with open(path, "rb") as f:
                    data = f.read()
                source = path
        except OSError as err:
            yield ReadError(path, None, f"cannot read: {err.strerror or err}")
            continue
        if opened is not None:
            opened(source)
        yield from read_bytes(source, data)


def read_bytes(source: str, data: bytes) -> Iterator[Item]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        yield ReadError(source, line, f"not UTF-8 text (byte {err.start})")
        return
    yield from read_text(source, text)


def read_text(source: str, text: str) -> Iterator[Item]:
    """The documents of one YAML stream or JSON text (JSON values may follow each other)."""
    if text.lstrip().startswith(("{", "[")) or source.endswith(".json"):
        parsed = _read_json(source, text)
        if not isinstance(parsed, ReadError):
            yield from parsed
            return
        if source.endswith(".json") or _NO_CONSTANTS in parsed.problem:
            yield parsed  # JSON up to a NaN or Infinity is JSON: kubectl reads it as JSON and refuses it
            return
        # Not JSON after all (YAML flow style): YAML parses it or says where it breaks.
    origins = _helm_origins(text) if "# Source: " in text else []
    starts = [0, *(m.end() for m in _BREAK.finditer(text))]  # where each line begins, as YAML counts
    start, last = 0, None
    while True:
        # The stream from line `start` on, blank lines above it keeping every mark's line number.
        broken, error = yield from _read_yaml(source, "\n" * start + text[starts[start] :], origins)
        if error is not None and error != last:  # a document broken on its own `---` line: said once
            yield error
        last = error
        if broken is None:
            return
        # A syntax error ends PyYAML's stream: go on at the next document marker after it (a line
        # starting with `---` always starts a document, even inside a block scalar).
        following = range(max(broken, start + 1), len(starts))
        start = next((i for i in following if _MARKER.match(text, starts[i])), -1)
        if start < 0:
            return


# YAML's line breaks (PyYAML and libyaml count these), and a document marker ending at one.
_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")
_MARKER = re.compile("---(?=[ \t\r\n\x85\u2028\u2029]|\\Z)")


def _read_yaml(
    source: str, text: str, origins: list[tuple[int, str | None]]
) -> Generator[Item, None, tuple[int | None, ReadError | None]]:
    """The documents of YAML stream `text`; returns the 0-based line of a syntax error that ended it
    (None when it was read to its end, or cannot be resumed) and that error."""
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1
            # Before constructing: that merges `<<` keys into the node.
            repeated = yamlnodes.repeated_key(node)
            obj = loader.construct_document(node)
            if repeated is not None:  # PyYAML keeps the last value; kubectl refuses the document
                key, at = repeated
                problem = f'invalid YAML: key "{key}" appears twice in one mapping (kubectl refuses it)'
                yield ReadError(source, at, problem)
                continue
            yield from _objects(source, line, obj, node, _origin(origins, line))
    except yaml.YAMLError as err:
        if isinstance(err, yaml.reader.ReaderError) and _BaseLoader is not yaml.SafeLoader:
            # libyaml gives the bad character's place in UTF-8 bytes; the line is counted in characters.
            err.position = len(
                text.encode("utf-8", "surrogatepass")[: err.position].decode("utf-8", "ignore")
            )
        line, _, problem = admission_settings.yaml_problem(err, text)
        return (None if line is None else line - 1), ReadError(source, line, f"invalid YAML: {problem}")
    except RecursionError:
        return None, ReadError(source, None, "invalid YAML: nested too deeply")
    finally:
        loader.dispose()
    return None, None


class _Constant(ValueError):
    """NaN, Infinity or -Infinity in JSON text: Python reads them, JSON (and kubectl, and the API
    server) does not."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _refuse_constant(name: str) -> NoReturn:
    raise _Constant(name)


_NO_CONSTANTS = "is not a JSON value (JSON has no NaN or Infinity); kubectl refuses it"
# A JSON string (skipped whole) or one of the constants Python reads: the first constant outside strings.
_CONSTANT_OR_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|(-?Infinity|NaN)')


def _constant_error(source: str, text: str, start: int, name: str) -> ReadError:
    """Where `name` first stands as a value from `start` on (the text up to it is valid JSON)."""
    at = next((m.start(1) for m in _CONSTANT_OR_STRING.finditer(text, start) if m.group(1)), start)
    line = text.count("\n", 0, at) + 1
    column = at - text.rfind("\n", 0, at)
    return ReadError(source, line, f"invalid JSON: {name} {_NO_CONSTANTS} (column {column})")


def _read_json(source: str, text: str) -> list[Item] | ReadError:
    # As the webhook decodes reviews (serving/jsonbody.py): wide integers read, NaN and Infinity refused.
    decoder = json.JSONDecoder(parse_int=jsonnumbers.read_int, parse_constant=_refuse_constant)
    items: list[Item] = []
    pos = len(text) - len(text.lstrip())
    line, counted = 1, 0
    try:
        while pos < len(text):
            obj, end = decoder.raw_decode(text, pos)
            line += text.count("\n", counted, pos)
            counted = pos
            node = _JsonNode((text, pos, end), line - 1)
            items.extend(_objects(source, line, obj, node, None))
            pos = end
            while pos < len(text) and text[pos].isspace():
                pos += 1
    except json.JSONDecodeError as err:
        return ReadError(source, err.lineno, f"invalid JSON: {err.msg} (column {err.colno})")
    except _Constant as err:
        return _constant_error(source, text, pos, err.name)
    except RecursionError:
        return [ReadError(source, None, "invalid JSON: nested too deeply")]
    return items


def _objects(source: str, line: int, obj: Any, node: Any, origin: str | None) -> Iterator[Item]:
    """One document -> its objects: a `*List` (kind List, PodList …) gives each item."""
    if obj is None:
        return  # empty document: `---` separators and comment-only documents, as Helm writes them
    if not isinstance(obj, dict):
        yield Skipped(source, line, f"not a Kubernetes object (a {_type_name(obj)}, not a mapping)")
        return
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        yield Skipped(source, line, "no kind: not a Kubernetes object")
        return
    items = obj.get("items")
    if kind.endswith("List") and isinstance(items, list):
        if isinstance(node, _JsonNode):
            for i, item in enumerate(items):
                yield from _objects(
                    source, line, item, _JsonNode(None, node.offset, node, ("items", i)), origin
                )
            return
        item_nodes = yamlnodes.child(node, "items") if node is not None else None
        for i, item in enumerate(items):
            item_node = yamlnodes.child(item_nodes, i) if item_nodes is not None else None
            item_line = item_node.start_mark.line + 1 if item_node is not None else line
            yield from _objects(source, item_line, item, item_node, origin)
        return
    yield Document(source, line, obj, origin, node)


def _helm_origins(text: str) -> list[tuple[int, str | None]]:
    """(line, template) for each `# Source:` comment and (line, None) for each document marker."""
    found: list[tuple[int, str | None]] = []
    line, pos = 1, 0
    for m in _HELM_SOURCE.finditer(text):
        line += text.count("\n", pos, m.start())  # counted piecewise: one pass over the text
        pos = m.start()
        found.append((line, m.group(1)))
    return found


def _origin(origins: Sequence[tuple[int, str | None]], line: int) -> str | None:
    """The template of the document whose node starts at `line`: the last `# Source:` comment above it,
    unless a document marker comes between (a later document without a comment of its own)."""
    at = bisect.bisect_right(origins, line, key=lambda o: o[0])
    return origins[at - 1][1] if at else None


def _type_name(obj: object) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(obj), type(obj).__name__
    )
